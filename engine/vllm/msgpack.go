package vllm

import (
	"encoding/binary"
	"math"
)

// reader walks a msgpack document held in memory. It never allocates: strings
// and binary values come back as sub-slices of the input, so they are valid
// only as long as the input is. Every read checks the remaining length, so a
// truncated or hostile document yields an error, never a panic or a huge
// allocation.
type reader struct {
	b   []byte
	off int
}

func (r *reader) reset(b []byte) { r.b, r.off = b, 0 }

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) errf(reason string) error {
	return &MalformedError{Offset: r.off, Reason: reason}
}

func (r *reader) peek() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf("unexpected end of payload")
	}
	return r.b[r.off], nil
}

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, r.errf("value runs past the end of the payload")
	}
	s := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return s, nil
}

func (r *reader) u8() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.errf("unexpected end of payload")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) be(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

// nilValue consumes a nil and reports true when the next value is nil.
func (r *reader) nilValue() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xc0 {
		r.off++
		return true
	}
	return false
}

// arrayLen reads an array header. ok is false, with nothing consumed, when
// the next value is not an array.
func (r *reader) arrayLen() (n int, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.off++
		n = int(c & 0x0f)
	case c == 0xdc || c == 0xdd:
		r.off++
		w := 2
		if c == 0xdd {
			w = 4
		}
		v, err := r.be(w)
		if err != nil {
			return 0, false, err
		}
		n = int(v)
	default:
		return 0, false, nil
	}
	// Every element takes at least one byte.
	if n > r.remaining() {
		return 0, false, r.errf("array longer than the payload")
	}
	return n, true, nil
}

// mapLen reads a map header. ok is false, with nothing consumed, when the
// next value is not a map.
func (r *reader) mapLen() (n int, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.off++
		n = int(c & 0x0f)
	case c == 0xde || c == 0xdf:
		r.off++
		w := 2
		if c == 0xdf {
			w = 4
		}
		v, err := r.be(w)
		if err != nil {
			return 0, false, err
		}
		n = int(v)
	default:
		return 0, false, nil
	}
	if n > r.remaining()/2 {
		return 0, false, r.errf("map longer than the payload")
	}
	return n, true, nil
}

// bytesValue reads a str or bin value as a sub-slice of the input. ok is
// false, with nothing consumed, when the next value is neither.
func (r *reader) bytesValue() (s []byte, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return nil, false, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.off++
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		r.off++
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		r.off++
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		r.off++
		n, err = r.be(4)
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s, err = r.take(int(n))
	return s, err == nil, err
}

// intValue reads any msgpack integer as its 64-bit two's complement bits;
// neg reports a negative signed value. ok is false, with nothing consumed,
// when the next value is not an integer.
func (r *reader) intValue() (bits uint64, neg, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, false, err
	}
	switch {
	case c <= 0x7f:
		r.off++
		return uint64(c), false, true, nil
	case c >= 0xe0:
		r.off++
		return uint64(int64(int8(c))), true, true, nil
	}
	var w int
	signed := false
	switch c {
	case 0xcc, 0xcd, 0xce, 0xcf:
		w = 1 << (c - 0xcc)
	case 0xd0, 0xd1, 0xd2, 0xd3:
		w = 1 << (c - 0xd0)
		signed = true
	default:
		return 0, false, false, nil
	}
	r.off++
	v, err := r.be(w)
	if err != nil {
		return 0, false, false, err
	}
	if signed {
		shift := uint(64 - 8*w)
		s := int64(v<<shift) >> shift
		return uint64(s), s < 0, true, nil
	}
	return v, false, true, nil
}

// floatValue reads a float or an integer as float64.
func (r *reader) floatValue() (f float64, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch c {
	case 0xca:
		r.off++
		v, err := r.be(4)
		return float64(math.Float32frombits(uint32(v))), err == nil, err
	case 0xcb:
		r.off++
		v, err := r.be(8)
		return math.Float64frombits(v), err == nil, err
	}
	bits, neg, ok, err := r.intValue()
	if !ok || err != nil {
		return 0, ok, err
	}
	if neg {
		return float64(int64(bits)), true, nil
	}
	return float64(bits), true, nil
}

// skip consumes one complete value of any type, however deeply nested,
// without recursion: it counts the values still owed.
func (r *reader) skip() error {
	need := 1
	for need > 0 {
		need--
		c, err := r.u8()
		if err != nil {
			return err
		}
		var n int     // bytes of payload after the header
		var items int // nested values this header adds
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			items = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			items = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			n = int(c & 0x1f)
		case c == 0xc1:
			return r.errf("reserved code 0xc1")
		case c == 0xc4 || c == 0xd9:
			v, err := r.be(1)
			if err != nil {
				return err
			}
			n = int(v)
		case c == 0xc5 || c == 0xda:
			v, err := r.be(2)
			if err != nil {
				return err
			}
			n = int(v)
		case c == 0xc6 || c == 0xdb:
			v, err := r.be(4)
			if err != nil {
				return err
			}
			n = int(v)
		case c == 0xc7 || c == 0xc8 || c == 0xc9:
			v, err := r.be(1 << (c - 0xc7))
			if err != nil {
				return err
			}
			n = int(v) + 1 // ext type byte
		case c == 0xca:
			n = 4
		case c == 0xcb:
			n = 8
		case c >= 0xcc && c <= 0xcf:
			n = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			n = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			n = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xde:
			v, err := r.be(2)
			if err != nil {
				return err
			}
			items = int(v)
			if c == 0xde {
				items *= 2
			}
		case c == 0xdd || c == 0xdf:
			v, err := r.be(4)
			if err != nil {
				return err
			}
			items = int(v)
			if c == 0xdf {
				items *= 2
			}
		}
		if _, err := r.take(n); err != nil {
			return err
		}
		// Every owed value takes at least one byte, so a count beyond the
		// remaining bytes is malformed; checking here also bounds need.
		if items > r.remaining()-need {
			return r.errf("container longer than the payload")
		}
		need += items
	}
	return nil
}
