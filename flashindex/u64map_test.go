package flashindex

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

// TestU64Map checks the open-addressing map against a Go map under random
// churn with clustered keys (so probe runs wrap and backward shifts run).
func TestU64Map(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		var m u64map
		ref := map[uint64]uint64{}
		space := uint64(1 + rng.IntN(300))
		for i := 0; i < 5000; i++ {
			k := rng.Uint64N(space) // includes key 0
			if rng.IntN(10) == 0 {
				k <<= 40 // same low bits: same home slot
			}
			switch rng.IntN(3) {
			case 0, 1:
				v := rng.Uint64()
				m.put(k, v)
				ref[k] = v
			case 2:
				_, had := ref[k]
				if got := m.del(k); got != had {
					t.Fatalf("seed %d step %d: del(%d) = %v, want %v", seed, i, k, got, had)
				}
				delete(ref, k)
			}
			if m.Len() != len(ref) {
				t.Fatalf("seed %d step %d: len %d, want %d", seed, i, m.Len(), len(ref))
			}
			probe := rng.Uint64N(space)
			v, ok := m.get(probe)
			rv, rok := ref[probe]
			if ok != rok || v != rv {
				t.Fatalf("seed %d step %d: get(%d) = %d,%v want %d,%v", seed, i, probe, v, ok, rv, rok)
			}
		}
		n := 0
		m.each(func(k, v uint64) {
			if ref[k] != v {
				t.Fatalf("each: %d=%d, want %d", k, v, ref[k])
			}
			n++
		})
		if n != len(ref) {
			t.Fatalf("each visited %d of %d", n, len(ref))
		}
		m.clear()
		if m.Len() != 0 {
			t.Fatal("clear")
		}
	}
}

// TestHeadMap checks the sequence-locked head map against a Go map under
// the same churn of inserts, in-place updates and deletes.
func TestHeadMap(t *testing.T) {
	vals := make([]headEntry, 64)
	for i := range vals {
		vals[i] = testEntry(i)
	}
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		h := newHeadMap()
		ref := map[uint64]headEntry{}
		space := uint64(1 + rng.IntN(300))
		for i := 0; i < 5000; i++ {
			k := rng.Uint64N(space) // includes key 0
			if rng.IntN(10) == 0 {
				k <<= 40
			}
			switch op := rng.IntN(6); {
			case op < 3:
				v := vals[rng.IntN(len(vals))]
				h.put(k, v.d, &v.kids)
				ref[k] = v
			case op == 3:
				if _, ok := ref[k]; ok {
					v := vals[rng.IntN(len(vals))]
					h.update(k, v.d, &v.kids)
					ref[k] = v
				}
			default:
				h.del(k)
				delete(ref, k)
			}
			if h.n != len(ref) {
				t.Fatalf("seed %d step %d: len %d, want %d", seed, i, h.n, len(ref))
			}
			if h.seq.Load()&1 != 0 {
				t.Fatalf("seed %d step %d: sequence left odd", seed, i)
			}
			probe := rng.Uint64N(space)
			var v view
			if h.get(probe, &v); !ref[probe].is(v) {
				t.Fatalf("seed %d step %d: get(%d) = %+v, want %+v", seed, i, probe, v, ref[probe])
			}
			if v := h.peek(probe); v != ref[probe].d { // through the writer's filter
				t.Fatalf("seed %d step %d: peek(%d) = %p, want %p", seed, i, probe, v, ref[probe].d)
			}
		}
	}
}

// TestHeadMapConcurrent runs lock-free readers against a writer that
// inserts and deletes keys around a fixed set (so backward shifts and
// growth move the fixed keys under the readers) and swaps the fixed keys'
// contents between two versions in place: readers must always find every
// fixed key with one of its versions, with that version's hashes and kids,
// and never a key that was never inserted. Run with -race.
func TestHeadMapConcurrent(t *testing.T) {
	h := newHeadMap()
	const fixed = 200
	var versions [fixed + 1][2]headEntry
	for k := uint64(1); k <= fixed; k++ {
		versions[k] = [2]headEntry{testEntry(int(k)), testEntry(int(k) + 3)}
		h.put(k<<40, versions[k][0].d, &versions[k][0].kids)
	}
	other := testEntry(0)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for !stop.Load() {
				k := 1 + rng.Uint64N(fixed)
				var v view
				if h.get(k<<40, &v); v.d == nil || (v.d != versions[k][0].d && v.d != versions[k][1].d) {
					errs <- "fixed key lost or wrong under concurrent writes"
					return
				} else if !versions[k][0].is(v) && !versions[k][1].is(v) {
					errs <- "a slot's copies from another snapshot than its contents"
					return
				}
				if h.get(k<<40|1, &v) {
					errs <- "found a key never inserted"
					return
				}
			}
		}(r)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 20000; i++ {
		k := (1+rng.Uint64N(fixed))<<40 | 2 + rng.Uint64N(8)<<1 // never a fixed key nor k|1
		switch rng.IntN(3) {
		case 0:
			h.put(k, other.d, &other.kids)
		case 1:
			h.del(k)
		default:
			f := 1 + rng.Uint64N(fixed)
			v := versions[f][rng.IntN(2)]
			h.update(f<<40, v.d, &v.kids)
		}
	}
	stop.Store(true)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestChainMatchLen checks the sampled comparison against a full compare
// (matchLen) on chains that share a prefix of every length up to 5,000
// blocks and then diverge, and on one chain that is a prefix of the other.
func TestChainMatchLen(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for trial := 0; trial < 3000; trial++ {
		n := 1 + rng.IntN(5000)
		common := 1 + rng.IntN(n)
		local := make([]uint64, n)
		for i := range local {
			local[i] = rng.Uint64()
		}
		a := AppendSequenceHashes(nil, local)
		other := slices.Clone(local)
		if common < n {
			other[common] ^= 1 + rng.Uint64N(1<<32) // diverge at block common
		}
		b := AppendSequenceHashes(nil, other)
		if cut := rng.IntN(3); cut == 1 {
			b = b[:common+rng.IntN(n-common+1)]
		} else if cut == 2 {
			a = a[:common+rng.IntN(n-common+1)]
		}
		want := matchLen(a, b)
		if got := chainMatchLen(a, b); got != want {
			t.Fatalf("trial %d: chainMatchLen over %d/%d blocks = %d, want %d", trial, len(a), len(b), got, want)
		}
	}
}

// TestHeadFilterSaturates: more than 255 heads in one filter bucket
// saturate its counter, which then stays set, so removing most of them
// never hides the rest.
func TestHeadFilterSaturates(t *testing.T) {
	var keys []uint64
	for k := uint64(1); len(keys) < 300; k++ {
		if headBucket(k) == 7 {
			keys = append(keys, k)
		}
	}
	h := newHeadMap()
	d := &nodeData{}
	for _, k := range keys {
		h.put(k, d, nil)
	}
	for _, k := range keys[1:] {
		h.del(k)
	}
	if h.peek(keys[0]) != d {
		t.Fatal("a head hidden by its saturated filter bucket")
	}
	if h.peek(keys[1]) != nil {
		t.Fatal("a removed head still found")
	}
	h.del(keys[0])
	if h.peek(keys[0]) != nil || h.n != 0 {
		t.Fatal("last head not removed")
	}
}

// headEntry is what the head map holds for a key: contents and kids.
type headEntry struct {
	d    *nodeData
	kids kidList
}

// testEntry returns an entry whose contents (i+1 hashes) and kid list
// (i mod 8 offsets, capped at headKids) differ with i.
func testEntry(i int) headEntry {
	e := headEntry{d: newNodeData(make([]uint64, i+1), []run{{end: uint32(i + 1)}}, nil)}
	e.kids.n = uint32(min(i%8, headKids))
	for j := range e.kids.n {
		e.kids.off[j] = uint32(i + int(j))
	}
	return e
}

// is reports whether v shows e: the same contents, their hashes (the same
// backing array) and kids. The zero entry is absence.
func (e headEntry) is(v view) bool {
	if e.d == nil {
		return v.d == nil
	}
	return v.d == e.d && len(v.hashes) == len(e.d.hashes) && &v.hashes[0] == &e.d.hashes[0] && v.kids == e.kids
}

// TestHeadSlotSize: a head slot is one cache line (two slots would share
// lines, or one straddle two).
func TestHeadSlotSize(t *testing.T) {
	if n := unsafe.Sizeof(headSlot{}); n != 64 {
		t.Fatalf("headSlot is %d bytes", n)
	}
}
