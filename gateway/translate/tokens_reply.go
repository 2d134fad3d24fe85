package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentkv/agentkv/internal/tokenapi"
)

// ErrTokenReply is wrapped by every error a TokenDecoder returns.
var ErrTokenReply = errors.New("translate: bad token-API reply")

func replyErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrTokenReply}, a...)...)
}

// TokenDecoder reads a worker's token-API reply, whole or one streamed
// JSON object at a time, into TokenChunks of new tokens. SGLang streams
// what was generated so far in each object; the decoder keeps count so
// each chunk holds only the new tokens.
type TokenDecoder struct {
	API  TokenAPI
	n    int // SGLang: tokens seen so far
	text int // SGLang: text bytes seen so far
}

// Decode reads one JSON object of the reply.
func (d *TokenDecoder) Decode(b []byte) (TokenChunk, error) {
	switch d.API {
	case TokenGenerate:
		return d.sglang(b)
	case TokenInference:
		return decodeInference(b)
	case TokenCompletions:
		return decodeCompletions(b)
	}
	return TokenChunk{}, replyErr("unknown token API %d", d.API)
}

// sglang reads SGLang's {"text", "output_ids", "meta_info"}.
func (d *TokenDecoder) sglang(b []byte) (TokenChunk, error) {
	var v struct {
		Text      string           `json:"text"`
		OutputIDs []uint32         `json:"output_ids"`
		Meta      *sglangMeta      `json:"meta_info"`
		Error     *json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return TokenChunk{}, replyErr("%v", err)
	}
	if v.Error != nil || v.Meta == nil {
		return TokenChunk{}, replyErr("no meta_info: %s", clip(b))
	}
	m := v.Meta
	if len(v.OutputIDs) < d.n {
		return TokenChunk{}, replyErr("output_ids went back from %d to %d", d.n, len(v.OutputIDs))
	}
	var c TokenChunk
	c.IDs = v.OutputIDs[d.n:]
	if m.OutputTokenLogprobs != nil {
		lps, ids, err := triples(m.OutputTokenLogprobs)
		if err != nil {
			return TokenChunk{}, err
		}
		if len(lps) != len(v.OutputIDs) {
			return TokenChunk{}, replyErr("%d output_token_logprobs for %d output_ids", len(lps), len(v.OutputIDs))
		}
		for i := d.n; i < len(ids); i++ {
			if ids[i] != v.OutputIDs[i] {
				return TokenChunk{}, replyErr("output_token_logprobs[%d] is token %d, output_ids has %d", i, ids[i], v.OutputIDs[i])
			}
		}
		c.Logprobs = lps[d.n:]
	}
	if len(m.OutputTopLogprobs) > d.n {
		for _, raw := range m.OutputTopLogprobs[d.n:] {
			lps, ids, err := triples(raw)
			if err != nil {
				return TokenChunk{}, err
			}
			top := make([]TokenLogprob, len(ids))
			for i := range ids {
				top[i] = TokenLogprob{ids[i], lps[i]}
			}
			c.Top = append(c.Top, top)
		}
	}
	if len(v.Text) >= d.text {
		c.Text = v.Text[d.text:]
		d.text = len(v.Text)
	}
	d.n = len(v.OutputIDs)
	if f := m.Finish; f != nil {
		c.Finish, c.Matched = f.Type, f.Matched
		c.Usage = &TokenUsage{Prompt: m.Prompt, Completion: m.Completion, Cached: m.Cached}
	}
	return c, nil
}

type sglangMeta struct {
	Finish *struct {
		Type    string `json:"type"`
		Matched *int64 `json:"matched"`
	} `json:"finish_reason"`
	Prompt              int               `json:"prompt_tokens"`
	Completion          int               `json:"completion_tokens"`
	Cached              int               `json:"cached_tokens"`
	OutputTokenLogprobs json.RawMessage   `json:"output_token_logprobs"`
	OutputTopLogprobs   []json.RawMessage `json:"output_top_logprobs"`
}

// triples reads SGLang's [[logprob, token_id, text-or-null], ...].
func triples(raw json.RawMessage) ([]float64, []uint32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	var ts [][]json.RawMessage
	if err := json.Unmarshal(raw, &ts); err != nil {
		return nil, nil, replyErr("logprobs: %v", err)
	}
	lps, ids := make([]float64, len(ts)), make([]uint32, len(ts))
	for i, t := range ts {
		if len(t) < 2 {
			return nil, nil, replyErr("logprob entry %d has %d fields, want [logprob, token_id, text]", i, len(t))
		}
		if err := json.Unmarshal(t[0], &lps[i]); err != nil {
			return nil, nil, replyErr("logprob entry %d: %v", i, err)
		}
		if err := json.Unmarshal(t[1], &ids[i]); err != nil {
			return nil, nil, replyErr("logprob entry %d token id: %v", i, err)
		}
	}
	return lps, ids, nil
}

type openAIUsage struct {
	Prompt     int `json:"prompt_tokens"`
	Completion int `json:"completion_tokens"`
	Details    *struct {
		Cached int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *openAIUsage) usage() *TokenUsage {
	if u == nil {
		return nil
	}
	t := &TokenUsage{Prompt: u.Prompt, Completion: u.Completion}
	if u.Details != nil {
		t.Cached = u.Details.Cached
	}
	return t
}

// decodeInference reads vLLM's {"choices": [{"token_ids", "logprobs":
// {"content": [{"token", "logprob", "top_logprobs"}]}, "finish_reason"}],
// "usage"}: a stream's objects hold the new tokens only.
func decodeInference(b []byte) (TokenChunk, error) {
	ch, c, ok, err := firstChoice[struct {
		TokenIDs []uint32 `json:"token_ids"`
		Logprobs *struct {
			Content []struct {
				Token   string  `json:"token"`
				Logprob float64 `json:"logprob"`
				Top     []struct {
					Token   string  `json:"token"`
					Logprob float64 `json:"logprob"`
				} `json:"top_logprobs"`
			} `json:"content"`
		} `json:"logprobs"`
		Finish *string `json:"finish_reason"`
	}](b)
	if err != nil || !ok {
		return c, err
	}
	c.IDs = ch.TokenIDs
	if ch.Finish != nil {
		c.Finish = *ch.Finish
	}
	if ch.Logprobs != nil {
		if len(ch.Logprobs.Content) != len(ch.TokenIDs) {
			return TokenChunk{}, replyErr("%d logprobs for %d token_ids", len(ch.Logprobs.Content), len(ch.TokenIDs))
		}
		c.Logprobs = make([]float64, len(ch.TokenIDs))
		c.Top = make([][]TokenLogprob, len(ch.TokenIDs))
		for i, e := range ch.Logprobs.Content {
			c.Logprobs[i] = e.Logprob
			for _, t := range e.Top {
				id, err := tokenIDString(t.Token)
				if err != nil {
					return TokenChunk{}, err
				}
				c.Top[i] = append(c.Top[i], TokenLogprob{id, t.Logprob})
			}
		}
	}
	return c, nil
}

// firstChoice decodes an OpenAI-shaped reply (or stream chunk) whose
// choices are C: its first choice, and a chunk holding its usage. ok is
// false for a usage-only chunk (no choices); no choices and no usage is
// an error.
func firstChoice[C any](b []byte) (C, TokenChunk, bool, error) {
	var v struct {
		Choices []C          `json:"choices"`
		Usage   *openAIUsage `json:"usage"`
	}
	var zero C
	if err := json.Unmarshal(b, &v); err != nil {
		return zero, TokenChunk{}, false, replyErr("%v", err)
	}
	c := TokenChunk{Usage: v.Usage.usage()}
	if len(v.Choices) == 0 {
		if c.Usage == nil {
			return zero, TokenChunk{}, false, replyErr("no choices: %s", clip(b))
		}
		return zero, c, false, nil
	}
	return v.Choices[0], c, true, nil
}

// tokenIDString reads vLLM's "token_id:N" (return_tokens_as_token_ids).
func tokenIDString(s string) (uint32, error) {
	rest, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, replyErr("token %q is not token_id:N (return_tokens_as_token_ids)", s)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, replyErr("token %q: %v", s, err)
	}
	return uint32(n), nil
}

// decodeCompletions reads the completions API's reply to a token-id
// prompt with return_tokens_as_token_ids and logprobs: the ids are those
// of logprobs.tokens ("token_id:N"), their logprobs token_logprobs, the
// alternatives top_logprobs (objects read in order).
func decodeCompletions(b []byte) (TokenChunk, error) {
	ch, c, ok, err := firstChoice[struct {
		Text     string `json:"text"`
		Logprobs *struct {
			Tokens        []string          `json:"tokens"`
			TokenLogprobs []*float64        `json:"token_logprobs"`
			Top           []json.RawMessage `json:"top_logprobs"`
		} `json:"logprobs"`
		Finish *string `json:"finish_reason"`
	}](b)
	if err != nil || !ok {
		return c, err
	}
	c.Text = ch.Text
	if ch.Finish != nil {
		c.Finish = *ch.Finish
	}
	lp := ch.Logprobs
	if lp == nil {
		if ch.Text != "" {
			return TokenChunk{}, replyErr("text without logprobs: the worker ignored logprobs or return_tokens_as_token_ids")
		}
		return c, nil
	}
	if len(lp.TokenLogprobs) != len(lp.Tokens) || (lp.Top != nil && len(lp.Top) != len(lp.Tokens)) {
		return TokenChunk{}, replyErr("%d tokens, %d token_logprobs, %d top_logprobs", len(lp.Tokens), len(lp.TokenLogprobs), len(lp.Top))
	}
	c.IDs, c.Logprobs = make([]uint32, len(lp.Tokens)), make([]float64, len(lp.Tokens))
	for i, s := range lp.Tokens {
		id, err := tokenIDString(s)
		if err != nil {
			return TokenChunk{}, err
		}
		if lp.TokenLogprobs[i] == nil {
			return TokenChunk{}, replyErr("token_logprobs[%d] is null", i)
		}
		c.IDs[i], c.Logprobs[i] = id, *lp.TokenLogprobs[i]
	}
	for _, raw := range lp.Top {
		top, err := orderedTop(raw)
		if err != nil {
			return TokenChunk{}, err
		}
		c.Top = append(c.Top, top)
	}
	return c, nil
}

// orderedTop reads one {"token_id:N": logprob, ...} object in its order.
func orderedTop(raw json.RawMessage) ([]TokenLogprob, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, replyErr("top_logprobs entry is not an object")
	}
	top := []TokenLogprob{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, replyErr("top_logprobs: %v", err)
		}
		id, err := tokenIDString(k.(string))
		if err != nil {
			return nil, err
		}
		var lp float64
		if err := dec.Decode(&lp); err != nil {
			return nil, replyErr("top_logprobs %q: %v", k, err)
		}
		top = append(top, TokenLogprob{id, lp})
	}
	return top, nil
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

// TokenEncoder writes a reply in the client's token API (TokenGenerate or
// TokenInference) from the worker's TokenChunks: SGLang's objects hold
// everything so far (as SGLang streams), vLLM's the new tokens only.
// Token ids and logprobs are carried as the worker gave them.
type TokenEncoder struct {
	API TokenAPI
	Req *TokenRequest

	ids     []uint32
	lps     []float64
	top     [][]TokenLogprob
	text    strings.Builder
	finish  string
	matched *int64
	usage   *TokenUsage
}

// Add folds c into the reply.
func (e *TokenEncoder) Add(c TokenChunk) {
	e.ids = append(e.ids, c.IDs...)
	e.lps = append(e.lps, c.Logprobs...)
	e.top = append(e.top, c.Top...)
	e.text.WriteString(c.Text)
	if c.Finish != "" {
		e.finish, e.matched = c.Finish, c.Matched
	}
	if c.Usage != nil {
		e.usage = c.Usage
	}
}

// Finished reports whether a chunk carried the finish reason.
func (e *TokenEncoder) Finished() bool { return e.finish != "" }

// Usage returns the reply's usage: the worker's, or counted.
func (e *TokenEncoder) Usage() TokenUsage {
	if e.usage != nil {
		return *e.usage
	}
	return TokenUsage{Prompt: len(e.Req.Tokens), Completion: len(e.ids)}
}

// FinishReason returns the finish reason so far ("" before the last).
func (e *TokenEncoder) FinishReason() string { return e.finish }

// Abort ends the reply with finish reason abort (the client aborted it,
// or the worker's stream broke).
func (e *TokenEncoder) Abort() {
	if e.finish == "" {
		e.finish = "abort"
	}
}

// Chunk returns the stream object after c was added: from (the tokens
// before c) on for vLLM, everything for SGLang.
func (e *TokenEncoder) Chunk(from int) []byte {
	if e.API == TokenGenerate {
		return e.sglang()
	}
	return e.inference(from, e.finish != "" && e.Req.IncludeUsage)
}

// Whole returns the whole (non-streamed) reply.
func (e *TokenEncoder) Whole() []byte {
	if e.API == TokenGenerate {
		return e.sglang()
	}
	return e.inference(0, true)
}

// Len returns the tokens so far.
func (e *TokenEncoder) Len() int { return len(e.ids) }

func (e *TokenEncoder) sglang() []byte {
	u := e.Usage()
	m := tokenapi.MetaInfo{ID: e.Req.RID, PromptTokens: len(e.Req.Tokens), CompletionTokens: len(e.ids), CachedTokens: u.Cached}
	if e.finish != "" {
		f := &tokenapi.FinishReason{Type: e.finish, Matched: e.matched}
		switch e.finish {
		case tokenapi.FinishLength:
			f.Length = len(e.ids)
		case tokenapi.FinishAbort:
			f.Message = "Abort by request"
		}
		m.FinishReason = f
	}
	if e.Req.Logprobs && len(e.lps) == len(e.ids) {
		m.OutputTokenLogprobs = appendTriples(nil, e.ids, e.lps)
		if e.Req.TopLogprobs > 0 && len(e.top) == len(e.ids) {
			b := []byte{'['}
			for i, top := range e.top {
				if i > 0 {
					b = append(b, ',')
				}
				ids, lps := make([]uint32, len(top)), make([]float64, len(top))
				for j, t := range top {
					ids[j], lps[j] = t.ID, t.Logprob
				}
				b = appendTriples(b, ids, lps)
			}
			m.OutputTopLogprobs = append(b, ']')
		}
	}
	b, _ := json.Marshal(tokenapi.GenerateResponse{Text: e.text.String(), OutputIDs: tokenapi.AppendIDs(nil, e.ids), MetaInfo: m})
	return b
}

// appendTriples writes SGLang's [[logprob, token_id, null], ...].
func appendTriples(b []byte, ids []uint32, lps []float64) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, lps[i], 'g', -1, 64)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(id), 10)
		b = append(b, ",null]"...)
	}
	return append(b, ']')
}

func (e *TokenEncoder) inference(from int, usage bool) []byte {
	ch := tokenapi.InferenceChoice{TokenIDs: tokenapi.AppendIDs(nil, e.ids[from:])}
	if e.finish != "" {
		f := e.finish
		ch.FinishReason = &f
	}
	if e.Req.Logprobs && len(e.lps) == len(e.ids) {
		lp := &tokenapi.Logprobs{Content: make([]tokenapi.LogprobContent, 0, len(e.ids)-from)}
		for i := from; i < len(e.ids); i++ {
			c := tokenapi.LogprobContent{Token: tokenapi.TokenString(e.ids[i]), Logprob: e.lps[i], TopLogprobs: []tokenapi.TopLogprob{}}
			if i < len(e.top) {
				for _, t := range e.top[i][:min(len(e.top[i]), e.Req.TopLogprobs)] {
					c.TopLogprobs = append(c.TopLogprobs, tokenapi.TopLogprob{Token: tokenapi.TokenString(t.ID), Logprob: t.Logprob})
				}
			}
			lp.Content = append(lp.Content, c)
		}
		ch.Logprobs = lp
	}
	r := tokenapi.InferenceResponse{RequestID: e.Req.RID, Model: e.Req.Model, Choices: []tokenapi.InferenceChoice{ch}, PromptLogprobs: json.RawMessage("null")}
	if usage {
		u := e.Usage()
		r.Usage = tokenapi.NewUsage(u.Prompt, u.Completion, u.Cached)
	}
	b, _ := json.Marshal(r)
	return b
}

// TokenErrorMessage returns the message of a worker's error body in any
// of the shapes the engines answer ({"error": {"message"}}, {"error":
// "..."}, {"message"}, {"detail"}), else the body itself, clipped.
func TokenErrorMessage(b []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  any             `json:"detail"`
	}
	if json.Unmarshal(b, &v) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return inner.Message
		case json.Unmarshal(v.Error, &s) == nil && s != "":
			return s
		case v.Message != "":
			return v.Message
		case v.Detail != nil:
			return fmt.Sprint(v.Detail)
		}
	}
	return string(bytes.TrimSpace(clip(b)))
}
