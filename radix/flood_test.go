package radix

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// floodChain is session i's chain: a prefix shared by every session (a
// system prompt) and a tail of its own, so every session adds new blocks.
func floodChain(i int, dst []uint64) []uint64 {
	content := dst[:0]
	for b := range 8 {
		content = append(content, uint64(b+1))
	}
	for b := range 8 {
		content = append(content, uint64(i+1)<<8|uint64(b))
	}
	return chainOf(content)
}

// TestLineageFloodBounded: issue #22. A new session id (and new blocks) per
// request: the tree stays at MaxSessions sessions, its blocks and its heap
// stay where one fill left them after 8x the bound of distinct sessions.
func TestLineageFloodBounded(t *testing.T) {
	const max = 1 << 12
	tr, err := NewRawTree(Config{MaxSessions: max, OnEvict: func(string) {}})
	if err != nil {
		t.Fatal(err)
	}
	var buf []uint64
	flood := func(from, to int) {
		for i := from; i < to; i++ {
			if err := tr.UpdateFromMatch("s"+strconv.Itoa(i), floodChain(i, buf)); err != nil {
				t.Fatal(err)
			}
			if i%1024 == 0 {
				tr.TakeEvicted()
			}
		}
		tr.TakeEvicted()
	}
	flood(0, max)
	full, fullStats := liveHeap(), tr.Stats()
	flood(max, 8*max)
	after, st := liveHeap(), tr.Stats()
	t.Logf("after filling: heap %d, %+v; after 8x the bound: heap %d, %+v", full, fullStats, after, st)
	if tr.Len() != max || st.Sessions != max {
		t.Fatalf("%d sessions, bound %d", tr.Len(), max)
	}
	if st.Blocks > fullStats.Blocks || st.Nodes > fullStats.Nodes {
		t.Fatalf("blocks %d -> %d, nodes %d -> %d under a flood", fullStats.Blocks, st.Blocks, fullStats.Nodes, st.Nodes)
	}
	if tr.Contains(floodChain(0, nil)[15]) || !tr.Contains(floodChain(8*max-1, nil)[15]) {
		t.Fatal("the oldest session's tail survived, or the newest is missing")
	}
	if after > full+full/2 {
		t.Fatalf("heap grew from %d to %d", full, after)
	}
}

// BenchmarkLineageFlood: UpdateFromMatch with a new session (a shared
// prefix and a tail of its own) per call, from below the default bound
// (65,536) to far past it: flat per call.
func BenchmarkLineageFlood(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ids := make([]string, n)
			for i := range ids {
				ids[i] = "s" + strconv.Itoa(i)
			}
			var buf []uint64
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				tr, _ := NewRawTree(Config{})
				b.StartTimer()
				c0 := threadCPU()
				for i, id := range ids {
					buf = floodChain(i, buf)
					if err := tr.UpdateFromMatch(id, buf); err != nil {
						b.Fatal(err)
					}
				}
				cpu += threadCPU() - c0
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/session")
		})
	}
}
