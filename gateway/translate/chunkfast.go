package translate

import (
	"encoding/json"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/jsonscan"
)

// learnFast is sniffJSON into an apiwire.ChatChunk then Learn, for the
// chunks a chat stream ends with (a finish reason, the usage) without
// encoding/json's reflection over the whole chunk: it fills only what
// Learn reads (the usage, decoded by encoding/json, and each choice's
// finish reason), after checking that every other field json.Unmarshal
// fills has a type it accepts. A chunk it does not take whole (a tool
// call, a repeated or differently cased key, a type json.Unmarshal
// refuses) returns ok false, and the caller decodes it the usual way.
// FuzzLearnFast holds it to the usual way's result.
func learnFast(data []byte, u *Usage) (finished, ok bool) {
	if !jsonscan.Valid(data) {
		return false, false
	}
	i := jsonscan.SkipSpace(data, 0)
	if data[i] != '{' {
		return false, false
	}
	var c apiwire.ChatChunk
	var sawUsage, sawChoices bool
	_, ok = jsonscan.Members(data, i, func(key []byte, v int) (int, bool) {
		switch string(key) {
		case "id", "object", "model", "system_fingerprint":
			return jsonscan.StringOrNull(data, v)
		case "created":
			return jsonscan.IntOrNull(data, v)
		case "usage":
			if sawUsage {
				return 0, false
			}
			sawUsage = true
			end, ok := jsonscan.ValueEnd(data, v)
			if !ok || data[v] == 'n' {
				return end, ok
			}
			c.Usage = new(apiwire.Usage)
			return end, json.Unmarshal(data[v:end], c.Usage) == nil
		case "choices":
			if sawChoices {
				return 0, false
			}
			sawChoices = true
			return choicesFast(data, v, &c)
		}
		return jsonscan.SkipUnknown(data, key, v, chunkFields)
	})
	if !ok {
		return false, false
	}
	return Learn(&c, u), true
}

// The fields json.Unmarshal fills in a chunk, a choice and a delta.
var (
	chunkFields  = []string{"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
	choiceFields = []string{"index", "delta", "logprobs", "finish_reason", "stop_reason"}
	deltaFields  = []string{"role", "content", "reasoning_content", "tool_calls"}
)

// choicesFast reads a choices list (or null) at data[v] into c: each
// choice's finish reason, its other fields type-checked; a tool call
// gives up.
func choicesFast(data []byte, v int, c *apiwire.ChatChunk) (int, bool) {
	if data[v] == 'n' {
		return v + 4, true
	}
	if data[v] != '[' {
		return 0, false
	}
	i := jsonscan.SkipSpace(data, v+1)
	if data[i] == ']' {
		return i + 1, true
	}
	for {
		if data[i] != '{' {
			return 0, false
		}
		var ch apiwire.ChatChunkChoice
		var sawFinish bool
		end, ok := jsonscan.Members(data, i, func(key []byte, v int) (int, bool) {
			switch string(key) {
			case "index":
				return jsonscan.IntOrNull(data, v)
			case "delta":
				if data[v] == 'n' {
					return v + 4, true
				}
				if data[v] != '{' {
					return 0, false
				}
				return jsonscan.Members(data, v, func(key []byte, v int) (int, bool) {
					switch string(key) {
					case "role", "content", "reasoning_content":
						return jsonscan.StringOrNull(data, v)
					case "tool_calls":
						if data[v] == 'n' {
							return v + 4, true
						}
						if end := jsonscan.SkipSpace(data, v+1); data[v] == '[' && data[end] == ']' {
							return end + 1, true
						}
						return 0, false // a tool call: the usual way
					}
					return jsonscan.SkipUnknown(data, key, v, deltaFields)
				})
			case "finish_reason":
				if sawFinish {
					return 0, false
				}
				sawFinish = true
				end, ok := jsonscan.StringOrNull(data, v)
				if ok && data[v] == '"' {
					var f string
					if f, ok = jsonscan.String(data[v:end]); ok {
						ch.FinishReason = &f
					}
				}
				return end, ok
			case "logprobs", "stop_reason":
				return jsonscan.ValueEnd(data, v)
			}
			return jsonscan.SkipUnknown(data, key, v, choiceFields)
		})
		if !ok {
			return 0, false
		}
		c.Choices = append(c.Choices, ch)
		i = jsonscan.SkipSpace(data, end)
		if data[i] == ']' {
			return i + 1, true
		}
		i = jsonscan.SkipSpace(data, i+1)
	}
}
