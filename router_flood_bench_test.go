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
// and admission program, and prunes the oldest approximate entries. The
// per-call cost must not grow with N: the sub-benchmarks at 1K, 200K and 1M
// are compared (target: within 2x).
// Each prompt is 256 tokens, a 128-token system prompt shared by all plus
// 128 of its own, over 4 workers in approximate mode with soft affinity
// (what the proxy runs without KV events). Metrics:
//
//   - cpu-µs/op: the calling thread's CPU time per call, which leaves out
//     other jobs on a shared machine but also the GC's background work;
//   - x-1K: cpu-µs/op over the sessions=1000 case's, when that case ran
//     first in the same process (the target is <= 2);
//   - heap-MiB: the live heap after the run (after a GC), which must stay
//     bounded too;
//   - gc-ms: the process CPU time of that one full GC, what marking the
//     live heap costs per cycle;
//   - gc-µs/op: that cycle's cost spread over the calls that fill the
//     heap's GOGC headroom (alloc bytes per call over the live heap at
//     GOGC=100): the background GC work per call that cpu-µs/op omits.
//
// Run it with a fixed -benchtime (e.g. 20000x): every timed call adds a
// session too.
func BenchmarkSessionFlood(b *testing.B) {
	var base float64 // cpu-µs/op of sessions=1000, when it ran
	for _, n := range []int{1_000, 200_000, 1_000_000} {
		b.Run(fmt.Sprintf("sessions=%d", n), func(b *testing.B) {
			r := floodRouter(b)
			f := newFlood(r)
			for range n {
				f.call(b)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var ms0 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			c0 := cputime.Thread()
			b.ResetTimer()
			for b.Loop() {
				f.call(b)
			}
			b.StopTimer()
			cpu := float64((cputime.Thread() - c0).Nanoseconds()) / float64(b.N) / 1e3
			b.ReportMetric(cpu, "cpu-µs/op")
			if n == 1_000 {
				base = cpu
			} else if base > 0 {
				b.ReportMetric(cpu/base, "x-1K")
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			allocPerOp := float64(ms.TotalAlloc-ms0.TotalAlloc) / float64(b.N)
			p0 := cputime.Process()
			runtime.GC()
			gc := cputime.Process() - p0
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(gc.Nanoseconds())/1e6, "gc-ms")
			b.ReportMetric(float64(gc.Nanoseconds())/1e3*allocPerOp/float64(ms.HeapAlloc), "gc-µs/op")
			runtime.KeepAlive(r)
		})
	}
}

// TestSessionFloodBounded: issue #22. A new session id per call, 8x past
// small session bounds: the session table, the lineage tree and the hash
// cache stay at their bound, the approximate entries are the last calls'
// blocks, and what is kept per session between turns (the approximate
// index's recording reads it) is kept only for live sessions.
func TestSessionFloodBounded(t *testing.T) {
	const max = 512
	r := floodRouter(t, func(c *Config) {
		c.Sessions.MaxSessions = max
		c.Lineage.MaxSessions = max
	})
	f := newFlood(r)
	for range 8 * max {
		f.call(t)
	}
	if n := r.table.Len(); n != max {
		t.Fatalf("session table: %d sessions, bound %d", n, max)
	}
	if n := r.tree.Len(); n > max {
		t.Fatalf("lineage tree: %d sessions, bound %d", n, max)
	}
	if n := r.hashes.len(); n > max {
		t.Fatalf("hash cache: %d entries, %d sessions live", n, max)
	}
	r.mu.Lock()
	acting := len(r.acting)
	r.mu.Unlock()
	if acting > max {
		t.Fatalf("%d sessions kept between turns (for the approximate index's recording), %d live", acting, max)
	}
	// Every call recorded its 8 blocks of its own; the 8 shared ones once
	// per worker that took the shared prefix.
	st := r.index.Stats()
	if own := 8 * 8 * max; st.Approx < own || st.Approx > own+4*8 {
		t.Fatalf("%d approximate entries, want %d own + at most 32 shared", st.Approx, own)
	}
	// A session's hashes are forgotten with it: the oldest live session's
	// are cached, the evicted ones' not.
	oldest := "flood-" + strconv.Itoa(8*max-max+1)
	r.hashes.mu.Lock()
	_, live := r.hashes.sessions[oldest]
	_, gone := r.hashes.sessions["flood-1"]
	r.hashes.mu.Unlock()
	if !live || gone {
		t.Fatalf("hash cache: oldest live session cached %v, first evicted one still cached %v", live, gone)
	}
}

func floodRouter(tb testing.TB, opts ...func(*Config)) *Router {
	tb.Helper()
	cfg := Config{BlockSize: 16, Seed: 1, Index: IndexApproximate, Affinity: AffinitySoft}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := New(cfg)
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
