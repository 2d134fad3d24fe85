package jsonscan

import (
	"testing"
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
