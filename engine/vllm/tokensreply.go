package vllm

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentkv/agentkv/internal/jsonscan"
)

// decodeTokens reads the "tokens" of a /tokenize reply: exactly what
// json.NewDecoder(reply).Decode into struct{Tokens []uint32} gives,
// without encoding/json for the common reply (one object, "tokens" a list
// of integers), which reflects over every id of a long prompt; any other
// reply takes encoding/json's path. FuzzDecodeTokens holds it to that.
func decodeTokens(reply []byte) ([]uint32, error) {
	if ids, ok := fastTokens(reply); ok {
		return ids, nil
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	err := json.NewDecoder(bytes.NewReader(reply)).Decode(&out)
	return out.Tokens, err
}

// fastTokens is decodeTokens' path for a reply that is one valid JSON
// object whose only member named like "tokens" is "tokens", a list of
// integers in uint32's range (or null).
func fastTokens(b []byte) ([]uint32, bool) {
	if !jsonscan.Valid(b) {
		return nil, false
	}
	i := skipSpace(b, 0)
	if b[i] != '{' {
		return nil, false
	}
	var ids []uint32
	seen := false
	i = skipSpace(b, i+1)
	if b[i] == '}' {
		return nil, true
	}
	for {
		ke := jsonscan.StringEnd(b, i)
		key := b[i+1 : ke-1]
		v := skipSpace(b, skipSpace(b, ke)+1)
		var end int
		switch {
		case string(key) == "tokens" && !seen:
			seen = true
			var ok bool
			if ids, end, ok = uint32List(b, v); !ok {
				return nil, false
			}
		case bytes.IndexByte(key, '\\') >= 0 || strings.EqualFold(string(key), "tokens"):
			return nil, false // an escaped, repeated or differently cased "tokens"
		default:
			end, _ = jsonscan.ValueEnd(b, v)
		}
		i = skipSpace(b, end)
		if b[i] == '}' {
			return ids, true
		}
		i = skipSpace(b, i+1)
	}
}

// uint32List reads a list of integers in uint32's range, or null, at
// b[i] (valid JSON).
func uint32List(b []byte, i int) ([]uint32, int, bool) {
	if b[i] == 'n' {
		return nil, i + 4, true
	}
	if b[i] != '[' {
		return nil, 0, false
	}
	ids := make([]uint32, 0, (len(b)-i)/7+1)
	i = skipSpace(b, i+1)
	if b[i] == ']' {
		return ids, i + 1, true
	}
	for {
		var n uint64
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			n = n*10 + uint64(b[j]-'0')
			if n > 1<<32-1 {
				return nil, 0, false
			}
			j++
		}
		if j == i || b[j] == '.' || b[j] == 'e' || b[j] == 'E' {
			return nil, 0, false // a sign, a fraction, an exponent: not a uint32
		}
		ids = append(ids, uint32(n))
		i = skipSpace(b, j)
		if b[i] == ']' {
			return ids, i + 1, true
		}
		i = skipSpace(b, i+1) // past the comma
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
