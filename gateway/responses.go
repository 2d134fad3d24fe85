package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
)

// responsesRequest is the part of an OpenAI Responses request the
// translation to chat completions reads.
type responsesRequest struct {
	Model              string          `json:"model"`
	Instructions       json.RawMessage `json:"instructions"`
	Input              json.RawMessage `json:"input"`
	Tools              []responsesTool `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
	Reasoning          *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

// responsesItem is one input (or output) item.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"` // custom_tool_call
	Output    json.RawMessage `json:"output"`
}

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

// responsesToChat translates a Responses request to a chat completions
// request. The Responses API is stateless here: previous_response_id is
// refused (clients such as Codex send store=false and the whole input).
// Function tools map to chat functions, custom (free-form) tools to a
// function taking {"input": string}; other built-in tools are dropped.
// Reasoning items are dropped (chat completions cannot carry them back).
// custom lists the custom tools' names, for the reply's translation.
func responsesToChat(body []byte) (cr *chatRequest, custom map[string]bool, err error) {
	var in responsesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, badRequest("responses request: %v", err)
	}
	if in.PreviousResponseID != "" {
		return nil, nil, badRequest("previous_response_id is not supported: this gateway keeps no responses; send the whole input (store=false)")
	}
	cr = &chatRequest{Model: in.Model, ParallelToolCalls: in.ParallelToolCalls, MaxTokens: in.MaxOutputTokens,
		Temperature: in.Temperature, TopP: in.TopP, Stream: in.Stream}
	if in.Reasoning != nil {
		cr.ReasoningEffort = in.Reasoning.Effort
	}
	if in.Stream {
		cr.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if s := textContent(in.Instructions); s != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: s})
	}
	for _, t := range in.Tools {
		switch t.Type {
		case "function":
			cr.Tools = append(cr.Tools, chatTool{Type: "function", Function: chatToolDef{Name: t.Name,
				Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
		case "custom":
			if custom == nil {
				custom = map[string]bool{}
			}
			custom[t.Name] = true
			cr.Tools = append(cr.Tools, chatTool{Type: "function", Function: chatToolDef{Name: t.Name,
				Description: t.Description, Parameters: customParams}})
		}
	}
	if len(in.ToolChoice) > 0 {
		var s string
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(in.ToolChoice, &s) == nil:
			cr.ToolChoice = s
		case json.Unmarshal(in.ToolChoice, &named) == nil && named.Name != "":
			cr.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": named.Name}}
		}
	}
	var text string
	if json.Unmarshal(in.Input, &text) == nil {
		cr.Messages = append(cr.Messages, chatMessage{Role: "user", Content: text})
		return cr, custom, nil
	}
	var items []responsesItem
	if len(in.Input) > 0 {
		if err := json.Unmarshal(in.Input, &items); err != nil {
			return nil, nil, badRequest("responses input: want a string or a list of items: %v", err)
		}
	}
	for _, it := range items {
		switch it.Type {
		case "message", "":
			if it.Role == "" {
				return nil, nil, badRequest("responses input: a message item has no role")
			}
			role := it.Role
			if role == "developer" {
				role = "system"
			}
			cr.Messages = append(cr.Messages, chatMessage{Role: role, Content: content(responsesParts(it.Content))})
		case "function_call", "custom_tool_call":
			args := it.Arguments
			if it.Type == "custom_tool_call" {
				args = customArgs(it.Input)
			}
			tc := chatToolCall{ID: it.CallID, Type: "function", Function: chatFunction{Name: it.Name, Arguments: args}}
			if n := len(cr.Messages); n > 0 && cr.Messages[n-1].Role == "assistant" {
				cr.Messages[n-1].ToolCalls = append(cr.Messages[n-1].ToolCalls, tc)
			} else {
				cr.Messages = append(cr.Messages, chatMessage{Role: "assistant", ToolCalls: []chatToolCall{tc}})
			}
		case "function_call_output", "custom_tool_call_output":
			cr.Messages = append(cr.Messages, chatMessage{Role: "tool", ToolCallID: it.CallID, Content: textContent(it.Output)})
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

// responsesParts reads a message item's content: a string or a list of
// input_text / output_text / input_image parts.
func responsesParts(raw json.RawMessage) []chatPart {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []chatPart{{Type: "text", Text: s}}
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	out := make([]chatPart, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text", "refusal":
			out = append(out, chatPart{Type: "text", Text: p.Text})
		case "input_image":
			var u string
			if json.Unmarshal(p.ImageURL, &u) == nil && u != "" {
				out = append(out, chatPart{Type: "image_url", ImageURL: &imageURL{URL: u}})
			}
		}
	}
	return out
}

// The Responses reply shapes.

type responsesResponse struct {
	ID                string              `json:"id"`
	Object            string              `json:"object"`
	CreatedAt         int64               `json:"created_at"`
	Status            string              `json:"status"`
	Model             string              `json:"model"`
	Output            []responsesOutput   `json:"output"`
	Usage             *responsesUsage     `json:"usage"`
	IncompleteDetails *incompleteDetails  `json:"incomplete_details"`
	Error             *responsesError     `json:"error"`
	ParallelToolCalls bool                `json:"parallel_tool_calls"`
	ToolChoice        any                 `json:"tool_choice"`
	Tools             []responsesToolEcho `json:"tools"`
}

type responsesToolEcho struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type responsesError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type responsesOutput struct {
	Type      string           `json:"type"`
	ID        string           `json:"id"`
	Status    string           `json:"status"`
	Role      string           `json:"role,omitempty"`
	Content   *[]responsesText `json:"content,omitempty"`
	CallID    string           `json:"call_id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Arguments *string          `json:"arguments,omitempty"`
	Input     *string          `json:"input,omitempty"`
}

type responsesText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func (u *responsesUsage) into(out *Usage) {
	if u == nil {
		return
	}
	out.HasUsage = true
	out.PromptTokens, out.CompletionTokens = u.InputTokens, u.OutputTokens
	out.CachedTokens = u.InputTokensDetails.CachedTokens
}

func newResponsesUsage(u Usage) *responsesUsage {
	r := &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		TotalTokens: u.PromptTokens + u.CompletionTokens}
	r.InputTokensDetails.CachedTokens = u.CachedTokens
	return r
}

// responsesStatus maps a chat finish reason to a response status.
func responsesStatus(finish string) (string, *incompleteDetails) {
	switch finish {
	case "length":
		return "incomplete", &incompleteDetails{Reason: "max_output_tokens"}
	case "content_filter":
		return "incomplete", &incompleteDetails{Reason: "content_filter"}
	}
	return "completed", nil
}

// responsesShell is the response object before its output is known.
func responsesShell(id, model string, created int64, req *chatRequest) responsesResponse {
	r := responsesResponse{ID: id, Object: "response", CreatedAt: created, Status: "in_progress", Model: model,
		Output: []responsesOutput{}, ParallelToolCalls: req.ParallelToolCalls == nil || *req.ParallelToolCalls,
		ToolChoice: "auto", Tools: []responsesToolEcho{}}
	if req.ToolChoice != nil {
		r.ToolChoice = req.ToolChoice
	}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, responsesToolEcho{Type: "function", Name: t.Function.Name})
	}
	return r
}

// toolItem returns the output item of a tool call: a function_call, or a
// custom_tool_call for a custom tool (its input unwrapped).
func toolItem(id, callID, name, args string, custom map[string]bool) responsesOutput {
	o := responsesOutput{Type: "function_call", ID: id, Status: "completed", CallID: callID, Name: name}
	if custom[name] {
		var in struct {
			Input string `json:"input"`
		}
		_ = json.Unmarshal([]byte(args), &in)
		o.Type, o.Input = "custom_tool_call", &in.Input
		return o
	}
	o.Arguments = &args
	return o
}

// chatToResponses translates a non-streamed chat completion reply.
func chatToResponses(b []byte, req *chatRequest, custom map[string]bool, id string) ([]byte, Usage, error) {
	var cr chatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return nil, Usage{}, fmt.Errorf("gateway: worker reply: %w", err)
	}
	var u Usage
	cr.Usage.into(&u)
	out := responsesShell(id, cr.Model, cr.Created, req)
	if len(cr.Choices) > 0 {
		ch := cr.Choices[0]
		u.FinishReason = deref(ch.FinishReason)
		if t := deref(ch.Message.Content); t != "" {
			out.Output = append(out.Output, responsesOutput{Type: "message", ID: "msg_" + id, Status: "completed",
				Role: "assistant", Content: &[]responsesText{{Type: "output_text", Text: t, Annotations: []any{}}}})
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
