package radix

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkUpdateFromMatch: a session whose previous context was 8,000
// blocks sends an 8,192-block context (target ≤ 5 µs). Untimed, 32
// sessions are forked at the 8,000-block frontier of a base session; timed,
// each extends by its own 192 blocks; untimed, they are removed. The tree
// returns to the same 8,000 blocks every round.
func BenchmarkUpdateFromMatch(b *testing.B) {
	full := chainOf(seq(1, 8192))
	b.Run("extend=192/prev=8000", func(b *testing.B) {
		const k = 32
		tr := mustRawB(b)
		if err := tr.UpdateFromMatch("base", full[:8000]); err != nil {
			b.Fatal(err)
		}
		var names [k]string
		var chains [k][]uint64
		for j := range k {
			names[j] = fmt.Sprint("s", j)
			chains[j] = append(full[:8000:8000], chainFrom(full[7999], seq(uint64(j+1)<<32, 192))...)
		}
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var cpu time.Duration
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i += k {
			b.StopTimer()
			for j := range k {
				tr.RemoveSession(names[j])
				if err := tr.UpdateFromMatch(names[j], full[:8000]); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			c0 := threadCPU()
			for j := 0; j < k && i+j < b.N; j++ {
				if err := tr.UpdateFromMatch(names[j], chains[j]); err != nil {
					b.Fatal(err)
				}
			}
			cpu += threadCPU() - c0
		}
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	// The same extension as a stream: one session's context grows by 192
	// blocks per request, 64 requests in a row (timed, map growth
	// included), then it is reset to the 8,000-block base (untimed).
	b.Run("stream/extend=192", func(b *testing.B) {
		long := chainOf(seq(1, 8000+64*192))
		tr := mustRawB(b)
		if err := tr.UpdateFromMatch("base", long[:8000]); err != nil {
			b.Fatal(err)
		}
		n := 65
		b.ReportAllocs()
		for b.Loop() {
			if n > 64 {
				b.StopTimer()
				tr.RemoveSession("s")
				if err := tr.UpdateFromMatch("s", long[:8000]); err != nil {
					b.Fatal(err)
				}
				n = 1
				b.StartTimer()
			}
			if err := tr.UpdateFromMatch("s", long[:8000+n*192]); err != nil {
				b.Fatal(err)
			}
			n++
		}
	})
	// Baseline: a naive index that re-walks the whole context per request.
	b.Run("naive-rewalk/8192", func(b *testing.B) {
		m := make(map[uint64]uint64, 8192)
		for b.Loop() {
			var prev uint64
			for _, h := range full {
				if _, ok := m[h]; !ok {
					m[h] = prev
				}
				prev = h
			}
		}
	})
	// A subagent's first request: it shares a prefix with its parent's
	// 8,000-block context and adds 64 blocks. The junction is found by
	// binary search; the parent's edge is split, relabelling the smaller
	// side (the shared prefix here).
	for _, shared := range []int{64, 1000, 4000} {
		b.Run(fmt.Sprintf("fork=64/shared=%d", shared), func(b *testing.B) {
			tr := mustRawB(b)
			if err := tr.UpdateFromMatch("parent", full[:8000]); err != nil {
				b.Fatal(err)
			}
			fork := append(full[:shared:shared], chainFrom(full[shared-1], seq(1<<40, 64))...)
			b.ReportAllocs()
			for b.Loop() {
				if err := tr.UpdateFromMatch("child", fork); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				tr.RemoveSession("child")
				b.StartTimer()
			}
		})
	}
}

func chainFrom(prev uint64, content []uint64) []uint64 {
	out := make([]uint64, len(content))
	for i, c := range content {
		prev = mix(prev, c)
		out[i] = prev
	}
	return out
}

func mustRawB(b *testing.B) *RawTree {
	tr, err := NewRawTree(Config{})
	if err != nil {
		b.Fatal(err)
	}
	return tr
}

// lineageTree builds one session whose lineage has `nodes` compressed
// edges totalling `blocks` blocks: each edge is a branch point because a
// sibling session forks off one block after it.
func lineageTree(b *testing.B, nodes, blocks int) *RawTree {
	tr := mustRawB(b)
	main := chainOf(seq(1, uint64(blocks)))
	if err := tr.UpdateFromMatch("main", main); err != nil {
		b.Fatal(err)
	}
	per := blocks / nodes
	for i := 1; i < nodes; i++ {
		at := i * per
		fork := append(main[:at:at], chainFrom(main[at-1], []uint64{uint64(1<<50 + i)})...)
		if err := tr.UpdateFromMatch(fmt.Sprint("fork", i), fork); err != nil {
			b.Fatal(err)
		}
	}
	return tr
}

// BenchmarkSplit shows Split scales with nodes on the path, not blocks:
// at a fixed node count the block count changes 16×, the time does not.
func BenchmarkSplit(b *testing.B) {
	for _, c := range []struct{ nodes, blocks int }{
		{16, 1024}, {16, 16384}, {64, 16384}, {256, 16384},
	} {
		b.Run(fmt.Sprintf("n=%d/blocks=%d", c.nodes, c.blocks), func(b *testing.B) {
			tr := lineageTree(b, c.nodes, c.blocks)
			if segs, _ := tr.Path("main", nil); len(segs) != c.nodes {
				b.Fatalf("path has %d nodes, want %d", len(segs), c.nodes)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			c0 := threadCPU()
			for b.Loop() {
				if _, err := tr.Split("main"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkPath (the lineage as compressed segments) scales with nodes;
// BenchmarkLineage copies every block, so it also grows with blocks (by
// memmove, one copy per node).
func BenchmarkPath(b *testing.B) {
	for _, c := range []struct{ nodes, blocks int }{
		{16, 1024}, {16, 16384}, {64, 16384}, {256, 16384},
	} {
		tr := lineageTree(b, c.nodes, c.blocks)
		b.Run(fmt.Sprintf("n=%d/blocks=%d", c.nodes, c.blocks), func(b *testing.B) {
			dst := make([]Segment, 0, c.nodes)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			c0 := threadCPU()
			for b.Loop() {
				dst, _ = tr.Path("main", dst[:0])
			}
			b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
		b.Run(fmt.Sprintf("lineage/n=%d/blocks=%d", c.nodes, c.blocks), func(b *testing.B) {
			dst := make([]uint64, 0, c.blocks)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			c0 := threadCPU()
			for b.Loop() {
				dst, _ = tr.Lineage("main", dst[:0])
			}
			b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
