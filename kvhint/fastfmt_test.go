package kvhint

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
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

// TestJSONSafe8 checks the SWAR test against a per-byte reference on every
// single-byte substitution and random words.
func TestJSONSafe8(t *testing.T) {
	ref := func(x uint64) bool {
		for i := 0; i < 8; i++ {
			c := byte(x >> (8 * i))
			if c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				return false
			}
		}
		return true
	}
	base := uint64(0x6161616161616161) // "aaaaaaaa"
	for pos := 0; pos < 8; pos++ {
		for c := 0; c < 256; c++ {
			x := base&^(0xff<<(8*pos)) | uint64(c)<<(8*pos)
			if jsonSafe8(x) != ref(x) {
				t.Fatalf("byte %#x at %d: got %v", c, pos, jsonSafe8(x))
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000000 {
		x := r.Uint64()
		if r.IntN(2) == 0 {
			x &= 0x7f7f7f7f7f7f7f7f
			x |= 0x2020202020202020
		}
		if jsonSafe8(x) != ref(x) {
			t.Fatalf("%#x: got %v", x, jsonSafe8(x))
		}
	}
}

func TestAppendJSONStringRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("ab\"\\\x00\x1f\x7f\xc3\xa9\xe2\x86\x92\xff")
	for range 20000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		var got, want string
		if err := json.Unmarshal(appendJSONString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		wb, _ := json.Marshal(s)
		_ = json.Unmarshal(wb, &want)
		if got != want {
			t.Fatalf("%q: got %q want %q", s, got, want)
		}
	}
}
