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
// integers in uint32's range (or null). It checks the reply as it reads
// it, in one pass: the ids are read and checked together, and any other
// scalar value is checked by jsonscan.ValidValue; anything else (another
// member holding an object or a list, bad syntax) is not ok.
func fastTokens(b []byte) ([]uint32, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	var ids []uint32
	seen := false
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		ke := jsonscan.ValidValue(b, i) // past the key and its white space
		if ke < 0 || ke >= len(b) || b[ke] != ':' {
			return nil, false
		}
		key := bytes.TrimRight(b[i+1:ke], " \t\r\n")
		key = key[:len(key)-1] // the closing quote
		v := skipSpace(b, ke+1)
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
		case v < len(b) && (b[v] == '{' || b[v] == '['):
			return nil, false // a container: encoding/json's path, whose depth limit counts this object
		default:
			if end = jsonscan.ValidValue(b, v); end < 0 {
				return nil, false
			}
		}
		i = skipSpace(b, end)
		switch {
		case i >= len(b):
			return nil, false
		case b[i] == '}':
			return ids, skipSpace(b, i+1) == len(b)
		case b[i] != ',':
			return nil, false
		}
		i = skipSpace(b, i+1)
	}
}

// uint32List reads and checks a JSON list of integers in uint32's range,
// or null, at b[i], returning the index past it; not ok for anything
// else (a sign, a fraction, an exponent, a leading zero, bad syntax).
func uint32List(b []byte, i int) ([]uint32, int, bool) {
	if i < len(b) && b[i] == 'n' {
		if len(b)-i < 4 || string(b[i:i+4]) != "null" {
			return nil, 0, false
		}
		return nil, i + 4, true
	}
	if i >= len(b) || b[i] != '[' {
		return nil, 0, false
	}
	ids := make([]uint32, 0, (len(b)-i)/7+1)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
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
		if j == i || j-i > 1 && b[i] == '0' || j == len(b) || b[j] == '.' || b[j] == 'e' || b[j] == 'E' {
			return nil, 0, false // none, a leading zero, cut, a fraction, an exponent
		}
		ids = append(ids, uint32(n))
		i = skipSpace(b, j)
		switch {
		case i >= len(b):
			return nil, 0, false
		case b[i] == ']':
			return ids, i + 1, true
		case b[i] != ',':
			return nil, 0, false
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
