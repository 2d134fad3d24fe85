package session

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type harnessCase struct {
	name    string
	headers [][2]string
	body    string
	want    AgentContext
	reason  Reason // checked when refused
	refused bool
}

func request(headers [][2]string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	for _, kv := range headers {
		r.Header.Add(kv[0], kv[1])
	}
	return r
}

func runHarnessCases(t *testing.T, e *Extractor, cases []harnessCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			before := e.Stats()
			got, err := e.FromRequest(request(tc.headers), body)
			if tc.refused {
				var re *RefusedError
				if !errors.As(err, &re) || !errors.Is(err, ErrRefused) {
					t.Fatalf("err = %v, want a *RefusedError", err)
				}
				if re.Reason != tc.reason {
					t.Fatalf("reason = %v, want %v", re.Reason, tc.reason)
				}
				if got != (AgentContext{}) {
					t.Fatalf("refused request got a context: %+v", got)
				}
				if after := e.Stats(); after.Refused[tc.reason] != before.Refused[tc.reason]+1 {
					t.Fatalf("refusal not counted: before %v after %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// Header sets as captured from Claude Code 2.1 (DESIGN.md).
func TestClaudeCode(t *testing.T) {
	const s = "5b0c7a4e-2f1d-4f7e-9c1a-0d6b1c9e8f00"
	runHarnessCases(t, Default, []harnessCase{
		{
			name:    "root",
			headers: [][2]string{{"X-Claude-Code-Session-Id", s}, {"anthropic-version", "2023-06-01"}},
			want:    AgentContext{SessionID: s, Harness: HarnessClaudeCode},
		},
		{
			name:    "subagent is a child of the root session",
			headers: [][2]string{{"X-Claude-Code-Session-Id", s}, {"x-claude-code-agent-id", "a1f3"}},
			want:    AgentContext{SessionID: s + "/a1f3", ParentSessionID: s, AgentID: "a1f3", Harness: HarnessClaudeCode},
		},
		{
			name: "nested subagent's parent is the parent agent",
			headers: [][2]string{
				{"X-Claude-Code-Session-Id", s}, {"x-claude-code-agent-id", "b2"},
				{"x-claude-code-parent-agent-id", "a1f3"},
			},
			want: AgentContext{SessionID: s + "/b2", ParentSessionID: s + "/a1f3", AgentID: "b2", Harness: HarnessClaudeCode},
		},
		{
			name: "parent agent equal to agent falls back to the root",
			headers: [][2]string{
				{"X-Claude-Code-Session-Id", s}, {"x-claude-code-agent-id", "b2"},
				{"x-claude-code-parent-agent-id", "b2"},
			},
			want: AgentContext{SessionID: s + "/b2", ParentSessionID: s, AgentID: "b2", Harness: HarnessClaudeCode},
		},
		{
			name: "metadata.user_id JSON fallback",
			body: `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi {\"session_id\":\"nope\"}"}],` +
				`"metadata":{"user_id":"{\"device_id\":\"d1\",\"account_uuid\":\"acc\",\"session_id\":\"` + s + `\"}"},"max_tokens":32}`,
			want: AgentContext{SessionID: s, Harness: HarnessClaudeCode},
		},
		{
			name:    "metadata fallback keeps the agent header",
			headers: [][2]string{{"x-claude-code-agent-id", "a9"}},
			body:    `{"metadata":{"user_id":"{\"session_id\":\"` + s + `\"}"}}`,
			want:    AgentContext{SessionID: s + "/a9", ParentSessionID: s, AgentID: "a9", Harness: HarnessClaudeCode},
		},
		{
			name: "legacy user_id form",
			body: `{"metadata":{"user_id":"user_abc123_account_42_session_` + s + `"}}`,
			want: AgentContext{SessionID: s, Harness: HarnessClaudeCode},
		},
		{
			name:    "header wins over metadata",
			headers: [][2]string{{"X-Claude-Code-Session-Id", s}},
			body:    `{"metadata":{"user_id":"{\"session_id\":\"other\"}"}}`,
			want:    AgentContext{SessionID: s, Harness: HarnessClaudeCode},
		},
	})
}

// Header sets as captured from Codex 0.171.
func TestCodex(t *testing.T) {
	meta := `{"session_id":"sess-1","thread_id":"th-2","agent_name":"reviewer","turn_id":"turn-7","sandbox":"workspace-write"}`
	runHarnessCases(t, Default, []harnessCase{
		{
			name: "full header set: the thread is the session",
			headers: [][2]string{
				{"session-id", "sess-1"}, {"thread-id", "th-2"}, {"x-codex-window-id", "w-1"},
				{"x-codex-turn-metadata", meta},
			},
			want: AgentContext{SessionID: "th-2", AgentID: "reviewer", TurnID: "turn-7", Harness: HarnessCodex},
		},
		{
			name: "subagent thread names its parent",
			headers: [][2]string{
				{"session-id", "sess-1"}, {"thread-id", "th-3"}, {"x-codex-parent-thread-id", "th-2"},
			},
			want: AgentContext{SessionID: "th-3", ParentSessionID: "th-2", Harness: HarnessCodex},
		},
		{
			name:    "turn metadata only",
			headers: [][2]string{{"x-codex-turn-metadata", meta}},
			want:    AgentContext{SessionID: "th-2", AgentID: "reviewer", TurnID: "turn-7", Harness: HarnessCodex},
		},
		{
			name:    "session-id only",
			headers: [][2]string{{"session-id", "sess-1"}},
			want:    AgentContext{SessionID: "sess-1", Harness: HarnessCodex},
		},
		{
			name:    "malformed turn metadata is ignored",
			headers: [][2]string{{"session-id", "sess-1"}, {"x-codex-turn-metadata", `{"turn_id":`}},
			want:    AgentContext{SessionID: "sess-1", Harness: HarnessCodex},
		},
		{
			name:    "older Codex: conversation_id and session_id headers",
			headers: [][2]string{{"session_id", "sess-old"}, {"conversation_id", "conv-old"}},
			want:    AgentContext{SessionID: "conv-old", Harness: HarnessCodex},
		},
		{
			name:    "older Codex: session_id with Codex's originator",
			headers: [][2]string{{"session_id", "sess-old"}, {"originator", "codex_cli_rs"}},
			want:    AgentContext{SessionID: "sess-old", Harness: HarnessCodex},
		},
		{
			name: "prompt_cache_key body fallback",
			body: `{"model":"gpt-5","input":[{"role":"user","content":"x"}],"prompt_cache_key":"sess-9","stream":true}`,
			want: AgentContext{SessionID: "sess-9", Harness: HarnessCodex},
		},
	})
}

// The SGLang model gateway's routing key, as slime/miles rollout workers
// send it, alone or with a ThunderAgent program_id.
func TestSGLangRoutingKey(t *testing.T) {
	runHarnessCases(t, Default, []harnessCase{
		{
			name:    "routing key",
			headers: [][2]string{{"X-SMG-Routing-Key", "rollout-7"}},
			want:    AgentContext{SessionID: "rollout-7", Harness: HarnessSGLang},
		},
		{
			name:    "harness headers win",
			headers: [][2]string{{"x-session-id", "ses_9"}, {"x-smg-routing-key", "rollout-8"}},
			want:    AgentContext{SessionID: "ses_9", Harness: HarnessOpenCode},
		},
		{
			name:    "final",
			headers: [][2]string{{"x-smg-routing-key", "rollout-9"}, {"x-dynamo-session-final", "true"}},
			want:    AgentContext{SessionID: "rollout-9", Final: true, Harness: HarnessSGLang},
		},
	})
}

// Header sets as captured from OpenCode 1.18.
func TestOpenCode(t *testing.T) {
	runHarnessCases(t, Default, []harnessCase{
		{
			name:    "session and affinity",
			headers: [][2]string{{"x-session-id", "ses_01"}, {"x-session-affinity", "ses_01"}},
			want:    AgentContext{SessionID: "ses_01", Harness: HarnessOpenCode},
		},
		{
			name:    "child session",
			headers: [][2]string{{"x-session-id", "ses_02"}, {"x-parent-session-id", "ses_01"}},
			want:    AgentContext{SessionID: "ses_02", ParentSessionID: "ses_01", Harness: HarnessOpenCode},
		},
		{
			name:    "affinity only",
			headers: [][2]string{{"x-session-affinity", "ses_03"}},
			want:    AgentContext{SessionID: "ses_03", Harness: HarnessOpenCode},
		},
	})
}

// The canonical Dynamo headers win over every harness.
func TestDynamoCanonical(t *testing.T) {
	runHarnessCases(t, Default, []harnessCase{
		{
			name:    "canonical only",
			headers: [][2]string{{"x-dynamo-session-id", "d1"}, {"x-dynamo-parent-session-id", "d0"}},
			want:    AgentContext{SessionID: "d1", ParentSessionID: "d0", Harness: HarnessDynamo},
		},
		{
			name:    "final",
			headers: [][2]string{{"X-Dynamo-Session-ID", "d1"}, {"X-Dynamo-Session-Final", "TRUE"}},
			want:    AgentContext{SessionID: "d1", Final: true, Harness: HarnessDynamo},
		},
		{
			name:    "final false",
			headers: [][2]string{{"x-dynamo-session-id", "d1"}, {"x-dynamo-session-final", "false"}},
			want:    AgentContext{SessionID: "d1", Harness: HarnessDynamo},
		},
		{
			name: "wins over Claude Code; harness parent relative to another id is dropped",
			headers: [][2]string{
				{"X-Claude-Code-Session-Id", "root"}, {"x-claude-code-agent-id", "child"},
				{"x-dynamo-session-id", "d7"},
			},
			want: AgentContext{SessionID: "d7", AgentID: "child", Harness: HarnessClaudeCode},
		},
		{
			name: "canonical parent wins over the harness parent",
			headers: [][2]string{
				{"x-session-id", "s"}, {"x-parent-session-id", "p1"},
				{"x-dynamo-session-id", "s"}, {"x-dynamo-parent-session-id", "p2"},
			},
			want: AgentContext{SessionID: "s", ParentSessionID: "p2", Harness: HarnessOpenCode},
		},
		{
			name:    "same id keeps the harness parent",
			headers: [][2]string{{"x-session-id", "s"}, {"x-parent-session-id", "p1"}, {"x-dynamo-session-id", "s"}},
			want:    AgentContext{SessionID: "s", ParentSessionID: "p1", Harness: HarnessOpenCode},
		},
		{
			name:    "a parent equal to the session is dropped",
			headers: [][2]string{{"x-dynamo-session-id", "d1"}, {"x-dynamo-parent-session-id", "d1"}},
			want:    AgentContext{SessionID: "d1", Harness: HarnessDynamo},
		},
		{
			name:    "parent without a session is no session",
			headers: [][2]string{{"x-dynamo-parent-session-id", "d0"}},
			want:    AgentContext{},
		},
		{
			name:    "final on a Claude Code request",
			headers: [][2]string{{"X-Claude-Code-Session-Id", "c"}, {"x-dynamo-session-final", "1"}},
			want:    AgentContext{SessionID: "c", Final: true, Harness: HarnessClaudeCode},
		},
	})
}

// ThunderAgent clients put program_id in the JSON body.
func TestThunderAgent(t *testing.T) {
	runHarnessCases(t, Default, []harnessCase{
		{
			name: "program_id",
			body: `{"model":"m","messages":[],"program_id":"prog-4"}`,
			want: AgentContext{SessionID: "prog-4", ProgramID: "prog-4", Harness: HarnessThunderAgent},
		},
		{
			name: "extra_body.program_id",
			body: `{"model":"m","extra_body":{"top_k":5,"program_id":"prog-5"}}`,
			want: AgentContext{SessionID: "prog-5", ProgramID: "prog-5", Harness: HarnessThunderAgent},
		},
		{
			name: "numeric program id",
			body: `{"program_id": 17 }`,
			want: AgentContext{SessionID: "17", ProgramID: "17", Harness: HarnessThunderAgent},
		},
		{
			name:    "program id alongside a canonical session",
			headers: [][2]string{{"x-dynamo-session-id", "prog-6"}},
			body:    `{"program_id":"prog-6"}`,
			want:    AgentContext{SessionID: "prog-6", ProgramID: "prog-6", Harness: HarnessDynamo},
		},
		{
			name: "truncated body: keys before the cut still count",
			body: `{"program_id":"prog-7","messages":[{"role":"user","content":"abc`,
			want: AgentContext{SessionID: "prog-7", ProgramID: "prog-7", Harness: HarnessThunderAgent},
		},
		{
			name: "not JSON",
			body: `program_id=3`,
			want: AgentContext{},
		},
	})
}

func TestRefusals(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a", 257)
	runHarnessCases(t, e, []harnessCase{
		{name: "257 bytes", headers: [][2]string{{"x-dynamo-session-id", long}}, refused: true, reason: TooLong},
		{name: "256 bytes ok", headers: [][2]string{{"x-dynamo-session-id", long[:256]}},
			want: AgentContext{SessionID: long[:256], Harness: HarnessDynamo}},
		{name: "tab", headers: [][2]string{{"x-session-id", "a\tb"}}, refused: true, reason: ControlChar},
		{name: "DEL in parent", headers: [][2]string{{"x-session-id", "a"}, {"x-parent-session-id", "b\x7f"}},
			refused: true, reason: ControlChar},
		{name: "newline in body id", body: `{"program_id":"p\n1"}`, refused: true, reason: ControlChar},
		{name: "invalid UTF-8", headers: [][2]string{{"x-session-id", "a\xffb"}}, refused: true, reason: InvalidUTF8},
		{name: "long agent id", headers: [][2]string{{"X-Claude-Code-Session-Id", "s"}, {"x-claude-code-agent-id", long}},
			refused: true, reason: TooLong},
	})
	if got := e.Stats().Total(); got != 6 {
		t.Fatalf("Total = %d, want 6", got)
	}
}

func TestCustomRule(t *testing.T) {
	mine := Rule{
		Harness: "acme",
		Session: []string{"x-acme-run"},
		Parent:  []string{"x-acme-parent"},
		Final:   []string{"x-acme-done"},
		Agent:   []string{"x-acme-agent"},
		Turn:    []string{"x-acme-step"},
	}
	bodyRule := Rule{
		Harness: "bodyrun",
		Func: func(h http.Header, body []byte, ac *AgentContext) {
			if body != nil {
				if raw, ok := member(body, "run"); ok {
					ac.SessionID, _ = jsonString(string(raw))
				}
			}
		},
	}
	e, err := New(Config{Rules: append([]Rule{mine}, append(DefaultRules(), bodyRule)...)})
	if err != nil {
		t.Fatal(err)
	}
	runHarnessCases(t, e, []harnessCase{
		{
			name: "custom headers",
			headers: [][2]string{{"X-Acme-Run", "r1"}, {"x-acme-parent", "r0"}, {"x-acme-done", "yes"},
				{"x-acme-agent", "planner"}, {"x-acme-step", "3"}},
			want: AgentContext{SessionID: "r1", ParentSessionID: "r0", Final: true, AgentID: "planner", TurnID: "3", Harness: "acme"},
		},
		{
			name:    "custom row first in the table wins over a built-in",
			headers: [][2]string{{"x-acme-run", "r1"}, {"x-session-id", "oc"}},
			want:    AgentContext{SessionID: "r1", Harness: "acme"},
		},
		{
			name:    "built-ins still work",
			headers: [][2]string{{"x-session-id", "oc"}},
			want:    AgentContext{SessionID: "oc", Harness: HarnessOpenCode},
		},
		{
			name: "custom body rule runs before built-in body fallbacks",
			body: `{"prompt_cache_key":"k","run":"b1"}`,
			want: AgentContext{SessionID: "b1", Harness: "bodyrun"},
		},
		{
			name:    "custom rule output is validated",
			headers: [][2]string{{"x-acme-run", "r1"}, {"x-acme-step", strings.Repeat("9", 300)}},
			refused: true, reason: TooLong,
		},
	})
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{MaxIDLen: -1},
		{Rules: []Rule{{Session: []string{"x"}}}},
		{Rules: []Rule{{Harness: "h"}}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) err = %v, want ErrConfig", cfg, err)
		}
	}
	e, err := New(Config{Rules: []Rule{}})
	if err != nil {
		t.Fatal(err)
	}
	ac, _ := e.FromRequest(request([][2]string{{"x-session-id", "x"}, {"x-dynamo-session-id", "d"}}), nil)
	if ac.SessionID != "d" || ac.Harness != HarnessDynamo {
		t.Fatalf("empty rule table: got %+v", ac)
	}
}

func TestFromRequestNil(t *testing.T) {
	if ac, err := FromRequest(nil, nil); err != nil || ac.Valid() {
		t.Fatalf("nil request: %+v %v", ac, err)
	}
}

func TestJSONScanner(t *testing.T) {
	for _, tc := range []struct {
		in   string
		key  string
		want string
		ok   bool
	}{
		{`{"a":1,"b":"x"}`, "b", `"x"`, true},
		{` { "a" : [1,{"b":"]"}] , "b" : {"c":"}"} } `, "b", `{"c":"}"}`, true},
		{`{"a":"\"b\":1","b":true}`, "b", `true`, true},
		{`{"a":1`, "b", ``, false},
		{`[{"b":1}]`, "b", ``, false},
		{`{"b\u0022":1,"b":2}`, "b", `2`, true},
		{`{"b":}`, "b", ``, false},
		{`{"b":2 `, "b", `2`, true}, // complete value before the cut
		{``, "b", ``, false},
	} {
		got, ok := member(tc.in, tc.key)
		if ok != tc.ok || got != tc.want {
			t.Errorf("member(%q, %q) = %q, %v; want %q, %v", tc.in, tc.key, got, ok, tc.want, tc.ok)
		}
	}
	for _, tc := range []struct{ raw, want string }{
		{`"abc"`, "abc"}, {`"a\nb"`, "a\nb"}, {`"\u00e9"`, "é"},
	} {
		if got, ok := jsonString(tc.raw); !ok || got != tc.want {
			t.Errorf("jsonString(%s) = %q, %v", tc.raw, got, ok)
		}
	}
	for _, raw := range []string{`"a\x"`, `1`, `"`, `"\xff"`} {
		if got, ok := jsonString(raw); ok {
			t.Errorf("jsonString(%q) = %q, want failure", raw, got)
		}
	}
}

// The rows added for issue #32, in source-chain order, and compaction.
func TestSourceChain(t *testing.T) {
	const uuid = "0f8fad5b-d9cb-469f-a165-70867728950e"
	runHarnessCases(t, Default, []harnessCase{
		{
			name:    "DeepSeek harness with parent and compaction",
			headers: [][2]string{{"x-deepseek-harness-session-id", "ds-2"}, {"x-deepseek-harness-parent-session-id", "ds-1"}, {"x-deepseek-harness-compact", "1"}},
			want:    AgentContext{SessionID: "ds-2", ParentSessionID: "ds-1", Harness: HarnessDeepSeek, Compaction: true},
		},
		{
			name:    "Pi openai-responses: session_id and x-client-request-id",
			headers: [][2]string{{"session_id", uuid}, {"x-client-request-id", uuid}},
			body:    `{"model":"m","prompt_cache_key":"` + uuid + `"}`,
			want:    AgentContext{SessionID: uuid, Harness: HarnessPi},
		},
		{
			name:    "Pi with session affinity headers",
			headers: [][2]string{{"session_id", "pi-1"}, {"x-session-affinity", "pi-1"}},
			want:    AgentContext{SessionID: "pi-1", Harness: HarnessPi},
		},
		{
			name:    "SkyRL X-Session-ID",
			headers: [][2]string{{"X-Session-ID", "traj-4"}},
			want:    AgentContext{SessionID: "traj-4", Harness: HarnessOpenCode},
		},
		{
			name:    "session-shaped x-client-request-id",
			headers: [][2]string{{"x-client-request-id", uuid}},
			want:    AgentContext{SessionID: uuid, Harness: HarnessClientID},
		},
		{
			name:    "per-request x-client-request-id is ignored",
			headers: [][2]string{{"x-client-request-id", "req_123"}},
		},
		{
			name:    "Bearer is not a session by default",
			headers: [][2]string{{"Authorization", "Bearer sess-7"}},
		},
		{
			name: "body: prompt_cache_key before metadata.user_id",
			body: `{"metadata":{"user_id":"{\"session_id\":\"cc\"}"},"prompt_cache_key":"pk"}`,
			want: AgentContext{SessionID: "pk", Harness: HarnessCodex},
		},
		{
			name: "body: metadata.user_id plain form",
			body: `{"metadata":{"user_id":"user_ab_account_cd_session_ef"}}`,
			want: AgentContext{SessionID: "ef", Harness: HarnessClaudeCode},
		},
		{
			name: "body: user before session_params and program_id",
			body: `{"user":"u-1","session_params":{"session_id":"sp-1"},"program_id":"p-1"}`,
			want: AgentContext{SessionID: "u-1", Harness: HarnessOpenAIUser, ProgramID: "p-1"},
		},
		{
			name: "body: session_params.session_id",
			body: `{"session_params":{"session_id":"sp-1"},"program_id":"p-1"}`,
			want: AgentContext{SessionID: "sp-1", Harness: HarnessSessionParam, ProgramID: "p-1"},
		},
		{
			name:    "Codex compaction turn and window number",
			headers: [][2]string{{"thread-id", "th"}, {"x-codex-window-id", "th:3"}, {"x-codex-turn-metadata", `{"request_kind":"compaction"}`}},
			want:    AgentContext{SessionID: "th", Harness: HarnessCodex, Compaction: true, Window: 3},
		},
		{
			name:    "Claude Code compaction header",
			headers: [][2]string{{"X-Claude-Code-Session-Id", "s"}, {"x-claude-code-compaction", "true"}},
			want:    AgentContext{SessionID: "s", Harness: HarnessClaudeCode, Compaction: true},
		},
		{
			name:    "Claude Code request class",
			headers: [][2]string{{"X-Claude-Code-Session-Id", "s"}, {"x-claude-code-request-class", "compaction"}},
			want:    AgentContext{SessionID: "s", Harness: HarnessClaudeCode, Compaction: true},
		},
	})
	bearer, err := New(Config{BearerSession: true})
	if err != nil {
		t.Fatal(err)
	}
	runHarnessCases(t, bearer, []harnessCase{
		{
			name:    "opt-in Bearer as session",
			headers: [][2]string{{"Authorization", "Bearer sess-7"}},
			want:    AgentContext{SessionID: "sess-7", Harness: HarnessBearer},
		},
		{
			name:    "harness headers win over Bearer",
			headers: [][2]string{{"Authorization", "Bearer sess-7"}, {"x-session-id", "o"}},
			want:    AgentContext{SessionID: "o", Harness: HarnessOpenCode},
		},
	})
}

func TestWindowNumber(t *testing.T) {
	for v, want := range map[string]uint32{"": 0, "w": 0, "th:": 0, "th:12": 12, "a:b:7": 7, "th:x1": 0, "th:99999999999": 0} {
		if got := windowNumber(v); got != want {
			t.Errorf("windowNumber(%q) = %d, want %d", v, got, want)
		}
	}
}
