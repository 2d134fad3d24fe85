package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// stream returns an SSE reply of n content events and a usage event, as
// vLLM sends it.
func stream(n int) []byte {
	var b bytes.Buffer
	b.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	for i := 0; i < n; i++ {
		b.WriteString("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" tok\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n")
	}
	u, _ := json.Marshal(map[string]any{"choices": []any{}, "usage": map[string]any{"prompt_tokens": 100, "completion_tokens": n,
		"prompt_tokens_details": map[string]int{"cached_tokens": 64}}})
	fmt.Fprintf(&b, "data: %s\n\ndata: [DONE]\n\n", u)
	return b.Bytes()
}

// BenchmarkReadStream is the client's CPU cost per streamed token.
func BenchmarkReadStream(b *testing.B) {
	for _, n := range []int{256} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			s := stream(n)
			b.SetBytes(int64(len(s)))
			b.ReportAllocs()
			for b.Loop() {
				var st streamStats
				if err := readStream(bytes.NewReader(s), time.Now, &st); err != nil || st.contentEvents != n {
					b.Fatal(err, st.contentEvents)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/event")
		})
	}
}

// BenchmarkReplay replays single-turn sessions against an in-process
// server that answers at once: the generator's own ceiling in requests per
// second (2k-token prompts, 64-token streamed replies).
func BenchmarkReplay(b *testing.B) {
	reply := stream(64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(reply)
	}))
	defer srv.Close()
	for _, n := range []int{200} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			w := trace.Workload{BlockTokens: 64}
			for i := 0; i < n; i++ {
				w.Sessions = append(w.Sessions, trace.Session{ID: fmt.Sprint(i), ParentTurn: -1,
					Turns: []trace.Turn{{InputTokens: 2048, OutputTokens: 64, HashIDs: ids(uint64(i)*100, 32)}}})
			}
			r, err := New(Config{Endpoint: srv.URL, Model: "m", SkipPreflight: true, Concurrency: 16})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				rep, err := r.Run(context.Background(), &w)
				if err != nil || rep.Summary.OK != n {
					b.Fatal(err, rep.Summary.ErrorList())
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
