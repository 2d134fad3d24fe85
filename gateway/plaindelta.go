package gateway

import (
	"bytes"

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
	i := jsonscan.SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return "", false
	}
	sawChoices := false
	i, ok = jsonscan.Members(data, i, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "id", "object", "model", "system_fingerprint":
			return jsonscan.StringOrNull(data, v)
		case "created":
			return jsonscan.IntOrNull(data, v)
		case "choices":
			if sawChoices || data[v] != '[' {
				return 0, false
			}
			sawChoices = true
			var end int
			content, end, ok = oneChoice(data, v)
			return end, ok
		}
		return jsonscan.SkipUnknown(data, key, v, chunkFields)
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
	i = jsonscan.SkipSpace(data, i+1)
	if data[i] != '{' {
		return "", 0, false
	}
	var sawIndex, sawDelta bool
	i, ok = jsonscan.Members(data, i, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "index":
			if sawIndex || data[v] != '0' {
				return 0, false
			}
			sawIndex = true
			return jsonscan.IntOrNull(data, v)
		case "delta":
			if sawDelta || data[v] != '{' {
				return 0, false
			}
			sawDelta = true
			var sawContent, sawRole bool
			return jsonscan.Members(data, v, func(key []byte, v int) (int, bool) {
				switch string(key) {
				case "role":
					if sawRole {
						return 0, false
					}
					sawRole = true
					return jsonscan.StringOrNull(data, v)
				case "content":
					if sawContent {
						return 0, false
					}
					sawContent = true
					end, ok := jsonscan.StringOrNull(data, v)
					if ok && data[v] == '"' {
						content, ok = jsonscan.String(data[v:end])
					}
					return end, ok
				}
				return jsonscan.SkipUnknown(data, key, v, deltaFields)
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
		return jsonscan.SkipUnknown(data, key, v, choiceFields)
	})
	if !ok || !sawIndex || !sawDelta {
		return "", 0, false
	}
	i = jsonscan.SkipSpace(data, i)
	if data[i] != ']' {
		return "", 0, false // a second choice
	}
	return content, i + 1, true
}
