package loadgen_test

import (
	"fmt"
	"os"
	"time"

	"github.com/agentkv/agentkv/internal/loadgen"
)

// Two prompts whose first block ids agree share their first words (and so
// their first tokens, and a server's prefix cache).
func ExamplePrompter() {
	p := loadgen.NewPrompter(4, 0)
	fmt.Printf("%q\n", p.Append(nil, []uint64{7, 8}, 6, 0))
	fmt.Printf("%q\n", p.Append(nil, []uint64{7, 9}, 8, 0))
	// Output:
	// " case and both day hand by"
	// " case and both day been second because course"
}

func ExampleSummarize() {
	results := []loadgen.Result{
		{PromptTokens: 1000, CompletionTokens: 100, CachedTokens: 800, HasUsage: true, HasCached: true,
			InputTokens: 1000, OutputTokens: 100, Words: 1000, TTFT: 80 * time.Millisecond, E2E: 2 * time.Second},
		{PromptTokens: 3000, CompletionTokens: 300, CachedTokens: 0, HasUsage: true, HasCached: true,
			InputTokens: 3000, OutputTokens: 300, Words: 3000, TTFT: 400 * time.Millisecond, E2E: 6 * time.Second},
		{Error: loadgen.KindHTTP, Status: 503},
	}
	s := loadgen.Summarize(results, 10*time.Second)
	s.Planned = 3
	_ = s.WriteText(os.Stdout)
	// Output:
	// requests    3 finished of 3 planned (2 ok, 1 failed) in 10.00s
	// errors      http_503 ×1
	// throughput  0.3 req/s, 40 output tok/s, 400 prompt tok/s
	// tokens      4000 prompt (server) for 4000 in the trace (4000 words sent), 400 output for 400 in the trace
	// TTFT        p50 80.0ms  p99 400.0ms  max 400.0ms
	// E2E         p50 2.00s  p99 6.00s  max 6.00s
	// cache hits  20.0% of prompt tokens (800 cached, reported by 2 of 2 requests)
}
