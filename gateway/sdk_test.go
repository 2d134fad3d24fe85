package gateway

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"
)

// TestOfficialSDKs: the official OpenAI and Anthropic Go clients parse the
// gateway's replies and streams (translated from a chat-only worker)
// without error and see tool calls and cached tokens in their own fields.
func TestOfficialSDKs(t *testing.T) {
	f := newChatOnly(t)
	_, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
	ctx := context.Background()

	oc := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHeader("session-id", "sdk-codex"))
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "shell",
		Parameters: map[string]any{"type": "object"}, Strict: openai.Bool(false)}}
	params := responses.ResponseNewParams{Model: "m", Instructions: openai.String("You are Codex."),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("list files")},
		Tools: []responses.ToolUnionParam{tool}, Store: openai.Bool(false), MaxOutputTokens: openai.Int(50)}
	r, err := oc.Responses.New(ctx, params)
	require.NoError(t, err)
	require.Equal(t, responses.ResponseStatusCompleted, r.Status)
	require.Len(t, r.Output, 1)
	require.Equal(t, "function_call", r.Output[0].Type)
	require.Equal(t, "shell", r.Output[0].Name)
	require.EqualValues(t, f.cachedTokens, r.Usage.InputTokensDetails.CachedTokens)

	st := oc.Responses.NewStreaming(ctx, params)
	var completed *responses.Response
	var argDeltas int
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.function_call_arguments.delta":
			argDeltas++
		case "response.completed":
			resp := ev.Response
			completed = &resp
		}
	}
	require.NoError(t, st.Err())
	require.NotNil(t, completed)
	require.Equal(t, 2, argDeltas)
	require.EqualValues(t, f.cachedTokens, completed.Usage.InputTokensDetails.CachedTokens)
	require.Equal(t, `{"cmd":"ls"}`, completed.Output[0].Arguments.OfString)

	// Chat completions pass through.
	cs := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var acc openai.ChatCompletionAccumulator
	for cs.Next() {
		acc.AddChunk(cs.Current())
	}
	require.NoError(t, cs.Err())
	require.Equal(t, "ok 1", acc.Choices[0].Message.Content)
	require.EqualValues(t, f.cachedTokens, acc.Usage.PromptTokensDetails.CachedTokens, "the gateway asked for the usage chunk")

	ac := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("sk-test"), aoption.WithMaxRetries(0),
		aoption.WithHeader("X-Claude-Code-Session-Id", "sdk-claude"))
	mp := anthropic.MessageNewParams{Model: "claude-x", MaxTokens: 64,
		System:   []anthropic.TextBlockParam{{Text: "You are Claude Code."}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("list files"))},
		Tools: []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Bash",
			InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"cmd": map[string]any{"type": "string"}}}}}}}
	m, err := ac.Messages.New(ctx, mp)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonToolUse, m.StopReason)
	require.Equal(t, "Bash", m.Content[0].Name)
	require.EqualValues(t, f.cachedTokens, m.Usage.CacheReadInputTokens)

	ms := ac.Messages.NewStreaming(ctx, mp)
	var got anthropic.Message
	for ms.Next() {
		require.NoError(t, got.Accumulate(ms.Current()))
	}
	require.NoError(t, ms.Err())
	require.Equal(t, anthropic.StopReasonToolUse, got.StopReason)
	require.Len(t, got.Content, 1)
	require.Equal(t, "Bash", got.Content[0].Name)
	require.JSONEq(t, `{"cmd":"ls"}`, string(got.Content[0].Input))
	require.EqualValues(t, f.cachedTokens, got.Usage.CacheReadInputTokens)
	require.EqualValues(t, 3, got.Usage.OutputTokens)

	// A tool result turn: text back.
	mp.Messages = append(mp.Messages, got.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(got.Content[0].ID, "a.go", false)))
	m, err = ac.Messages.New(ctx, mp)
	require.NoError(t, err)
	require.Equal(t, anthropic.StopReasonEndTurn, m.StopReason)
	require.Equal(t, "ok 4", m.Content[0].Text)
	body, _, _ := f.last()
	msgs := body["messages"].([]any)
	require.Equal(t, "tool", msgs[3].(map[string]any)["role"])

	n, err := ac.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-x",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	require.NoError(t, err)
	require.Greater(t, n.InputTokens, int64(0))
	models, err := ac.Models.List(ctx, anthropic.ModelListParams{})
	require.NoError(t, err)
	require.Equal(t, "m1", models.Data[0].ID)
}
