package flashindex

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"
)

// BenchmarkRecordTurn measures recording an agent turn without KV events:
// the session's context (prefix blocks, recorded by its earlier turns)
// plus a 32-block new tail, at a 2 K- and a 128 K-token context (16-token
// blocks), whole (Record) and as the router records a turn that extends
// its last on the same worker (RecordTail). cpu-µs/op is the calling
// thread's CPU time per call.
func BenchmarkRecordTurn(b *testing.B) {
	for _, c := range []struct {
		prefix int
		tail   bool
	}{{128, false}, {8192, false}, {128, true}, {8192, true}} {
		prefix := c.prefix
		name := "whole"
		if c.tail {
			name = "tail"
		}
		b.Run(fmt.Sprintf("%s/prefix=%d", name, prefix), func(b *testing.B) {
			ix, err := New(Config{BlockSize: 16})
			if err != nil {
				b.Fatal(err)
			}
			seq := make([]uint64, prefix, prefix+32)
			for i := range seq {
				seq[i] = uint64(i+1) * 0x9e3779b97f4a7c15
			}
			w := Worker{ID: 1}
			ix.Record(w, seq, time.Hour)
			next := uint64(1 << 40)
			turn := func() {
				s := seq[:prefix]
				for range 32 {
					next++
					s = append(s, next*0xbf58476d1ce4e5b9)
				}
				if c.tail {
					ix.RecordTail(w, s, prefix, time.Hour)
				} else {
					ix.Record(w, s, time.Hour)
				}
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				turn()
			}
			b.ReportMetric(float64(threadCPU()-c0)/float64(b.N)/1e3, "cpu-µs/op")
		})
	}
}

// TestRecordTail: a turn recorded from its link block indexes the same
// residency as a whole Record, leaves the context's entries their expiry
// (they go at theirs, the new blocks later), records the whole chain when
// the link block is not indexed or from is out of range, and, with events
// confirming part of the chain, changes nothing of those.
func TestRecordTail(t *testing.T) {
	now := time.Unix(1000, 0)
	ix := mustNew(t, Config{BlockSize: 16, Now: func() time.Time { return now }})
	depth := func(seq []uint64, w Worker) int {
		for _, m := range ix.FindMatches(seq, nil) {
			if m.Worker == w {
				return m.Device
			}
		}
		return 0
	}
	chain := func(base uint64, n int) []uint64 {
		s := make([]uint64, n)
		for i := range s {
			s[i] = base + uint64(i)
		}
		return s
	}
	w, w2 := Worker{ID: 1}, Worker{ID: 2}
	seq := chain(100, 14)
	ix.Record(w, seq[:10], time.Minute)
	now = now.Add(20 * time.Second)
	ix.RecordTail(w, seq, 10, time.Minute)
	if d := depth(seq, w); d != 14 {
		t.Fatalf("after the tail: %d blocks matched, want 14", d)
	}
	if st := ix.Stats(); st.Approx != 14 {
		t.Fatalf("%d entries, want 14", st.Approx)
	}
	// The context's entries keep their expiry (20 s before the tail's);
	// the link block, recorded again, lives as long as the tail.
	now = now.Add(41 * time.Second)
	ix.Expire()
	if d, st := depth(seq, w), ix.Stats(); d != 0 || st.Approx != 5 {
		t.Fatalf("after the context's expiry: %d matched, %d entries; want 0 and the link and tail's 5", d, st.Approx)
	}
	// The link block is gone with the rest now; a tail from it records
	// the whole chain.
	now = now.Add(time.Minute)
	ix.RecordTail(w, seq, 10, time.Minute)
	if d := depth(seq, w); d != 14 {
		t.Fatalf("tail without its link block: %d matched, want the whole 14", d)
	}
	// Out of range: whole.
	other := chain(500, 6)
	for _, from := range []int{-1, 7} {
		ix.RecordTail(w2, other, from, time.Minute)
		if d := depth(other, w2); d != 6 {
			t.Fatalf("from %d: %d matched, want the whole 6", from, d)
		}
	}
	// from == len: the last block is refreshed, nothing else changes.
	before := ix.Stats().Approx
	ix.RecordTail(w2, other, len(other), time.Minute)
	if d, st := depth(other, w2), ix.Stats(); d != 6 || st.Approx != before {
		t.Fatalf("from len: %d matched, %d entries, want 6 and %d", d, st.Approx, before)
	}
}

// TestRecordTailEqualsRecord: on random chains, extended turn by turn on
// random workers, recording each turn from the last turn's length (when it
// ran on the same worker) gives every worker the same matched depth for
// every turn's chain as recording it whole, while nothing expires.
func TestRecordTailEqualsRecord(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 9))
		whole, tail := mustNew(t, Config{BlockSize: 16}), mustNew(t, Config{BlockSize: 16})
		type sess struct {
			seq  []uint64
			last int
			w    Worker
		}
		var ss []*sess
		var all [][]uint64
		for turn := range 60 {
			if len(ss) == 0 || r.IntN(4) == 0 {
				ss = append(ss, &sess{seq: []uint64{uint64(r.IntN(3)) + 1}})
			}
			s := ss[r.IntN(len(ss))]
			for range r.IntN(5) {
				s.seq = append(s.seq, uint64(seed)<<40|uint64(turn)<<20|uint64(r.Uint32()))
			}
			w := Worker{ID: uint64(r.IntN(3))}
			from := 0
			if w == s.w && s.last > 0 {
				from = s.last
			}
			whole.Record(w, s.seq, time.Hour)
			tail.RecordTail(w, s.seq, from, time.Hour)
			s.last, s.w = len(s.seq), w
			all = append(all, slices.Clone(s.seq))
		}
		for _, seq := range all {
			a, b := whole.FindMatches(seq, nil), tail.FindMatches(seq, nil)
			sortMatches(a)
			sortMatches(b)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d: chain %x: whole %+v, tail %+v", seed, seq, a, b)
			}
		}
	}
}
