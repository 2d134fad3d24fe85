package vllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Request paths of the OpenAI-compatible API.
const (
	ChatPath       = "/v1/chat/completions"
	CompletionPath = "/v1/completions"
	TokenizePath   = "/tokenize"
)

// Tokenize returns the prompt token ids the engine itself will see for an
// OpenAI request body bound for path, from vLLM's /tokenize endpoint. For a
// chat request it sends the messages, tools and chat-template options, so
// the engine applies its chat template and the ids (hence the block
// hashes) match the KV events it publishes. A completion whose prompt is
// already token ids needs no request.
func (c *Client) Tokenize(ctx context.Context, path string, body []byte) ([]uint32, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("vllm: request body: %w", err)
	}
	tk := map[string]json.RawMessage{}
	if m, ok := req["model"]; ok {
		tk["model"] = m
	}
	switch path {
	case ChatPath:
		for _, k := range []string{"messages", "tools", "chat_template", "chat_template_kwargs",
			"add_generation_prompt", "continue_final_message", "add_special_tokens", "mm_processor_kwargs"} {
			if v, ok := req[k]; ok {
				tk[k] = v
			}
		}
		if _, ok := tk["messages"]; !ok {
			return nil, fmt.Errorf("%w: no messages", ErrUnsupportedPrompt)
		}
	case CompletionPath:
		raw := req["prompt"]
		var s string
		if json.Unmarshal(raw, &s) == nil {
			tk["prompt"] = raw
			if v, ok := req["add_special_tokens"]; ok {
				tk["add_special_tokens"] = v
			}
			break
		}
		var ids []uint32
		if json.Unmarshal(raw, &ids) == nil {
			return ids, nil
		}
		return nil, ErrUnsupportedPrompt
	default:
		return nil, fmt.Errorf("%w: path %q", ErrUnsupportedPrompt, path)
	}
	b, _ := json.Marshal(tk)
	resp, err := c.do(ctx, http.MethodPost, TokenizePath, nil, b)
	if err != nil {
		return nil, fmt.Errorf("vllm: tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, statusErr(resp)
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	// The engine's reply is untrusted: read at most MaxTokenizeReplyBytes.
	lr := &io.LimitedReader{R: resp.Body, N: MaxTokenizeReplyBytes + 1}
	if err := json.NewDecoder(lr).Decode(&out); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("vllm: tokenize reply: %w (more than %d bytes)", ErrReplyTooLarge, MaxTokenizeReplyBytes)
		}
		return nil, fmt.Errorf("vllm: tokenize reply: %w", err)
	}
	return out.Tokens, nil
}

// MaxTokenizeReplyBytes bounds a /tokenize reply: 64 MiB, several million
// token ids, far beyond any context window.
const MaxTokenizeReplyBytes = 64 << 20

// ErrReplyTooLarge reports an engine reply past its size bound.
var ErrReplyTooLarge = errors.New("vllm: engine reply too large")

// Tokens is Tokenize with a fallback: when /tokenize fails (the engine is
// down, an older server, a prompt shape it does not take) it returns
// ApproxTokens of PromptText and exact=false. err is non-nil only when the
// body is not a JSON object.
func (c *Client) Tokens(ctx context.Context, path string, body []byte) (tokens []uint32, exact bool, err error) {
	if t, err := c.Tokenize(ctx, path, body); err == nil {
		return t, true, nil
	}
	text, err := PromptText(path, body)
	if err != nil {
		return nil, false, err
	}
	return ApproxTokens(nil, text), false, nil
}

// approxMark tags pseudo-token ids: real vocabularies stay far below 2^24,
// so a pseudo-token never equals a real token id.
const approxMark = 0xff000000

// ApproxTokens is the documented fallback when the engine cannot tokenize:
// it appends one pseudo-token per 3 bytes of text (the bytes packed into
// the low 24 bits, tagged with 0xff in the high byte; a short tail is
// zero-padded) and returns the extended slice. It is injective and
// prefix-stable: a prompt that extends another yields pseudo-tokens that
// extend the other's, so prefix reuse between an agent's turns is still
// visible to block hashing. It does not reproduce the engine's token ids,
// so these hashes never match the engine's KV events: with the fallback the
// router keeps session and prefix affinity but loses cache-overlap credit.
// A pseudo-token stands for 3 bytes where a BPE token averages about 4, so
// block counts run about a third high.
func ApproxTokens(dst []uint32, text []byte) []uint32 {
	for i := 0; i < len(text); i += 3 {
		var v uint32
		for j := 0; j < 3; j++ {
			v <<= 8
			if i+j < len(text) {
				v |= uint32(text[i+j])
			}
		}
		dst = append(dst, approxMark|v)
	}
	return dst
}

// PromptText renders the prompt of an OpenAI request body as text for
// ApproxTokens: a completion's prompt string, or for a chat the tools' JSON
// followed by each message as "role\n" + its text content (text parts
// concatenated) + its tool calls' JSON + "\n". Rendering is deterministic,
// and a conversation that appends messages renders to an extension of its
// earlier text.
func PromptText(path string, body []byte) ([]byte, error) {
	var req struct {
		Prompt   json.RawMessage `json:"prompt"`
		Tools    json.RawMessage `json:"tools"`
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("vllm: request body: %w", err)
	}
	var b strings.Builder
	if path == CompletionPath {
		var s string
		if json.Unmarshal(req.Prompt, &s) == nil {
			return []byte(s), nil
		}
		b.Write(req.Prompt) // token ids or a batch: the raw JSON
		return []byte(b.String()), nil
	}
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		b.WriteString("tools\n")
		b.Write(req.Tools)
		b.WriteByte('\n')
	}
	for _, m := range req.Messages {
		b.WriteString(m.Role)
		b.WriteByte('\n')
		var s string
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			b.WriteString(s)
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				b.WriteString(p.Text)
			}
		default:
			b.Write(m.Content)
		}
		if len(m.ToolCalls) > 0 && string(m.ToolCalls) != "null" {
			b.Write(m.ToolCalls)
		}
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}
