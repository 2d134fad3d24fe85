package apiwire_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// server serves one handler per path and fails the test on any other.
func server(t *testing.T, routes map[string]http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, ok := routes[r.URL.Path]
		if !ok {
			t.Errorf("unexpected request %s %s", r.Method, r.URL.Path)
			http.NotFound(w, r)
			return
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func decode[T any](t *testing.T, r *http.Request) T {
	t.Helper()
	var v T
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Errorf("decode %s: %v\n%s", r.URL.Path, err, b)
	}
	return v
}

func usage() *apiwire.Usage {
	return &apiwire.Usage{PromptTokens: 100, CompletionTokens: 7, TotalTokens: 107,
		PromptTokensDetails: &apiwire.PromptTokensDetails{CachedTokens: 64}}
}

var weatherSchema = map[string]any{"type": "object",
	"properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}

func oaiClient(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func chatParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("be brief"),
			openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{openai.TextContentPart("read"), openai.TextContentPart("it")}),
			{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "Read", Arguments: `{"path":"a"}`}}}}}},
			openai.ToolMessage("file body", "call_1"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "Read", Description: openai.String("read a file"), Parameters: weatherSchema})},
		ToolChoice:          openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
		MaxCompletionTokens: openai.Int(16),
		Stop:                openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"END"}},
		StreamOptions:       openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}
}

func checkChatRequest(t *testing.T, req apiwire.ChatRequest) {
	t.Helper()
	if req.Model != "m" || len(req.Messages) != 4 {
		t.Fatalf("request: %+v", req)
	}
	m := req.Messages
	if m[0].Role != "system" || m[0].Text() != "be brief" || m[0].Content.IsArray() {
		t.Errorf("system message: %+v", m[0])
	}
	if m[1].Role != "user" || !m[1].Content.IsArray() || m[1].Text() != "read\nit" {
		t.Errorf("user message: %+v", m[1])
	}
	if m[2].Role != "assistant" || len(m[2].ToolCalls) != 1 || m[2].ToolCalls[0].Function.Name != "Read" ||
		m[2].ToolCalls[0].Function.Arguments != `{"path":"a"}` || m[2].ToolCalls[0].ID != "call_1" {
		t.Errorf("assistant message: %+v", m[2])
	}
	if m[3].Role != "tool" || m[3].ToolCallID != "call_1" || m[3].Text() != "file body" {
		t.Errorf("tool message: %+v", m[3])
	}
	if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Function.Name != "Read" || len(req.Tools[0].Function.Parameters) == 0 {
		t.Errorf("tools: %+v", req.Tools)
	}
	if mode, _ := apiwire.ToolChoice(req.ToolChoice); mode != "auto" {
		t.Errorf("tool_choice %s", req.ToolChoice)
	}
	if req.MaxOutputTokens() != 16 || !req.Stop.IsArray() || req.Stop.Parts[0] != "END" {
		t.Errorf("limits: max %d stop %+v", req.MaxOutputTokens(), req.Stop)
	}
}

func TestOpenAIChatSDK(t *testing.T) {
	text := "hello there"
	url := server(t, map[string]http.HandlerFunc{"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
		req := decode[apiwire.ChatRequest](t, r)
		checkChatRequest(t, req)
		if !req.Stream {
			apiwire.WriteJSON(w, 200, apiwire.ChatResponse{ID: "chatcmpl-1", Object: apiwire.ObjectChatCompletion, Created: 1, Model: "m",
				Choices: []apiwire.ChatChoice{{Message: apiwire.ChatResponseMessage{Role: "assistant", Content: &text,
					ToolCalls: []apiwire.ToolCall{{ID: "call_2", Type: "function", Function: apiwire.FunctionCall{Name: "Read", Arguments: `{"path":"b"}`}}}},
					FinishReason: apiwire.FinishToolCalls}},
				Usage: usage()})
			return
		}
		if !req.IncludeUsage() {
			t.Error("stream without include_usage")
		}
		sw := apiwire.NewSSEWriter(w)
		chunk := func(d apiwire.ChatDelta, fin *string) apiwire.ChatChunk {
			return apiwire.ChatChunk{ID: "chatcmpl-1", Object: apiwire.ObjectChatCompletionChunk, Created: 1, Model: "m",
				Choices: []apiwire.ChatChunkChoice{{Delta: d, FinishReason: fin}}}
		}
		sw.Data(chunk(apiwire.ChatDelta{Role: "assistant", Content: apiwire.Ptr("")}, nil))
		sw.Data(chunk(apiwire.ChatDelta{Content: apiwire.Ptr("hello ")}, nil))
		sw.Data(chunk(apiwire.ChatDelta{Content: apiwire.Ptr("there")}, nil))
		sw.Data(chunk(apiwire.ChatDelta{ToolCalls: []apiwire.ToolCallDelta{{ID: "call_2", Type: "function", Function: apiwire.FunctionCallDelta{Name: "Read"}}}}, nil))
		sw.Data(chunk(apiwire.ChatDelta{ToolCalls: []apiwire.ToolCallDelta{{Function: apiwire.FunctionCallDelta{Arguments: `{"path":`}}}}, nil))
		sw.Data(chunk(apiwire.ChatDelta{ToolCalls: []apiwire.ToolCallDelta{{Function: apiwire.FunctionCallDelta{Arguments: `"b"}`}}}}, nil))
		sw.Data(chunk(apiwire.ChatDelta{}, apiwire.Ptr(apiwire.FinishToolCalls)))
		sw.Data(apiwire.ChatChunk{ID: "chatcmpl-1", Object: apiwire.ObjectChatCompletionChunk, Created: 1, Model: "m", Choices: []apiwire.ChatChunkChoice{}, Usage: usage()})
		sw.Done()
	}})
	c := oaiClient(url)
	ctx := context.Background()
	resp, err := c.Chat.Completions.New(ctx, chatParams())
	if err != nil {
		t.Fatal(err)
	}
	ch := resp.Choices[0]
	if ch.Message.Content != text || ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 ||
		ch.Message.ToolCalls[0].Function.Arguments != `{"path":"b"}` || !resp.JSON.Usage.Valid() {
		t.Errorf("reply: %+v", resp)
	}
	if resp.Usage.PromptTokens != 100 || resp.Usage.CompletionTokens != 7 || resp.Usage.PromptTokensDetails.CachedTokens != 64 ||
		!resp.Usage.PromptTokensDetails.JSON.CachedTokens.Valid() {
		t.Errorf("usage: %+v", resp.Usage)
	}

	st := c.Chat.Completions.NewStreaming(ctx, chatParams())
	var acc openai.ChatCompletionAccumulator
	n := 0
	for st.Next() {
		cur := st.Current()
		if cur.Object != "chat.completion.chunk" {
			t.Errorf("chunk object %q", cur.Object)
		}
		acc.AddChunk(cur)
		n++
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Errorf("%d chunks, want 8", n)
	}
	got := acc.Choices[0]
	if got.Message.Content != text || got.FinishReason != "tool_calls" || len(got.Message.ToolCalls) != 1 ||
		got.Message.ToolCalls[0].Function.Arguments != `{"path":"b"}` || got.Message.ToolCalls[0].Function.Name != "Read" {
		t.Errorf("accumulated: %+v", got)
	}
	if acc.Usage.PromptTokensDetails.CachedTokens != 64 || acc.Usage.TotalTokens != 107 {
		t.Errorf("stream usage: %+v", acc.Usage)
	}
}

func TestOpenAICompletionsAndModelsSDK(t *testing.T) {
	url := server(t, map[string]http.HandlerFunc{
		"/v1/completions": func(w http.ResponseWriter, r *http.Request) {
			req := decode[apiwire.CompletionRequest](t, r)
			if len(req.Prompt.Texts) != 1 || req.Prompt.Texts[0] != "once upon" || *req.MaxTokens != 5 {
				t.Errorf("request %+v", req)
			}
			resp := apiwire.CompletionResponse{ID: "cmpl-1", Object: apiwire.ObjectTextCompletion, Created: 1, Model: "m"}
			if !req.Stream {
				resp.Choices = []apiwire.CompletionChoice{{Text: "a time", FinishReason: apiwire.Ptr(apiwire.FinishLength)}}
				resp.Usage = usage()
				apiwire.WriteJSON(w, 200, resp)
				return
			}
			sw := apiwire.NewSSEWriter(w)
			for _, s := range []string{"a ", "time"} {
				resp.Choices = []apiwire.CompletionChoice{{Text: s}}
				sw.Data(resp)
			}
			resp.Choices = []apiwire.CompletionChoice{{FinishReason: apiwire.Ptr(apiwire.FinishLength)}}
			sw.Data(resp)
			resp.Choices, resp.Usage = []apiwire.CompletionChoice{}, usage()
			sw.Data(resp)
			sw.Done()
		},
		"/v1/models": func(w http.ResponseWriter, r *http.Request) {
			apiwire.WriteJSON(w, 200, apiwire.ModelList{Object: "list", Data: []apiwire.Model{{ID: "m", Object: "model", Created: 1, OwnedBy: "agentkv", MaxModelLen: 4096}}})
		},
	})
	c := oaiClient(url)
	ctx := context.Background()
	p := openai.CompletionNewParams{Model: "m", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon")}, MaxTokens: openai.Int(5)}
	resp, err := c.Completions.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Text != "a time" || resp.Choices[0].FinishReason != "length" || resp.Usage.PromptTokensDetails.CachedTokens != 64 {
		t.Errorf("reply %+v", resp)
	}
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.Completions.NewStreaming(ctx, p)
	text, sawUsage := "", false
	for st.Next() {
		cur := st.Current()
		for _, ch := range cur.Choices {
			text += ch.Text
		}
		if cur.JSON.Usage.Valid() {
			sawUsage = cur.Usage.PromptTokens == 100
		}
	}
	if st.Err() != nil || text != "a time" || !sawUsage {
		t.Errorf("stream: err %v text %q usage %v", st.Err(), text, sawUsage)
	}
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "m" || page.Data[0].OwnedBy != "agentkv" {
		t.Errorf("models: %v %+v", err, page)
	}
}

func TestOpenAIErrorSDK(t *testing.T) {
	url := server(t, map[string]http.HandlerFunc{"/v1/chat/completions": func(w http.ResponseWriter, r *http.Request) {
		apiwire.WriteOpenAIError(w, 404, "The model `x` does not exist.")
	}})
	c := oaiClient(url)
	_, err := c.Chat.Completions.New(context.Background(), chatParams())
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != 404 || ae.Message != "The model `x` does not exist." || ae.Type != "not_found_error" {
		t.Fatalf("error %#v", err)
	}
}

func TestResponsesSDK(t *testing.T) {
	text := "done reading"
	usage := &apiwire.ResponsesUsage{InputTokens: 100, InputTokensDetails: apiwire.InputTokensDetails{CachedTokens: 48}, OutputTokens: 2, TotalTokens: 102}
	url := server(t, map[string]http.HandlerFunc{"/v1/responses": func(w http.ResponseWriter, r *http.Request) {
		req := decode[apiwire.ResponsesRequest](t, r)
		if req.InstructionsText() != "be a coder" || !req.Input.IsArray() || len(req.Input.Parts) != 3 || *req.MaxOutputTokens != 8 {
			t.Fatalf("request %+v", req)
		}
		in := req.Input.Parts
		if in[0].ItemType() != apiwire.ItemMessage || in[0].Role != "user" || in[0].Text() != "list files" ||
			in[1].ItemType() != apiwire.ItemFunctionCall || in[1].CallID != "c1" || in[1].Name != "shell" || in[1].Arguments != `{"cmd":"ls"}` ||
			in[2].ItemType() != apiwire.ItemFunctionCallOutput || in[2].CallID != "c1" || in[2].Text() != "a.go" {
			t.Errorf("input %+v", in)
		}
		if len(req.Tools) != 1 || req.Tools[0].Type != "function" || req.Tools[0].Name != "shell" {
			t.Errorf("tools %+v", req.Tools)
		}
		msg := apiwire.OutputItem{Type: apiwire.ItemMessage, ID: "msg_1", Status: apiwire.StatusCompleted, Role: "assistant",
			Content: []apiwire.ResponsesContent{apiwire.OutputText(text)}}
		call := apiwire.OutputItem{Type: apiwire.ItemFunctionCall, ID: "fc_1", CallID: "c2", Name: "shell", Arguments: `{"cmd":"cat a.go"}`, Status: apiwire.StatusCompleted}
		full := &apiwire.Response{ID: "resp_1", Object: apiwire.ObjectResponse, CreatedAt: 1, Status: apiwire.StatusCompleted, Model: "m",
			Output: []apiwire.OutputItem{msg, call}, Usage: usage, ToolChoice: json.RawMessage(`"auto"`), Tools: req.Tools}
		if !req.Stream {
			apiwire.WriteJSON(w, 200, full)
			return
		}
		sw := apiwire.NewSSEWriter(w)
		seq := 0
		ev := func(e apiwire.ResponsesStreamEvent) {
			e.SequenceNumber = seq
			seq++
			sw.Event(e.Type, e)
		}
		start := *full
		start.Status, start.Output, start.Usage = apiwire.StatusInProgress, []apiwire.OutputItem{}, nil
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseCreated, Response: &start})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseInProgress, Response: &start})
		m0 := msg
		m0.Status, m0.Content = apiwire.StatusInProgress, nil
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemAdded, Item: &m0})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartAdded, ItemID: "msg_1", Part: apiwire.Ptr(apiwire.OutputText(""))})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDelta, ItemID: "msg_1", Delta: "done "})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDelta, ItemID: "msg_1", Delta: "reading"})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputTextDone, ItemID: "msg_1", Text: text})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventContentPartDone, ItemID: "msg_1", Part: apiwire.Ptr(apiwire.OutputText(text))})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemDone, Item: &msg})
		c0 := call
		c0.Arguments, c0.Status = "", apiwire.StatusInProgress
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemAdded, OutputIndex: 1, Item: &c0})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDelta, OutputIndex: 1, ItemID: "fc_1", Delta: call.Arguments})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventFunctionCallArgumentsDone, OutputIndex: 1, ItemID: "fc_1", Name: "shell", Arguments: call.Arguments})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventOutputItemDone, OutputIndex: 1, Item: &call})
		ev(apiwire.ResponsesStreamEvent{Type: apiwire.EventResponseCompleted, Response: full})
	}})
	c := oaiClient(url)
	ctx := context.Background()
	p := responses.ResponseNewParams{
		Model:        "m",
		Instructions: openai.String("be a coder"),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
				{OfInputText: &responses.ResponseInputTextParam{Text: "list files"}}}, responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(`{"cmd":"ls"}`, "c1", "shell"),
			responses.ResponseInputItemParamOfFunctionCallOutput("a.go"),
		}},
		Tools:           []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "shell", Parameters: weatherSchema}}},
		MaxOutputTokens: openai.Int(8),
	}
	p.Input.OfInputItemList[2].OfFunctionCallOutput.CallID = openai.String("c1")
	resp, err := c.Responses.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != text || len(resp.Output) != 2 || resp.Output[1].Type != "function_call" || resp.Output[1].CallID != "c2" ||
		resp.Usage.InputTokensDetails.CachedTokens != 48 || !resp.Usage.JSON.OutputTokens.Valid() {
		t.Errorf("reply %+v", resp)
	}
	st := c.Responses.NewStreaming(ctx, p)
	var types []string
	var deltas string
	var done responses.Response
	for st.Next() {
		e := st.Current()
		types = append(types, e.Type)
		if e.SequenceNumber != int64(len(types)-1) || !e.JSON.SequenceNumber.Valid() {
			t.Errorf("event %d %s: sequence_number %d", len(types)-1, e.Type, e.SequenceNumber)
		}
		switch v := e.AsAny().(type) {
		case responses.ResponseTextDeltaEvent:
			deltas += v.Delta
			if !v.JSON.Logprobs.Valid() || !v.JSON.ItemID.Valid() || !v.JSON.ContentIndex.Valid() {
				t.Errorf("delta fields %s", v.RawJSON())
			}
		case responses.ResponseCompletedEvent:
			done = v.Response
		case responses.ResponseFunctionCallArgumentsDoneEvent:
			if v.Arguments != `{"cmd":"cat a.go"}` {
				t.Errorf("arguments %q", v.Arguments)
			}
		case responses.ResponseOutputItemAddedEvent:
			if !v.JSON.Item.Valid() || !v.Item.JSON.ID.Valid() {
				t.Errorf("item added %s", v.RawJSON())
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) != 14 || types[0] != "response.created" || types[13] != "response.completed" || deltas != text {
		t.Errorf("events %v deltas %q", types, deltas)
	}
	if done.Usage.InputTokensDetails.CachedTokens != 48 || done.Usage.OutputTokens != 2 || done.OutputText() != text {
		t.Errorf("completed %+v", done)
	}
}

func antClient(url string) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(url), aoption.WithAPIKey("sk-test"), aoption.WithMaxRetries(0))
}

func TestAnthropicSDK(t *testing.T) {
	u := apiwire.AnthropicUsage{InputTokens: 36, CacheReadInputTokens: 64, OutputTokens: 3}
	url := server(t, map[string]http.HandlerFunc{
		"/v1/messages": func(w http.ResponseWriter, r *http.Request) {
			req := decode[apiwire.MessagesRequest](t, r)
			if req.SystemText() != "be a coder" || !req.System.IsArray() || req.MaxTokens == nil || *req.MaxTokens != 9 || len(req.Messages) != 3 ||
				req.Metadata == nil || req.Metadata.UserID != `{"session_id":"s1"}` || len(req.StopSequences) != 1 {
				t.Fatalf("request %+v", req)
			}
			m := req.Messages
			if m[0].Role != "user" || apiwire.BlocksText(m[0].Content) != "look" ||
				m[1].Content.Parts[0].Type != "tool_use" || m[1].Content.Parts[0].Name != "Read" || string(m[1].Content.Parts[0].Input) != `{"path":"a"}` ||
				m[2].Content.Parts[0].Type != "tool_result" || m[2].Content.Parts[0].ToolUseID != "tu1" || m[2].Content.Parts[0].ResultText() != "body" {
				t.Errorf("messages %+v", m)
			}
			if len(req.Tools) != 1 || req.Tools[0].Name != "Read" || len(req.Tools[0].InputSchema) == 0 {
				t.Errorf("tools %+v", req.Tools)
			}
			blocks := []apiwire.ContentBlock{{Type: "text", Text: "ok "}, {Type: "tool_use", ID: "tu2", Name: "Read", Input: json.RawMessage(`{"path":"b"}`)}}
			msg := apiwire.MessagesResponse{ID: "msg_1", Type: "message", Role: "assistant", Model: "m", Content: blocks,
				StopReason: apiwire.Ptr(apiwire.StopToolUse), Usage: u}
			if !req.Stream {
				apiwire.WriteJSON(w, 200, msg)
				return
			}
			sw := apiwire.NewSSEWriter(w)
			ev := func(e apiwire.MessagesStreamEvent) { sw.Event(e.Type, e) }
			start := msg
			start.Content, start.StopReason = []apiwire.ContentBlock{}, nil
			start.Usage.OutputTokens = 1
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStart, Message: &start})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStart, ContentBlock: &apiwire.ContentBlock{Type: "text"}})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventPing})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Delta: &apiwire.StreamDelta{Type: apiwire.DeltaText, Text: "ok "}})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStart, Index: 1, ContentBlock: &apiwire.ContentBlock{Type: "tool_use", ID: "tu2", Name: "Read"}})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Index: 1, Delta: &apiwire.StreamDelta{Type: apiwire.DeltaInputJSON, PartialJSON: ""}})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockDelta, Index: 1, Delta: &apiwire.StreamDelta{Type: apiwire.DeltaInputJSON, PartialJSON: `{"path":"b"}`}})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventContentBlockStop, Index: 1})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageDelta, Delta: &apiwire.StreamDelta{StopReason: apiwire.Ptr(apiwire.StopToolUse)}, Usage: &u})
			ev(apiwire.MessagesStreamEvent{Type: apiwire.EventMessageStop})
		},
		"/v1/messages/count_tokens": func(w http.ResponseWriter, r *http.Request) {
			req := decode[apiwire.MessagesRequest](t, r)
			if len(req.Messages) != 3 {
				t.Errorf("count_tokens request %+v", req)
			}
			apiwire.WriteJSON(w, 200, apiwire.CountTokensResponse{InputTokens: 100})
		},
		"/v1/models": func(w http.ResponseWriter, r *http.Request) {
			apiwire.WriteJSON(w, 200, apiwire.AnthropicModelList{Data: []apiwire.AnthropicModel{{Type: "model", ID: "m", DisplayName: "m", CreatedAt: "2025-01-01T00:00:00Z"}},
				FirstID: apiwire.Ptr("m"), LastID: apiwire.Ptr("m")})
		},
	})
	c := antClient(url)
	ctx := context.Background()
	msgs := []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("look")),
		anthropic.NewAssistantMessage(anthropic.NewToolUseBlock("tu1", map[string]any{"path": "a"}, "Read")),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock("tu1", "body", false)),
	}
	tools := []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "Read",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"], Required: []string{"path"}}}}}
	p := anthropic.MessageNewParams{Model: "m", MaxTokens: 9, System: []anthropic.TextBlockParam{{Text: "be a coder"}},
		Messages: msgs, Tools: tools, StopSequences: []string{"END"},
		Metadata: anthropic.MetadataParam{UserID: anthropic.String(`{"session_id":"s1"}`)}}
	resp, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Content) != 2 || resp.Content[0].Text != "ok " || resp.Content[1].Name != "Read" || string(resp.Content[1].Input) != `{"path":"b"}` ||
		resp.StopReason != "tool_use" || resp.Usage.CacheReadInputTokens != 64 || resp.Usage.InputTokens != 36 || !resp.Usage.JSON.CacheCreationInputTokens.Valid() {
		t.Errorf("reply %+v", resp)
	}
	// The SDK does not surface ping: 10 of the 11 events.
	st := c.Messages.NewStreaming(ctx, p)
	var acc anthropic.Message
	n := 0
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 10 || len(acc.Content) != 2 || acc.Content[0].Text != "ok " || string(acc.Content[1].Input) != `{"path":"b"}` ||
		acc.StopReason != "tool_use" || acc.Usage.CacheReadInputTokens != 64 || acc.Usage.OutputTokens != 3 {
		t.Errorf("%d events, accumulated %+v", n, acc)
	}
	cnt, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "m", Messages: msgs})
	if err != nil || cnt.InputTokens != 100 {
		t.Errorf("count_tokens %v %+v", err, cnt)
	}
	page, err := c.Models.List(ctx, anthropic.ModelListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "m" {
		t.Errorf("models %v %+v", err, page)
	}
}

func TestAnthropicErrorSDK(t *testing.T) {
	url := server(t, map[string]http.HandlerFunc{"/v1/messages": func(w http.ResponseWriter, r *http.Request) {
		apiwire.WriteAnthropicError(w, 400, "max_tokens: Field required")
	}})
	c := antClient(url)
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 1,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || string(ae.Type()) != "invalid_request_error" {
		t.Fatalf("error %#v", err)
	}
}
