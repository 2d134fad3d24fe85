package apiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestTextOr(t *testing.T) {
	for _, tc := range []struct {
		in    string
		text  string
		parts int
		out   string
	}{
		{`"hi"`, "hi", -1, `"hi"`},
		{`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]`, "a", 2, `[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]`},
		{`[]`, "", 0, `[]`},
		{`null`, "", -1, `""`},
	} {
		var m ChatMessage
		if err := json.Unmarshal([]byte(`{"role":"user","content":`+tc.in+`}`), &m); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if m.Text() != tc.text || (tc.parts < 0) == m.Content.IsArray() || (tc.parts >= 0 && len(m.Content.Parts) != tc.parts) {
			t.Errorf("%s: text %q parts %v", tc.in, m.Text(), m.Content.Parts)
		}
		b, _ := json.Marshal(m.Content)
		if string(b) != tc.out {
			t.Errorf("%s: re-encoded %s, want %s", tc.in, b, tc.out)
		}
	}
	var m ChatMessage
	for _, bad := range []string{`1`, `{}`, `true`, `[1]`, `nul`} {
		if err := json.Unmarshal([]byte(`{"role":"user","content":`+bad+`}`), &m); err == nil {
			t.Errorf("content %s decoded", bad)
		}
	}
	// An assistant message with only tool calls omits content.
	b, _ := json.Marshal(ChatMessage{Role: "assistant", ToolCalls: []ToolCall{{ID: "c", Type: "function"}}})
	if bytes.Contains(b, []byte("content")) {
		t.Errorf("empty content written: %s", b)
	}
}

func TestPrompt(t *testing.T) {
	for _, tc := range []struct {
		in     string
		texts  []string
		tokens [][]int
	}{
		{`"a b"`, []string{"a b"}, nil},
		{`["a","b"]`, []string{"a", "b"}, nil},
		{`[1,2,3]`, nil, [][]int{{1, 2, 3}}},
		{`[[1],[2,3]]`, nil, [][]int{{1}, {2, 3}}},
		{`[]`, []string{}, nil},
	} {
		var p Prompt
		if err := json.Unmarshal([]byte(tc.in), &p); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if !reflect.DeepEqual(p.Texts, tc.texts) || !reflect.DeepEqual(p.Tokens, tc.tokens) {
			t.Errorf("%s: %+v", tc.in, p)
		}
		b, _ := json.Marshal(p)
		if string(b) != tc.in {
			t.Errorf("%s: re-encoded %s", tc.in, b)
		}
	}
	var p Prompt
	for _, bad := range []string{`1`, `{}`, `[{}]`, `[1,"a"]`, `["a",1]`, `[[1],"a"]`} {
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("prompt %s decoded: %+v", bad, p)
		}
	}
}

func TestToolChoice(t *testing.T) {
	for in, want := range map[string][2]string{
		``: {"", ""}, `null`: {"", ""}, `"auto"`: {"auto", ""}, `"none"`: {"none", ""}, `"required"`: {"required", ""},
		`{"type":"function","function":{"name":"Read"}}`: {"function", "Read"},
		`{"type":"function","name":"shell"}`:             {"function", "shell"},
		`{"type":"any"}`:                                 {"any", ""},
		`{"type":"tool","name":"Read"}`:                  {"function", "Read"},
		`{"type":"auto"}`:                                {"auto", ""},
		`[1]`:                                            {"auto", ""},
	} {
		m, n := ToolChoice(json.RawMessage(in))
		if m != want[0] || n != want[1] {
			t.Errorf("%s: %s %s, want %v", in, m, n, want)
		}
	}
}

// TestEventShapes pins the exact JSON of the events whose fields depend on
// their type.
func TestEventShapes(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{MessagesStreamEvent{Type: EventContentBlockStart, ContentBlock: &ContentBlock{Type: BlockText}},
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
		{MessagesStreamEvent{Type: EventContentBlockStart, Index: 1, ContentBlock: &ContentBlock{Type: BlockToolUse, ID: "t", Name: "R"}},
			`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"R","input":{}}}`},
		{MessagesStreamEvent{Type: EventContentBlockDelta, Index: 1, Delta: &StreamDelta{Type: DeltaInputJSON}},
			`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`},
		{MessagesStreamEvent{Type: EventContentBlockDelta, Delta: &StreamDelta{Type: DeltaText, Text: "a"}},
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`},
		{MessagesStreamEvent{Type: EventMessageDelta, Delta: &StreamDelta{StopReason: Ptr(StopEndTurn)}, Usage: &AnthropicUsage{OutputTokens: 3}},
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}`},
		{MessagesStreamEvent{Type: EventMessageStop}, `{"type":"message_stop"}`},
		{MessagesStreamEvent{Type: EventPing}, `{"type":"ping"}`},
		{MessagesStreamEvent{Type: EventError, Error: &AnthropicErrorDetail{Type: "overloaded_error", Message: "x"}},
			`{"type":"error","error":{"type":"overloaded_error","message":"x"}}`},
		{ResponsesStreamEvent{Type: EventOutputTextDelta, SequenceNumber: 4, ItemID: "m", Delta: "a"},
			`{"type":"response.output_text.delta","sequence_number":4,"item_id":"m","output_index":0,"content_index":0,"delta":"a","logprobs":[]}`},
		{ResponsesStreamEvent{Type: EventFunctionCallArgumentsDelta, SequenceNumber: 5, ItemID: "f", OutputIndex: 1, Delta: "{"},
			`{"type":"response.function_call_arguments.delta","sequence_number":5,"item_id":"f","output_index":1,"delta":"{"}`},
		{OutputItem{Type: ItemMessage, ID: "m", Status: StatusInProgress, Role: "assistant"},
			`{"type":"message","id":"m","status":"in_progress","role":"assistant","content":[]}`},
		{OutputItem{Type: ItemFunctionCall, ID: "f", CallID: "c", Name: "n", Status: StatusInProgress},
			`{"type":"function_call","id":"f","call_id":"c","name":"n","arguments":"","status":"in_progress"}`},
		{ChatChunkChoice{Delta: ChatDelta{Content: Ptr("")}},
			`{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}`},
		{NewOpenAIError(400, "bad"), `{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":400}}`},
		{NewAnthropicError(404, "no"), `{"type":"error","error":{"type":"not_found_error","message":"no"}}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%T:\n got %s (%v)\nwant %s", tc.v, b, err, tc.want)
		}
	}
}

// TestRoundTrip decodes requests as clients send them, re-encodes and
// decodes again: the second decode equals the first.
func TestRoundTrip(t *testing.T) {
	for _, s := range seedRequests {
		for _, v := range []any{&ChatRequest{}, &CompletionRequest{}, &ResponsesRequest{}, &MessagesRequest{}} {
			roundTrip(t, []byte(s), v)
		}
	}
}

func roundTrip(t *testing.T, data []byte, v any) {
	t.Helper()
	if json.Unmarshal(data, v) != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%T: re-encode: %v", v, err)
	}
	w := reflect.New(reflect.TypeOf(v).Elem()).Interface()
	if err := json.Unmarshal(b, w); err != nil {
		t.Fatalf("%T: decode of re-encoded %s: %v", v, b, err)
	}
	b2, _ := json.Marshal(w)
	if !bytes.Equal(b, b2) {
		t.Fatalf("%T: not stable:\n%s\n%s", v, b, b2)
	}
}

var seedRequests = []string{
	`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"Read","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"x"}],"tools":[{"type":"function","function":{"name":"Read","parameters":{"type":"object"}}}],"tool_choice":"auto","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"stop":["a"]}`,
	`{"model":"m","prompt":[[1,2],[3]],"max_tokens":3,"stop":"x"}`,
	`{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"n","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"o"}],"tools":[{"type":"function","name":"n"}],"max_output_tokens":4,"stream":true}`,
	`{"model":"m","input":"plain"}`,
	`{"model":"m","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"R","input":{"p":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}],"is_error":true}]}],"max_tokens":9,"metadata":{"user_id":"u"},"stop_sequences":["x"],"stream":true}`,
}

func TestSSEWriterReader(t *testing.T) {
	rec := httptest.NewRecorder()
	w := NewSSEWriter(rec)
	w.Event("message_start", map[string]string{"type": "message_start"})
	w.Data(map[string]int{"a": 1})
	w.Comment("keep-alive")
	w.Done()
	if rec.Header().Get("Content-Type") != "text/event-stream" || !rec.Flushed {
		t.Fatalf("headers %v flushed %v", rec.Header(), rec.Flushed)
	}
	want := "event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"
	if rec.Body.String() != want {
		t.Fatalf("wrote %q", rec.Body.String())
	}
	r := NewSSEReader(strings.NewReader(want), 0)
	var got []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Event+"|"+string(ev.Data))
	}
	if strings.Join(got, ",") != `message_start|{"type":"message_start"},|{"a":1},|[DONE]` {
		t.Errorf("read %v", got)
	}
}

func TestSSEReaderRules(t *testing.T) {
	in := "retry: 5\r\nid: 7\r\ndata: a\r\ndata:b\r\n\r\nevent: x\n\n: c\ndata\ndata:  two\n\ndata: cut"
	r := NewSSEReader(strings.NewReader(in), 0)
	var got []SSEEvent
	for {
		ev, err := r.Next()
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		ev.Data = append([]byte(nil), ev.Data...)
		got = append(got, ev)
	}
	want := []SSEEvent{{Data: []byte("a\nb"), ID: "7"}, {Data: []byte("\n two")}, {Data: []byte("cut")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q", got)
	}
	r = NewSSEReader(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), 64)
	if _, err := r.Next(); !errors.Is(err, ErrSSELineTooLong) {
		t.Errorf("long line: %v", err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrSSELineTooLong) {
		t.Errorf("after a long line: %v", err)
	}
}

// TestGatewayShapes pins the shapes the gateway's translations write and
// read: an empty string content that is written, custom tool calls, vLLM's
// stop_reason, a tool_result whose content is an object.
func TestGatewayShapes(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{ChatMessage{Role: "tool", ToolCallID: "c", Content: Str[ChatContentPart]("")}, `{"role":"tool","content":"","tool_call_id":"c"}`},
		{ChatMessage{Role: "user", Content: TextOr[ChatContentPart]{Parts: []ChatContentPart{ImageURLPart("data:x")}}},
			`{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:x"}}]}`},
		{OutputItem{Type: ItemCustomToolCall, ID: "f", Status: StatusCompleted, CallID: "c", Name: "p"},
			`{"type":"custom_tool_call","id":"f","status":"completed","call_id":"c","name":"p","input":""}`},
		{ResponsesStreamEvent{Type: EventCustomToolCallInputDelta, SequenceNumber: 3, ItemID: "f", Delta: "x"},
			`{"type":"response.custom_tool_call_input.delta","sequence_number":3,"item_id":"f","output_index":0,"delta":"x"}`},
		{ResponsesStreamEvent{Type: EventCustomToolCallInputDone, SequenceNumber: 4, ItemID: "f", Input: "x"},
			`{"type":"response.custom_tool_call_input.done","sequence_number":4,"item_id":"f","output_index":0,"input":"x"}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%T:\n got %s (%v)\nwant %s", tc.v, b, err, tc.want)
		}
	}
	// A content given as "" or null is written back as ""; an absent one
	// stays absent.
	for in, want := range map[string]string{`"content":""`: `"content":""`, `"content":null`: `"content":""`, `"name":"n"`: ``} {
		var m ChatMessage
		if err := json.Unmarshal([]byte(`{"role":"user",`+in+`}`), &m); err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(m); strings.Contains(string(b), `"content"`) != (want != "") || !strings.Contains(string(b), want) {
			t.Errorf("%s re-encoded as %s", in, b)
		}
	}
	for in, want := range map[string]string{`"stop_reason":"END"`: "END", `"stop_reason":null`: "-", `"stop_reason":12`: "-", `"index":0`: "-"} {
		var c ChatChoice
		if err := json.Unmarshal([]byte(`{`+in+`}`), &c); err != nil {
			t.Fatal(err)
		}
		if s, ok := c.StopString(); (ok && s != want) || (!ok && want != "-") {
			t.Errorf("%s: %q %v", in, s, ok)
		}
	}
	var r MessagesRequest
	if err := json.Unmarshal([]byte(`{"max_tokens":0,"messages":[{"role":"assistant","content":[{"type":"web_search_tool_result","tool_use_id":"s","content":{"type":"web_search_tool_result_error"}}]}]}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.MaxTokens == nil || *r.MaxTokens != 0 || r.Messages[0].Content.Parts[0].ResultText() != "" {
		t.Errorf("request %+v", r)
	}
}

// TestErrorTypes: the one table, as the APIs document it, including the
// statuses the gateway and the mock worker once answered differently
// (403, 503, 504).
func TestErrorTypes(t *testing.T) {
	for _, tc := range []struct {
		status            int
		openai, anthropic string
	}{
		{400, "invalid_request_error", "invalid_request_error"},
		{401, "authentication_error", "authentication_error"},
		{402, "invalid_request_error", "billing_error"},
		{403, "permission_error", "permission_error"},
		{404, "not_found_error", "not_found_error"},
		{405, "invalid_request_error", "invalid_request_error"},
		{413, "invalid_request_error", "request_too_large"},
		{429, "rate_limit_error", "rate_limit_error"},
		{500, "server_error", "api_error"},
		{502, "server_error", "api_error"},
		{503, "server_error", "overloaded_error"},
		{504, "server_error", "timeout_error"},
		{529, "server_error", "overloaded_error"},
	} {
		if got := OpenAIErrorType(tc.status); got != tc.openai || NewOpenAIError(tc.status, "m").Error.Type != got {
			t.Errorf("%d: OpenAI type %q, want %q", tc.status, got, tc.openai)
		}
		if got := AnthropicErrorType(tc.status); got != tc.anthropic || NewAnthropicError(tc.status, "m").Error.Type != got {
			t.Errorf("%d: Anthropic type %q, want %q", tc.status, got, tc.anthropic)
		}
	}
}
