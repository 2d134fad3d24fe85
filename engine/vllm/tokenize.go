package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/agentkv/agentkv/internal/jsonscan"
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
	b, ids, err := tokenizeBody(path, body)
	if err != nil || ids != nil {
		return ids, err
	}
	n := 0
	for _, p := range b {
		n += len(p)
	}
	var reply []byte
	if c.kept != nil {
		bp := replyBufs.Get().(*[]byte)
		defer putReplyBuf(bp)
		var status int
		status, *bp, err = c.kept.post(ctx, b, n, (*bp)[:0], MaxTokenizeReplyBytes)
		if err != nil {
			return nil, fmt.Errorf("vllm: tokenize: %w", err)
		}
		if status/100 != 2 {
			return nil, newStatusError(status, *bp)
		}
		reply = *bp
	} else if reply, err = c.tokenizeHTTP(ctx, b, n); err != nil {
		return nil, err
	}
	if ids, err = decodeTokens(reply); err != nil {
		return nil, fmt.Errorf("vllm: tokenize reply: %w", err)
	}
	return ids, nil
}

// replyBufs keeps /tokenize reply buffers between requests.
var replyBufs = sync.Pool{New: func() any { return new([]byte) }}

// putReplyBuf returns bp to replyBufs unless a huge reply grew it (a
// 128 K-token context's reply is about 1 MiB; the bound is 64 MiB).
func putReplyBuf(bp *[]byte) {
	if cap(*bp) <= 4<<20 {
		replyBufs.Put(bp)
	}
}

// tokenizeHTTP is the /tokenize round trip through the http.Client, for
// what the direct path does not do (TLS, a proxy, a custom RoundTripper).
func (c *Client) tokenizeHTTP(ctx context.Context, b net.Buffers, n int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL(TokenizePath), nil)
	if err != nil {
		return nil, fmt.Errorf("vllm: tokenize: %w", err)
	}
	req.ContentLength = int64(n)
	req.GetBody = func() (io.ReadCloser, error) {
		bs := slices.Clone(b) // a reader consumes its net.Buffers
		return io.NopCloser(&bs), nil
	}
	req.Body, _ = req.GetBody()
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vllm: tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, statusErr(resp)
	}
	// The engine's reply is untrusted: read at most MaxTokenizeReplyBytes.
	var buf bytes.Buffer
	if cl := resp.ContentLength; cl > 0 && cl <= MaxTokenizeReplyBytes {
		buf.Grow(int(cl) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(&io.LimitedReader{R: resp.Body, N: MaxTokenizeReplyBytes + 1}); err != nil {
		return nil, fmt.Errorf("vllm: tokenize reply: %w", err)
	}
	if buf.Len() > MaxTokenizeReplyBytes {
		return nil, fmt.Errorf("vllm: tokenize reply: %w (more than %d bytes)", ErrReplyTooLarge, MaxTokenizeReplyBytes)
	}
	return buf.Bytes(), nil
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

// tokenizeBody builds the /tokenize request for body bound for path: the
// fields the engine's tokenizer reads, as pieces of body itself between a
// few bytes of framing, so a 30 MB prompt is sent without a copy (a decode
// into json.RawMessage values and a re-encode made three). ids is set instead
// for a completion whose prompt is token ids. Member names are matched as
// sent (an escaped name is not the field).
func tokenizeBody(path string, body []byte) (out net.Buffers, ids []uint32, err error) {
	if !jsonscan.Valid(body) {
		var v any
		err = json.Unmarshal(body, &v) // the syntax error, located
		return nil, nil, fmt.Errorf("vllm: request body: %w", err)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); t[0] != '{' {
		return nil, nil, fmt.Errorf("vllm: request body: not a JSON object")
	}
	var keep []string
	switch path {
	case ChatPath:
		keep = []string{"model", "messages", "tools", "chat_template", "chat_template_kwargs",
			"add_generation_prompt", "continue_final_message", "add_special_tokens", "mm_processor_kwargs"}
	case CompletionPath:
		keep = []string{"model", "prompt", "add_special_tokens"}
	default:
		return nil, nil, fmt.Errorf("%w: path %q", ErrUnsupportedPrompt, path)
	}
	vals := make([][]byte, len(keep)) // the last of a repeated name wins, as in a decode
	for f := (members{data: body}); ; {
		k, v, ok := f.next()
		if !ok {
			break
		}
		for i, name := range keep {
			if string(k) == name {
				vals[i] = v
			}
		}
	}
	if path == CompletionPath {
		var s string
		if json.Unmarshal(vals[1], &s) != nil {
			if json.Unmarshal(vals[1], &ids) == nil {
				return nil, ids, nil
			}
			return nil, nil, ErrUnsupportedPrompt
		}
	} else if vals[1] == nil {
		return nil, nil, fmt.Errorf("%w: no messages", ErrUnsupportedPrompt)
	}
	for i, v := range vals {
		if v == nil {
			continue
		}
		sep := `,"`
		if len(out) == 0 {
			sep = `{"`
		}
		out = append(out, []byte(sep+keep[i]+`":`), v)
	}
	return append(out, []byte{'}'}), nil, nil
}

// members iterates over the members of a valid top-level JSON object
// without decoding or copying: key is the raw name between its quotes, val
// the raw value (a subslice of data).
type members struct {
	data  []byte
	pos   int
	began bool
}

func (f *members) space() {
	for f.pos < len(f.data) && (f.data[f.pos] == ' ' || f.data[f.pos] == '\t' || f.data[f.pos] == '\n' || f.data[f.pos] == '\r') {
		f.pos++
	}
}

func (f *members) next() (key, val []byte, ok bool) {
	f.space()
	want := byte(',')
	if !f.began {
		f.began, want = true, '{'
	}
	if f.pos >= len(f.data) || f.data[f.pos] != want {
		return nil, nil, false
	}
	f.pos++
	f.space()
	if f.pos >= len(f.data) || f.data[f.pos] != '"' {
		return nil, nil, false
	}
	kend := skipJSONValue(f.data, f.pos)
	if kend < 0 {
		return nil, nil, false
	}
	key = f.data[f.pos+1 : kend-1]
	f.pos = kend
	f.space()
	if f.pos >= len(f.data) || f.data[f.pos] != ':' {
		return nil, nil, false
	}
	f.pos++
	f.space()
	vend := skipJSONValue(f.data, f.pos)
	if vend < 0 {
		return nil, nil, false
	}
	val, f.pos = f.data[f.pos:vend], vend
	return key, val, true
}

// skipJSONValue returns the index just past the valid JSON value starting
// at data[i], or -1.
func skipJSONValue(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	depth := 0
	for j := i; j < len(data); j++ {
		switch data[j] {
		case '"':
			for j++; j < len(data) && data[j] != '"'; j++ {
				if data[j] == '\\' {
					j++
				}
			}
			if j >= len(data) {
				return -1
			}
			if depth == 0 {
				return j + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1
			}
			if depth < 0 {
				return j
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j
			}
		}
	}
	if depth == 0 {
		return len(data)
	}
	return -1
}
