package flashindex

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
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
// the same churn, through both the reader (get) and writer (peek) paths.
func TestHeadMap(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		h := newHeadMap()
		ref := map[uint64]uint32{}
		space := uint64(1 + rng.IntN(300))
		for i := 0; i < 5000; i++ {
			k := rng.Uint64N(space) // includes key 0
			if rng.IntN(10) == 0 {
				k <<= 40
			}
			if rng.IntN(3) < 2 {
				v := rng.Uint32()
				h.put(k, v)
				ref[k] = v
			} else {
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
			rv, rok := ref[probe]
			for _, get := range []func(uint64) (uint32, bool){h.get, h.peek} {
				if v, ok := get(probe); ok != rok || v != rv {
					t.Fatalf("seed %d step %d: get(%d) = %d,%v want %d,%v", seed, i, probe, v, ok, rv, rok)
				}
			}
		}
	}
}

// TestHeadMapConcurrent runs lock-free readers against a writer that
// inserts and deletes keys around a fixed set (so backward shifts and
// growth move the fixed keys under the readers): readers must always find
// every fixed key with its value and never a key that was never inserted.
// Run with -race.
func TestHeadMapConcurrent(t *testing.T) {
	h := newHeadMap()
	const fixed = 200
	for k := uint64(1); k <= fixed; k++ {
		h.put(k<<40, uint32(k))
	}
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
				if v, ok := h.get(k << 40); !ok || v != uint32(k) {
					errs <- "fixed key lost or wrong under concurrent writes"
					return
				}
				if _, ok := h.get(k<<40 | 1); ok {
					errs <- "found a key never inserted"
					return
				}
			}
		}(r)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 20000; i++ {
		k := (1+rng.Uint64N(fixed))<<40 | 2 + rng.Uint64N(8)<<1 // never a fixed key nor k|1
		if rng.IntN(2) == 0 {
			h.put(k, 7)
		} else {
			h.del(k)
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
