package apiwire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Prompt is a completions request's prompt, which OpenAI's API accepts as
// a string, an array of strings, an array of token ids, or an array of
// token-id arrays. Exactly one of Texts and Tokens is set after decoding
// (an array of strings or token arrays has one entry per prompt; a single
// string or token array has one entry). Array records whether the first
// form was an array of prompts, so that encoding restores the original
// form.
type Prompt struct {
	Texts  []string
	Tokens [][]int
	Array  bool
}

// MarshalJSON implements json.Marshaler.
func (p Prompt) MarshalJSON() ([]byte, error) {
	switch {
	case p.Tokens != nil && (p.Array || len(p.Tokens) != 1):
		return json.Marshal(p.Tokens)
	case p.Tokens != nil:
		return json.Marshal(p.Tokens[0])
	case p.Array || len(p.Texts) != 1:
		if p.Texts == nil {
			return []byte(`""`), nil
		}
		return json.Marshal(p.Texts)
	default:
		return json.Marshal(p.Texts[0])
	}
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Prompt) UnmarshalJSON(b []byte) error {
	*p = Prompt{}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fmt.Errorf("apiwire: empty prompt")
	}
	switch b[0] {
	case 'n':
		var v any
		return json.Unmarshal(b, &v)
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		p.Texts = []string{s}
		return nil
	case '[':
	default:
		return fmt.Errorf("apiwire: prompt must be a string or an array, got %.20s", b)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	if len(raw) == 0 {
		p.Texts, p.Array = []string{}, true
		return nil
	}
	switch bytes.TrimSpace(raw[0])[0] {
	case '"':
		p.Array = true
		return json.Unmarshal(b, &p.Texts)
	case '[':
		p.Array = true
		return json.Unmarshal(b, &p.Tokens)
	default:
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return fmt.Errorf("apiwire: prompt array must hold strings, token ids or token arrays: %w", err)
		}
		p.Tokens = [][]int{ids}
		return nil
	}
}
