package mock

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/internal/wordtok"
)

// The tool-call rule on the conversation shapes the real harnesses send
// (captured from Claude Code 2.1.332, Codex 0.171.0 and OpenCode 1.18.33
// against agentkv proxy): each user turn gets one tool call, a turn that
// carries a tool result gets text, whatever follows the result in the
// same turn.
func TestToolRuleHarnessShapes(t *testing.T) {
	s := start(t, Config{})
	readTool := `{"name":"Read","input_schema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}}`
	fnTool := `{"type":"function","function":{"name":"read","parameters":{"type":"object","properties":{"filePath":{"type":"string"}},"required":["filePath"]}}}`
	respTool := `{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}`
	for _, c := range []struct {
		name, path, body string
		wantTool         bool
	}{
		// Claude Code 2.1 sends its environment as a system message after the
		// user's: still the user's turn.
		{"messages/trailing system", "/v1/messages", `{"max_tokens":20,"tools":[` + readTool + `],"messages":[
			{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"say hello"}]},
			{"role":"system","content":[{"type":"text","text":"# Environment"}]}]}`, true},
		// The tool result comes back in a user message with a system reminder
		// text block after it: text, not another call (the rule "the last
		// message is the user's" called the tool again: a loop).
		{"messages/tool_result and text", "/v1/messages", `{"max_tokens":20,"tools":[` + readTool + `],"messages":[
			{"role":"user","content":"say hello"},
			{"role":"system","content":"# Environment"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"README.md"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"# hello","is_error":false},{"type":"text","text":"<system-reminder>y</system-reminder>"}]}]}`, false},
		{"messages/tool_result only", "/v1/messages", `{"max_tokens":20,"tools":[` + readTool + `],"messages":[
			{"role":"user","content":"say hello"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"README.md"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"# hello"}]}]}`, false},
		// The next user turn, after the text answer: a call again.
		{"messages/next turn", "/v1/messages", `{"max_tokens":20,"tools":[` + readTool + `],"messages":[
			{"role":"user","content":"say hello"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"file_path":"README.md"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"# hello"}]},
			{"role":"assistant","content":"hello"},
			{"role":"user","content":"again"}]}`, true},
		{"chat/user", "/v1/chat/completions", `{"max_tokens":20,"tools":[` + fnTool + `],"messages":[
			{"role":"system","content":"You are opencode"},{"role":"user","content":"say hello"}]}`, true},
		{"chat/tool then user", "/v1/chat/completions", `{"max_tokens":20,"tools":[` + fnTool + `],"messages":[
			{"role":"user","content":"say hello"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"# hello"},
			{"role":"user","content":"<system-reminder>z</system-reminder>"}]}`, false},
		{"chat/tool choice none", "/v1/chat/completions", `{"max_tokens":20,"tool_choice":"none","tools":[` + fnTool + `],"messages":[
			{"role":"user","content":"say hello"}]}`, false},
		{"responses/developer and user", "/v1/responses", `{"max_output_tokens":20,"tools":[` + respTool + `],"input":[
			{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex"}]},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"say hello"}]}]}`, true},
		{"responses/output then user", "/v1/responses", `{"max_output_tokens":20,"tools":[` + respTool + `],"input":[
			{"type":"message","role":"user","content":[{"type":"input_text","text":"say hello"}]},
			{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"},
			{"type":"function_call_output","call_id":"call_1","output":"README.md"},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"note"}]}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(c.body, "{", fmt.Sprintf(`{"model":%q,`, s.Model()), 1)
			code, out := post(t, s.URL()+c.path, body, "anthropic-version", "2023-06-01")
			if code != 200 {
				t.Fatalf("status %d: %s", code, out)
			}
			var r struct {
				StopReason string `json:"stop_reason"`
				Choices    []struct {
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Output []struct {
					Type string `json:"type"`
				} `json:"output"`
			}
			if err := json.Unmarshal(out, &r); err != nil {
				t.Fatal(err)
			}
			called := r.StopReason == "tool_use" || len(r.Choices) > 0 && r.Choices[0].FinishReason == "tool_calls"
			for _, o := range r.Output {
				called = called || o.Type == "function_call"
			}
			if called != c.wantTool {
				t.Fatalf("tool call %v, want %v: %s", called, c.wantTool, out)
			}
		})
	}
}

func TestUserTurn(t *testing.T) {
	m := func(roles ...string) []wordtok.Message {
		var ms []wordtok.Message
		for _, r := range roles {
			ms = append(ms, wordtok.Message{Role: r})
		}
		return ms
	}
	for _, c := range []struct {
		msgs []wordtok.Message
		want bool
	}{
		{nil, false},
		{m("system"), false},
		{m("user"), true},
		{m("system", "user", "system"), true},
		{m("developer", "user", "user"), true},
		{m("user", "assistant"), false},
		{m("user", "assistant", "tool"), false},
		{m("user", "assistant", "tool", "user"), false},
		{m("user", "assistant", "tool", "tool", "system"), false},
		{m("user", "assistant", "tool", "assistant", "user"), true},
		{m("user", "assistant", "system"), false},
	} {
		var roles []string
		for _, x := range c.msgs {
			roles = append(roles, x.Role)
		}
		if got := userTurn(c.msgs); got != c.want {
			t.Errorf("userTurn(%v) = %v, want %v", roles, got, c.want)
		}
	}
}
