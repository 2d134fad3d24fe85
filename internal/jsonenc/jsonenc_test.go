package jsonenc

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

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

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	alphabet := []byte("ab\"\\\x00\x1f\x7f\xc3\xa9\xe2\x86\x92\xff\xe2\x80\xa8")
	for range 20000 {
		var b strings.Builder
		for range r.IntN(40) {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		s := b.String()
		var got, want string
		if err := json.Unmarshal(AppendString(nil, s), &got); err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		wb, _ := json.Marshal(s)
		_ = json.Unmarshal(wb, &want)
		if got != want {
			t.Fatalf("%q: got %q want %q", s, got, want)
		}
	}
}
