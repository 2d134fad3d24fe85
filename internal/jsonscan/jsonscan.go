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
