package session

import (
	"errors"
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

// floodID is the i-th distinct id of a flood; every id is unique.
func floodID(i int) string { return "flood-" + strconv.Itoa(i) }

// TestTableFloodBounded: issue #22. Session ids are untrusted: a client can
// send a new one per request. Driving the table with 8x its bound of
// distinct ids (plain, and each naming the previous as parent) keeps it at
// its bound, and its heap no larger than after filling it once.
func TestTableFloodBounded(t *testing.T) {
	const max = 1 << 12
	for _, parents := range []bool{false, true} {
		t.Run(fmt.Sprintf("parents=%v", parents), func(t *testing.T) {
			now := time.Unix(0, 0)
			tb, err := NewRawTable(TableConfig{MaxSessions: max, Now: func() time.Time { return now }, OnRemove: func(Removal) {}})
			if err != nil {
				t.Fatal(err)
			}
			flood := func(from, to int) {
				for i := from; i < to; i++ {
					ac := AgentContext{SessionID: floodID(i)}
					if parents && i > 0 {
						ac.ParentSessionID = floodID(i - 1)
					}
					if _, err := tb.Begin(ac); err != nil {
						t.Fatal(err)
					}
					if _, err := tb.End(ac.SessionID, Usage{InputTokens: 1}); err != nil {
						t.Fatal(err)
					}
					if i%max == 0 {
						tb.TakeRemovals()
					}
				}
				tb.TakeRemovals()
			}
			flood(0, max)
			full := liveHeap()
			flood(max, 8*max)
			after := liveHeap()
			if tb.Len() != max {
				t.Fatalf("%d live sessions, bound %d", tb.Len(), max)
			}
			if _, ok := tb.Get(floodID(0)); ok {
				t.Fatal("the oldest session survived the flood")
			}
			if _, ok := tb.Get(floodID(8*max - 1)); !ok {
				t.Fatal("the newest session is missing")
			}
			t.Logf("heap after filling: %d, after 8x the bound: %d", full, after)
			if after > full+full/2 {
				t.Fatalf("heap grew from %d to %d under a flood of distinct ids", full, after)
			}
		})
	}
}

// BenchmarkTableFlood: per-call cost of Begin+End with a new session id per
// call, from below the bound to far past it (1M distinct ids against the
// default 65,536): flat. With parents=chain every session names the
// previous one as parent (the deepest lineage a flood can build).
func BenchmarkTableFlood(b *testing.B) {
	for _, parents := range []string{"none", "chain"} {
		for _, n := range []int{1_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("parents=%s/n=%d", parents, n), func(b *testing.B) {
				ids := make([]string, n)
				for i := range ids {
					ids[i] = floodID(i)
				}
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				var cpu time.Duration
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					tb, _ := NewRawTable(TableConfig{})
					b.StartTimer()
					c0 := threadCPU()
					for i, id := range ids {
						ac := AgentContext{SessionID: id}
						if parents == "chain" && i > 0 {
							ac.ParentSessionID = ids[i-1]
						}
						tb.Begin(ac)
						tb.End(id, Usage{})
					}
					cpu += threadCPU() - c0
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/session")
			})
		}
	}
}

// TestTableLineageDepthBounded: a chain of sessions each naming the
// previous as parent links only MaxLineageDepth deep; the next session
// starts a new chain, so Root and every link walk stay bounded.
func TestTableLineageDepthBounded(t *testing.T) {
	tb, err := NewRawTable(TableConfig{})
	if err != nil {
		t.Fatal(err)
	}
	n := 2*MaxLineageDepth + 10
	for i := range n {
		ac := AgentContext{SessionID: floodID(i)}
		if i > 0 {
			ac.ParentSessionID = floodID(i - 1)
		}
		tb.Begin(ac)
	}
	for _, tc := range []struct{ id, root int }{
		{MaxLineageDepth - 1, 0}, {MaxLineageDepth, MaxLineageDepth},
		{2*MaxLineageDepth - 1, MaxLineageDepth}, {2 * MaxLineageDepth, 2 * MaxLineageDepth}, {n - 1, 2 * MaxLineageDepth},
	} {
		if r, _ := tb.Root(floodID(tc.id)); r != floodID(tc.root) {
			t.Fatalf("Root(%d) = %s, want %s", tc.id, r, floodID(tc.root))
		}
	}
	if info, _ := tb.Get(floodID(MaxLineageDepth)); info.Parent != floodID(MaxLineageDepth-1) {
		t.Fatalf("the unlinked session lost its Parent id: %q", info.Parent)
	}
	// Lazy adoption: a session linked after its children counts their
	// height, so it cannot splice two chains into one deeper than the bound.
	tb2, _ := NewRawTable(TableConfig{})
	tb2.Begin(AgentContext{SessionID: "top"})
	for i := range MaxLineageDepth - 1 {
		ac := AgentContext{SessionID: "a" + strconv.Itoa(i), ParentSessionID: "top"}
		if i > 0 {
			ac.ParentSessionID = "a" + strconv.Itoa(i-1)
		}
		tb2.Begin(ac)
	}
	tb2.Begin(AgentContext{SessionID: "b1", ParentSessionID: "b0"})                                  // b0 unseen yet
	tb2.Begin(AgentContext{SessionID: "b0", ParentSessionID: "a" + strconv.Itoa(MaxLineageDepth-3)}) // depth 64
	tb2.Begin(AgentContext{SessionID: "b1"})                                                         // b1 links under b0 now: b0 is at depth 64, b1 would be 65
	if r, _ := tb2.Root("b0"); r != "top" {
		t.Fatalf("Root(b0) = %q, want top", r)
	}
	if r, _ := tb2.Root("b1"); r != "b1" {
		t.Fatalf("Root(b1) = %q, want b1 (not linked past the bound)", r)
	}
}

// TestTableRefusesLongIDs: the table caps ids itself, whatever fed it.
func TestTableRefusesLongIDs(t *testing.T) {
	tb, _ := NewRawTable(TableConfig{MaxIDLen: 8})
	for _, ac := range []AgentContext{{SessionID: "123456789"}, {SessionID: "ok", ParentSessionID: "123456789"}} {
		if _, err := tb.Begin(ac); !errors.Is(err, ErrRefused) {
			t.Fatalf("%+v: %v, want ErrRefused", ac, err)
		}
	}
	if _, err := tb.Begin(AgentContext{SessionID: "12345678", ParentSessionID: "87654321"}); err != nil || tb.Len() != 1 {
		t.Fatalf("8-byte ids: %v, %d sessions", err, tb.Len())
	}
	if _, err := NewRawTable(TableConfig{MaxIDLen: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative MaxIDLen: %v", err)
	}
}
