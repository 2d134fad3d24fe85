package jsonscan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// stringEndRef is the byte-by-byte walk StringEnd replaces.
func stringEndRef(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

type named []byte

func check(t *testing.T, b []byte) {
	for i := range b {
		if b[i] != '"' {
			continue
		}
		want := stringEndRef(b, i)
		if got := StringEnd(b, i); got != want {
			t.Fatalf("%q at %d: []byte %d, want %d", b, i, got, want)
		}
		if got := StringEnd(string(b), i); got != want {
			t.Fatalf("%q at %d: string %d, want %d", b, i, got, want)
		}
		if got := StringEnd(named(b), i); got != want {
			t.Fatalf("%q at %d: named %d, want %d", b, i, got, want)
		}
	}
}

func TestStringEnd(t *testing.T) {
	for _, s := range []string{`"abc"`, `"a\"b"`, `"a\\"b"`, `"a\\\"b"`, `"\\\\"`, `"abc`, `"a\"`, `"\`, `""`, `"x\n\t\"y" "z"`} {
		check(t, []byte(s))
	}
}

// FuzzStringEnd: StringEnd agrees with a byte-by-byte walk everywhere.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`"a\"b\\" "c"`, `"\\\"`, `"` + "\x00" + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { check(t, b) })
}

func BenchmarkStringEnd(b *testing.B) {
	var s []byte
	s = append(s, '"')
	for len(s) < 200_000 {
		s = append(s, `func f() {\n\tif err != nil {\n\t\treturn err\n\t}\n}\n`...)
	}
	s = append(s, '"')
	b.Run("jsonscan", func(b *testing.B) {
		for range b.N {
			StringEnd(s, 0)
		}
		b.SetBytes(int64(len(s)))
	})
	b.Run("bytewalk", func(b *testing.B) {
		for range b.N {
			stringEndRef(s, 0)
		}
		b.SetBytes(int64(len(s)))
	})
}

// TestSkipJSON: jsonscan.ValueEnd finds the end of every value a plain parse reads.
func TestValueEnd(t *testing.T) {
	for _, s := range []string{`"a\"b\\"`, `"\\\\"`, `{"a":[1,2,{"b":"]}"}]}`, `-1.5e3`, `true`, `null`, `[]`, `{}`, `"x\\\""`} {
		end, ok := ValueEnd([]byte(s+` ,"z"`), 0)
		require.True(t, ok, s)
		require.Equal(t, len(s), end, s)
	}
	for _, s := range []string{`"abc`, `[1,2`, `]`, `"\"`} {
		_, ok := ValueEnd([]byte(s), 0)
		require.False(t, ok, s)
	}
}

// TestCommonPrefix: CommonPrefix agrees with a byte-by-byte compare where
// the bodies part at every offset around its block edges.
func TestCommonPrefix(t *testing.T) {
	a := make([]byte, 5000)
	for i := range a {
		a[i] = byte('a' + i%26)
	}
	for _, cut := range []int{0, 1, 1023, 1024, 1025, 2048, 4999, 5000} {
		b := append([]byte(nil), a...)
		if cut < len(b) {
			b[cut] = '!'
		}
		for _, n := range []int{len(b), cut, min(cut+1, len(b))} {
			want := 0
			for want < min(len(a), n) && a[want] == b[want] {
				want++
			}
			require.Equal(t, want, CommonPrefix(a, b[:n]), "cut %d, len %d", cut, n)
			require.Equal(t, want, CommonPrefix(b[:n], a), "cut %d, len %d", cut, n)
		}
	}
}
