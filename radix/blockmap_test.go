package radix

import (
	"math/rand/v2"
	"testing"
)

// TestBlockMapModel checks the open-addressing table against a Go map
// under inserts, overwrites and deletes of dense and random keys, across
// growth and shrinkage.
func TestBlockMapModel(t *testing.T) {
	for seed := range 8 {
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		var m blockMap
		m.init(0)
		ref := map[uint64]loc{}
		key := func() uint64 {
			if seed%2 == 0 {
				return uint64(rng.IntN(3000)) // dense ids, like trace hash ids
			}
			return rng.Uint64() >> uint(rng.IntN(64))
		}
		for step := range 20000 {
			k := key()
			switch op := rng.IntN(10); {
			case op < 5:
				l := loc{node: uint32(1 + rng.IntN(100)), depth: uint32(step)}
				_, had := ref[k]
				if got := m.insert(k, l); got == had {
					t.Fatalf("seed %d step %d: insert(%d) = %v, key present %v", seed, step, k, got, had)
				}
				if !had {
					ref[k] = l
				}
			case op < 6:
				if _, ok := ref[k]; ok {
					l := loc{node: 7, depth: 1}
					m.set(k, l)
					ref[k] = l
				}
			default:
				m.delete(k)
				delete(ref, k)
			}
			if m.n != len(ref) {
				t.Fatalf("seed %d step %d: n %d, ref %d", seed, step, m.n, len(ref))
			}
			if step%1000 == 0 || step == 19999 {
				for k, want := range ref {
					if got, ok := m.get(k); !ok || got != want {
						t.Fatalf("seed %d step %d: get(%d) = %v %v, want %v", seed, step, k, got, ok, want)
					}
				}
			}
		}
		// Drain: shrinks back to the minimum.
		for k := range ref {
			m.delete(k)
		}
		if m.n != 0 || len(m.slots) != minMapSlots {
			t.Fatalf("seed %d: drained map has n %d, %d slots", seed, m.n, len(m.slots))
		}
	}
}

func TestErrorText(t *testing.T) {
	for _, err := range []error{
		&CycleError{Block: 0xab, Depth: 3},
		&ParentConflictError{Block: 0xab, Depth: 3, HaveDepth: 9},
	} {
		if msg := err.Error(); len(msg) < 10 || msg[:7] != "radix: " {
			t.Errorf("error text %q", msg)
		}
	}
}
