package vllm

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzTokenizeBody: tokenizeBody never panics, and what it sends is a
// JSON object holding exactly the kept fields of the body, as decoding the
// body into json.RawMessage values (the former way) finds them.
func FuzzTokenizeBody(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi \"x\" \\ }"}],"stream":true,"tools":[]}`))
	f.Add([]byte(` { "messages" : [ ] , "model" : null , "messages" : [1] } `))
	f.Add([]byte(`{"prompt":"abc","add_special_tokens":false}`))
	f.Add([]byte(`{"prompt":[1,2,3]}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{ChatPath, CompletionPath} {
			out, ids, err := tokenizeBody(path, body)
			if err != nil || ids != nil {
				continue
			}
			sent := bytes.Join(out, nil)
			var got, want map[string]json.RawMessage
			if err := json.Unmarshal(sent, &got); err != nil {
				t.Fatalf("%s: sent %q: %v", path, sent, err)
			}
			if err := json.Unmarshal(body, &want); err != nil {
				t.Fatalf("%s: accepted %q: %v", path, body, err)
			}
			for k, v := range got {
				var a, b bytes.Buffer
				_ = json.Compact(&a, v)
				_ = json.Compact(&b, want[k])
				if !bytes.Equal(a.Bytes(), b.Bytes()) {
					t.Fatalf("%s: field %s sent %s, body has %s", path, k, v, want[k])
				}
			}
		}
	})
}
