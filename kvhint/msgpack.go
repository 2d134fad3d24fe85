package kvhint

import (
	"encoding/binary"
	"math"
	"strconv"
)

// Minimal MessagePack writer and reader for the binary encodings. Written by
// hand (no reflection, no intermediate values) so that encoding an envelope
// costs one append per field; tests check every byte against
// github.com/vmihailenco/msgpack/v5 in both directions.

func mpAppendArrayLen(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	default:
		return append(dst, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

func mpAppendNil(dst []byte) []byte { return append(dst, 0xc0) }

func mpAppendUint(dst []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(dst, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(dst, 0xce, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(dst, 0xcf, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

func mpAppendInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpAppendUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(v))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(v))
	case v >= math.MinInt16:
		return append(dst, 0xd1, byte(v>>8), byte(v))
	case v >= math.MinInt32:
		return append(dst, 0xd2, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(dst, 0xd3, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32), byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

func mpAppendStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = append(dst, 0xda, byte(n>>8), byte(n))
	default:
		dst = append(dst, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(dst, s...)
}

// mpReader reads MessagePack values from b. Errors are sticky: after the
// first one every read returns a zero value, and err says where it failed.
type mpReader struct {
	b   []byte
	off int
	err *DecodeError
}

const mpMaxDepth = 32

func (r *mpReader) fail(msg string) {
	if r.err == nil {
		r.err = &DecodeError{Format: "msgpack", Offset: r.off, Msg: msg}
	}
}

func (r *mpReader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b)-r.off < n {
		r.fail("truncated")
		return false
	}
	return true
}

func (r *mpReader) byte1() byte {
	if !r.need(1) {
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *mpReader) bigEndian(n int) uint64 {
	if !r.need(n) {
		return 0
	}
	var v uint64
	switch n {
	case 1:
		v = uint64(r.b[r.off])
	case 2:
		v = uint64(binary.BigEndian.Uint16(r.b[r.off:]))
	case 4:
		v = uint64(binary.BigEndian.Uint32(r.b[r.off:]))
	case 8:
		v = binary.BigEndian.Uint64(r.b[r.off:])
	}
	r.off += n
	return v
}

// peekNil consumes a nil and reports whether there was one.
func (r *mpReader) peekNil() bool {
	if r.err == nil && r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// arrayLen reads an array header. The length is checked against the bytes
// left (every element takes at least one), so callers may allocate it.
func (r *mpReader) arrayLen() int {
	c := r.byte1()
	var n uint64
	switch {
	case r.err != nil:
		return 0
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n = r.bigEndian(2)
	case c == 0xdd:
		n = r.bigEndian(4)
	default:
		r.off--
		r.fail("expected array")
		return 0
	}
	if r.err == nil && n > uint64(len(r.b)-r.off) {
		r.fail("array length " + strconv.FormatUint(n, 10) + " exceeds input")
		return 0
	}
	return int(n)
}

// uint reads a non-negative integer of any MessagePack width.
func (r *mpReader) uint() uint64 {
	c := r.byte1()
	switch {
	case r.err != nil:
		return 0
	case c < 0x80:
		return uint64(c)
	case c >= 0xcc && c <= 0xcf:
		return r.bigEndian(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		v := r.signed(n)
		if v < 0 {
			r.off -= n + 1
			r.fail("negative integer")
			return 0
		}
		return uint64(v)
	case c >= 0xe0:
		r.off--
		r.fail("negative integer")
		return 0
	}
	r.off--
	r.fail("expected integer")
	return 0
}

func (r *mpReader) signed(n int) int64 {
	u := r.bigEndian(n)
	switch n {
	case 1:
		return int64(int8(u))
	case 2:
		return int64(int16(u))
	case 4:
		return int64(int32(u))
	}
	return int64(u)
}

// int reads an integer of any MessagePack width that fits in an int64.
func (r *mpReader) int() int64 {
	c := r.byte1()
	switch {
	case r.err != nil:
		return 0
	case c < 0x80:
		return int64(c)
	case c >= 0xe0:
		return int64(int8(c))
	case c >= 0xcc && c <= 0xcf:
		v := r.bigEndian(1 << (c - 0xcc))
		if v > math.MaxInt64 {
			r.fail("integer overflows int64")
			return 0
		}
		return int64(v)
	case c >= 0xd0 && c <= 0xd3:
		return r.signed(1 << (c - 0xd0))
	}
	r.off--
	r.fail("expected integer")
	return 0
}

// str reads a string (str family; bin is accepted too).
func (r *mpReader) str() string {
	c := r.byte1()
	var n uint64
	switch {
	case r.err != nil:
		return ""
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n = r.bigEndian(1)
	case c == 0xda || c == 0xc5:
		n = r.bigEndian(2)
	case c == 0xdb || c == 0xc6:
		n = r.bigEndian(4)
	default:
		r.off--
		r.fail("expected string")
		return ""
	}
	if !r.need(int(min(n, math.MaxInt32))) {
		return ""
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s
}

// skip consumes one value of any type.
func (r *mpReader) skip(depth int) {
	if depth > mpMaxDepth {
		r.fail("nesting deeper than " + strconv.Itoa(mpMaxDepth))
		return
	}
	c := r.byte1()
	if r.err != nil {
		return
	}
	var elems uint64 // nested values to skip
	var size uint64  // raw bytes to skip
	switch {
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
	case c&0xf0 == 0x80:
		elems = 2 * uint64(c&0x0f)
	case c&0xf0 == 0x90:
		elems = uint64(c & 0x0f)
	case c&0xe0 == 0xa0:
		size = uint64(c & 0x1f)
	case c == 0xc4 || c == 0xd9:
		size = r.bigEndian(1)
	case c == 0xc5 || c == 0xda:
		size = r.bigEndian(2)
	case c == 0xc6 || c == 0xdb:
		size = r.bigEndian(4)
	case c == 0xc7:
		size = r.bigEndian(1) + 1
	case c == 0xc8:
		size = r.bigEndian(2) + 1
	case c == 0xc9:
		size = r.bigEndian(4) + 1
	case c == 0xca:
		size = 4
	case c == 0xcb:
		size = 8
	case c >= 0xcc && c <= 0xcf:
		size = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		size = 1 << (c - 0xd0)
	case c >= 0xd4 && c <= 0xd8:
		size = 1 + 1<<(c-0xd4)
	case c == 0xdc:
		elems = r.bigEndian(2)
	case c == 0xdd:
		elems = r.bigEndian(4)
	case c == 0xde:
		elems = 2 * r.bigEndian(2)
	case c == 0xdf:
		elems = 2 * r.bigEndian(4)
	default: // 0xc1 is never used
		r.off--
		r.fail("invalid type byte")
		return
	}
	if size > 0 && r.need(int(min(size, math.MaxInt32))) {
		r.off += int(size)
	}
	if elems > uint64(len(r.b)-r.off) {
		r.fail("container length exceeds input")
		return
	}
	for ; elems > 0 && r.err == nil; elems-- {
		r.skip(depth + 1)
	}
}
