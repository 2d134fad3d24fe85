package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/translate"
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

func TestResponsesTranslatedToChat(t *testing.T) {
	f := newChatOnly(t)
	s, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
	hdr := map[string]string{"session-id": "codex-1", "Authorization": "Bearer sk-1", "X-Secret": "no"}

	// A turn ending in a tool result: the model answers with text.
	resp, body := postJSON(t, srv.URL+ResponsesPath, hdr, sprintf(codexTurn, "false", ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	up, uh, path := f.last()
	require.Equal(t, ChatPath, path, "a chat-only worker gets chat completions")
	require.Equal(t, "Bearer sk-1", uh.Get("Authorization"))
	require.Empty(t, uh.Get("X-Secret"), "client headers beyond what the worker needs stay behind")
	require.Empty(t, uh.Get("Session-Id"))
	msgs := up["messages"].([]any)
	require.Len(t, msgs, 5)
	role := func(i int) string { return msgs[i].(map[string]any)["role"].(string) }
	require.Equal(t, []string{"system", "system", "user", "assistant", "tool"}, []string{role(0), role(1), role(2), role(3), role(4)})
	require.Equal(t, "You are Codex.", msgs[0].(map[string]any)["content"])
	call := msgs[3].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, "call_a", call["id"])
	require.Equal(t, "shell", call["function"].(map[string]any)["name"])
	require.Equal(t, "call_a", msgs[4].(map[string]any)["tool_call_id"])
	require.Equal(t, "a.go b.go", msgs[4].(map[string]any)["content"])
	require.Len(t, up["tools"].([]any), 1, "built-in tools are dropped")

	var r apiwire.Response
	require.NoError(t, json.Unmarshal(body, &r))
	require.Equal(t, "response", r.Object)
	require.Equal(t, "completed", r.Status)
	require.Len(t, r.Output, 1)
	require.Equal(t, "message", r.Output[0].Type)
	require.Equal(t, "ok 5", r.Output[0].Content[0].Text)
	require.Equal(t, f.cachedTokens, r.Usage.InputTokensDetails.CachedTokens)
	require.Equal(t, 3, r.Usage.OutputTokens)
	require.Equal(t, f.srv.URL, resp.Header.Get(HeaderWorker))
	require.Equal(t, "0/0", resp.Header.Get(HeaderWorkerID))
	require.NotEmpty(t, resp.Header.Get(HeaderCachedTokens))

	// A turn without the tool result: the model calls the tool.
	resp, body = postJSON(t, srv.URL+ResponsesPath, hdr, strings.Replace(sprintf(codexTurn, "false", ""),
		`,
  {"type":"function_call_output","call_id":"call_a","output":"a.go b.go"}`, "", 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	r = apiwire.Response{}
	require.NoError(t, json.Unmarshal(body, &r))
	require.Len(t, r.Output, 1)
	require.Equal(t, "function_call", r.Output[0].Type)
	require.Equal(t, "shell", r.Output[0].Name)
	require.Equal(t, "call_1", r.Output[0].CallID)
	require.JSONEq(t, `{"cmd":"ls"}`, r.Output[0].Arguments)

	// Streamed, ending in a tool call.
	resp, body = postJSON(t, srv.URL+ResponsesPath, hdr, strings.Replace(sprintf(codexTurn, "true", ""),
		`,
  {"type":"function_call_output","call_id":"call_a","output":"a.go b.go"}`, "", 1))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	names, datas := sseEvents(t, body)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.function_call_arguments.delta", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.output_item.done", "response.completed"}, names)
	for i, d := range datas {
		require.Equal(t, names[i], d["type"])
		require.EqualValues(t, i, d["sequence_number"])
	}
	require.Equal(t, `{"cmd":"ls"}`, datas[5]["arguments"])
	done := datas[len(datas)-1]["response"].(map[string]any)
	require.Equal(t, "completed", done["status"])
	usage := done["usage"].(map[string]any)
	require.EqualValues(t, f.cachedTokens, usage["input_tokens_details"].(map[string]any)["cached_tokens"])

	// Streamed text.
	resp, body = postJSON(t, srv.URL+ResponsesPath, hdr, sprintf(codexTurn, "true", ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	names, datas = sseEvents(t, body)
	require.Equal(t, []string{"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}, names)
	require.Equal(t, "ok 5", datas[6]["text"])

	info, ok := s.Router().Sessions().Get("codex-1")
	require.True(t, ok, "the Codex session header was recognised")
	require.EqualValues(t, 4, info.Requests)
	require.EqualValues(t, 4*f.cachedTokens, info.Usage.CachedTokens)
	for _, w := range s.Router().Workers() {
		require.Equal(t, agentkv.Load{}, s.Router().WorkerLoad(w))
	}
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

func TestMessagesTranslatedToChat(t *testing.T) {
	f := newChatOnly(t)
	s, srv := testStack(t, StackConfig{Gateway: Config{StripBillingHeader: true}}, WorkerSpec{URL: f.srv.URL})
	hdr := map[string]string{"x-api-key": "sk-2", "anthropic-version": "2023-06-01"}

	resp, body := postJSON(t, srv.URL+MessagesPath+"?beta=true", hdr, sprintf(claudeTurn, "false", toolResult))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	up, uh, _ := f.last()
	require.Equal(t, "sk-2", uh.Get("X-Api-Key"))
	msgs := up["messages"].([]any)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.(map[string]any)["role"].(string))
	}
	require.Equal(t, []string{"system", "user", "system", "assistant", "tool"}, roles)
	require.Equal(t, "# Environment", msgs[2].(map[string]any)["content"])
	require.Equal(t, "You are Claude Code.", msgs[0].(map[string]any)["content"], "billing preamble stripped")
	asst := msgs[3].(map[string]any)
	require.Equal(t, "Let me look.", asst["content"])
	require.Equal(t, "toolu_1", asst["tool_calls"].([]any)[0].(map[string]any)["id"])
	require.JSONEq(t, `{"cmd":"ls"}`, asst["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"].(string))
	require.Equal(t, "a.go", msgs[4].(map[string]any)["content"])
	require.Len(t, up["tools"].([]any), 1)
	require.EqualValues(t, 100, up["max_tokens"])

	var m apiwire.MessagesResponse
	require.NoError(t, json.Unmarshal(body, &m))
	require.Equal(t, "message", m.Type)
	require.Equal(t, "end_turn", *m.StopReason)
	require.Equal(t, f.cachedTokens, m.Usage.CacheReadInputTokens)
	require.Equal(t, 3, m.Usage.OutputTokens)
	require.Equal(t, "ok 5", m.Content[0].Text)

	// Streamed tool use.
	resp, body = postJSON(t, srv.URL+MessagesPath, hdr, sprintf(claudeTurn, "true", ""))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	names, datas := sseEvents(t, body)
	require.Equal(t, []string{"message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	require.Equal(t, "tool_use", datas[2]["content_block"].(map[string]any)["type"])
	require.Equal(t, "Bash", datas[2]["content_block"].(map[string]any)["name"])
	require.Equal(t, `{"cmd":`, datas[3]["delta"].(map[string]any)["partial_json"])
	md := datas[6]
	require.Equal(t, "tool_use", md["delta"].(map[string]any)["stop_reason"])
	require.EqualValues(t, f.cachedTokens, md["usage"].(map[string]any)["cache_read_input_tokens"])

	info, ok := s.Router().Sessions().Get("cc-body-1")
	require.True(t, ok, "the session in metadata.user_id was recognised")
	require.EqualValues(t, 2, info.Requests)
}

func TestCountTokensAndModels(t *testing.T) {
	f := newChatOnly(t)
	_, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
	body := `{"model":"m","system":"sys","messages":[{"role":"user","content":"hello"}]}`
	resp, b := postJSON(t, srv.URL+CountTokensPath, nil, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	cr, err := translate.MessagesToChat([]byte(body))
	require.NoError(t, err)
	msgs, _ := json.Marshal(cr.Messages)
	require.JSONEq(t, `{"input_tokens":`+itoa(len(msgs))+`}`, string(b), "the worker's tokenizer counts")

	get := func(anth bool) string {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+ModelsPath, nil)
		if anth {
			req.Header.Set("anthropic-version", "2023-06-01")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		d := v["data"].([]any)[0].(map[string]any)
		if anth {
			require.Equal(t, "model", d["type"])
			require.Equal(t, "2023-11-14T22:13:20Z", d["created_at"])
			require.Equal(t, false, v["has_more"])
		} else {
			require.Equal(t, "model", d["object"])
		}
		return d["id"].(string)
	}
	require.Equal(t, "m1", get(false))
	require.Equal(t, "m1", get(true))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
