package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// messagesRequest is the part of an Anthropic Messages (or count_tokens)
// request the translation to chat completions reads.
type messagesRequest struct {
	Model         string          `json:"model"`
	System        json.RawMessage `json:"system"`
	Messages      []anthMessage   `json:"messages"`
	Tools         []anthTool      `json:"tools"`
	ToolChoice    *anthToolChoice `json:"tool_choice"`
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	StopSequences []string        `json:"stop_sequences"`
	Stream        bool            `json:"stream"`
}

type anthMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type anthTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// anthBlock is one content block of a message.
type anthBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// systemText joins the system prompt's text: a string or text blocks,
// joined with "\n".
func systemText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []anthBlock
	if json.Unmarshal(raw, &blocks) != nil {
		return ""
	}
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		if b.Type == "text" || b.Type == "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// messagesToChat translates an Anthropic Messages request to chat
// completions: the system prompt, and system-role messages among the
// messages (Claude Code 2.1 sends them mid-conversation), become system
// messages; text and image
// blocks become content parts; tool_use blocks become the assistant's
// tool_calls (input as JSON arguments); tool_result blocks become tool
// messages, ahead of the rest of their user turn; thinking blocks are
// dropped; client tools (with an input_schema) become functions, server
// tools are dropped; tool_choice any → "required", tool → the named
// function, none → "none"; stop_sequences → stop.
func messagesToChat(body []byte) (*chatRequest, error) {
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, badRequest("messages request: %v", err)
	}
	cr := &chatRequest{Model: in.Model, MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP,
		TopK: in.TopK, Stop: in.StopSequences, Stream: in.Stream}
	if in.Stream {
		cr.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if s := systemText(in.System); s != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: s})
	}
	for _, t := range in.Tools {
		if len(t.InputSchema) == 0 {
			continue // a server tool (web search, ...): the engine cannot run it
		}
		cr.Tools = append(cr.Tools, chatTool{Type: "function", Function: chatToolDef{Name: t.Name,
			Description: t.Description, Parameters: t.InputSchema}})
	}
	if tc := in.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto":
			cr.ToolChoice = "auto"
		case "any":
			cr.ToolChoice = "required"
		case "none":
			cr.ToolChoice = "none"
		case "tool":
			cr.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		}
		if tc.DisableParallelToolUse {
			f := false
			cr.ParallelToolCalls = &f
		}
	}
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" && m.Role != "system" {
			return nil, badRequest("messages.%d.role: want user, assistant or system, got %q", i, m.Role)
		}
		if m.Role == "system" {
			// Claude Code 2.1 sends mid-conversation system messages
			// (anthropic-beta mid-conversation-tool-changes): text only.
			cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: systemText(m.Content)})
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			cr.Messages = append(cr.Messages, chatMessage{Role: m.Role, Content: s})
			continue
		}
		var blocks []anthBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, badRequest("messages.%d.content: want a string or a list of blocks", i)
		}
		var parts []chatPart
		var calls []chatToolCall
		for _, b := range blocks {
			switch b.Type {
			case "text":
				parts = append(parts, chatPart{Type: "text", Text: b.Text})
			case "image":
				if b.Source == nil {
					continue
				}
				u := b.Source.URL
				if b.Source.Type == "base64" {
					u = "data:" + b.Source.MediaType + ";base64," + b.Source.Data
				}
				parts = append(parts, chatPart{Type: "image_url", ImageURL: &imageURL{URL: u}})
			case "tool_use":
				args := "{}"
				if in := bytes.TrimSpace(b.Input); len(in) > 0 {
					args = string(in)
				}
				calls = append(calls, chatToolCall{ID: b.ID, Type: "function", Function: chatFunction{Name: b.Name, Arguments: args}})
			case "tool_result":
				txt := textContent(b.Content)
				if b.IsError && !strings.HasPrefix(txt, "Error") {
					txt = "Error: " + txt
				}
				cr.Messages = append(cr.Messages, chatMessage{Role: "tool", ToolCallID: b.ToolUseID, Content: txt})
			}
		}
		if len(parts) == 0 && len(calls) == 0 {
			continue // a user turn of tool results only
		}
		msg := chatMessage{Role: m.Role, ToolCalls: calls}
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

// The Messages reply shapes.

type anthResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []anthOutBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthUsage      `json:"usage"`
}

type anthOutBlock struct {
	Type  string          `json:"type"`
	Text  *string         `json:"text,omitempty"`
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
}

// anthUsage is Anthropic's usage: input_tokens excludes the cached part.
type anthUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func newAnthUsage(u Usage) anthUsage {
	return anthUsage{InputTokens: max(u.PromptTokens-u.CachedTokens, 0), CacheReadInputTokens: u.CachedTokens,
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

// chatToMessages translates a non-streamed chat completion reply.
func chatToMessages(b []byte, id string) ([]byte, Usage, error) {
	var cr chatResponse
	if err := json.Unmarshal(b, &cr); err != nil {
		return nil, Usage{}, fmt.Errorf("gateway: worker reply: %w", err)
	}
	var u Usage
	cr.Usage.into(&u)
	out := anthResponse{ID: id, Type: "message", Role: "assistant", Model: cr.Model, Content: []anthOutBlock{}}
	var stopSeq *string
	if len(cr.Choices) > 0 {
		ch := cr.Choices[0]
		u.FinishReason = deref(ch.FinishReason)
		if t := deref(ch.Message.Content); t != "" {
			out.Content = append(out.Content, anthOutBlock{Type: "text", Text: &t})
		}
		for _, tc := range ch.Message.ToolCalls {
			u.ToolCalls = append(u.ToolCalls, tc.Function.Name)
			out.Content = append(out.Content, anthOutBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name,
				Input: toolInput(tc.Function.Arguments)})
		}
		if s, ok := ch.StopReason.(string); ok && u.FinishReason == "stop" {
			stopSeq = &s // vLLM names the stop string that ended the text
		}
	}
	sr := stopReason(u.FinishReason, stopSeq != nil)
	out.StopReason, out.StopSequence = &sr, stopSeq
	out.Usage = newAnthUsage(u)
	j, err := json.Marshal(out)
	return j, u, err
}
