package sharedpool

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
)

// floodPages returns n distinct pages (never repeating across calls with
// different from).
func floodPages(from, n int) []PageHash {
	pages := make([]PageHash, n)
	for i := range pages {
		binary.LittleEndian.PutUint64(pages[i][:], uint64(from+i)*0x9E3779B97F4A7C15|1)
		binary.LittleEndian.PutUint64(pages[i][8:], uint64(from+i))
	}
	return pages
}

// TestPageFloodBounded: issue #22. Mooncake store events for a stream of
// distinct pages (a publisher, or a flood, that never removes): the index
// never tracks more than MaxPages, its memory stays where one fill left
// it, and each overflow is reported.
func TestPageFloodBounded(t *testing.T) {
	const max = 1 << 12
	l := Layout{PageSize: 4, MLA: true}
	ix := newIndex(t, Config{Layout: l, MaxPages: max})
	b := &batcher{ix: ix}
	flood := func(from, to int) (overflows int) {
		for i := from; i < to; i += 64 {
			r := b.apply(storeAll(l, "", floodPages(i, 64)...)...)
			overflows += r.Overflows
			if ix.Len() > max {
				t.Fatalf("%d pages tracked, bound %d", ix.Len(), max)
			}
		}
		return overflows
	}
	flood(0, max)
	full := ix.MemoryBytes()
	n := flood(max, 8*max)
	after := ix.MemoryBytes()
	t.Logf("memory after filling: %d, after 8x the bound: %d, overflows %d, stats %+v", full, after, n, ix.Stats())
	if n < 7 || ix.Stats().Overflows < 7 {
		t.Fatalf("%d overflows reported for 7 more fills", n)
	}
	if after > full {
		t.Fatalf("memory grew from %d to %d", full, after)
	}
	if last := floodPages(8*max-1, 1)[0]; !ix.Contains(last) {
		t.Fatal("the newest page is missing")
	}
}

// BenchmarkPageFlood: per-page cost of storing distinct pages from below
// the default bound (2^21 pages) to past it: flat (an overflow clears the
// table in O(1) amortised per page).
func BenchmarkPageFlood(b *testing.B) {
	l := Layout{PageSize: 4, MLA: true}
	for _, n := range []int{1 << 10, 1 << 17, 1 << 20, 1 << 22} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			batches := make([][]Event, 0, n/256)
			for i := 0; i < n; i += 256 {
				batches = append(batches, storeAll(l, "", floodPages(i, 256)...))
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				ix := newIndex(b, Config{Layout: l})
				bt := &batcher{ix: ix}
				b.StartTimer()
				c0 := threadCPU()
				for _, evs := range batches {
					bt.apply(evs...)
				}
				cpu += threadCPU() - c0
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/page")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/page")
		})
	}
}

// threadCPU is the calling thread's CPU time (internal/cputime).
func threadCPU() time.Duration { return cputime.Thread() }
