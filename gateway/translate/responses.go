package translate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// ErrBadRequest is matched by every error about a request body the
// gateway cannot serve; the client gets 400 in its API's shape.
var ErrBadRequest = errors.New("gateway: bad request")

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// customArgs wraps a custom (free-form) tool's input as the JSON
// arguments of the function the translation offers in its place.
func customArgs(input string) string {
	b, _ := json.Marshal(struct {
		Input string `json:"input"`
	}{input})
	return string(b)
}

var customParams = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}`)

// ResponsesToChat translates a Responses request to a chat completions
// request. The Responses API is stateless here: previous_response_id is
// refused (clients such as Codex send store=false and the whole input).
// Function tools map to chat functions, custom (free-form) tools to a
// function taking {"input": string}; other built-in tools are dropped.
// Reasoning items are dropped (chat completions cannot carry them back).
// custom lists the custom tools' names, for the reply's translation.
func ResponsesToChat(body []byte) (cr *apiwire.ChatRequest, custom map[string]bool, err error) {
	return ResponsesToChatMemo(body, nil)
}

// ResponsesToChatMemo is ResponsesToChat decoding the body from ms's
// memo of an earlier body that started the same way (nil: no memo).
func ResponsesToChatMemo(body []byte, ms *Memos) (cr *apiwire.ChatRequest, custom map[string]bool, err error) {
	in, err := decodeResponses(body, ms)
	if err != nil {
		return nil, nil, err
	}
	if in.PreviousResponseID != "" {
		return nil, nil, badRequest("previous_response_id is not supported: this gateway keeps no responses; send the whole input (store=false)")
	}
	effort, err := in.ReasoningEffort()
	if err != nil {
		return nil, nil, badRequest("responses request: reasoning: %v", err)
	}
	cr = &apiwire.ChatRequest{Model: in.Model, ParallelToolCalls: in.ParallelToolCalls, MaxTokens: in.MaxOutputTokens,
		Temperature: in.Temperature, TopP: in.TopP, Stream: in.Stream, ReasoningEffort: effort}
	if in.Stream {
		cr.StreamOptions = &apiwire.StreamOptions{IncludeUsage: true}
	}
	if s := partsText(in.Instructions); s != "" {
		cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "system", Content: text(s)})
	}
	custom = toolsToChat(cr, in.Tools, in.ToolChoice)
	if !in.Input.IsArray() && !in.Input.IsZero() {
		cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "user", Content: text(in.Input.Text)})
		return cr, custom, nil
	}
	for _, it := range in.Input.Parts {
		switch it.Type {
		case "message", "":
			if it.Role == "" {
				return nil, nil, badRequest("responses input: a message item has no role")
			}
			role := it.Role
			if role == "developer" {
				role = "system"
			}
			cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: role, Content: content(responsesParts(it.Content))})
		case "function_call", "custom_tool_call":
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				args = customArgs(it.Input)
			}
			tc := apiwire.ToolCall{ID: it.CallID, Type: "function", Function: apiwire.FunctionCall{Name: it.Name, Arguments: args}}
			if n := len(cr.Messages); n > 0 && cr.Messages[n-1].Role == "assistant" {
				cr.Messages[n-1].ToolCalls = append(cr.Messages[n-1].ToolCalls, tc)
			} else {
				cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "assistant", ToolCalls: []apiwire.ToolCall{tc}})
			}
		case "function_call_output", "custom_tool_call_output":
			cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "tool", ToolCallID: it.CallID, Content: text(partsText(it.Output))})
		case "reasoning":
			// Dropped: chat completions has no way to send it back.
		default:
			// Built-in tool calls (web search, local shell, ...) have no
			// chat counterpart; they are dropped.
		}
	}
	if len(cr.Messages) == 0 {
		return nil, nil, badRequest("responses request has no input")
	}
	return cr, custom, nil
}

// toolsToChat offers cr the request's function tools, its custom
// (free-form) tools as functions taking {"input": string}, and its
// tool_choice; it returns the custom tools' names (nil: none).
func toolsToChat(cr *apiwire.ChatRequest, tools []apiwire.ResponsesTool, choice json.RawMessage) (custom map[string]bool) {
	for _, t := range tools {
		switch t.Type {
		case "function":
			cr.Tools = append(cr.Tools, apiwire.ChatTool{Type: "function", Function: apiwire.FunctionDecl{Name: t.Name,
				Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
		case "custom":
			if custom == nil {
				custom = map[string]bool{}
			}
			custom[t.Name] = true
			cr.Tools = append(cr.Tools, apiwire.ChatTool{Type: "function", Function: apiwire.FunctionDecl{Name: t.Name,
				Description: t.Description, Parameters: customParams}})
		}
	}
	if len(choice) > 0 {
		var s string
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(choice, &s) == nil:
			cr.ToolChoice, _ = json.Marshal(s)
		case json.Unmarshal(choice, &named) == nil && named.Name != "":
			cr.ToolChoice = namedTool(named.Name)
		}
	}
	return custom
}

// responsesParts reads a message item's content: a string or a list of
// input_text / output_text / input_image parts.
func responsesParts(c apiwire.TextOr[apiwire.ResponsesContent]) []apiwire.ChatContentPart {
	if !c.IsArray() {
		return []apiwire.ChatContentPart{{Type: "text", Text: c.Text}}
	}
	out := make([]apiwire.ChatContentPart, 0, len(c.Parts))
	for _, p := range c.Parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text", "refusal":
			out = append(out, apiwire.ChatContentPart{Type: "text", Text: p.Text})
		case "input_image":
			if p.ImageURL != "" {
				out = append(out, apiwire.ImageURLPart(p.ImageURL))
			}
		}
	}
	return out
}

// partsText returns c's string, or the text of its parts run together.
func partsText(c apiwire.TextOr[apiwire.ResponsesContent]) string {
	if !c.IsArray() {
		return c.Text
	}
	var b strings.Builder
	for _, p := range c.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

func responsesUsageInto(u *apiwire.ResponsesUsage, out *Usage) {
	if u == nil {
		return
	}
	out.HasUsage = true
	out.PromptTokens, out.CompletionTokens = u.InputTokens, u.OutputTokens
	out.CachedTokens = u.InputTokensDetails.CachedTokens
}

func newResponsesUsage(u Usage) *apiwire.ResponsesUsage {
	return &apiwire.ResponsesUsage{InputTokens: u.PromptTokens, InputTokensDetails: apiwire.InputTokensDetails{CachedTokens: u.CachedTokens},
		OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}

// responsesStatus maps a chat finish reason to a response status.
func responsesStatus(finish string) (string, *apiwire.IncompleteDetails) {
	switch finish {
	case "length":
		return "incomplete", &apiwire.IncompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		return "incomplete", &apiwire.IncompleteDetails{Reason: "content_filter"}
	}
	return "completed", nil
}

// outputText is an output_text part as the translation writes it.
func outputText(t string) apiwire.ResponsesContent {
	return apiwire.ResponsesContent{Type: "output_text", Text: t, Annotations: json.RawMessage("[]")}
}

// responsesShell is the response object before its output is known.
func responsesShell(id, model string, created int64, req *apiwire.ChatRequest) apiwire.Response {
	r := apiwire.Response{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: model,
		Output: []apiwire.OutputItem{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		ToolChoice: json.RawMessage(`"auto"`), Tools: []apiwire.ResponsesTool{}}
	if len(req.ToolChoice) > 0 {
		r.ToolChoice = req.ToolChoice
	}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, apiwire.ResponsesTool{Type: "function", Name: t.Function.Name})
	}
	return r
}

// toolItem returns the output item of a tool call: a function_call, or a
// custom_tool_call for a custom tool (its input unwrapped).
func toolItem(id, callID, name, args string, custom map[string]bool) apiwire.OutputItem {
	o := apiwire.OutputItem{Type: apiwire.ItemFunctionCall, ID: id, Status: "completed", CallID: callID, Name: name,
		Arguments: args}
	if custom[name] {
		var in struct {
			Input string `json:"input"`
		}
		_ = json.Unmarshal([]byte(args), &in)
		o.Type, o.Arguments, o.Input = apiwire.ItemCustomToolCall, "", in.Input
	}
	return o
}

// ChatToResponses translates a non-streamed chat completion reply.
func ChatToResponses(b []byte, req *apiwire.ChatRequest, custom map[string]bool, id string) ([]byte, Usage, error) {
	var cr apiwire.ChatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return nil, Usage{}, fmt.Errorf("gateway: worker reply: %w", err)
	}
	var u Usage
	usageInto(cr.Usage, &u)
	out := responsesShell(id, cr.Model, cr.Created, req)
	if len(cr.Choices) > 0 {
		ch := &cr.Choices[0]
		u.FinishReason = ch.FinishReason
		if t := deref(ch.Message.Content); t != "" {
			out.Output = append(out.Output, apiwire.OutputItem{Type: apiwire.ItemMessage, ID: "msg_" + id, Status: "completed",
				Role: "assistant", Content: []apiwire.ResponsesContent{outputText(t)}})
		}
		for i, tc := range ch.Message.ToolCalls {
			u.ToolCalls = append(u.ToolCalls, tc.Function.Name)
			out.Output = append(out.Output, toolItem(fmt.Sprintf("fc_%s_%d", id, i), tc.ID, tc.Function.Name,
				tc.Function.Arguments, custom))
		}
	}
	out.Status, out.IncompleteDetails = responsesStatus(u.FinishReason)
	out.Usage = newResponsesUsage(u)
	j, err := json.Marshal(out)
	return j, u, err
}
