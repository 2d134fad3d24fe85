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
// form (possibly empty), otherwise Text holds the string. JSON null and an
// absent field decode to the zero value. Encoding writes the array form
// when Parts is non-nil, else the string.
type TextOr[P any] struct {
	Text  string
	Parts []P
}

// IsArray reports whether the value was (or will be) written as an array.
func (t TextOr[P]) IsArray() bool { return t.Parts != nil }

// IsZero reports whether t holds neither a non-empty string nor an array,
// so that encoding/json's omitzero drops it.
func (t TextOr[P]) IsZero() bool { return t.Parts == nil && t.Text == "" }

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
		return json.Unmarshal(b, &v) // accepts exactly null
	case '"':
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
