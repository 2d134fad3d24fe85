// Package jsonenc holds the allocation-free JSON string encoder shared by
// the hand-written encoders of kvhint and trace.
package jsonenc

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string and returns the extended slice:
// quotes, backslashes and control characters are escaped, U+2028 and U+2029
// too (as encoding/json does, for JavaScript), invalid UTF-8 becomes U+FFFD (written as UTF-8);
// <, > and & are left as they are. Runs of 8 plain ASCII bytes are checked a
// word at a time.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := safePrefix(s); i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...) // the replacement character itself, so decode and re-encode is a fixed point
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// jsonSafe8 reports whether the 8 bytes of x (little-endian) need no JSON
// escaping: all are ASCII, >= 0x20, and neither '"' nor '\\'.
func jsonSafe8(x uint64) bool {
	ctl := (x - lsb*0x20) & ^x // high bit set where a byte < 0x20 (or >= 0x80)
	q := x ^ (lsb * '"')       // zero bytes where '"'
	bs := x ^ (lsb * '\\')     // zero bytes where '\\'
	hasQ := (q - lsb) & ^q     // high bit where q byte was zero (or >= 0x80)
	hasBS := (bs - lsb) & ^bs  // likewise for '\\'
	return (ctl|hasQ|hasBS|x)&msb == 0
}

// safePrefix returns the length of the longest prefix of s, a multiple of 8
// bytes, that needs no escaping.
func safePrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if !jsonSafe8(x) {
			break
		}
	}
	return i
}
