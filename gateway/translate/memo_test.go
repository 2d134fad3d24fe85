package translate

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// agentBodies is an agent session's bodies, turn by turn: Claude Code's
// Messages shape (tool_use, tool_result with source code) or Codex's
// Responses shape (function_call, function_call_output), each body
// resending the previous one's items and adding a turn.
func agentBodies(t testing.TB, api string, turns int) [][]byte {
	code := strings.Repeat("func f() {\n\tif err != nil {\n\t\treturn fmt.Errorf(\"x: %w\", err)\n\t}\n}\n", 150)
	var items []any
	var out [][]byte
	for turn := 0; turn < turns; turn++ {
		id := fmt.Sprintf("call_%d", turn)
		if api == "messages" {
			items = append(items,
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("turn %d: fix the tests ✓ <b>&amp;</b> \u2028", turn)}}},
				map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": id, "name": "Read", "input": map[string]any{"path": fmt.Sprintf("f%d.go", turn)}}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": id, "content": code}}})
		} else {
			items = append(items,
				map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": fmt.Sprintf("turn %d: fix the tests ✓", turn)}}},
				map[string]any{"type": "function_call", "call_id": id, "name": "shell", "arguments": fmt.Sprintf(`{"cmd":"cat f%d.go"}`, turn)},
				map[string]any{"type": "function_call_output", "call_id": id, "output": code})
		}
		var v any
		if api == "messages" {
			v = map[string]any{"model": "m", "max_tokens": 64, "stream": true, "messages": items, "system": "You are a coding agent.",
				"tools": []any{map[string]any{"name": "Read", "description": "Reads a file.", "input_schema": map[string]any{"type": "object"}}}}
		} else {
			v = map[string]any{"model": "m", "instructions": "You are a coding agent.", "input": items, "stream": true, "store": false,
				"tools": []any{map[string]any{"type": "function", "name": "shell", "parameters": map[string]any{"type": "object"}}}}
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		out = append(out, b)
	}
	return out
}

// translateBoth translates body with ms and without a memo and checks
// they agree (the chat request, or the error).
func translateBoth(t *testing.T, api string, body []byte, ms *Memos) {
	t.Helper()
	var got, want *apiwire.ChatRequest
	var gotErr, wantErr error
	if api == "messages" {
		want, wantErr = MessagesToChat(body)
		got, gotErr = MessagesToChatMemo(body, ms)
	} else {
		want, _, wantErr = ResponsesToChat(body)
		got, _, gotErr = ResponsesToChatMemo(body, ms)
	}
	if wantErr != nil {
		require.EqualError(t, gotErr, wantErr.Error(), "%.200q", body)
		return
	}
	require.NoError(t, gotErr)
	require.True(t, reflect.DeepEqual(want, got), "%.200q", body)
	wantB, err := json.Marshal(want)
	require.NoError(t, err)
	gotB, err := MarshalChat(got, body, ms)
	require.NoError(t, err)
	require.Equal(t, string(wantB), string(gotB), "MarshalChat")
}

// TestMemoTranslation: an agent's growing session translated turn by turn
// through a memo equals translating each body whole, and from the second
// turn on takes every earlier item from the memo; bodies the memo does
// not handle (a repeated or differently cased member, a changed earlier
// item, malformed items and structure) translate, or fail, exactly as a
// whole decode does.
func TestMemoTranslation(t *testing.T) {
	for _, api := range []string{"messages", "responses"} {
		t.Run(api, func(t *testing.T) {
			ms := NewMemos(0)
			bodies := agentBodies(t, api, 10)
			key := map[string]string{"messages": "messages", "responses": "input"}[api]
			for i, b := range bodies {
				translateBoth(t, api, b, ms)
				m := ms.get(ms.key(api[0], b))
				require.NotNil(t, m, "turn %d: no memo kept", i)
				if i > 0 {
					var reused int
					switch m := m.(type) {
					case *arrayMemo[apiwire.AnthropicMessage]:
						reused = m.reused
					case *arrayMemo[apiwire.InputItem]:
						reused = m.reused
					}
					require.Equal(t, 3*i, reused, "turn %d: every earlier item from the memo", i)
					out, _ := ms.get(ms.key('c', b)).(*chatOut)
					require.NotNil(t, out, "turn %d: no encoding kept", i)
					require.LessOrEqual(t, out.fresh, 4, "turn %d: only the new turn's messages encoded (of %d)", i, len(out.msgs))
				}
			}
			last := string(bodies[len(bodies)-1])
			variants := []string{
				strings.Replace(last, "turn 0:", "turn 0!", 1),                        // an earlier item changed
				strings.Replace(last, `"`+key+`":`, `"`+strings.ToUpper(key)+`":`, 1), // cased as encoding/json still matches
				strings.Replace(last, `"model":"m"`, `"`+key+`":[],"model":"m"`, 1),   // the member twice
				strings.Replace(last, `"model"`, `"mo\u0064el"`, 1),                   // an escaped name
				strings.Replace(last, "turn 9:", "turn 9:\x01", 1),                    // a control character in a new item
				strings.Replace(last, `}]`, `},]`, 1),                                 // a trailing comma
				last[:len(last)-1],                                                    // truncated
				last + " x",                                                           // data after the object
				strings.Replace(last, `"stream":true`, `"stream":tru`, 1),             // a bad literal outside the items
				strings.Replace(last, `"`+key+`":[`, `"`+key+`":[1,`, 1),              // an item of the wrong type
				strings.Replace(last, `"`+key+`":[`, `"`+key+`":{"a":[`, 1) + "}",     // not an array
			}
			for _, v := range variants {
				translateBoth(t, api, []byte(v), ms)
			}
		})
	}
}

// FuzzMemoDecode: decoding any body from any other body's memo equals
// decoding it whole: the same request, or a refusal where a whole decode
// fails.
func FuzzMemoDecode(f *testing.F) {
	bodies := agentBodies(f, "messages", 2)
	f.Add(bodies[0], bodies[1])
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"}]}`), []byte(`{"messages":[{"role":"user","content":"a"},1]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"a"}],"Messages":[]}`), []byte(`{"messages":[{"role":"user","content":"a"}]} `))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		set := func(r *apiwire.MessagesRequest, items []apiwire.AnthropicMessage) { r.Messages = items }
		var ra apiwire.MessagesRequest
		prev, _ := decodeMemo(a, "messages", nil, &ra, set)
		var got apiwire.MessagesRequest
		_, ok := decodeMemo(b, "messages", prev, &got, set)
		var want apiwire.MessagesRequest
		err := json.Unmarshal(b, &want)
		if !ok {
			return // decoded whole by the caller
		}
		require.NoError(t, err, "the memo decoded what encoding/json refuses: %q", b)
		require.True(t, reflect.DeepEqual(want, got), "%q from %q", b, a)
	})
}

// FuzzMarshalChat: a chat request encoded from the memo of any other
// request's encoding equals json.Marshal of it.
func FuzzMarshalChat(f *testing.F) {
	bodies := agentBodies(f, "messages", 2)
	f.Add(bodies[0], bodies[1])
	f.Add([]byte(`{"messages":[{"role":"user","content":"a<b>"}],"max_tokens":1}`), []byte(`{"messages":[{"role":"user","content":"a<b>"},{"role":"assistant","content":[{"type":"text","text":"\u2028"}]}],"max_tokens":1}`))
	slot := []byte(strings.Repeat("k", minMemoBody)) // both in one memo slot
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ms := NewMemos(0)
		if cr, err := MessagesToChat(a); err == nil {
			_, err := MarshalChat(cr, slot, ms)
			require.NoError(t, err)
		}
		cr, err := MessagesToChat(b)
		if err != nil {
			return
		}
		want, wantErr := json.Marshal(cr)
		got, err := MarshalChat(cr, slot, ms)
		if wantErr != nil {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	})
}
