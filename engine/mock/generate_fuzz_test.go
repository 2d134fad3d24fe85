package mock

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzTokenAPIs sends arbitrary bodies to the token-API and RL control
// decoders (/generate, /inference/v1/generate, /abort_request,
// /pause_generation, /update_weights_from_disk): no panic, no 5xx, every
// reply valid JSON (or SGLang's plain 200), and the engine left idle and
// unpaused.
func FuzzTokenAPIs(f *testing.F) {
	for _, s := range []string{
		`{"rid":"a","input_ids":[1,2,3],"return_logprob":true,"top_logprobs_num":2,"logprob_start_len":0,"sampling_params":{"max_new_tokens":3,"stop_token_ids":[1]}}`,
		`{"text":"a b c","stream":true,"sampling_params":{"max_new_tokens":2,"ignore_eos":true}}`,
		`{"token_ids":[5,6],"sampling_params":{"max_tokens":2,"logprobs":1},"stream":true,"stream_options":{"include_usage":true}}`,
		`{"rid":"a"}`,
		`{"abort_all":true}`,
		`{"mode":"in_place"}`,
		`{"weight_version":"v","abort_all_requests":true}`,
	} {
		for p := range 5 {
			f.Add(uint8(p), []byte(s))
		}
	}
	s, err := Start(Config{Speedup: 1e6, MaxModelLen: 64, MaxOutput: 4, MinOutput: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	paths := []string{"/generate", "/inference/v1/generate", "/abort_request", "/pause_generation", "/update_weights_from_disk"}
	f.Fuzz(func(t *testing.T, p uint8, body []byte) {
		path := paths[int(p)%len(paths)]
		rec := httptest.NewRecorder()
		s.mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body)))
		s.SetPaused(false) // a pause must not starve the next input
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", path, body, rec.Code, rec.Body.Bytes())
		}
		out := rec.Body.Bytes()
		if rec.Header().Get("Content-Type") == "text/event-stream" || len(out) == 0 {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%s %q: invalid JSON reply %q", path, body, out)
		}
	})
}
