package flashindex

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestU64Map checks the open-addressing map against a Go map under random
// churn with clustered keys (so probe runs wrap and backward shifts run).
func TestU64Map(t *testing.T) {
	if s := unsafe.Sizeof(blockShard{}); s%64 != 0 {
		t.Errorf("blockShard is %d bytes, not a multiple of a cache line", s)
	}
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
