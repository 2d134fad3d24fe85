package mock

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// The official SDKs are the clients: every reply and stream of the mock
// parses without error, and the usage fields are there, cached tokens
// included on a second turn.

var readSchema = map[string]any{"type": "object", "properties": map[string]any{"file_path": map[string]any{"type": "string"},
	"limit": map[string]any{"type": "integer"}}, "required": []string{"file_path"}}

func oai(s *Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.URL()+"/v1/"), option.WithAPIKey("sk-x"), option.WithMaxRetries(0))
}

func TestSDKChat(t *testing.T) {
	s := start(t, Config{})
	c := oai(s)
	ctx := context.Background()
	text := words(80, "c")
	p := openai.ChatCompletionNewParams{Model: s.Model(), MaxTokens: openai.Int(6),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage(text)}}
	resp, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "length" || len(strings.Fields(resp.Choices[0].Message.Content)) != 6 ||
		resp.Usage.CompletionTokens != 6 || resp.Usage.PromptTokens != 87 || !resp.Usage.PromptTokensDetails.JSON.CachedTokens.Valid() {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, p)
	var acc openai.ChatCompletionAccumulator
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	// The same prompt: its full blocks are cached, and the reply is the same.
	if acc.Choices[0].Message.Content != resp.Choices[0].Message.Content || acc.Usage.PromptTokensDetails.CachedTokens != 87/16*16 {
		t.Fatalf("stream %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	// Tools: the user's turn gets one call to a read-only tool, with its
	// required arguments; the tool's result gets text.
	p.Tools = []openai.ChatCompletionToolUnionParam{
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "Bash", Parameters: readSchema}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "Read", Parameters: readSchema}),
	}
	st = c.Chat.Completions.NewStreaming(ctx, p)
	acc = openai.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	call := acc.Choices[0].Message.ToolCalls
	if acc.Choices[0].FinishReason != "tool_calls" || len(call) != 1 || call[0].Function.Name != "Read" ||
		call[0].Function.Arguments != `{"file_path":"README.md"}` || call[0].ID == "" {
		t.Fatalf("tool call %+v", acc.Choices[0])
	}
	p.Messages = append(p.Messages, acc.Choices[0].Message.ToParam(), openai.ToolMessage("contents", call[0].ID))
	resp, err = c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason == "tool_calls" || resp.Choices[0].Message.Content == "" {
		t.Fatalf("after the tool result: %s", resp.RawJSON())
	}
}

func TestSDKCompletionsAndModels(t *testing.T) {
	s := start(t, Config{})
	c := oai(s)
	ctx := context.Background()
	p := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(s.Model()), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(words(40, "q"))},
		MaxTokens: openai.Int(5), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
	resp, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage.PromptTokens != 40 || resp.Usage.CompletionTokens != 5 || resp.Choices[0].FinishReason != "length" {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	st := c.Completions.NewStreaming(ctx, p)
	text, cached := "", int64(-1)
	for st.Next() {
		cur := st.Current()
		for _, ch := range cur.Choices {
			text += ch.Text
		}
		if cur.JSON.Usage.Valid() {
			cached = cur.Usage.PromptTokensDetails.CachedTokens
		}
	}
	if st.Err() != nil || text != resp.Choices[0].Text || cached != 32 {
		t.Fatalf("stream err %v text %q cached %d", st.Err(), text, cached)
	}
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != s.Model() {
		t.Fatalf("models %v %+v", err, page)
	}
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "nope", Prompt: p.Prompt})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || !strings.Contains(ae.Message, "nope") {
		t.Fatalf("unknown model: %v", err)
	}
}

func TestSDKResponses(t *testing.T) {
	s := start(t, Config{})
	c := oai(s)
	ctx := context.Background()
	p := responses.ResponseNewParams{Model: s.Model(), Instructions: openai.String("be a coder"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(words(60, "s"))}, MaxOutputTokens: openai.Int(7)}
	resp, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(strings.Fields(resp.OutputText())) != 7 || resp.Usage.OutputTokens != 7 || resp.Usage.InputTokens == 0 ||
		!resp.Usage.InputTokensDetails.JSON.CachedTokens.Valid() || resp.Status != "incomplete" {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	st := c.Responses.NewStreaming(ctx, p)
	var done responses.Response
	deltas, n := "", 0
	for st.Next() {
		e := st.Current()
		if e.SequenceNumber != int64(n) {
			t.Fatalf("event %d has sequence_number %d", n, e.SequenceNumber)
		}
		n++
		switch v := e.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			deltas += v.Delta
		case responses.ResponseCompletedEvent:
			done = v.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if deltas != resp.OutputText() || done.OutputText() != deltas || done.Usage.InputTokensDetails.CachedTokens == 0 {
		t.Fatalf("stream %q, completed %s", deltas, done.RawJSON())
	}
	// A function tool is called, then answered with text.
	p.MaxOutputTokens = openai.Int(50)
	p.Tools = []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "shell",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "required": []string{"command"}}}}}
	resp, err = c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Output) != 1 || resp.Output[0].Type != "function_call" || resp.Output[0].Name != "shell" || resp.Output[0].Arguments.OfString != `{"command":["ls"]}` {
		t.Fatalf("tool call %s", resp.RawJSON())
	}
	in := responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage(words(60, "s"), responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfFunctionCall(resp.Output[0].Arguments.OfString, resp.Output[0].CallID, "shell"),
		responses.ResponseInputItemParamOfFunctionCallOutput("a.go"),
	}
	in[2].OfFunctionCallOutput.CallID = openai.String(resp.Output[0].CallID)
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: in}
	resp, err = c.Responses.New(ctx, p)
	if err != nil || resp.Output[0].Type != "message" || resp.OutputText() == "" {
		t.Fatalf("after the tool output: %v %s", err, resp.RawJSON())
	}
}

func TestSDKMessages(t *testing.T) {
	s := start(t, Config{})
	c := anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithAPIKey("sk-x"), aoption.WithMaxRetries(0))
	ctx := context.Background()
	p := anthropic.MessageNewParams{Model: anthropic.Model(s.Model()), MaxTokens: 9, System: []anthropic.TextBlockParam{{Text: "be a coder"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(words(70, "m")))}}
	resp, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StopReason != "max_tokens" || resp.Usage.OutputTokens != 9 || resp.Usage.CacheReadInputTokens != 0 || len(strings.Fields(resp.Content[0].Text)) != 9 {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	prompt := resp.Usage.InputTokens
	st := c.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != resp.Content[0].Text || acc.Usage.CacheReadInputTokens != prompt/16*16 ||
		acc.Usage.InputTokens+acc.Usage.CacheReadInputTokens != prompt || acc.StopReason != "max_tokens" {
		t.Fatalf("stream %+v usage %+v", acc.Content, acc.Usage)
	}
	cnt, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: p.Model, Messages: p.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: p.System}})
	if err != nil || cnt.InputTokens != prompt {
		t.Fatalf("count_tokens %v %+v, want %d", err, cnt, prompt)
	}
	// Claude Code's loop: tool_use, then tool_result, then end_turn.
	p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Read", InputSchema: anthropic.ToolInputSchemaParam{
		Properties: readSchema["properties"], Required: []string{"file_path"}}}}}
	p.MaxTokens = 100
	st = c.Messages.NewStreaming(ctx, p)
	acc = anthropic.Message{}
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if st.Err() != nil || acc.StopReason != "tool_use" || acc.Content[0].Name != "Read" || string(acc.Content[0].Input) != `{"file_path":"README.md"}` {
		t.Fatalf("tool use %v %+v", st.Err(), acc)
	}
	p.Messages = append(p.Messages, acc.ToParam(), anthropic.NewUserMessage(anthropic.NewToolResultBlock(acc.Content[0].ID, "text", false)))
	resp, err = c.Messages.New(ctx, p)
	if err != nil || resp.StopReason != "end_turn" || resp.Content[0].Text == "" {
		t.Fatalf("after the tool result: %v %s", err, resp.RawJSON())
	}
	page, err := c.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != s.Model() {
		t.Fatalf("models %v %+v", err, page)
	}
	_, err = c.Messages.New(ctx, anthropic.MessageNewParams{Model: "nope", MaxTokens: 1, Messages: p.Messages[:1]})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || string(ae.Type()) != "not_found_error" {
		t.Fatalf("unknown model: %v", err)
	}
}
