package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/agentkv/agentkv/internal/jsonscan"
)

// plainDelta reads a chat chunk that only adds content to choice 0 (most
// of a stream) without encoding/json: it returns the content and true
// when json.Unmarshal into apiwire.ChatChunk would succeed and
// streamSoFar.learn would learn exactly that content and nothing else (no
// tool call, no reasoning, one choice). Anything else (another shape, a
// field of the wrong type, a key spelled in another case or escaped, a
// repeated key, usage, a finish reason) returns false, and the caller
// decodes the chunk as before. FuzzPlainDelta holds it to that.
func plainDelta(data []byte) (content string, ok bool) {
	if !jsonscan.Valid(data) {
		return "", false
	}
	i := skipWS(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", false
	}
	sawChoices := false
	i, ok = eachMember(data, i, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "id", "object", "model", "system_fingerprint":
			return stringOrNull(data, v)
		case "created":
			return intLiteral(data, v)
		case "choices":
			if sawChoices || data[v] != '[' {
				return 0, false
			}
			sawChoices = true
			var end int
			content, end, ok = oneChoice(data, v)
			return end, ok
		}
		return skipUnknown(data, key, v, chunkFields)
	})
	return content, ok && sawChoices
}

// The fields json.Unmarshal fills (matching keys without regard to case).
var (
	chunkFields  = []string{"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
	choiceFields = []string{"index", "delta", "logprobs", "finish_reason", "stop_reason"}
	deltaFields  = []string{"role", "content", "reasoning_content", "tool_calls"}
)

// oneChoice reads a choices array of exactly one plain choice 0 at
// data[i] and returns its content and the index after the array.
func oneChoice(data []byte, i int) (content string, end int, ok bool) {
	i = skipWS(data, i+1)
	if data[i] != '{' {
		return "", 0, false
	}
	var sawIndex, sawDelta bool
	i, ok = eachMember(data, i, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "index":
			if sawIndex || data[v] != '0' {
				return 0, false
			}
			sawIndex = true
			return intLiteral(data, v)
		case "delta":
			if sawDelta || data[v] != '{' {
				return 0, false
			}
			sawDelta = true
			var sawContent, sawRole bool
			return eachMember(data, v, func(key []byte, v int) (int, bool) {
				switch string(key) {
				case "role":
					if sawRole {
						return 0, false
					}
					sawRole = true
					return stringOrNull(data, v)
				case "content":
					if sawContent {
						return 0, false
					}
					sawContent = true
					end, ok := stringOrNull(data, v)
					if ok && data[v] == '"' {
						content, ok = jsonString(data[v:end])
					}
					return end, ok
				}
				return skipUnknown(data, key, v, deltaFields)
			})
		case "logprobs", "stop_reason":
			end, ok := jsonscan.ValueEnd(data, v)
			return end, ok
		case "finish_reason":
			if !bytes.HasPrefix(data[v:], []byte("null")) {
				return 0, false
			}
			return v + 4, true
		}
		return skipUnknown(data, key, v, choiceFields)
	})
	if !ok || !sawIndex || !sawDelta {
		return "", 0, false
	}
	i = skipWS(data, i)
	if data[i] != ']' {
		return "", 0, false // a second choice
	}
	return content, i + 1, true
}

// eachMember calls f for each member of the object at data[i] (valid
// JSON) with its key and the index of its value, and returns the index
// after the object. f returns the index after the value. A key with an
// escape stops it (the key it names is not its bytes).
func eachMember(data []byte, i int, f func(key []byte, v int) (int, bool)) (int, bool) {
	i = skipWS(data, i+1)
	if data[i] == '}' {
		return i + 1, true
	}
	for {
		ke := jsonscan.StringEnd(data, i)
		key := data[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, false
		}
		v := skipWS(data, skipWS(data, ke)+1) // past the colon
		end, ok := f(key, v)
		if !ok {
			return 0, false
		}
		i = skipWS(data, end)
		if data[i] == '}' {
			return i + 1, true
		}
		i = skipWS(data, i+1) // past the comma
	}
}

// skipUnknown skips a member json.Unmarshal ignores, and refuses one whose
// key matches a field of the struct in another case.
func skipUnknown(data, key []byte, v int, fields []string) (int, bool) {
	for _, f := range fields {
		if strings.EqualFold(string(key), f) {
			return 0, false
		}
	}
	return jsonscan.ValueEnd(data, v)
}

func stringOrNull(data []byte, v int) (int, bool) {
	switch data[v] {
	case '"':
		return jsonscan.StringEnd(data, v), true
	case 'n':
		return v + 4, true
	}
	return 0, false
}

// intLiteral accepts what json.Unmarshal puts in an int or int64 field:
// an integer in range, or null.
func intLiteral(data []byte, v int) (int, bool) {
	if data[v] == 'n' {
		return v + 4, true
	}
	end, ok := jsonscan.ValueEnd(data, v)
	if !ok {
		return 0, false
	}
	var n int64
	if json.Unmarshal(data[v:end], &n) != nil {
		return 0, false
	}
	return end, true
}

// jsonString decodes a JSON string token as json.Unmarshal does: bytes
// without escapes are taken as they are when they are valid UTF-8.
func jsonString(tok []byte) (string, bool) {
	body := tok[1 : len(tok)-1]
	if bytes.IndexByte(body, '\\') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	return s, json.Unmarshal(tok, &s) == nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
