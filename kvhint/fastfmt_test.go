package kvhint

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestAppendUint64(t *testing.T) {
	vals := []uint64{0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999999, 1e8, 1e8 + 1, 1e16 - 1, 1e16, 1e16 + 7, 1<<64 - 1, 1 << 63}
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		vals = append(vals, r.Uint64()>>r.IntN(64))
	}
	for p := uint64(1); p < 1e19; p *= 10 {
		vals = append(vals, p-1, p, p+1)
	}
	for _, v := range vals {
		if got, want := string(appendUint64([]byte("x"), v)), "x"+strconv.FormatUint(v, 10); got != want {
			t.Fatalf("appendUint64(%d) = %s, want %s", v, got, want)
		}
	}
}
