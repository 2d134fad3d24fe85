package agentkv

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"

	"github.com/agentkv/agentkv/internal/cputime"
	"github.com/agentkv/agentkv/session"
)

// BenchmarkSessionFlood is the session-rotation attack of issue #22: every
// call is TryRoute + Done for a session id never seen before. Before the
// timed calls, the router has already seen sessions=N distinct sessions, so
// from N = 65,536 (the session table's bound) on, every call evicts the
// least recently used session, and with it its hash-cache entry, lineage
// and admission program. The per-call cost must not grow with N: the
// sub-benchmarks at 1K, 200K and 1M are compared (target: within 2×).
// Each prompt is 256 tokens, a 128-token system prompt shared by all plus
// 128 of its own, over 4 workers in approximate mode with soft affinity
// (what the proxy runs without KV events). It reports the calling thread's
// CPU time per call (cpu-µs/op, which leaves out other jobs on a shared
// machine but also the GC's background work) and the live heap after the
// run (heap-MiB), which must stay bounded too. Run it with a fixed
// -benchtime (e.g. 20000x): every timed call adds a session too.
func BenchmarkSessionFlood(b *testing.B) {
	for _, n := range []int{1_000, 200_000, 1_000_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			r := floodRouter(b)
			f := newFlood(r)
			for range n {
				f.call(b)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := cputime.Thread()
			b.ResetTimer()
			for b.Loop() {
				f.call(b)
			}
			b.StopTimer()
			b.ReportMetric(float64((cputime.Thread()-c0).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
			runtime.KeepAlive(r)
		})
	}
}

func floodRouter(tb testing.TB) *Router {
	tb.Helper()
	r, err := New(Config{BlockSize: 16, Seed: 1, Approximate: true, Affinity: AffinitySoft})
	if err != nil {
		tb.Fatal(err)
	}
	for w := range 4 {
		id := uint64(w)
		if err := r.AddWorker(WorkerFunc(func() WorkerInfo {
			return WorkerInfo{ID: id, BlockSize: 16, KVCapacityTokens: 1 << 20}
		})); err != nil {
			tb.Fatal(err)
		}
	}
	return r
}

// flood issues requests, each from a new session.
type flood struct {
	r      *Router
	rng    *rand.Rand
	tokens []uint32
	next   int
}

func newFlood(r *Router) *flood {
	f := &flood{r: r, rng: rand.New(rand.NewPCG(7, 8)), tokens: make([]uint32, 256)}
	for i := range 128 {
		f.tokens[i] = uint32(f.rng.IntN(150000))
	}
	return f
}

func (f *flood) call(tb testing.TB) {
	for i := 128; i < len(f.tokens); i++ {
		f.tokens[i] = uint32(f.rng.IntN(150000))
	}
	f.next++
	d, err := f.r.TryRoute(&Request{Tokens: f.tokens, ExpectedOutputTokens: 16,
		Agent: session.AgentContext{SessionID: "flood-" + strconv.Itoa(f.next)}})
	if err != nil {
		tb.Fatal(err)
	}
	d.Done(Usage{PromptTokens: len(f.tokens), CompletionTokens: 16})
}
