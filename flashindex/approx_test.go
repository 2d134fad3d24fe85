package flashindex

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
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
// should not depend on it beyond cache effects. cpu-µs/op is the calling
// thread's CPU time per call.
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
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c0 := threadCPU()
			for b.Loop() {
				call()
			}
			b.ReportMetric(float64(threadCPU()-c0)/float64(b.N)/1e3, "cpu-µs/op")
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

// TestApproxSetOrder drives the approximate-entry set with adds, refreshes,
// removals and takes of the first entry, with expiries mostly rising (one
// TTL, a clock moving on: the O(1) queue) and sometimes earlier than the
// newest (another TTL, a clock stepped back: the heap), against a plain
// list: the first entry is always the (expiry, order) minimum, and the
// queue, the heap, the positions and the free list stay consistent.
func TestApproxSetOrder(t *testing.T) {
	type ref struct {
		expiry int64
		order  uint64
	}
	for seed := uint64(0); seed < 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 5))
		var s approxSet
		s.init()
		live := map[int32]ref{}
		var order uint64
		now := int64(1000)
		expiry := func() int64 {
			switch rng.IntN(8) {
			case 0:
				return now - int64(rng.IntN(50)) // earlier than the newest
			case 1:
				return now // a tie, broken by order
			}
			now += int64(rng.IntN(3))
			return now
		}
		heapUsed := 0
		for step := range 2500 {
			switch op := rng.IntN(10); {
			case op < 5 || len(live) == 0:
				e := expiry()
				i := s.add(rng.IntN(4), rng.Uint64(), e, order)
				if _, dup := live[i]; dup {
					t.Fatalf("seed %d step %d: slot %d handed out twice", seed, step, i)
				}
				live[i] = ref{e, order}
				order++
			case op < 7:
				for i := range live { // any entry
					e := expiry()
					s.refresh(i, e, order)
					live[i] = ref{e, order}
					order++
					break
				}
			case op < 8:
				for i := range live {
					s.unlink(i)
					s.release(i)
					delete(live, i)
					break
				}
			default:
				i := s.first()
				s.unlink(i)
				s.release(i)
				delete(live, i)
			}
			heapUsed = max(heapUsed, len(s.heap))
			checkApproxSet(t, &s, live, func(a, b ref) bool {
				return a.expiry < b.expiry || a.expiry == b.expiry && a.order < b.order
			})
		}
		if heapUsed == 0 {
			t.Fatalf("seed %d: the heap was never used", seed)
		}
	}
}

// checkApproxSet asserts s holds exactly live and that first is its
// minimum.
func checkApproxSet[R any](t *testing.T, s *approxSet, live map[int32]R, less func(a, b R) bool) {
	t.Helper()
	if s.live != len(live) {
		t.Fatalf("live %d, want %d", s.live, len(live))
	}
	seen := map[int32]bool{}
	prev := int32(none)
	for i := s.head; i != none; i = s.ents[i].next {
		e := &s.ents[i]
		if e.pos != inQueue || e.prev != prev {
			t.Fatalf("queued entry %d: pos %d, prev %d (want %d)", i, e.pos, e.prev, prev)
		}
		if prev != none && !s.before(prev, i) {
			t.Fatalf("queue out of order at %d", i)
		}
		seen[i] = true
		prev = i
	}
	if s.tail != prev {
		t.Fatalf("tail %d, want %d", s.tail, prev)
	}
	for k, i := range s.heap {
		if int(s.ents[i].pos) != k {
			t.Fatalf("heap entry %d at %d records position %d", i, k, s.ents[i].pos)
		}
		if k > 0 && s.before(i, s.heap[(k-1)/2]) {
			t.Fatalf("heap order broken at %d", k)
		}
		if seen[i] {
			t.Fatalf("entry %d both queued and in the heap", i)
		}
		seen[i] = true
	}
	if len(seen) != len(live) {
		t.Fatalf("%d entries linked, %d live", len(seen), len(live))
	}
	free := 0
	for i := s.free; i != none; i = s.ents[i].next {
		if seen[i] {
			t.Fatalf("live entry %d on the free list", i)
		}
		free++
	}
	if free+len(live) != len(s.ents) {
		t.Fatalf("%d free + %d live != %d slots", free, len(live), len(s.ents))
	}
	if len(live) == 0 {
		if s.first() != none {
			t.Fatal("first of an empty set")
		}
		return
	}
	var min int32 = none
	for i := range live {
		if !seen[i] {
			t.Fatalf("live entry %d not linked", i)
		}
		if min == none || less(live[i], live[min]) {
			min = i
		}
	}
	if f := s.first(); f != min {
		t.Fatalf("first %d, want %d", f, min)
	}
}

// TestApproxEntriesHoldNoPointers: the approximate entries, and the maps
// that find them, are pointer-free, so the garbage collector never scans
// them: a session flood keeps a million of them live (issue #22), and
// with a pointer each every GC cycle walked them all.
func TestApproxEntriesHoldNoPointers(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[approxEntry](), reflect.TypeFor[u64slot]()} {
		if p := pointerIn(typ); p != "" {
			t.Errorf("%v holds a pointer (%s)", typ, p)
		}
	}
}

// pointerIn names a field of t that the garbage collector must scan, or
// returns "".
func pointerIn(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return t.String()
	case reflect.Array:
		return pointerIn(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if p := pointerIn(t.Field(i).Type); p != "" {
				return t.Field(i).Name + ": " + p
			}
		}
	}
	return ""
}
