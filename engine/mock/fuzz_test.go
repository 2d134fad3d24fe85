package mock

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzHandlers sends arbitrary bodies to every request decoder of the
// server: no panic, no 5xx, and an error reply is valid JSON in the API's
// shape.
func FuzzHandlers(f *testing.F) {
	for _, s := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tools":[{"type":"function","function":{"name":"Read","parameters":{"type":"object","required":["p"],"properties":{"p":{"type":"array","items":{"anyOf":[{"type":"integer"}]}}}}}}],"max_tokens":3,"stream":true}`,
		`{"prompt":[1,2,3],"max_tokens":2}`,
		`{"input":[{"type":"function_call_output","call_id":"c","output":"o"}],"max_output_tokens":2}`,
		`{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"tokens":[1,2]}`,
		`{"prompt":"a b"}`,
	} {
		for p := range 7 {
			f.Add(uint8(p), []byte(s))
		}
	}
	s, err := Start(Config{Speedup: 1e6, MaxModelLen: 4096, MaxOutput: 4, MinOutput: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	paths := []string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/tokenize", "/detokenize"}
	f.Fuzz(func(t *testing.T, p uint8, body []byte) {
		path := paths[int(p)%len(paths)]
		rec := httptest.NewRecorder()
		s.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e map[string]json.RawMessage
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e["error"] == nil {
				t.Fatalf("%s %q: error reply %s", path, body, rec.Body.Bytes())
			}
		}
	})
}
