package sim

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// checkTable runs ops against the table and a Go map; keys are drawn from
// a small space so collisions, updates and deletes of absent keys happen.
func checkTable(t *testing.T, ops []byte) {
	tb := newTable(4)
	ref := map[uint64]int32{}
	for len(ops) >= 3 {
		op, k, v := ops[0]%3, uint64(ops[1]), int32(ops[2])
		// Spread keys so some share home slots after the mix.
		key := k * 0x100000001
		ops = ops[3:]
		switch op {
		case 0:
			tb.put(key, v)
			ref[key] = v
		case 1:
			_, inRef := ref[key]
			if tb.del(key) != inRef {
				t.Fatalf("del(%x) disagrees with the map", key)
			}
			delete(ref, key)
		case 2:
			got, ok := tb.get(key)
			want, inRef := ref[key]
			if ok != inRef || got != want {
				t.Fatalf("get(%x) = %d %v, want %d %v", key, got, ok, want, inRef)
			}
		}
		if tb.n != len(ref) {
			t.Fatalf("table has %d entries, map %d", tb.n, len(ref))
		}
	}
	for k, v := range ref {
		if got, ok := tb.get(k); !ok || got != v {
			t.Fatalf("final get(%x) = %d %v, want %d", k, got, ok, v)
		}
	}
	n := 0
	tb.each(func(k uint64, v int32) {
		n++
		if ref[k] != v {
			t.Fatalf("each: %x = %d, want %d", k, v, ref[k])
		}
	})
	if n != len(ref) {
		t.Fatalf("each visited %d, want %d", n, len(ref))
	}
}

func TestTableAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		ops := make([]byte, 3*(1+rng.IntN(2000)))
		for i := range ops {
			ops[i] = byte(rng.IntN(256))
		}
		checkTable(t, ops)
	}
}

func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 1, 0, 2, 2, 1, 1, 0, 2, 2, 0})
	f.Add(binary.LittleEndian.AppendUint64(nil, 0x0102030405060708))
	f.Fuzz(func(t *testing.T, ops []byte) { checkTable(t, ops) })
}
