package jsonscan

import (
	"encoding/binary"
	"math/bits"
)

// maxDepth is encoding/json's nesting limit: Valid rejects deeper values,
// as json.Valid does.
const maxDepth = 10000

// Valid reports whether b is exactly one JSON value with optional white
// space around it: what encoding/json.Valid reports, byte for byte (bytes
// inside strings are not checked for UTF-8, as encoding/json does not),
// several times faster on agent bodies, whose bytes are mostly inside
// long strings: a string's plain run is skipped eight bytes at a time.
func Valid(b []byte) bool {
	i := ValidValue(b, skipSpace(b, 0))
	return i >= 0 && skipSpace(b, i) == len(b)
}

// ValidValue returns the index just past the JSON value that starts at
// b[i] (white space after it skipped), or -1 when no valid value starts
// there: Valid for a value inside a document that has not been checked.
func ValidValue(b []byte, i int) int {
	var stack []byte // '{' or '[' per open container
	var buf [64]byte
	stack = buf[:0]
	for {
		// A value at b[i].
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			if i = stringEnd(b, i); i < 0 {
				return -1
			}
		case c == '{':
			if len(stack) == maxDepth {
				return -1
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			stack = append(stack, '{')
			if i = key(b, i); i < 0 {
				return -1
			}
			continue
		case c == '[':
			if len(stack) == maxDepth {
				return -1
			}
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == ']' {
				i++
				break
			}
			stack = append(stack, '[')
			continue
		case c == 't':
			if i = literal(b, i, "true"); i < 0 {
				return -1
			}
		case c == 'f':
			if i = literal(b, i, "false"); i < 0 {
				return -1
			}
		case c == 'n':
			if i = literal(b, i, "null"); i < 0 {
				return -1
			}
		case c == '-' || c >= '0' && c <= '9':
			if i = number(b, i); i < 0 {
				return -1
			}
		default:
			return -1
		}
		// After a value: close containers, or a comma and the next one.
		for {
			i = skipSpace(b, i)
			if len(stack) == 0 {
				return i
			}
			if i >= len(b) {
				return -1
			}
			top := stack[len(stack)-1]
			switch {
			case b[i] == ',':
				i = skipSpace(b, i+1)
				if top == '{' {
					if i = key(b, i); i < 0 {
						return -1
					}
				}
			case top == '{' && b[i] == '}' || top == '[' && b[i] == ']':
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return -1
			}
			break
		}
	}
}

// key reads an object key and its colon at b[i] and returns the index of
// the value after them (white space skipped), or -1.
func key(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = stringEnd(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// number reads a JSON number at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

const (
	lo8  = 0x0101010101010101
	hi8  = 0x8080808080808080
	quot = '"' * lo8
	bsl  = '\\' * lo8
	ctl  = 0x20 * lo8
)

// special returns a word whose high bit is set in each byte of x that is
// '"', '\\' or below 0x20, and possibly in bytes after the first such one
// (the borrow of the subtraction runs upward), never before it.
func special(x uint64) uint64 {
	q, s := x^quot, x^bsl
	return ((q-lo8)&^q | (s-lo8)&^s | (x-ctl)&^x) & hi8
}

// stringEnd returns the index just past the valid JSON string whose
// opening quote is b[i], or -1: no closing quote, a control character, or
// a bad escape.
func stringEnd(b []byte, i int) int {
	i++
	for {
		for i+8 <= len(b) {
			if m := special(binary.LittleEndian.Uint64(b[i:])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		case c == '\\':
			if i+1 >= len(b) {
				return -1
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !hex4(b[i+2:i+6]) {
					return -1
				}
				i += 6
			default:
				return -1
			}
		default:
			i++
		}
	}
}

func hex4(h []byte) bool {
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
