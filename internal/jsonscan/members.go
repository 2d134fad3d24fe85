package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// The helpers below walk a document that Valid accepted, to read a few
// members of a known shape without encoding/json's reflection while
// agreeing with what json.Unmarshal would do: a caller gives up (and
// decodes the usual way) wherever they report false.

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Members calls f for each member of the object at b[i] with its key and
// the index of its value, and returns the index after the object; f
// returns the index after the value, or false to stop. A key with an
// escape stops it (its name is not its bytes).
func Members(b []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	i = SkipSpace(b, i+1)
	if b[i] == '}' {
		return i + 1, true
	}
	for {
		ke := StringEnd(b, i)
		key := b[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, false
		}
		end, ok := f(key, SkipSpace(b, SkipSpace(b, ke)+1))
		if !ok {
			return 0, false
		}
		i = SkipSpace(b, end)
		if b[i] == '}' {
			return i + 1, true
		}
		i = SkipSpace(b, i+1)
	}
}

// SkipUnknown skips the value at b[v] of a member that json.Unmarshal
// ignores, and refuses one whose key matches one of a struct's fields in
// another case (json.Unmarshal would fill that field).
func SkipUnknown(b, key []byte, v int, fields []string) (int, bool) {
	for _, f := range fields {
		if strings.EqualFold(string(key), f) {
			return 0, false
		}
	}
	return ValueEnd(b, v)
}

// StringOrNull accepts a string or null at b[v] (what a string or *string
// field takes) and returns the index after it.
func StringOrNull(b []byte, v int) (int, bool) {
	switch b[v] {
	case '"':
		return StringEnd(b, v), true
	case 'n':
		return v + 4, true
	}
	return 0, false
}

// IntOrNull accepts what json.Unmarshal puts in an int64 field (an integer
// in range, or null) at b[v] and returns the index after it.
func IntOrNull(b []byte, v int) (int, bool) {
	if b[v] == 'n' {
		return v + 4, true
	}
	end, ok := ValueEnd(b, v)
	if !ok {
		return 0, false
	}
	var n int64
	return end, json.Unmarshal(b[v:end], &n) == nil
}

// String decodes the JSON string token tok as json.Unmarshal does: bytes
// without escapes are taken as they are when they are valid UTF-8.
func String(tok []byte) (string, bool) {
	body := tok[1 : len(tok)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	return s, json.Unmarshal(tok, &s) == nil
}
