package zframe

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

var errCap = errors.New("test: over the cap")

func writeFields(t testing.TB, f func(e *FieldWriter)) []byte {
	t.Helper()
	var buf bytes.Buffer
	bw := bufio.NewWriter(&buf)
	e := FieldWriter{W: bw}
	f(&e)
	require.NoError(t, e.Err)
	require.NoError(t, bw.Flush())
	return buf.Bytes()
}

func fieldReader(p []byte) *FieldReader {
	return &FieldReader{R: bufio.NewReader(bytes.NewReader(p)), Format: errFormat, Keep: errCap}
}

func TestFieldsRoundTrip(t *testing.T) {
	body := writeFields(t, func(e *FieldWriter) {
		e.U(0)
		e.U(math.MaxUint64)
		e.Bool(true)
		e.Bool(false)
		e.H(0x0102030405060708)
		e.B([]byte{9, 8, 7})
		e.S("")
		e.S("héllo")
		e.U(300)
	})
	d := fieldReader(body)
	require.Equal(t, uint64(0), d.U())
	require.Equal(t, uint64(math.MaxUint64), d.U())
	require.Equal(t, 1, d.N(1, "flag"))
	require.Equal(t, 0, d.N(1, "flag"))
	require.Equal(t, uint64(0x0102030405060708), d.H())
	require.Equal(t, []byte{9, 8, 7}, d.B(make([]byte, 5), 3))
	require.Equal(t, "", d.S(10, "empty"))
	require.Equal(t, "héllo", d.S(10, "word"))
	require.Equal(t, 300, d.N(300, "count"))
	d.End()
	require.NoError(t, d.Err)
}

// capReader fails with an error wrapping errCap once n bytes are read, as
// a size cap under the reader does.
type capReader struct {
	r io.Reader
	n int
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, fmt.Errorf("%w: 0 bytes left", errCap)
	}
	n, err := c.r.Read(p[:min(len(p), c.n)])
	c.n -= n
	return n, err
}

func TestFieldReaderErrors(t *testing.T) {
	body := writeFields(t, func(e *FieldWriter) { e.U(5); e.S("abc"); e.H(1) })
	cases := []struct {
		name string
		body []byte
		read func(d *FieldReader)
		want error
		msg  string
	}{
		{"over the limit", body, func(d *FieldReader) { d.N(4, "count") }, errFormat, "count: 5 exceeds 4"},
		{"string over the limit", body, func(d *FieldReader) { d.U(); d.S(2, "name") }, errFormat, "name: 3 exceeds 2"},
		{"truncated word", body[:len(body)-3], func(d *FieldReader) { d.U(); d.S(3, "name"); d.H() }, errFormat, "truncated"},
		{"truncated varint", []byte{0x80}, func(d *FieldReader) { d.U() }, errFormat, "truncated"},
		{"truncated string", body[:3], func(d *FieldReader) { d.U(); d.S(3, "name") }, errFormat, "truncated"},
		{"truncated bytes", body[:2], func(d *FieldReader) { d.B(nil, 4) }, errFormat, "truncated"},
		{"trailing data", body, func(d *FieldReader) { d.U(); d.End() }, errFormat, "trailing data"},
		{"empty body is no data", nil, func(d *FieldReader) { d.End() }, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := fieldReader(c.body)
			c.read(d)
			if c.want == nil {
				require.NoError(t, d.Err)
				return
			}
			require.ErrorIs(t, d.Err, c.want)
			require.Contains(t, d.Err.Error(), c.msg)
			first := d.Err
			// After an error every read is a zero value and the error stays.
			require.Zero(t, d.U())
			require.Zero(t, d.H())
			require.Zero(t, d.N(10, "x"))
			require.Empty(t, d.S(10, "x"))
			d.Fail("later")
			d.End()
			require.Equal(t, first, d.Err)
		})
	}
	t.Run("the cap's error kept", func(t *testing.T) {
		d := &FieldReader{R: bufio.NewReader(&capReader{r: bytes.NewReader(body), n: 2}), Format: errFormat, Keep: errCap}
		d.U()
		d.S(3, "name")
		require.ErrorIs(t, d.Err, errCap)
		require.NotErrorIs(t, d.Err, errFormat)
	})
}

// FuzzFieldReader reads arbitrary bodies with a script of field reads
// taken from the input: the reader never panics, never returns more bytes
// than its bounds allow, and every error wraps Format.
func FuzzFieldReader(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4}, writeFields(f, func(e *FieldWriter) { e.U(7); e.H(9); e.S("ab"); e.B([]byte{1, 2}) }))
	f.Add([]byte{2, 2, 2}, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{3}, []byte{0x80, 0x80, 0x80, 0x80, 0x08})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, script, body []byte) {
		d := fieldReader(body)
		var buf []byte
		for _, op := range script {
			switch op % 6 {
			case 0:
				d.U()
			case 1:
				if n := d.N(uint64(op), "n"); n > int(op) {
					t.Fatalf("N(%d) = %d", op, n)
				}
			case 2:
				d.H()
			case 3:
				if s := d.S(int(op), "s"); len(s) > int(op) {
					t.Fatalf("S(%d) is %d bytes", op, len(s))
				}
			case 4:
				if buf = d.B(buf, int(op)); d.Err == nil && len(buf) != int(op) {
					t.Fatalf("B(%d) is %d bytes", op, len(buf))
				}
			case 5:
				d.End()
			}
		}
		if d.Err != nil && !errors.Is(d.Err, errFormat) {
			t.Fatalf("error %v does not wrap the format error", d.Err)
		}
	})
}
