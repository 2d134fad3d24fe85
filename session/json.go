package session

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/agentkv/agentkv/internal/jsonscan"
)

// text is what the JSON scanner reads: a header value (string) or a body
// prefix ([]byte). Values found in a []byte are copied out by jsonString;
// values found in a string are substrings (immutable, so safe to keep).
type text interface{ ~string | ~[]byte }

// fields iterates over the members of a top-level JSON object without
// decoding anything it does not need. It never allocates, never recurses,
// and stops (ok=false) at the first syntax error or at the end of a
// truncated input, so a body prefix cut at any byte is safe to scan.
type fields[T text] struct {
	data  T
	pos   int
	began bool
}

func newFields[T text](data T) fields[T] { return fields[T]{data: data} }

func (f *fields[T]) skipSpace() {
	for f.pos < len(f.data) {
		switch f.data[f.pos] {
		case ' ', '\t', '\n', '\r':
			f.pos++
		default:
			return
		}
	}
}

// next returns the next member: key is the raw key between its quotes
// (escapes not decoded) and val the raw value token (a string keeps its
// quotes). ok is false at the end of the object or on malformed input.
func (f *fields[T]) next() (key, val T, ok bool) {
	if !f.began {
		f.began = true
		f.skipSpace()
		if f.pos >= len(f.data) || f.data[f.pos] != '{' {
			f.pos = len(f.data)
			return key, val, false
		}
		f.pos++
	} else {
		f.skipSpace()
		if f.pos >= len(f.data) || f.data[f.pos] != ',' {
			f.pos = len(f.data)
			return key, val, false
		}
		f.pos++
	}
	f.skipSpace()
	if f.pos >= len(f.data) || f.data[f.pos] != '"' {
		f.pos = len(f.data)
		return key, val, false
	}
	kend := skipString(f.data, f.pos)
	if kend < 0 {
		f.pos = len(f.data)
		return key, val, false
	}
	key = f.data[f.pos+1 : kend-1]
	f.pos = kend
	f.skipSpace()
	if f.pos >= len(f.data) || f.data[f.pos] != ':' {
		f.pos = len(f.data)
		return key, val, false
	}
	f.pos++
	f.skipSpace()
	vend := skipValue(f.data, f.pos)
	if vend < 0 {
		f.pos = len(f.data)
		return key, val, false
	}
	val = f.data[f.pos:vend]
	f.pos = vend
	return key, val, true
}

// skipString returns the index just past the string starting at data[i]
// (which must be '"'), or -1 if it is unterminated.
func skipString[T text](data T, i int) int {
	return jsonscan.StringEnd(data, i)
}

// skipValue returns the index just past the JSON value starting at data[i],
// or -1 if it is malformed or truncated. Nested containers are skipped by
// counting brackets (strings respected), so depth costs no stack.
func skipValue[T text](data T, i int) int {
	if i >= len(data) {
		return -1
	}
	switch c := data[i]; c {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				e := skipString(data, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		// number, true, false, null: up to the next delimiter.
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				if j == i {
					return -1
				}
				return j
			}
			j++
		}
		return -1 // a scalar is never the last byte of a complete object
	}
}

// keyIs reports whether the raw key equals name. Escaped keys never match
// (no harness escapes its field names).
func keyIs[T text](key T, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if key[i] != name[i] {
			return false
		}
	}
	return true
}

// member returns the raw value of the first top-level member named name.
func member[T text](data T, name string) (val T, ok bool) {
	f := newFields(data)
	for {
		k, v, more := f.next()
		if !more {
			return val, false
		}
		if keyIs(k, name) {
			return v, true
		}
	}
}

// jsonString decodes a raw JSON string token. Without escapes the result is
// a substring of raw (no copy). ok is false for a non-string token, invalid
// escapes or invalid UTF-8. Callers holding []byte convert first (the copy
// that keeps the result from aliasing a reusable buffer).
func jsonString(raw string) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	for i := 0; i < len(inner); i++ {
		if inner[i] == '\\' {
			// Rare path: let encoding/json decode escapes exactly.
			var dec string
			if err := json.Unmarshal([]byte(raw), &dec); err != nil {
				return "", false
			}
			return dec, true
		}
	}
	s = inner
	if !utf8.ValidString(s) {
		return "", false
	}
	return s, true
}

// jsonID decodes an id given as a JSON string or an integer literal (some
// clients send numeric program ids).
func jsonID(raw string) (string, bool) {
	if len(raw) > 0 && raw[0] == '"' {
		return jsonString(raw)
	}
	if len(raw) == 0 {
		return "", false
	}
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return "", false
		}
	}
	return raw, true
}
