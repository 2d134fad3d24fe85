package mock

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentkv/agentkv/internal/cputime"
)

// BenchmarkServer measures what one mock worker sustains at speedup 1000
// with 200 concurrent streaming chat requests (600-word prompts sharing a
// 400-word prefix, 64-token replies), through real HTTP on loopback:
// requests/s, generated tokens/s, and the process CPU per generated token
// (server and clients together, so an upper bound on the mock's cost).
func BenchmarkServer(b *testing.B) {
	for _, conc := range []int{200} {
		b.Run(fmt.Sprintf("streams=%d", conc), func(b *testing.B) {
			s, err := Start(Config{Speedup: 1000, MinOutput: 64, MaxOutput: 64})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			tr := &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}
			defer tr.CloseIdleConnections()
			cl := &http.Client{Transport: tr}
			prefix := words(400, "b")
			var next, tokens atomic.Int64
			body := func(i int64) string {
				return string(mustJSON(map[string]any{"model": s.Model(), "stream": true,
					"messages": []map[string]string{{"role": "user", "content": prefix + " " + words(200, fmt.Sprintf("u%d", i))}}}))
			}
			cpu0 := cputime.Process()
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := 0; w < conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						req, _ := http.NewRequestWithContext(context.Background(), "POST", s.URL()+"/v1/chat/completions", strings.NewReader(body(i)))
						resp, err := cl.Do(req)
						if err != nil {
							b.Error(err)
							return
						}
						raw, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if n := strings.Count(string(raw), `"content":"`) - 1; n != 64 {
							b.Errorf("%d tokens streamed", n)
							return
						}
						tokens.Add(64)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			cpu := cputime.Process() - cpu0
			el := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/el, "req/s")
			b.ReportMetric(float64(tokens.Load())/el, "tok/s")
			if tokens.Load() > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(tokens.Load()), "cpu-ns/token")
			}
		})
	}
}
