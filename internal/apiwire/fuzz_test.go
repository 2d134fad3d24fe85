package apiwire

import (
	"strings"
	"testing"
)

// FuzzRequests decodes arbitrary bytes as each request type; whatever
// decodes must re-encode and decode to the same value, and never panic.
func FuzzRequests(f *testing.F) {
	for _, s := range seedRequests {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[]}]}`))
	f.Add([]byte(`{"prompt":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip(t, data, &ChatRequest{})
		roundTrip(t, data, &CompletionRequest{})
		roundTrip(t, data, &ResponsesRequest{})
		roundTrip(t, data, &MessagesRequest{})
	})
}

// FuzzSSEReader reads arbitrary streams: no panic, a bounded number of
// events, data never longer than the input.
func FuzzSSEReader(f *testing.F) {
	f.Add("event: a\ndata: b\n\ndata: [DONE]\n\n")
	f.Add("data: x\r\ndata: y\r\n\r\n: c\nid: 1\n")
	f.Fuzz(func(t *testing.T, s string) {
		r := NewSSEReader(strings.NewReader(s), 128)
		for i := 0; ; i++ {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > len(s) || i > len(s) {
				t.Fatalf("event %d: %d bytes of data from %d of input", i, len(ev.Data), len(s))
			}
		}
	})
}
