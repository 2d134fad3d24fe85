package sharedpool

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// randomPages returns n pseudo-random page hashes (SHA-256 output is
// uniform, so random bytes index the same way).
func randomPages(n int, seed uint64) []PageHash {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	out := make([]PageHash, n)
	for i := range out {
		for w := 0; w < 32; w += 8 {
			v := r.Uint64()
			for b := range 8 {
				out[i][w+b] = byte(v >> (8 * b))
			}
		}
	}
	return out
}

// fill stores every object of pages into ix in batches, reusing buffers.
func fill(tb testing.TB, ix *Index, l Layout, pages []PageHash, seq *uint64) {
	tb.Helper()
	const per = 4096
	evs := make([]Event, 0, per*l.ObjectsPerPage())
	var keys []string
	for start := 0; start < len(pages); start += per {
		evs, keys = evs[:0], keys[:0]
		for _, p := range pages[start:min(start+per, len(pages))] {
			keys = l.AppendObjectKeys(keys, p)
		}
		for _, k := range keys {
			evs = append(evs, Event{Kind: Store, Key: k})
		}
		*seq++
		if r := ix.Apply(&Batch{Seq: *seq, Events: evs}); r.Cleared() {
			tb.Fatalf("fill cleared the index: %+v", r)
		}
	}
}

// cpuMeter reports CPU time per unit alongside a benchmark's wall time: on
// a shared machine wall time includes waiting for a core.
type cpuMeter struct{ start int64 }

func startCPU() cpuMeter { return cpuMeter{cpuNanos()} }

func (m cpuMeter) report(b *testing.B, units float64, unit string) {
	if m.start == 0 || units == 0 {
		return
	}
	b.ReportMetric(float64(cpuNanos()-m.start)/units, "cpu-ns/"+unit)
}

const benchPages = 1 << 20

var big struct {
	once   sync.Once
	layout Layout
	ix     *Index
	pages  []PageHash // present
	absent []PageHash
	naive  map[string]struct{}
}

// bigIndex builds (once per process) an index of 1M MLA pages and, for the
// baseline, a naive set of their object keys as Dynamo keeps them.
func bigIndex(b *testing.B) {
	big.once.Do(func() {
		big.layout = Layout{PageSize: 64, MLA: true}
		ix, err := New(Config{Layout: big.layout, MaxPages: 4 << 20, Seed: 99})
		if err != nil {
			b.Fatal(err)
		}
		big.pages = randomPages(benchPages, 1)
		big.absent = randomPages(4096, 2)
		var seq uint64
		fill(b, ix, big.layout, big.pages, &seq)
		big.ix = ix
		big.naive = make(map[string]struct{}, benchPages)
		for _, p := range big.pages {
			big.naive[big.layout.LogicalKey(p)+"__k"] = struct{}{}
		}
	})
	if big.ix.Len() != benchPages {
		b.Fatalf("index holds %d pages", big.ix.Len())
	}
}

// naiveQuery is the baseline: rebuild every page's object keys as strings
// and look each up in a set, as Dynamo's HicacheSharedKvCache does.
func naiveQuery(l Layout, set map[string]struct{}, pages []PageHash) int {
	total := 0
	var keys []string
	for _, p := range pages {
		keys = l.AppendObjectKeys(keys[:0], p)
		hit := true
		for _, k := range keys {
			if _, ok := set[k]; !ok {
				hit = false
				break
			}
		}
		if hit {
			total++
		}
	}
	return total
}

// BenchmarkQuery: one request of 1,024 pages against 1M indexed pages.
// Target: <= 20 µs per query. naive-ns/op and speedup compare against the
// string-key baseline measured in the same run.
func BenchmarkQuery(b *testing.B) {
	bigIndex(b)
	r := rand.New(rand.NewPCG(3, 4))
	for _, hitPct := range []int{100, 50, 0} {
		query := make([]PageHash, 1024)
		wantHits := 0
		for i := range query {
			if r.IntN(100) < hitPct {
				query[i] = big.pages[r.IntN(len(big.pages))]
				wantHits++
			} else {
				query[i] = big.absent[r.IntN(len(big.absent))]
			}
		}
		b.Run(fmt.Sprintf("n=1024/index=1M/hits=%d%%", hitPct), func(b *testing.B) {
			var h Hits
			cpu := startCPU()
			for b.Loop() {
				if err := big.ix.QueryInto(&h, query); err != nil {
					b.Fatal(err)
				}
			}
			cpu.report(b, float64(b.N), "op")
			if h.Total != wantHits {
				b.Fatalf("%d hits, want %d", h.Total, wantHits)
			}
			b.StopTimer()
			const naiveRuns = 50
			start := time.Now()
			for range naiveRuns {
				if got := naiveQuery(big.layout, big.naive, query); got != wantHits {
					b.Fatalf("naive %d hits", got)
				}
			}
			naive := float64(time.Since(start).Nanoseconds()) / naiveRuns
			own := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(naive, "naive-ns/op")
			b.ReportMetric(naive/own, "speedup")
		})
	}
}

// BenchmarkPoolQuery is BenchmarkQuery through the locked wrapper.
func BenchmarkPoolQuery(b *testing.B) {
	bigIndex(b)
	p := &Pool{ix: big.ix}
	query := big.pages[:1024]
	var h Hits
	b.Run("n=1024/index=1M", func(b *testing.B) {
		for b.Loop() {
			if err := p.QueryInto(&h, query); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkApply measures applying store/remove events. Target: >= 5M
// objects/s on one core. Each iteration stores every object of a set of
// pages and then removes them all, on top of a prefilled index.
func BenchmarkApply(b *testing.B) {
	for _, bc := range []struct {
		name    string
		layout  Layout
		churn   int
		prefill int
	}{
		{"layout=TP2/n=65536", Layout{PageSize: 64, TPSize: 2}, 1 << 16, 0},
		{"layout=TP8PP2/n=16384", Layout{PageSize: 64, TPSize: 8, PPSize: 2}, 1 << 14, 0},
		{"layout=MLA/n=65536/prefill=1M", Layout{PageSize: 64, MLA: true}, 1 << 16, 1 << 20},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ix, err := New(Config{Layout: bc.layout, MaxPages: 4 << 20, Seed: 5})
			if err != nil {
				b.Fatal(err)
			}
			var seq uint64
			if bc.prefill > 0 {
				fill(b, ix, bc.layout, randomPages(bc.prefill, 11), &seq)
			}
			pages := randomPages(bc.churn, 12)
			var stores, removes []Event
			for _, p := range pages {
				for _, k := range bc.layout.AppendObjectKeys(nil, p) {
					stores = append(stores, Event{Kind: Store, Key: k, Medium: "cpu", GroupID: bc.layout.GroupID(p)})
					removes = append(removes, Event{Kind: Remove, Key: k, Medium: "cpu"})
				}
			}
			base := ix.Len()
			cpu := startCPU()
			for b.Loop() {
				seq++
				ix.Apply(&Batch{Seq: seq, Events: stores})
				seq++
				ix.Apply(&Batch{Seq: seq, Events: removes})
			}
			if ix.Len() != base || ix.Stats().Gaps != 0 {
				b.Fatalf("len %d, want %d", ix.Len(), base)
			}
			objs := float64(len(stores)+len(removes)) * float64(b.N)
			cpu.report(b, objs, "object")
			b.ReportMetric(objs/b.Elapsed().Seconds(), "objects/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/objs, "ns/object")
		})
	}
}

// BenchmarkDecode measures DecodeFrames on a batch of 1,024 events.
func BenchmarkDecode(b *testing.B) {
	l := Layout{PageSize: 64, TPSize: 2}
	pages := randomPages(256, 21)
	var dyn, rfc []any
	for _, p := range pages {
		for _, k := range l.AppendObjectKeys(nil, p) {
			dyn = append(dyn, objEvent("stored", k, "default", l.GroupID(p)))
			rfc = append(rfc, om{{"event_id", uint64(7)}, {"timestamp", int64(1)}, {"event_type", "stored"},
				{"model_name", nil}, {"block_size", nil}, {"tenant_id", "default"}, {"backend_id", "mc"},
				{"medium", "cpu"}, {"dp_rank", 0}, {"group_id", l.GroupID(p)}, {"object_key", k},
				{"seq_hashes", []uint64{}}, {"base_block_idx", nil}, {"parent_hash", nil}, {"token_ids", nil}})
		}
	}
	for _, bc := range []struct {
		name   string
		events []any
	}{{"shape=object/n=1024", dyn}, {"shape=rfc1527/n=1024", rfc}} {
		fr := frames("", 1, batchPayload(b, bc.events...))
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(fr[2])))
			cpu := startCPU()
			for b.Loop() {
				bt, err := DecodeFrames(fr)
				if err != nil || len(bt.Events) != len(bc.events) {
					b.Fatal(err)
				}
			}
			cpu.report(b, float64(len(bc.events))*float64(b.N), "object")
			b.ReportMetric(float64(len(bc.events))*float64(b.N)/b.Elapsed().Seconds(), "objects/s")
		})
	}
}

// BenchmarkMemoryPerPage reports the index's bytes per present page: the
// table's own estimate (MemoryBytes) and the Go heap growth while filling.
func BenchmarkMemoryPerPage(b *testing.B) {
	for _, bc := range []struct {
		name   string
		layout Layout
		n      int
	}{
		{"layout=MLA/n=1M", Layout{PageSize: 64, MLA: true}, 1 << 20},
		{"layout=MLA/n=1.5M", Layout{PageSize: 64, MLA: true}, 3 << 19},
		{"layout=TP8/n=262144", Layout{PageSize: 64, TPSize: 8}, 1 << 18},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pages := randomPages(bc.n, 31)
			var perPage, heapPerPage float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ix, err := New(Config{Layout: bc.layout, MaxPages: 4 << 20, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				var seq uint64
				fill(b, ix, bc.layout, pages, &seq)
				runtime.GC()
				runtime.ReadMemStats(&after)
				perPage = float64(ix.MemoryBytes()) / float64(ix.Len())
				heapPerPage = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(ix.Len())
				runtime.KeepAlive(ix)
			}
			b.ReportMetric(perPage, "bytes/page")
			b.ReportMetric(heapPerPage, "heap-bytes/page")
		})
	}
}
