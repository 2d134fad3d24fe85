package agentkv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// BenchmarkRoute measures routing overhead for a 32K-token agent turn over
// 16 workers, hashing included (tokenisation excluded): each turn extends a
// session whose earlier context is cached on one worker, and workers hold
// other sessions' contexts too. p50/p99 come from per-call latencies.
func BenchmarkRoute(b *testing.B) {
	for _, tc := range []struct {
		name    string
		bs      int
		tokens  int
		workers int
	}{
		{"n=32768/workers=16/bs=16", 16, 32768, 16},
		{"n=32768/workers=16/bs=64", 64, 32768, 16},
		{"n=8192/workers=64/bs=16", 16, 8192, 64},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r, err := New(Config{BlockSize: tc.bs, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			for w := 0; w < tc.workers; w++ {
				id := uint64(w)
				if err := r.AddWorker(WorkerFunc(func() WorkerInfo {
					return WorkerInfo{ID: id, BlockSize: tc.bs, KVCapacityTokens: 1 << 22}
				})); err != nil {
					b.Fatal(err)
				}
			}
			h, _ := flashindex.NewHasher(tc.bs, "")
			rng := rand.New(rand.NewPCG(1, 2))
			const sessions = 64
			prompts := make([][]uint32, sessions)
			sys := make([]uint32, 2048)
			for i := range sys {
				sys[i] = uint32(rng.IntN(150000))
			}
			evID := map[uint64]uint64{}
			for s := range prompts {
				p := append([]uint32{}, sys...)
				for len(p) < tc.tokens {
					p = append(p, uint32(rng.IntN(150000)))
				}
				prompts[s] = p
				// The session's first 90% is cached on worker s%workers.
				w := uint64(s % tc.workers)
				_, seq := h.AppendHashes(nil, nil, p[:tc.tokens*9/10], 0, false)
				ev := &flashindex.Event{Worker: flashindex.Worker{ID: w}, Kind: flashindex.Stored, BlockSize: tc.bs}
				evID[w]++
				ev.EventID = evID[w]
				for i, sh := range seq {
					ev.Blocks = append(ev.Blocks, flashindex.StoredBlock{EngineHash: sh, LocalHash: localOf(h, p, i), HasLocalHash: true})
				}
				if err := r.ApplyEvent(ev); err != nil {
					b.Fatal(err)
				}
			}
			reqs := make([]Request, sessions)
			for s := range reqs {
				reqs[s] = Request{Tokens: prompts[s], Agent: session.AgentContext{SessionID: fmt.Sprintf("s%d", s)}}
			}
			lat := make([]time.Duration, 0, 1<<16)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				req := reqs[i%sessions]
				req.ID = ""
				t0 := time.Now()
				d, err := r.TryRoute(&req)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
				d.Done(Usage{PromptTokens: tc.tokens, CompletionTokens: 10})
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

func localOf(h *flashindex.Hasher, p []uint32, i int) uint64 {
	bs := h.BlockSize()
	return h.LocalHash(p[i*bs : (i+1)*bs])
}
