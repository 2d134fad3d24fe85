package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// systemText joins the system prompt's text: a string or text blocks,
// joined with "\n".
func systemText(c apiwire.TextOr[apiwire.ContentBlock]) string {
	if !c.IsArray() {
		return c.Text
	}
	parts := make([]string, 0, len(c.Parts))
	for _, b := range c.Parts {
		if b.Type == "text" || b.Type == "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// namedTool is a chat tool_choice naming one function.
func namedTool(name string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": name}})
	return b
}

// MessagesToChat translates an Anthropic Messages request to chat
// completions: the system prompt, and system-role messages among the
// messages (Claude Code 2.1 sends them mid-conversation), become system
// messages; text and image
// blocks become content parts; tool_use blocks become the assistant's
// tool_calls (input as JSON arguments); tool_result blocks become tool
// messages, ahead of the rest of their user turn; thinking blocks are
// dropped; client tools (with an input_schema) become functions, server
// tools are dropped; tool_choice any → "required", tool → the named
// function, none → "none"; stop_sequences → stop.
func MessagesToChat(body []byte) (*apiwire.ChatRequest, error) {
	return MessagesToChatMemo(body, nil)
}

// MessagesToChatMemo is MessagesToChat decoding the body from ms's memo
// of an earlier body that started the same way (nil: no memo).
func MessagesToChatMemo(body []byte, ms *Memos) (*apiwire.ChatRequest, error) {
	in, err := decodeMessages(body, ms)
	if err != nil {
		return nil, err
	}
	cr := &apiwire.ChatRequest{Model: in.Model, MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP,
		TopK: in.TopK, Stream: in.Stream}
	if len(in.StopSequences) > 0 {
		cr.Stop.Parts = in.StopSequences
	}
	if in.Stream {
		cr.StreamOptions = &apiwire.StreamOptions{IncludeUsage: true}
	}
	if s := systemText(in.System); s != "" {
		cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "system", Content: text(s)})
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 {
			continue // a server tool (web search, ...): the engine cannot run it
		}
		cr.Tools = append(cr.Tools, apiwire.ChatTool{Type: "function", Function: apiwire.FunctionDecl{Name: t.Name,
			Description: t.Description, Parameters: t.InputSchema}})
	}
	if err := toolChoiceToChat(cr, in.ToolChoice); err != nil {
		return nil, err
	}
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" && m.Role != "system" {
			return nil, badRequest("messages.%d.role: want user, assistant or system, got %q", i, m.Role)
		}
		if m.Role == "system" {
			// Claude Code 2.1 sends mid-conversation system messages
			// (anthropic-beta mid-conversation-tool-changes): text only.
			cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "system", Content: text(systemText(m.Content))})
			continue
		}
		if !m.Content.IsArray() {
			if m.Content.IsZero() {
				return nil, badRequest("messages.%d.content: want a string or a list of blocks", i)
			}
			cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: m.Role, Content: text(m.Content.Text)})
			continue
		}
		parts, calls, err := blocksToChat(cr, i, m.Content.Parts)
		if err != nil {
			return nil, err
		}
		if len(parts) == 0 && len(calls) == 0 {
			continue // a user turn of tool results only
		}
		msg := apiwire.ChatMessage{Role: m.Role, ToolCalls: calls}
		if len(parts) > 0 {
			msg.Content = content(parts)
		}
		cr.Messages = append(cr.Messages, msg)
	}
	if len(cr.Messages) == 0 {
		return nil, badRequest("messages request has no messages")
	}
	return cr, nil
}

// toolChoiceToChat sets cr's tool_choice from an Anthropic tool_choice:
// any → "required", tool → the named function, none → "none".
func toolChoiceToChat(cr *apiwire.ChatRequest, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	var tc apiwire.AnthropicToolChoice
	if err := json.Unmarshal(raw, &tc); err != nil {
		return badRequest("messages request: tool_choice: %v", err)
	}
	switch tc.Type {
	case "auto":
		cr.ToolChoice = json.RawMessage(`"auto"`)
	case "any":
		cr.ToolChoice = json.RawMessage(`"required"`)
	case "none":
		cr.ToolChoice = json.RawMessage(`"none"`)
	case "tool":
		cr.ToolChoice = namedTool(tc.Name)
	}
	if tc.DisableParallelToolUse {
		cr.ParallelToolCalls = apiwire.Ptr(false)
	}
	return nil
}

// blocksToChat translates message i's content blocks: text and image
// blocks become content parts, tool_use blocks tool calls, tool_result
// blocks tool messages appended to cr (ahead of the rest of their turn).
func blocksToChat(cr *apiwire.ChatRequest, i int, blocks []apiwire.ContentBlock) ([]apiwire.ChatContentPart, []apiwire.ToolCall, error) {
	var parts []apiwire.ChatContentPart
	var calls []apiwire.ToolCall
	for _, b := range blocks {
		switch b.Type {
		case "text":
			parts = append(parts, apiwire.ChatContentPart{Type: "text", Text: b.Text})
		case "image":
			var src *apiwire.ImageSource
			if len(b.Source) > 0 && json.Unmarshal(b.Source, &src) != nil {
				return nil, nil, badRequest("messages.%d.content: want a string or a list of blocks", i)
			}
			if src == nil {
				continue
			}
			u := src.URL
			if src.Type == "base64" {
				u = "data:" + src.MediaType + ";base64," + src.Data
			}
			parts = append(parts, apiwire.ImageURLPart(u))
		case "tool_use":
			args := "{}"
			if in := bytes.TrimSpace(b.Input); len(in) > 0 {
				args = string(in)
			}
			calls = append(calls, apiwire.ToolCall{ID: b.ID, Type: "function", Function: apiwire.FunctionCall{Name: b.Name, Arguments: args}})
		case "tool_result":
			txt := textContent(b.Content)
			if b.IsError && !strings.HasPrefix(txt, "Error") {
				txt = "Error: " + txt
			}
			cr.Messages = append(cr.Messages, apiwire.ChatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: text(txt)})
		}
	}
	return parts, calls, nil
}

func newAnthUsage(u Usage) apiwire.AnthropicUsage {
	return apiwire.AnthropicUsage{InputTokens: max(u.PromptTokens-u.CachedTokens, 0), CacheReadInputTokens: u.CachedTokens,
		OutputTokens: u.CompletionTokens}
}

// stopReason maps a chat finish reason to Anthropic's stop_reason.
func stopReason(finish string, hitStop bool) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	}
	if hitStop {
		return "stop_sequence"
	}
	return "end_turn"
}

// toolInput returns a tool call's arguments as a JSON object for a
// tool_use block ({} when they are not one).
func toolInput(args string) json.RawMessage {
	b := bytes.TrimSpace([]byte(args))
	if len(b) > 0 && b[0] == '{' && json.Valid(b) {
		return b
	}
	return json.RawMessage("{}")
}

// ChatToMessages translates a non-streamed chat completion reply.
func ChatToMessages(b []byte, id string) ([]byte, Usage, error) {
	var cr apiwire.ChatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return nil, Usage{}, fmt.Errorf("gateway: worker reply: %w", err)
	}
	var u Usage
	usageInto(cr.Usage, &u)
	out := apiwire.MessagesResponse{ID: id, Type: "message", Role: "assistant", Model: cr.Model, Content: []apiwire.ContentBlock{}}
	var stopSeq *string
	if len(cr.Choices) > 0 {
		ch := &cr.Choices[0]
		u.FinishReason = ch.FinishReason
		if t := deref(ch.Message.Content); t != "" {
			out.Content = append(out.Content, apiwire.ContentBlock{Type: "text", Text: t})
		}
		for _, tc := range ch.Message.ToolCalls {
			u.ToolCalls = append(u.ToolCalls, tc.Function.Name)
			out.Content = append(out.Content, apiwire.ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name,
				Input: toolInput(tc.Function.Arguments)})
		}
		if s, ok := ch.StopString(); ok && u.FinishReason == "stop" {
			stopSeq = &s // vLLM names the stop string that ended the text
		}
	}
	sr := stopReason(u.FinishReason, stopSeq != nil)
	out.StopReason, out.StopSequence = &sr, stopSeq
	out.Usage = newAnthUsage(u)
	j, err := json.Marshal(out)
	return j, u, err
}
