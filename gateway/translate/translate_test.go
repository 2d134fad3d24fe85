package translate

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/apiwire"
)

const codexTurn = `{"model":"m","instructions":"You are Codex.","stream":%s,"store":false,
 "input":[
  {"type":"message","role":"developer","content":[{"type":"input_text","text":"be brief"}]},
  {"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]},
  {"type":"reasoning","summary":[]},
  {"type":"function_call","call_id":"call_a","name":"shell","arguments":"{\"cmd\":\"ls\"}"},
  {"type":"function_call_output","call_id":"call_a","output":"a.go b.go"}%s],
 "tools":[{"type":"function","name":"shell","description":"run a command","parameters":{"type":"object"}},
          {"type":"web_search"}]}`

func sprintf(format string, args ...any) string {
	for _, a := range args {
		format = strings.Replace(format, "%s", a.(string), 1)
	}
	return format
}

const claudeTurn = `{"model":"claude-x","max_tokens":100,"stream":%s,
 "system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"},
           {"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],
 "metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"cc-body-1\"}"},
 "tools":[{"name":"Bash","description":"run","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}],
 "messages":[
  {"role":"user","content":[{"type":"text","text":"list files"}]},
  {"role":"system","content":[{"type":"text","text":"# Environment"}]},
  {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Let me look."},
    {"type":"tool_use","id":"toolu_1","name":"Bash","input":{"cmd":"ls"}}]}%s]}`

const toolResult = `,
  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a.go"}]}]}`

// sseEvents splits an SSE body into (event, data) pairs.
func sseEvents(t *testing.T, body []byte) (names []string, datas []map[string]any) {
	t.Helper()
	var s SSEScanner
	s.On = func(ev string, data []byte) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m), string(data))
		names = append(names, ev)
		datas = append(datas, m)
	}
	s.Feed(body)
	s.Flush()
	return names, datas
}

// TestTranslateRequestShapes: every shape a client may send for the fields
// that are a string or an array (Anthropic system, message and tool_result
// content; Responses instructions, input, message content and outputs),
// null and absent values, custom tools and server tool results translate
// to the chat request they always did. An assistant message of tool calls
// only has no content.
func TestTranslateRequestShapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"model":"m","system":"sys","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]}`},
		{`{"model":"m","system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"a\nb"},{"role":"user","content":"hi"}]}`},
		{`{"model":"m","system":null,"messages":[{"role":"user","content":null},{"role":"system","content":[{"type":"text","text":"env"}]},{"role":"system"}]}`,
			`{"model":"m","messages":[{"role":"user","content":""},{"role":"system","content":"env"},{"role":"system","content":""}]}`},
		{`{"model":"m","max_tokens":0,"stop_sequences":["x","y"],"top_k":5,"messages":[
		   {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{"p":1}},{"type":"tool_use","id":"t2","name":"Web","input":{}}]},
		   {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"body"},
		     {"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}},{"type":"text","text":"b"}]},
		     {"type":"tool_result","tool_use_id":"t3","content":"","is_error":true},{"type":"tool_result","tool_use_id":"t4"}]}]}`,
			`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"t1","type":"function","function":{"name":"Read","arguments":"{\"p\":1}"}},{"id":"t2","type":"function","function":{"name":"Web","arguments":"{}"}}]},
			  {"role":"tool","content":"body","tool_call_id":"t1"},{"role":"tool","content":"ab","tool_call_id":"t2"},{"role":"tool","content":"Error: ","tool_call_id":"t3"},{"role":"tool","content":"","tool_call_id":"t4"}],
			  "max_tokens":0,"top_k":5,"stop":["x","y"]}`},
		{`{"model":"m","messages":[
		   {"role":"assistant","content":[{"type":"server_tool_use","id":"s1","name":"web_search","input":{"query":"q"}},
		     {"type":"web_search_tool_result","tool_use_id":"s1","content":{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}},{"type":"text","text":"done"}]},
		   {"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}},{"type":"text","text":"see"}]}],
		  "tool_choice":{"type":"tool","name":"Read","disable_parallel_tool_use":true},"tools":[{"name":"Read","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"done"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}},{"type":"text","text":"see"}]}],
			  "tools":[{"type":"function","function":{"name":"Read","parameters":{"type":"object"}}}],"tool_choice":{"function":{"name":"Read"},"type":"function"},"parallel_tool_calls":false}`},
		{`{"model":"m","messages":[{"role":"user"}]}`, ``},
		{`{"model":"m","input":"hi"}`, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`},
		{`{"model":"m","input":null}`, `{"model":"m","messages":[{"role":"user","content":""}]}`},
		{`{"model":"m","instructions":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}],"input":[{"role":"user","content":""}]}`,
			`{"model":"m","messages":[{"role":"system","content":"ab"},{"role":"user","content":""}]}`},
		{`{"model":"m","reasoning":{"effort":"high","summary":"auto"},"tool_choice":{"type":"function","name":"shell"},
		  "tools":[{"type":"function","name":"shell","parameters":{"type":"object"},"strict":false},{"type":"custom","name":"apply_patch","description":"patch","format":{"type":"grammar"}},{"type":"web_search"}],
		  "input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok","annotations":[]}]},
		    {"type":"custom_tool_call","call_id":"c1","name":"apply_patch","input":"*** Begin Patch"},{"type":"custom_tool_call_output","call_id":"c1","output":"done"},
		    {"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"x"},{"type":"input_text","text":"y"}]},{"type":"function_call_output","call_id":"c3","output":null},
		    {"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,AA"}]}]}`,
			`{"model":"m","messages":[{"role":"assistant","content":"ok","tool_calls":[{"id":"c1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\":\"*** Begin Patch\"}"}}]},
			  {"role":"tool","content":"done","tool_call_id":"c1"},{"role":"tool","content":"xy","tool_call_id":"c2"},{"role":"tool","content":"","tool_call_id":"c3"},
			  {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}]}],
			  "tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object"},"strict":false}},
			    {"type":"function","function":{"name":"apply_patch","description":"patch","parameters":{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}}}],
			  "tool_choice":{"function":{"name":"shell"},"type":"function"},"reasoning_effort":"high"}`},
	} {
		var cr *apiwire.ChatRequest
		var err error
		if strings.Contains(tc.in, `"input":`) && !strings.Contains(tc.in, `"messages"`) {
			cr, _, err = ResponsesToChat([]byte(tc.in))
		} else {
			cr, err = MessagesToChat([]byte(tc.in))
		}
		if tc.want == "" {
			require.ErrorIs(t, err, ErrBadRequest, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		b, err := json.Marshal(cr)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(b), tc.in)
	}
}

// TestResponsesCustomToolReply: a call of a custom (free-form) tool comes
// back as a custom_tool_call item with its input unwrapped, streamed as
// custom_tool_call_input events, and whole.
func TestResponsesCustomToolReply(t *testing.T) {
	cr, custom, err := ResponsesToChat([]byte(`{"model":"m","input":"x","tools":[{"type":"custom","name":"apply_patch"}]}`))
	require.NoError(t, err)
	item := map[string]any{"type": "custom_tool_call", "id": "fc_r_0", "status": "completed", "call_id": "call_1",
		"name": "apply_patch", "input": "*** Begin Patch"}

	rec := httptest.NewRecorder()
	tr := NewResponsesStream(NewEventWriter(rec), "r", "m", 1, cr, custom)
	tr.Start()
	var u Usage
	for _, c := range []string{
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\":"}}]}}]}`,
		`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"*** Begin Patch\"}"}}]},"finish_reason":"tool_calls"}]}`,
	} {
		var ch apiwire.ChatChunk
		require.NoError(t, json.Unmarshal([]byte(c), &ch))
		Learn(&ch, &u)
		tr.Chunk(&ch)
	}
	tr.End(u, true, "")
	names, datas := sseEvents(t, rec.Body.Bytes())
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done",
		"response.completed"}, names)
	added := datas[2]["item"].(map[string]any)
	require.Equal(t, "custom_tool_call", added["type"])
	require.Equal(t, "in_progress", added["status"])
	require.Equal(t, "", added["input"])
	require.Equal(t, map[string]any{"type": names[3], "sequence_number": 3.0, "item_id": "fc_r_0", "output_index": 0.0,
		"delta": "*** Begin Patch"}, datas[3])
	require.Equal(t, map[string]any{"type": names[4], "sequence_number": 4.0, "item_id": "fc_r_0", "output_index": 0.0,
		"input": "*** Begin Patch"}, datas[4])
	require.Equal(t, item, datas[5]["item"])
	require.Equal(t, []any{item}, datas[6]["response"].(map[string]any)["output"])

	whole := `{"id":"c","model":"m","created":7,"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"apply_patch","arguments":"{\"input\":\"*** Begin Patch\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}`
	b, u, err := ChatToResponses([]byte(whole), cr, custom, "r")
	require.NoError(t, err)
	require.Equal(t, []string{"apply_patch"}, u.ToolCalls)
	var r map[string]any
	require.NoError(t, json.Unmarshal(b, &r))
	require.Equal(t, []any{item}, r["output"])
}

func TestStripBilling(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"},{"type":"text","text":"You are Claude Code."}],"model":"m"}`,
			`{"system":[{"type":"text","text":"You are Claude Code."}],"model":"m"}`},
		{`{"system":"x-anthropic-billing-header: cc_version=2.1.1.abc;\nYou are."}`, `{"system":"You are."}`},
		{`{"system":"You are."}`, ``},
		{`{"messages":[{"role":"user","content":"x-anthropic-billing-header: hi"}]}`, ``},
		{`{"system":[{"type":"text","text":"keep x-anthropic-billing-header: mid"}]}`, ``},
		{`not json x-anthropic-billing-header:`, ``},
	} {
		got, ok := StripBilling([]byte(tc.in))
		if tc.want == "" {
			require.False(t, ok, tc.in)
			require.Equal(t, tc.in, string(got))
			continue
		}
		require.True(t, ok, tc.in)
		require.JSONEq(t, tc.want, string(got))
	}
}

func TestChunkMatters(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`, false},
		{`{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason" : null}]}`, false},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, true},
		{`{"choices":[{"index":0,"delta":{},"finish_reason": "length"}]}`, true},
		{`{"choices":[{"index":0,"delta":{"content":"finish_reason"},"finish_reason":null}]}`, false},
		{`{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}`, true},
		{`{"choices":[],"usage":{"prompt_tokens":1}}`, true},
		{`{"choices":[{"text":"x","finish_reason":"stop"}]}`, true},
	} {
		require.Equal(t, tc.want, ChunkMatters([]byte(tc.in)), tc.in)
		// The reference: a full decode.
		var c apiwire.ChatChunk
		require.NoError(t, json.Unmarshal([]byte(tc.in), &c))
		var u Usage
		fin := Learn(&c, &u)
		if fin || u.HasUsage || len(u.ToolCalls) > 0 {
			require.True(t, ChunkMatters([]byte(tc.in)), "a chunk that teaches something is decoded: %s", tc.in)
		}
	}
}

// FuzzTranslateRequests: whatever the body, the request translators never
// panic, and a translation they accept is a chat request that marshals and
// has messages.
func FuzzTranslateRequests(f *testing.F) {
	for _, s := range []string{
		sprintf(codexTurn, "true", ""), sprintf(claudeTurn, "false", toolResult),
		`{"input":"hi"}`, `{"input":[{"role":"user","content":"x"}]}`, `{"input":[{"type":"function_call_output","output":[{"type":"input_text","text":"a"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]}]}`,
		`{"tools":[{"type":"custom","name":"apply_patch"}],"input":[{"type":"custom_tool_call","name":"apply_patch","input":"x"}]}`,
		`{"system":[{"type":"text"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","input":null}]}]}`,
		`{"tool_choice":{"type":"tool","name":"x"},"messages":[{"role":"user","content":""}]}`,
		`{}`, `[]`, `null`, `{"input":7}`, `{"messages":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tr := range []func([]byte) (*apiwire.ChatRequest, error){
			func(b []byte) (*apiwire.ChatRequest, error) { c, _, err := ResponsesToChat(b); return c, err },
			MessagesToChat,
		} {
			cr, err := tr(body)
			if err != nil {
				require.ErrorIs(t, err, ErrBadRequest)
				continue
			}
			require.NotEmpty(t, cr.Messages)
			b, err := json.Marshal(cr)
			require.NoError(t, err)
			require.True(t, json.Valid(b))
		}
		_, _ = StripBilling(body)
	})
}

// FuzzTranslateReplies: the reply translators and the usage sniffers take
// any bytes from a worker without panicking; whole replies they accept
// translate to valid JSON.
func FuzzTranslateReplies(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`,
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"cache_read_input_tokens\":4}}}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3}}}\n\n",
		`{"choices":null}`, `{"choices":[{"message":{"content":7}}]}`, "data: {\n", "",
	} {
		f.Add([]byte(s))
	}
	req := &apiwire.ChatRequest{Model: "m"}
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, _, err := ChatToResponses(b, req, map[string]bool{"f": true}, "r"); err == nil {
			require.True(t, json.Valid(out))
		}
		if out, _, err := ChatToMessages(b, "m"); err == nil {
			require.True(t, json.Valid(out))
		}
		for _, api := range []API{Chat, Responses, Messages} {
			for _, stream := range []bool{false, true} {
				sn := NewSniffer(api, stream)
				half := len(b) / 2
				sn.Write(b[:half])
				sn.Write(b[half:])
				u := sn.Finish()
				require.GreaterOrEqual(t, len(u.ToolCalls), 0)
			}
		}
		for _, mk := range []func(w http.ResponseWriter) Translator{
			func(w http.ResponseWriter) Translator {
				return NewResponsesStream(NewEventWriter(w), "r", "m", 1, req, nil)
			},
			func(w http.ResponseWriter) Translator { return NewMessagesStream(NewEventWriter(w), "m", "m", 3) },
		} {
			rec := httptest.NewRecorder()
			tr := mk(rec)
			tr.Start()
			var sc SSEScanner
			sc.On = func(_ string, data []byte) {
				var ch apiwire.ChatChunk
				if json.Unmarshal(data, &ch) == nil {
					tr.Chunk(&ch)
				}
			}
			sc.Feed(b)
			sc.Flush()
			tr.End(Usage{}, bytes.Contains(b, []byte("DONE")), "cut")
			var n int
			var check SSEScanner
			check.On = func(_ string, data []byte) {
				n++
				require.True(t, json.Valid(data), string(data))
			}
			check.Feed(rec.Body.Bytes())
			require.Greater(t, n, 1)
		}
	})
}
