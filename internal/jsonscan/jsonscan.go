// Package jsonscan finds the ends of JSON strings fast: with a vectorised
// search for the closing quote, then a count of the backslashes before
// it, instead of a byte-by-byte walk that stops at every escape (agent
// bodies carry source code, an escaped newline or tab per line).
package jsonscan

import (
	"bytes"
	"strings"
)

// StringEnd returns the index just past the JSON string whose opening
// quote is data[i], or -1 where the string does not end. Escapes are
// followed (a quote after an odd run of backslashes is escaped), not
// validated.
func StringEnd[T ~string | ~[]byte](data T, i int) int {
	j := i + 1
	for {
		k := indexQuote(data, j)
		if k < 0 {
			return -1
		}
		n := 0 // backslashes before the quote
		for k-1-n > i && data[k-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return k + 1
		}
		j = k + 1
	}
}

// indexQuote is the index of the first '"' in data at or after from, or -1.
func indexQuote[T ~string | ~[]byte](data T, from int) int {
	if from >= len(data) {
		return -1
	}
	var k int
	switch d := any(data).(type) {
	case string:
		k = strings.IndexByte(d[from:], '"')
	case []byte:
		k = bytes.IndexByte(d[from:], '"')
	default: // a named string or byte slice type
		k = -1
		for x := from; x < len(data); x++ {
			if data[x] == '"' {
				k = x - from
				break
			}
		}
	}
	if k < 0 {
		return -1
	}
	return from + k
}

// ValueEnd returns the index just past the JSON value that starts at
// b[i], found by its strings and nesting alone: scalars are not
// validated (callers validate what they decode). ok is false where no end
// is found.
func ValueEnd(b []byte, i int) (end int, ok bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			if i = StringEnd(b, i); i < 0 {
				return 0, false
			}
			if depth == 0 {
				return i, true
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				return 0, false
			}
			if depth == 0 {
				return i + 1, true
			}
		default:
			if depth == 0 { // a number or literal: up to a delimiter
				j := i
				for j < len(b) && !isDelim(b[j]) {
					j++
				}
				return j, j > i
			}
		}
		i++
	}
	return 0, false
}

func isDelim(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r', ':':
		return true
	}
	return false
}

// CommonPrefix is the length of the longest common prefix of a and b,
// compared a block at a time (request bodies run to megabytes).
func CommonPrefix(a, b []byte) int {
	const chunk = 1024
	n := min(len(a), len(b))
	i := 0
	for i+chunk <= n && bytes.Equal(a[i:i+chunk], b[i:i+chunk]) {
		i += chunk
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}
