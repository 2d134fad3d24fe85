package limitio

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

var errBig = errors.New("test: too big")

func TestReaderSizeCap(t *testing.T) {
	for _, tc := range []struct {
		n, max int64
		ok     bool
	}{{10, 10, true}, {11, 10, false}, {0, 1, true}, {1 << 20, 0, true}} {
		l := &Reader{R: strings.NewReader(strings.Repeat("x", int(tc.n))), Max: tc.max, Err: errBig}
		got, err := io.ReadAll(l)
		if tc.ok != (err == nil) {
			t.Fatalf("n=%d max=%d: err %v", tc.n, tc.max, err)
		}
		if !tc.ok {
			var le *LimitError
			if !errors.Is(err, errBig) || !errors.As(err, &le) || le.Max != tc.max {
				t.Fatalf("err %v, want a *LimitError matching errBig", err)
			}
			if int64(len(got)) > tc.max {
				t.Fatalf("returned %d bytes past the cap %d", len(got), tc.max)
			}
		} else if int64(len(got)) != tc.n {
			t.Fatalf("read %d of %d", len(got), tc.n)
		}
		// Sticky.
		if _, err2 := l.Read(make([]byte, 1)); !tc.ok && err2 != err {
			t.Fatalf("second read: %v", err2)
		}
	}
}

// TestReaderExpansion: a zstd stream of 8 MiB of zeros (a few hundred bytes)
// is stopped by the ratio cap long before its end; the same data in random
// bytes (incompressible) passes.
func TestReaderExpansion(t *testing.T) {
	compress := func(b []byte) []byte {
		var out bytes.Buffer
		zw, _ := zstd.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	read := func(z []byte) (int64, error) {
		in := &Counter{R: bytes.NewReader(z)}
		zr, _ := zstd.NewReader(in)
		defer zr.Close()
		l := &Reader{R: zr, In: in, Ratio: 8, Slack: 1 << 10, Err: errBig}
		return io.Copy(io.Discard, l)
	}
	zeros := compress(make([]byte, 8<<20))
	n, err := read(zeros)
	if !errors.Is(err, errBig) {
		t.Fatalf("8 MiB of zeros from %d bytes: %d read, %v", len(zeros), n, err)
	}
	if limit := 8*int64(len(zeros)) + 1<<10; n > limit {
		t.Fatalf("read %d bytes, more than the %d the ratio allows", n, limit)
	}
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(i*2654435761>>13) ^ byte(i>>7)
	}
	if n, err := read(compress(random)); err != nil || n != 1<<20 {
		t.Fatalf("incompressible stream: %d, %v", n, err)
	}
}
