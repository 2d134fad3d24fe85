package wordtok

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// Message is one chat message in the template's neutral form: Role is
// "system", "user", "assistant" or "tool"; an assistant message may carry
// ToolCalls; a tool message answers ToolCallID.
type Message struct {
	Role       string
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is a call in an assistant message; Arguments is JSON text.
type ToolCall struct {
	ID, Name, Arguments string
}

// Tool is a declared tool; Parameters is its JSON schema.
type Tool struct {
	Name, Description string
	Parameters        json.RawMessage
}

// ChatOptions are the template's switches, named as vLLM names them.
type ChatOptions struct {
	// AddGenerationPrompt ends the prompt with <|assistant|>, the start of
	// the reply.
	AddGenerationPrompt bool
	// ContinueFinalMessage leaves the last message open (no <|end|>), so
	// generation continues it; vLLM requires AddGenerationPrompt false
	// with it.
	ContinueFinalMessage bool
}

// RenderChat renders a chat as the template's text:
//
//	[<|tools|> NAME DESCRIPTION PARAMETERS ... <|end|>]    when tools are given, one NAME DESCRIPTION PARAMETERS group per tool
//	<|ROLE|> CONTENT [<|tool_call|> NAME ARGUMENTS]... <|end|>    per message
//	[<|assistant|>]                                         with AddGenerationPrompt
//
// ROLE is system (also for "developer"), user, assistant or tool (also for
// "function"; any other role renders as user). PARAMETERS and ARGUMENTS
// are compacted JSON. With ContinueFinalMessage the last message has no
// <|end|> and no generation prompt follows. Encoding the text gives
// ApplyChat's tokens: each special marker is one token, each word of the
// content one token.
func RenderChat(msgs []Message, tools []Tool, opt ChatOptions) string {
	var b strings.Builder
	if len(tools) > 0 {
		b.WriteString("<|tools|>")
		for _, t := range tools {
			b.WriteByte(' ')
			b.WriteString(t.Name)
			if t.Description != "" {
				b.WriteByte(' ')
				b.WriteString(t.Description)
			}
			if p := compact(t.Parameters); p != "" {
				b.WriteByte(' ')
				b.WriteString(p)
			}
		}
		b.WriteString(" <|end|>\n")
	}
	for i, m := range msgs {
		b.WriteString(roleToken(m.Role))
		if m.Content != "" {
			b.WriteByte(' ')
			b.WriteString(m.Content)
		}
		for _, c := range m.ToolCalls {
			b.WriteString(" <|tool_call|> ")
			b.WriteString(c.Name)
			if a := compact(json.RawMessage(c.Arguments)); a != "" {
				b.WriteByte(' ')
				b.WriteString(a)
			}
		}
		if opt.ContinueFinalMessage && i == len(msgs)-1 {
			return b.String()
		}
		b.WriteString(" <|end|>\n")
	}
	if opt.AddGenerationPrompt {
		b.WriteString("<|assistant|>")
	}
	return b.String()
}

// ApplyChat appends the chat's prompt tokens to dst: the tokens of
// RenderChat's text. It is what the mock worker's /tokenize returns for a
// chat request.
func (t *Tokenizer) ApplyChat(dst []uint32, msgs []Message, tools []Tool, opt ChatOptions) []uint32 {
	return t.Encode(dst, RenderChat(msgs, tools, opt))
}

func roleToken(role string) string {
	switch role {
	case "system", "developer":
		return "<|system|>"
	case "assistant":
		return "<|assistant|>"
	case "tool", "function":
		return "<|tool|>"
	}
	return "<|user|>"
}

// compact returns JSON text without insignificant white space (the text as
// is when it is not valid JSON).
func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return string(raw)
	}
	return buf.String()
}

// FromChat returns the messages and tools of a chat completions request.
func FromChat(req *apiwire.ChatRequest) ([]Message, []Tool) {
	msgs := make([]Message, 0, len(req.Messages))
	for i := range req.Messages {
		m := &req.Messages[i]
		out := Message{Role: m.Role, Content: m.Text(), ToolCallID: m.ToolCallID}
		for _, c := range m.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: c.Function.Arguments})
		}
		msgs = append(msgs, out)
	}
	var tools []Tool
	for _, t := range req.Tools {
		tools = append(tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return msgs, tools
}

// ChatOptionsOf returns the template switches of a chat request
// (add_generation_prompt defaults to true).
func ChatOptionsOf(req *apiwire.ChatRequest) ChatOptions {
	return ChatOptions{AddGenerationPrompt: req.GenerationPrompt(), ContinueFinalMessage: req.ContinueFinalMessage}
}

// FromResponses returns the messages and tools of a Responses request:
// instructions become a system message, a string input one user message;
// message items keep their role, function_call items become assistant
// tool calls (consecutive calls share one assistant message),
// function_call_output items tool messages; other items are skipped.
func FromResponses(req *apiwire.ResponsesRequest) ([]Message, []Tool) {
	var msgs []Message
	if s := req.InstructionsText(); s != "" {
		msgs = append(msgs, Message{Role: "system", Content: s})
	}
	if !req.Input.IsArray() {
		if req.Input.Text != "" {
			msgs = append(msgs, Message{Role: "user", Content: req.Input.Text})
		}
	}
	for i := range req.Input.Parts {
		it := &req.Input.Parts[i]
		switch it.ItemType() {
		case apiwire.ItemMessage:
			msgs = append(msgs, Message{Role: it.Role, Content: it.Text()})
		case apiwire.ItemFunctionCall:
			c := ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
			if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, c)
			} else {
				msgs = append(msgs, Message{Role: "assistant", ToolCalls: []ToolCall{c}})
			}
		case apiwire.ItemFunctionCallOutput:
			msgs = append(msgs, Message{Role: "tool", Content: it.Text(), ToolCallID: it.CallID})
		}
	}
	var tools []Tool
	for _, t := range req.Tools {
		if t.Type == "function" {
			tools = append(tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return msgs, tools
}

// FromMessages returns the messages and tools of an Anthropic Messages
// request: the system prompt becomes a system message; in a user message,
// each tool_result block becomes a tool message (in order, before the
// message's text, as a chat translation orders them); in an assistant
// message, text blocks are the content and tool_use blocks its tool
// calls (arguments: the input as compact JSON).
func FromMessages(req *apiwire.MessagesRequest) ([]Message, []Tool) {
	var msgs []Message
	if s := req.SystemText(); s != "" {
		msgs = append(msgs, Message{Role: "system", Content: s})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		if !m.Content.IsArray() {
			msgs = append(msgs, Message{Role: m.Role, Content: m.Content.Text})
			continue
		}
		out := Message{Role: m.Role}
		var texts []string
		for j := range m.Content.Parts {
			b := &m.Content.Parts[j]
			switch b.Type {
			case apiwire.BlockText:
				texts = append(texts, b.Text)
			case apiwire.BlockToolUse:
				out.ToolCalls = append(out.ToolCalls, ToolCall{ID: b.ID, Name: b.Name, Arguments: compact(b.Input)})
			case apiwire.BlockToolResult:
				msgs = append(msgs, Message{Role: "tool", Content: b.ResultText(), ToolCallID: b.ToolUseID})
			}
		}
		out.Content = strings.Join(texts, "\n")
		if out.Content != "" || len(out.ToolCalls) > 0 || m.Role == "assistant" {
			msgs = append(msgs, out)
		}
	}
	var tools []Tool
	for _, t := range req.Tools {
		tools = append(tools, Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return msgs, tools
}
