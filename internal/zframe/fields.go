package zframe

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// The body inside a frame is a sequence of fields, the letters the
// snapshot formats' docs use for them:
//
//	u  an unsigned varint
//	h  a little-endian 64-bit word
//	b  bytes whose count the reader knows from earlier fields
//	s  a string: u length, then its bytes
//
// FieldWriter and FieldReader write and read them. Both keep the first
// error and do nothing after it, so a codec checks Err once per part
// instead of after every field.

// FieldWriter writes fields to W; the first write error stays in Err.
type FieldWriter struct {
	W   *bufio.Writer
	Err error
	buf [binary.MaxVarintLen64]byte
}

// U writes v as an unsigned varint.
func (e *FieldWriter) U(v uint64) {
	if e.Err == nil {
		n := binary.PutUvarint(e.buf[:], v)
		_, e.Err = e.W.Write(e.buf[:n])
	}
}

// Bool writes b as the varint 1 or 0.
func (e *FieldWriter) Bool(b bool) {
	e.U(Bit(b))
}

// H writes v as a little-endian 64-bit word.
func (e *FieldWriter) H(v uint64) {
	if e.Err == nil {
		binary.LittleEndian.PutUint64(e.buf[:8], v)
		_, e.Err = e.W.Write(e.buf[:8])
	}
}

// B writes p as is (the reader must know its length).
func (e *FieldWriter) B(p []byte) {
	if e.Err == nil {
		_, e.Err = e.W.Write(p)
	}
}

// S writes v's length, then v.
func (e *FieldWriter) S(v string) {
	e.U(uint64(len(v)))
	if e.Err == nil {
		_, e.Err = e.W.WriteString(v)
	}
}

// Bit is 1 for true and 0 for false, for flag words.
func Bit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// FieldReader reads fields from R. Its errors wrap Format: a value out of
// its bound, a short body (truncation), data after the body. A read error
// that wraps Keep (the error of a size cap under R, such as a
// limitio.Reader's) is kept as it is. The first error stays in Err; reads
// after it return zero values.
type FieldReader struct {
	R      *bufio.Reader
	Format error
	Keep   error
	Err    error
	buf    [8]byte
}

// Fail records a format error (format and args as fmt.Errorf's), unless
// an error is already recorded.
func (d *FieldReader) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: "+format, append([]any{d.Format}, args...)...)
	}
}

// ReadErr records err, returned by R: as is if it wraps Keep, otherwise as
// truncation.
func (d *FieldReader) ReadErr(err error) {
	if d.Err == nil && d.Keep != nil && errors.Is(err, d.Keep) {
		d.Err = err
		return
	}
	d.Fail("truncated (%v)", err)
}

// U reads an unsigned varint.
func (d *FieldReader) U() uint64 {
	if d.Err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.R)
	if err != nil {
		d.ReadErr(err)
	}
	return v
}

// N reads an unsigned varint no larger than limit, so that garbage cannot
// ask for absurd sizes; what names it in the error.
func (d *FieldReader) N(limit uint64, what string) int {
	v := d.U()
	if v > limit {
		d.Fail("%s: %d exceeds %d", what, v, limit)
		return 0
	}
	return int(v)
}

// H reads a little-endian 64-bit word.
func (d *FieldReader) H() uint64 {
	if d.Err != nil {
		return 0
	}
	if _, err := io.ReadFull(d.R, d.buf[:]); err != nil {
		d.ReadErr(err)
		return 0
	}
	return binary.LittleEndian.Uint64(d.buf[:])
}

// B reads n bytes into dst[:0], growing it as needed, and returns it; the
// caller bounds n.
func (d *FieldReader) B(dst []byte, n int) []byte {
	if d.Err != nil {
		return dst
	}
	dst = slices.Grow(dst[:0], n)[:n]
	if _, err := io.ReadFull(d.R, dst); err != nil {
		d.ReadErr(err)
	}
	return dst
}

// S reads a string of at most limit bytes.
func (d *FieldReader) S(limit int, what string) string {
	n := d.N(uint64(max(limit, 0)), what)
	if d.Err != nil || n == 0 {
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(d.R, b); err != nil {
		d.ReadErr(err)
		return ""
	}
	return string(b)
}

// End checks that the body ended: data after it is a format error, a read
// error other than io.EOF is recorded as ReadErr does.
func (d *FieldReader) End() {
	if d.Err != nil {
		return
	}
	if _, err := d.R.ReadByte(); err == nil {
		d.Fail("trailing data")
	} else if !errors.Is(err, io.EOF) {
		d.ReadErr(err)
	}
}
