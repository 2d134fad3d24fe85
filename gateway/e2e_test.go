package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"
)

// TestE2EHarnesses runs the gateway end to end over loopback: a Stack (as
// "agentkv proxy --mock-workers 3 --trace-out FILE" builds it) in front
// of three mock vLLM workers, real HTTP servers whose KV events reach the
// router over real ZeroMQ, and the official OpenAI and Anthropic Go SDKs
// as the clients, sending the session headers the harnesses send:
//
//   - Claude Code over /v1/messages: streaming, a system prompt with the
//     billing preamble and cache_control, tools; its first call is a Task
//     whose subagent (x-claude-code-agent-id: session "<root>/<agent>",
//     parent the root) runs its own conversation before the Task result
//     goes back;
//   - Codex over /v1/responses: streaming, store=false, instructions,
//     function tools, function_call and function_call_output items;
//   - OpenCode over /v1/chat/completions: streaming with the usage chunk.
//
// Each session has at least four turns (requests), a tool call on every
// user turn. The three harnesses run concurrently, once with workers
// serving every API natively (the gateway passes them through) and once
// with workers serving only chat completions (it translates). Checked:
// every turn after the first lands on the previous turn's worker (the
// X-Agentkv-Worker headers); the cached tokens in the API's own usage
// field cover the previous turn's full blocks; the trace file, read back
// with package trace, has one record per turn with the session, the
// subagent's parent, the API, the worker, the tokens the client saw and
// no error kind; the router's index, fed only by the KV events, holds each
// session's last prompt on its worker; the gateway's metrics count the
// translations and no failures.
func TestE2EHarnesses(t *testing.T) {
	for _, native := range []bool{true, false} {
		name := "native"
		if !native {
			name = "chat-only"
		}
		t.Run(name, func(t *testing.T) {
			c := startE2E(t, native)
			ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout)
			defer cancel()
			const (
				claude = "7f0c2a9e-claude-root"
				agent  = "a8c41d2"
				codex  = "0199a7c4-codex-thread"
				opc    = "ses_e2e_opencode"
			)
			sub := claude + "/" + agent
			t.Run("sessions", func(t *testing.T) {
				t.Run("claude-code", func(t *testing.T) {
					t.Parallel()
					runClaudeCode(ctx, t, c, claude, agent)
					c.checkSession(t, claude, 6)
					c.checkSession(t, sub, 4)
				})
				t.Run("codex", func(t *testing.T) {
					t.Parallel()
					runCodex(ctx, t, c, codex)
					c.checkSession(t, codex, 6)
				})
				t.Run("opencode", func(t *testing.T) {
					t.Parallel()
					runOpenCode(ctx, t, c, opc)
					c.checkSession(t, opc, 6)
				})
			})
			if t.Failed() {
				return
			}
			turns := map[string][]e2eTurn{}
			c.mu.Lock()
			for id, ts := range c.turns {
				turns[id] = ts
			}
			c.mu.Unlock()
			parents := map[string]string{claude: "", sub: claude, codex: "", opc: ""}
			require.Len(t, turns, len(parents))
			n := map[API]int{}
			for _, ts := range turns {
				n[ts[0].api] += len(ts)
			}
			for _, a := range []API{Messages, Responses, Chat} {
				want := 0.0
				if !native && a != Chat {
					want = float64(n[a])
				}
				require.Equal(t, want, c.counter(t, "agentkv_gateway_translated_total", map[string]string{"api": a.String()}), "translated %s", a)
				require.Equal(t, float64(n[a]), c.counter(t, "agentkv_gateway_prompt_tokens_source_total",
					map[string]string{"api": a.String(), "source": "inprocess"}), "tokenized in process, %s", a)
				require.Equal(t, float64(n[a]), c.counter(t, "agentkv_gateway_responses_total", map[string]string{"api": a.String(), "code": "200"}), "%s", a)
			}
			require.Zero(t, c.counter(t, "agentkv_gateway_failures_total", nil))
			require.Equal(t, float64(n[Messages]), c.counter(t, "agentkv_gateway_billing_preamble_stripped_total", nil))

			recs := c.records(t)
			require.Len(t, recs, len(parents), "trace sessions")
			for id, parent := range parents {
				c.checkTrace(t, recs, id, parent, turns[id])
				c.checkIndexed(t, recs, id)
			}
			for id, ts := range turns {
				t.Logf("%s: %v", id, ts)
			}
		})
	}
}

// e2eText is n words of a topic: n tokens for the mock's tokenizer.
func e2eText(topic string, n int) string { return e2eWords(n, topic) }

var readFileSchema = map[string]any{"type": "object", "properties": map[string]any{
	"file_path": map[string]any{"type": "string", "description": "The absolute path to the file to read"},
	"offset":    map[string]any{"type": "number"}, "limit": map[string]any{"type": "number"}},
	"required": []string{"file_path"}}

func claudeTools() []anthropic.ToolUnionParam {
	tool := func(name, desc string, props map[string]any, req ...string) anthropic.ToolUnionParam {
		return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: name, Description: anthropic.String(desc),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: props, Required: req}}}
	}
	str := map[string]any{"type": "string"}
	return []anthropic.ToolUnionParam{
		tool("Task", e2eText("launchanewagent", 60), map[string]any{"description": str, "prompt": str, "subagent_type": str},
			"description", "prompt", "subagent_type"),
		tool("Bash", e2eText("executesabashcommand", 80), map[string]any{"command": str, "timeout": map[string]any{"type": "number"}}, "command"),
		tool("Glob", e2eText("fastfilepatternmatching", 40), map[string]any{"pattern": str, "path": str}, "pattern"),
		tool("Grep", e2eText("powerfulsearchtool", 50), map[string]any{"pattern": str, "path": str}, "pattern"),
		tool("Read", e2eText("readsafilefromthelocalfilesystem", 50), readFileSchema["properties"].(map[string]any), "file_path"),
	}
}

// claudeAgent is one Claude Code conversation: the root session, or a
// subagent.
type claudeAgent struct {
	c          *e2eCluster
	client     anthropic.Client
	id, parent string
	p          anthropic.MessageNewParams
}

func newClaudeAgent(c *e2eCluster, root, agent string, billing string, system string) *claudeAgent {
	opts := []aoption.RequestOption{aoption.WithBaseURL(c.srv.URL), aoption.WithAPIKey("sk-ant-e2e"), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Claude-Code-Session-Id", root), aoption.WithHeader("User-Agent", "claude-cli/2.1.32 (external, sdk-cli)"),
		aoption.WithHeader("Anthropic-Beta", "claude-code-20250219,interleaved-thinking-2025-05-14")}
	a := &claudeAgent{c: c, id: root}
	if agent != "" {
		opts = append(opts, aoption.WithHeader("X-Claude-Code-Agent-Id", agent))
		a.id, a.parent = root+"/"+agent, root
	}
	a.client = anthropic.NewClient(opts...)
	a.p = anthropic.MessageNewParams{Model: "claude-sonnet-4-5-20250929", MaxTokens: 32000,
		System: []anthropic.TextBlockParam{
			{Text: "x-anthropic-billing-header: cc_version=2.1.32." + billing + "; cc_entrypoint=sdk-cli;"},
			{Text: system, CacheControl: anthropic.NewCacheControlEphemeralParam()},
		},
		Tools:    claudeTools(),
		Metadata: anthropic.MetadataParam{UserID: anthropic.String("user_5e1f_account_9a2b_session_" + root)},
	}
	return a
}

// turn sends the conversation, streaming, and appends the reply.
func (a *claudeAgent) turn(ctx context.Context, t *testing.T) anthropic.Message {
	t.Helper()
	var resp *http.Response
	st := a.client.Messages.NewStreaming(ctx, a.p, aoption.WithResponseInto(&resp))
	var m anthropic.Message
	for st.Next() {
		require.NoError(t, m.Accumulate(st.Current()))
	}
	require.NoError(t, st.Err(), a.id)
	tn := e2eTurn{session: a.id, parent: a.parent, api: Messages,
		prompt: int(m.Usage.InputTokens + m.Usage.CacheReadInputTokens + m.Usage.CacheCreationInputTokens),
		cached: int(m.Usage.CacheReadInputTokens), completion: int(m.Usage.OutputTokens)}
	switch m.StopReason {
	case anthropic.StopReasonToolUse:
		require.Len(t, m.Content, 1)
		require.Equal(t, "tool_use", m.Content[0].Type)
		require.NotEmpty(t, m.Content[0].ID)
		require.True(t, json.Valid(m.Content[0].Input))
		tn.tool = m.Content[0].Name
	case anthropic.StopReasonEndTurn:
		require.NotEmpty(t, m.Content)
		require.NotEmpty(t, m.Content[0].Text)
	default:
		t.Fatalf("%s: stop reason %q", a.id, m.StopReason)
	}
	a.c.record(t, tn, resp)
	a.p.Messages = append(a.p.Messages, m.ToParam())
	return m
}

func (a *claudeAgent) user(text string) {
	a.p.Messages = append(a.p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
}

func (a *claudeAgent) toolResult(m anthropic.Message, result string) {
	a.p.Messages = append(a.p.Messages, anthropic.NewUserMessage(anthropic.NewToolResultBlock(m.Content[0].ID, result, false)))
}

// runClaudeCode runs a Claude Code session: three user turns, each a tool
// call and its result (six requests). The first call is a Task (the
// request names it in tool_choice, so the mock calls it): a subagent with
// its own system prompt runs two user turns (four requests) and its last
// reply is the Task's result.
func runClaudeCode(ctx context.Context, t *testing.T, c *e2eCluster, root, agent string) {
	p := newClaudeAgent(c, root, "", "0b8", e2eText("youareclaudecode", 400))
	p.user(e2eText("pleaserefactorthegateway", 30))
	p.p.ToolChoice = anthropic.ToolChoiceParamOfTool("Task")
	m := p.turn(ctx, t)
	require.Equal(t, "Task", m.Content[0].Name)
	p.p.ToolChoice = anthropic.ToolChoiceUnionParam{}

	s := newClaudeAgent(c, root, agent, "1c9", e2eText("youareanexploreagent", 250))
	s.user(e2eText("findwherethegatewayroutes", 40))
	var last anthropic.Message
	for u := 0; u < 2; u++ {
		if u > 0 {
			s.user(e2eText(fmt.Sprintf("nowlookdeeper%d", u), 20))
		}
		sm := s.turn(ctx, t)
		s.toolResult(sm, e2eText(fmt.Sprintf("subagentfilecontents%d", u), 120))
		last = s.turn(ctx, t)
	}
	p.toolResult(m, last.Content[0].Text)
	p.turn(ctx, t)
	for u := 1; u < 3; u++ {
		p.user(e2eText(fmt.Sprintf("nextstep%d", u), 25))
		m := p.turn(ctx, t)
		p.toolResult(m, e2eText(fmt.Sprintf("toolresult%d", u), 150))
		p.turn(ctx, t)
	}
}

// runCodex runs a Codex session over the Responses API: store=false, the
// whole input resent each turn, function tools, the turn metadata header.
func runCodex(ctx context.Context, t *testing.T, c *e2eCluster, thread string) {
	oc := openai.NewClient(option.WithBaseURL(c.srv.URL+"/v1/"), option.WithAPIKey("sk-e2e"), option.WithMaxRetries(0),
		option.WithHeader("Session-Id", thread), option.WithHeader("Thread-Id", thread),
		option.WithHeader("Originator", "codex_exec"), option.WithHeader("User-Agent", "codex_exec/0.171.0"))
	obj := func(props map[string]any, req ...string) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": req, "additionalProperties": false}
	}
	strs := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	p := responses.ResponseNewParams{Model: "gpt-5.1-codex", Instructions: openai.String(e2eText("youarecodex", 350)),
		Store: openai.Bool(false), ParallelToolCalls: openai.Bool(false), PromptCacheKey: openai.String(thread),
		Reasoning: shared.ReasoningParam{Effort: shared.ReasoningEffortMedium, Summary: shared.ReasoningSummaryAuto},
		Include:   []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent},
		Tools: []responses.ToolUnionParam{
			{OfFunction: &responses.FunctionToolParam{Name: "shell", Description: openai.String(e2eText("runsashellcommand", 60)),
				Parameters: obj(map[string]any{"command": strs, "workdir": map[string]any{"type": "string"}}, "command"), Strict: openai.Bool(false)}},
			{OfFunction: &responses.FunctionToolParam{Name: "update_plan", Description: openai.String(e2eText("updatestheplan", 30)),
				Parameters: obj(map[string]any{"plan": strs}, "plan"), Strict: openai.Bool(false)}},
		},
	}
	input := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage(e2eText("developerinstructions", 80), responses.EasyInputMessageRoleDeveloper),
		responses.ResponseInputItemParamOfMessage(e2eText("environmentcontext", 40), responses.EasyInputMessageRoleUser),
	}
	k := 0
	turn := func() *responses.Response {
		t.Helper()
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
		meta := fmt.Sprintf(`{"session_id":%q,"thread_id":%q,"turn_id":"%d","sandbox":"read-only"}`, thread, thread, k)
		k++
		var resp *http.Response
		st := oc.Responses.NewStreaming(ctx, p, option.WithResponseInto(&resp), option.WithHeader("X-Codex-Turn-Metadata", meta))
		var done *responses.Response
		for st.Next() {
			if v, ok := st.Current().AsAny().(responses.ResponseCompletedEvent); ok {
				done = &v.Response
			}
		}
		require.NoError(t, st.Err(), thread)
		require.NotNil(t, done, "no response.completed")
		require.Equal(t, responses.ResponseStatusCompleted, done.Status)
		require.Len(t, done.Output, 1)
		tn := e2eTurn{session: thread, api: Responses, prompt: int(done.Usage.InputTokens),
			cached: int(done.Usage.InputTokensDetails.CachedTokens), completion: int(done.Usage.OutputTokens)}
		switch it := done.Output[0]; it.Type {
		case "function_call":
			fc := it.AsFunctionCall()
			require.NotEmpty(t, fc.CallID)
			require.True(t, json.Valid([]byte(fc.Arguments)), fc.Arguments)
			tn.tool = fc.Name
			fp := fc.ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfFunctionCall: &fp})
		case "message":
			msg := it.AsMessage()
			require.NotEmpty(t, done.OutputText())
			mp := msg.ToParam()
			input = append(input, responses.ResponseInputItemUnionParam{OfOutputMessage: &mp})
		default:
			t.Fatalf("%s: output item %q", thread, it.Type)
		}
		c.record(t, tn, resp)
		return done
	}
	for u := 0; u < 3; u++ {
		input = append(input, responses.ResponseInputItemParamOfMessage(e2eText(fmt.Sprintf("codexprompt%d", u), 30), responses.EasyInputMessageRoleUser))
		r := turn()
		require.Equal(t, "function_call", r.Output[0].Type)
		out := responses.ResponseInputItemParamOfFunctionCallOutput(e2eText(fmt.Sprintf("shelloutput%d", u), 140))
		out.OfFunctionCallOutput.CallID = openai.String(r.Output[0].CallID)
		input = append(input, out)
		turn()
	}
}

// runOpenCode runs an OpenCode session over chat completions: streaming
// with stream_options.include_usage, its x-session-id and
// x-session-affinity headers, lower-case tools.
func runOpenCode(ctx context.Context, t *testing.T, c *e2eCluster, id string) {
	oc := openai.NewClient(option.WithBaseURL(c.srv.URL+"/v1/"), option.WithAPIKey("sk-e2e"), option.WithMaxRetries(0),
		option.WithHeader("X-Session-Id", id), option.WithHeader("X-Session-Affinity", id),
		option.WithHeader("User-Agent", "opencode/1.18.0 ai-sdk/provider-utils/3.0.9"))
	fn := func(name string, props map[string]any, req ...string) openai.ChatCompletionToolUnionParam {
		return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: name,
			Description: openai.String(e2eText(name+"tooldescription", 50)),
			Parameters:  map[string]any{"type": "object", "properties": props, "required": req}})
	}
	str := map[string]any{"type": "string"}
	p := openai.ChatCompletionNewParams{Model: "qwen3-coder",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(e2eText("youareopencode", 300))},
		Tools: []openai.ChatCompletionToolUnionParam{fn("bash", map[string]any{"command": str, "description": str}, "command", "description"),
			fn("read", map[string]any{"filePath": str, "offset": map[string]any{"type": "number"}}, "filePath"),
			fn("glob", map[string]any{"pattern": str}, "pattern")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		MaxTokens:     openai.Int(32000),
	}
	turn := func() openai.ChatCompletionMessage {
		t.Helper()
		var resp *http.Response
		st := oc.Chat.Completions.NewStreaming(ctx, p, option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		var usage *openai.CompletionUsage
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			if ch.JSON.Usage.Valid() {
				u := ch.Usage
				usage = &u
			}
		}
		require.NoError(t, st.Err(), id)
		require.NotNil(t, usage, "no usage chunk")
		tn := e2eTurn{session: id, api: Chat, prompt: int(usage.PromptTokens), cached: int(usage.PromptTokensDetails.CachedTokens),
			completion: int(usage.CompletionTokens)}
		msg := acc.Choices[0].Message
		switch acc.Choices[0].FinishReason {
		case "tool_calls":
			require.Len(t, msg.ToolCalls, 1)
			tn.tool = msg.ToolCalls[0].Function.Name
			require.True(t, json.Valid([]byte(msg.ToolCalls[0].Function.Arguments)))
		case "stop":
			require.NotEmpty(t, msg.Content)
		default:
			t.Fatalf("%s: finish reason %q", id, acc.Choices[0].FinishReason)
		}
		c.record(t, tn, resp)
		p.Messages = append(p.Messages, msg.ToParam())
		return msg
	}
	for u := 0; u < 3; u++ {
		p.Messages = append(p.Messages, openai.UserMessage(e2eText(fmt.Sprintf("opencodeprompt%d", u), 25)))
		m := turn()
		require.NotEmpty(t, m.ToolCalls)
		p.Messages = append(p.Messages, openai.ToolMessage(e2eText(fmt.Sprintf("opencodetool%d", u), 130), m.ToolCalls[0].ID))
		turn()
	}
}
