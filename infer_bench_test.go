package agentkv

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/cputime"
	"github.com/agentkv/agentkv/session"
)

// BenchmarkInferRoute is BenchmarkRoute's mode=turn (a 32K-token turn of
// one of 64 live sessions, its last 512 tokens rewritten, block size 16,
// 16 workers) three ways: id=named, the session named (its hash cache
// hashes only the rewritten tail); id=none, no identity and no inference
// (an isolated call: the whole prompt is hashed); id=inferred, no
// identity, the router inferring the session (hashed whole too, then the
// Infer stage). x-none is id=inferred's thread CPU per call over
// id=none's in the same run: what inference adds (issue #32's target: at
// most 1.2); x-named the same over id=named's.
func BenchmarkInferRoute(b *testing.B) {
	cpu := map[string]float64{}
	for _, id := range []string{"named", "none", "inferred"} {
		b.Run(fmt.Sprintf("id=%s/n=32768", id), func(b *testing.B) {
			cpu[id] = benchInferRoute(b, id == "inferred", id == "named")
			if id == "inferred" && cpu["none"] > 0 && cpu["named"] > 0 {
				b.ReportMetric(cpu[id]/cpu["none"], "x-none")
				b.ReportMetric(cpu[id]/cpu["named"], "x-named")
			}
		})
	}
}

func benchInferRoute(b *testing.B, infer, named bool) float64 {
	const bs, tokens, workers, sessions = 16, 32768, 16, 64
	cfg := Config{BlockSize: bs, Seed: 1}
	if infer {
		cfg.InferSessions = &InferConfig{}
	}
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for w := range uint64(workers) {
		if err := r.AddWorker(WorkerFunc(func() WorkerInfo {
			return WorkerInfo{ID: w, BlockSize: bs, KVCapacityTokens: 1 << 22}
		})); err != nil {
			b.Fatal(err)
		}
	}
	h, _ := flashindex.NewHasher(bs, "")
	rb := &routeBench{r: r, h: h, mode: "turn", bs: bs, tokens: tokens, rng: rand.New(rand.NewPCG(1, 2)), evID: map[uint64]uint64{}}
	rb.sys = rb.randTokens(nil, 2048)
	prompts := make([][]uint32, sessions)
	for s := range prompts {
		prompts[s] = rb.randTokens(append(make([]uint32, 0, tokens), rb.sys...), tokens-len(rb.sys))
		if !named {
			rb.mode = "cold" // seed the cache only; the first request below names no session
			rb.seedSession(b, s, uint64(s%workers), prompts[s])
			rb.mode = "turn"
			d, err := r.TryRoute(&Request{Tokens: prompts[s]})
			if err != nil || d.agent.Inferred != infer {
				b.Fatalf("first request: %v, %+v", err, d)
			}
			d.Done(Usage{PromptTokens: tokens})
		} else {
			rb.seedSession(b, s, uint64(s%workers), prompts[s])
		}
	}
	reqs := rb.requests(prompts)
	if !named {
		for i := range reqs {
			reqs[i].Agent = session.AgentContext{}
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c0 := cputime.Thread()
	rb.timeRoutes(b, reqs)
	return float64((cputime.Thread() - c0).Nanoseconds()) / float64(b.N) / 1e3
}

// BenchmarkInferFlood: every call is TryRoute + Done of a request with no
// identity and a prompt of its own (256 tokens: a 128-token system prompt
// shared by all, then random), with inference on. Before the timed calls
// the router has seen requests=N such requests; the cost per call must
// not grow with N (x-1K: cpu-µs/op over the requests=1000 case's, in the
// same run; target within 2x, as BenchmarkSessionFlood's).
func BenchmarkInferFlood(b *testing.B) {
	var base float64
	for _, n := range []int{1_000, 200_000, 1_000_000} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			r, err := New(Config{BlockSize: 16, Affinity: AffinitySoft, Index: IndexApproximate, InferSessions: &InferConfig{}})
			if err != nil {
				b.Fatal(err)
			}
			for w := range uint64(4) {
				if err := r.AddWorker(WorkerFunc(func() WorkerInfo {
					return WorkerInfo{ID: w, BlockSize: 16, KVCapacityTokens: 1 << 22}
				})); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(3, 4))
			sys := make([]uint32, 128)
			for i := range sys {
				sys[i] = rng.Uint32()
			}
			toks := make([]uint32, 256)
			call := func() {
				copy(toks, sys)
				for i := 128; i < len(toks); i++ {
					toks[i] = rng.Uint32()
				}
				d, err := r.TryRoute(&Request{Tokens: toks})
				if err != nil {
					b.Fatal(err)
				}
				d.Done(Usage{PromptTokens: len(toks)})
			}
			for range n {
				call()
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := cputime.Thread()
			for b.Loop() {
				call()
			}
			cpu := float64((cputime.Thread() - c0).Nanoseconds()) / float64(b.N) / 1e3
			b.ReportMetric(cpu, "cpu-µs/op")
			if n == 1_000 {
				base = cpu
			} else if base > 0 {
				b.ReportMetric(cpu/base, "x-1K")
			}
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(r.infer.Len()), "inferred")
		})
	}
}
