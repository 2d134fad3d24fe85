package apiwire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// TextOr is a field that clients send either as a JSON string or as a JSON
// array of P: OpenAI message content (a string or content parts),
// Anthropic system and message content (a string or blocks), Responses
// input (a string or items), stop sequences (a string or strings).
//
// After decoding, exactly one form is set: Parts is non-nil for the array
// form (possibly empty), otherwise Text holds the string. JSON null reads
// as the empty string; an absent field leaves the zero value. Encoding
// writes the array form when Parts is non-nil, else the string.
//
// Under omitzero, a value that was given (decoded from a string or null,
// or built by Str) is written even when empty ("content":""); only the
// zero value, a field never given, is dropped.
type TextOr[P any] struct {
	Text  string
	Parts []P
	given bool // the string form was given, possibly empty
}

// Str returns the string form holding s, written even when s is "".
func Str[P any](s string) TextOr[P] { return TextOr[P]{Text: s, given: true} }

// IsArray reports whether the value was (or will be) written as an array.
func (t TextOr[P]) IsArray() bool { return t.Parts != nil }

// IsZero reports whether t was never given (an absent field, or a zero
// TextOr holding neither a string nor an array), so that encoding/json's
// omitzero drops it.
func (t TextOr[P]) IsZero() bool { return t.Parts == nil && t.Text == "" && !t.given }

// MarshalJSON implements json.Marshaler.
func (t TextOr[P]) MarshalJSON() ([]byte, error) {
	if t.Parts != nil {
		return json.Marshal(t.Parts)
	}
	return json.Marshal(t.Text)
}

// UnmarshalJSON implements json.Unmarshaler.
func (t *TextOr[P]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimLeft(b, " \t\r\n")
	*t = TextOr[P]{}
	if len(b) == 0 {
		return fmt.Errorf("apiwire: empty value")
	}
	switch b[0] {
	case 'n':
		var v any
		t.given = true
		return json.Unmarshal(b, &v) // accepts exactly null
	case '"':
		t.given = true
		return json.Unmarshal(b, &t.Text)
	case '[':
		parts := []P{}
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		t.Parts = parts
		return nil
	}
	return fmt.Errorf("apiwire: want a string or an array, got %.20s", b)
}

// Ptr returns a pointer to v: for the optional (pointer) fields of the wire
// types.
func Ptr[T any](v T) *T { return &v }
