package mock

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/tokenapi"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// tokenCompletionRequest is a /v1/completions body with vLLM's extra
// fields for token-in, token-out use (AReaL's path to vLLM).
type tokenCompletionRequest struct {
	apiwire.CompletionRequest
	ReturnTokensAsTokenIDs bool    `json:"return_tokens_as_token_ids,omitempty"`
	StopTokenIDs           []int64 `json:"stop_token_ids,omitempty"`
	RequestID              string  `json:"request_id,omitempty"`
}

// completionsAPI serves /v1/completions: with return_tokens_as_token_ids
// by tokenCompletions, else by text (the generation handlers' prologue,
// which reads the body again from the bytes read here).
func (s *Server) completionsAPI(text http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, ok := s.readBody(w, r, false)
		if !ok {
			return
		}
		var tr tokenCompletionRequest
		if json.Unmarshal(b, &tr) != nil || !tr.ReturnTokensAsTokenIDs {
			r.Body = io.NopCloser(bytes.NewReader(b))
			text(w, r)
			return
		}
		s.inlineHints(w, r, b)
		s.tokenCompletions(w, r, &tr)
	}
}

// tokenCompletions serves /v1/completions with return_tokens_as_token_ids
// as vLLM does: choices[0].logprobs holds tokens ("token_id:N"),
// token_logprobs, top_logprobs (logprobs alternatives, the sampled token
// first) and text_offset; an aborted request ends with finish_reason
// "abort". The ids and logprobs are those /generate gives for the same
// prompt.
func (s *Server) tokenCompletions(w http.ResponseWriter, r *http.Request, tr *tokenCompletionRequest) {
	req := &tr.CompletionRequest
	if !s.checkModel(req.Model) {
		s.unknownModel(w, false, req.Model)
		return
	}
	prompt, err := s.promptTokens(req.Prompt)
	if err != nil {
		s.replyError(w, r, false, err)
		return
	}
	if req.Logprobs != nil && *req.Logprobs < 0 {
		s.replyError(w, r, false, badRequest("logprobs must not be negative"))
		return
	}
	maxTokens := 16
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	rid := tr.RequestID
	if rid == "" {
		rid = newRID()
	}
	if !s.rl.reserve(rid) {
		s.replyError(w, r, false, badRequest("request_id %s is already in flight", strconv.Quote(rid)))
		return
	}
	defer s.rl.release(rid)
	rf, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	t, err := s.generateTokens(prompt, maxTokens, req.IgnoreEOS, tr.StopTokenIDs, req.CacheSalt)
	if err != nil {
		s.replyError(w, r, false, err)
		return
	}
	if s.rl.attach(rid, t.g.job) {
		s.drv.abort(t.g.job)
	}
	resp := apiwire.CompletionResponse{ID: "cmpl-" + rid, Object: apiwire.ObjectTextCompletion, Created: time.Now().Unix(), Model: s.replyModel(req.Model)}
	finish := func(aborted bool) *string {
		f := apiwire.FinishStop
		switch {
		case aborted:
			f = "abort"
		case t.g.limited:
			f = apiwire.FinishLength
		}
		return &f
	}
	if !req.Stream {
		n, cached, aborted, err := t.follow(r.Context(), nil, func(int, int) error { return nil })
		if err != nil {
			if r.Context().Err() == nil {
				s.replyError(w, r, false, err)
			}
			return
		}
		if rf.cutAfter > 0 {
			panic(http.ErrAbortHandler)
		}
		resp.Choices = []apiwire.CompletionChoice{{Text: t.g.text(n), Logprobs: t.completionLogprobs(req.Logprobs, 0, n), FinishReason: finish(aborted), StopReason: jsonNull}}
		resp.Usage = completionUsage(len(prompt), n, cached)
		apiwire.WriteJSON(w, http.StatusOK, resp)
		return
	}
	sw := apiwire.NewSSEWriter(w)
	n, cached, aborted, err := t.follow(r.Context(), &rf, func(from, to int) error {
		text := ""
		for i := from; i < to; i++ {
			text += t.g.piece(i)
		}
		resp.Choices = []apiwire.CompletionChoice{{Text: text, Logprobs: t.completionLogprobs(req.Logprobs, from, to)}}
		return sw.Data(resp)
	})
	if err != nil {
		s.streamError(sw, err)
		return
	}
	resp.Choices = []apiwire.CompletionChoice{{Text: "", Logprobs: jsonNull, FinishReason: finish(aborted), StopReason: jsonNull}}
	sw.Data(resp)
	if req.IncludeUsage() {
		resp.Choices, resp.Usage = []apiwire.CompletionChoice{}, completionUsage(len(prompt), n, cached)
		sw.Data(resp)
	}
	sw.Done()
}

func completionUsage(prompt, n, cached int) *apiwire.Usage {
	return &apiwire.Usage{PromptTokens: prompt, CompletionTokens: n, TotalTokens: prompt + n,
		PromptTokensDetails: &apiwire.PromptTokensDetails{CachedTokens: cached}}
}

// completionLogprobs writes the completions API's logprobs of generated
// tokens [from, to) (null when k is nil): the same values /generate
// reports, top alternatives as vllmGenerate draws them.
func (t *tokenTurn) completionLogprobs(k *int, from, to int) []byte {
	if k == nil {
		return jsonNull
	}
	out := t.output(to)[from:]
	b := []byte(`{"text_offset":[`)
	off := 0
	for i := 0; i < from; i++ {
		off += len(t.g.piece(i))
	}
	for i := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(off), 10)
		off += len(t.g.piece(from + i))
	}
	b = append(b, `],"token_logprobs":[`...)
	for i := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, tokenLogprob(t.g.seed, from+i), 'g', -1, 64)
	}
	b = append(b, `],"tokens":[`...)
	for i, id := range out {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, tokenapi.TokenString(id))
	}
	b = append(b, `],"top_logprobs":[`...)
	for i, id := range out {
		if i > 0 {
			b = append(b, ',')
		}
		v := tokenLogprob(t.g.seed, from+i)
		b = append(b, '{')
		alts := []uint32{id} // the sampled token first, no id twice
		for w := 0; len(alts) < *k && w < len(wordtok.Words); w++ {
			if a := wordtok.WordID(wordtok.Words[w]); a != id {
				alts = append(alts, a)
			}
		}
		for j, alt := range alts[:min(*k, len(alts))] {
			if j > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, tokenapi.TokenString(alt))
			b = append(b, ':')
			b = strconv.AppendFloat(b, v-float64(j), 'g', -1, 64)
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
