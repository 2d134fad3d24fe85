package flashindex

import (
	"fmt"
	"testing"
	"time"
)

// TestApproxBoundedFlood drives the approximate entries far past their
// bound with distinct request chains (each a shared 4-block system prompt
// plus 12 blocks of its own, over 4 workers), as a session flood does: the
// entries, blocks and nodes stay bounded, every pruned entry is counted,
// the newest request is still matched in full and the oldest not at all;
// at the TTL everything expires and the index is empty again.
func TestApproxBoundedFlood(t *testing.T) {
	const max, workers, own = 512, 4, 12
	now := time.Unix(1000, 0)
	ix := mustNew(t, Config{BlockSize: 16, ApproxMaxEntries: max, Now: func() time.Time { return now }})
	sys := []uint64{11, 12, 13, 14}
	chain := func(i int) []uint64 {
		seq := append([]uint64(nil), sys...)
		for k := range own {
			seq = append(seq, uint64(i+1)<<20|uint64(k))
		}
		return seq
	}
	depth := func(seq []uint64, w Worker) int {
		for _, m := range ix.FindMatches(seq, nil) {
			if m.Worker == w {
				return m.Device
			}
		}
		return 0
	}
	const calls = 20_000
	for i := range calls {
		w := Worker{ID: uint64(i % workers)}
		ix.Record(w, chain(i), time.Minute)
		st := ix.Stats()
		if st.Approx > max || st.Blocks > max+len(sys) || st.Nodes > max {
			t.Fatalf("call %d: %d entries, %d blocks, %d nodes past the bound %d", i, st.Approx, st.Blocks, st.Nodes, max)
		}
	}
	st := ix.Stats()
	if want := uint64(workers*len(sys) + calls*own - st.Approx); st.ApproxPruned != want {
		t.Fatalf("pruned %d entries, want %d", st.ApproxPruned, want)
	}
	last := calls - 1
	if d := depth(chain(last), Worker{ID: uint64(last % workers)}); d != len(sys)+own {
		t.Fatalf("newest request matched %d blocks, want %d", d, len(sys)+own)
	}
	if d := depth(chain(0), Worker{ID: 0}); d > len(sys) {
		t.Fatalf("oldest request still matched %d blocks", d)
	}
	now = now.Add(time.Minute)
	ix.Expire()
	if st := ix.Stats(); st.Approx != 0 || st.Blocks != 0 || st.Nodes != 0 {
		t.Fatalf("after the TTL: %d entries, %d blocks, %d nodes", st.Approx, st.Blocks, st.Nodes)
	}
}

// BenchmarkRecordAtBound measures Record of a new 16-block request chain
// on one of 4 workers with the approximate entries at their bound, so each
// call also prunes the oldest request's 16 entries (what a session flood
// does: issue #22). entries is Config.ApproxMaxEntries; the cost per call
// should not depend on it beyond cache effects.
func BenchmarkRecordAtBound(b *testing.B) {
	for _, max := range []int{1 << 12, 1 << 20} {
		b.Run(fmt.Sprintf("entries=%d", max), func(b *testing.B) {
			ix, err := New(Config{BlockSize: 16, ApproxMaxEntries: max})
			if err != nil {
				b.Fatal(err)
			}
			seq := make([]uint64, 16)
			next := uint64(1)
			call := func() {
				for i := range seq {
					seq[i] = next * 0x9e3779b97f4a7c15
					next++
				}
				ix.Record(Worker{ID: next % 4}, seq, time.Hour)
			}
			for range max / len(seq) {
				call()
			}
			for b.Loop() {
				call()
			}
			if got := ix.Stats().Approx; got > max {
				b.Fatalf("%d approximate entries, bound %d", got, max)
			}
		})
	}
}

// TestUnrecord: a failed request's approximate entries go, on that worker
// only; blocks confirmed by events and other workers' entries stay, and
// once nothing holds a block it leaves the index.
func TestUnrecord(t *testing.T) {
	ix := mustNew(t, Config{BlockSize: 2})
	w1, w2 := Worker{ID: 1}, Worker{ID: 2}
	blocks := [][]uint32{toks(1, 1), toks(2, 2), toks(3, 3), toks(4, 4)}
	seq := hashChain(t, 2, blocks...)
	depth := func(w Worker) int {
		for _, m := range ix.FindMatches(seq, nil) {
			if m.Worker == w {
				return m.Device
			}
		}
		return 0
	}
	if err := ix.Apply(chainEvent(w1, 0, Device, blocks[:2], nil, 0)); err != nil {
		t.Fatal(err)
	}
	ix.Record(w1, seq, time.Minute)
	ix.Record(w2, seq[:3], time.Minute)
	if depth(w1) != 4 || depth(w2) != 3 || ix.Stats().Approx != 5 {
		t.Fatalf("before: depths %d, %d, %d entries", depth(w1), depth(w2), ix.Stats().Approx)
	}
	ix.Unrecord(w1, seq)
	if depth(w1) != 2 || depth(w2) != 3 || ix.Stats().Approx != 3 {
		t.Fatalf("after Unrecord(w1): depths %d, %d, %d entries", depth(w1), depth(w2), ix.Stats().Approx)
	}
	ix.Unrecord(w2, seq[1:]) // the first block's entry stays
	ix.Unrecord(Worker{ID: 9}, seq)
	if depth(w2) != 1 || ix.Stats().Approx != 1 || ix.Stats().Blocks != 2 {
		t.Fatalf("after Unrecord(w2): depth %d, %+v", depth(w2), ix.Stats())
	}
}
