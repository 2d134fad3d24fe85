package mock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/tokenapi"
	"github.com/agentkv/agentkv/internal/wordtok"
)

func readAll(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
}

// tokenTurn is one token-API request: its generation and how it ended.
type tokenTurn struct {
	g       *generation
	prompt  []uint32
	matched *int64 // the stop token id that ended the reply
	start   time.Time
}

// generateTokens plans and submits a token-API reply: maxNew tokens when
// ignoreEOS (a rollout's usual setting), else the mock's drawn length cut
// to maxNew; the reply stops early, its stop token included, at the first
// of stop it generates.
func (s *Server) generateTokens(prompt []uint32, maxNew int, ignoreEOS bool, stop []int64, salt string) (*tokenTurn, error) {
	if len(prompt) == 0 {
		return nil, badRequest("the prompt is empty")
	}
	if len(salt) > MaxCacheSaltLen {
		return nil, badRequest("cache_salt is %d bytes, more than %d", len(salt), MaxCacheSaltLen)
	}
	if maxNew < 0 {
		return nil, badRequest("max new tokens must not be negative, got %d", maxNew)
	}
	room := s.cfg.MaxModelLen - len(prompt)
	if room < 1 {
		return nil, badRequest("The input (%d tokens) is longer than the model's context length (%d tokens).", len(prompt), s.cfg.MaxModelLen)
	}
	g := &generation{s: s, seed: promptSeed(prompt), continuing: true}
	t := &tokenTurn{g: g, prompt: prompt, start: time.Now()}
	if ignoreEOS {
		g.n, g.limited = maxNew, true
	} else {
		span := uint64(s.cfg.MaxOutput - s.cfg.MinOutput + 1)
		g.n = s.cfg.MinOutput + int(g.seed%span)
		if maxNew < g.n {
			g.n, g.limited = maxNew, true
		}
	}
	if g.n > room {
		g.n, g.limited = room, true
	}
	tokens := wordtok.Generate(append(make([]uint32, 0, len(prompt)+g.n), prompt...), g.seed, g.n)
	if len(stop) > 0 {
		for i, id := range tokens[len(prompt):] {
			if slices.Contains(stop, int64(id)) {
				m := int64(id)
				t.matched, g.n, g.limited = &m, i+1, false
				tokens = tokens[:len(prompt)+i+1]
				break
			}
		}
	}
	if g.n == 0 {
		// max_new_tokens 0: the prompt is prefilled, nothing generated.
		tokens = append(tokens, wordtok.Generate(nil, g.seed, 1)...)
	}
	j, err := s.drv.submit(tokens, len(prompt), salt)
	if err != nil {
		return nil, &errStatus{http.StatusBadRequest, err.Error()}
	}
	g.job = j
	return t, nil
}

// output returns generated token i's id.
func (t *tokenTurn) output(n int) []uint32 { return t.g.job.tokens[t.g.job.prompt : t.g.job.prompt+n] }

// tokenLogprob is the (deterministic) log probability of generated token
// i: a multiple of 1/1024 in [-8, 0), exact in JSON.
func tokenLogprob(seed uint64, i int) float64 {
	z := seed ^ 0x6c6f6770726f6273 + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return -float64(z%8192+1) / 1024
}

// follow waits for the reply, calling emit(from, to) as tokens [from, to)
// are generated (and the fault switches after each). It returns the
// tokens generated and the cached prompt tokens; aborted when the request
// was aborted (its tokens so far emitted). A client that goes away aborts
// the request in the engine.
func (t *tokenTurn) follow(ctx context.Context, rf *requestFaults, emit func(from, to int) error) (n, cached int, aborted bool, err error) {
	g := t.g
	sent := 0
	for {
		gen, done, c, jerr := g.s.drv.progress(g.job)
		gen = min(gen, g.n)
		if rf != nil && rf.cutAfter > 0 && gen > rf.cutAfter {
			gen = rf.cutAfter
		}
		if rf != nil && rf.stallMid > 0 && sent < rf.stallAfter && gen > rf.stallAfter {
			gen = rf.stallAfter
		}
		if gen > sent {
			if err := emit(sent, gen); err != nil {
				g.s.drv.abort(g.job)
				return sent, c, false, err
			}
			sent = gen
			if rf != nil && !rf.during(ctx, sent) {
				g.s.drv.abort(g.job)
				return sent, c, false, ctx.Err()
			}
		}
		if jerr != nil {
			if errors.Is(jerr, ErrAborted) {
				return sent, c, true, nil
			}
			return sent, c, false, jerr
		}
		if done && sent >= g.n {
			return sent, c, false, nil
		}
		select {
		case <-g.job.notify:
		case <-ctx.Done():
			g.s.drv.abort(g.job)
			return sent, c, false, ctx.Err()
		}
	}
}

func newRID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ---- SGLang POST /generate ----

// sglGenerate serves SGLang's POST /generate.
func (s *Server) sglGenerate(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readSGLang(w, r)
	if !ok {
		return
	}
	fail := func(status int, msg string) { tokenapi.WriteSGLangError(w, status, msg) }
	var req tokenapi.GenerateRequest
	if err := json.Unmarshal(b, &req); err != nil {
		fail(http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	rid, ok := req.RIDString()
	if !ok {
		fail(http.StatusBadRequest, "rid must be one string: the mock serves one prompt per request")
		return
	}
	var prompt []uint32
	switch hasIDs := len(req.InputIDs) > 0 && string(req.InputIDs) != "null"; {
	case hasIDs && req.Text != nil:
		fail(http.StatusBadRequest, "Either text or input_ids should be provided, not both.")
		return
	case hasIDs:
		ids, err := tokenapi.ParseIDs(nil, req.InputIDs, "input_ids", tokenapi.DefaultVocab, tokenapi.MaxIDs)
		if err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		prompt = ids
	case req.Text != nil:
		prompt = s.tok.Encode(nil, *req.Text)
	default:
		fail(http.StatusBadRequest, "Either text or input_ids should be provided.")
		return
	}
	var sp tokenapi.SGLangSampling
	if len(req.SamplingParams) > 0 && string(req.SamplingParams) != "null" {
		if err := json.Unmarshal(req.SamplingParams, &sp); err != nil {
			fail(http.StatusBadRequest, "sampling_params: "+err.Error())
			return
		}
	}
	maxNew := tokenapi.DefaultMaxNewTokens
	if sp.MaxNewTokens != nil {
		maxNew = *sp.MaxNewTokens
	}
	if req.TopLogprobsNum < 0 {
		fail(http.StatusBadRequest, "top_logprobs_num must not be negative")
		return
	}
	if req.LogprobStartLen != nil && *req.LogprobStartLen >= len(prompt) {
		fail(http.StatusBadRequest, "logprob_start_len ("+strconv.Itoa(*req.LogprobStartLen)+") is not below the input length ("+strconv.Itoa(len(prompt))+")")
		return
	}
	if rid == "" {
		rid = newRID()
	}
	if !s.rl.reserve(rid) {
		fail(http.StatusBadRequest, "Duplicate request ID: "+strconv.Quote(rid)+" is in flight")
		return
	}
	// The rid is free once the generation has ended, before its last
	// reply goes out: a client that read it may reuse or abort the rid.
	release := sync.OnceFunc(func() { s.rl.release(rid) })
	defer release()
	rf, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	t, err := s.generateTokens(prompt, maxNew, sp.IgnoreEOS, sp.StopTokenIDs, "") // SGLang's API has no cache_salt
	if err != nil {
		var es *errStatus
		if errors.As(err, &es) {
			fail(es.status, es.msg)
		} else {
			fail(http.StatusInternalServerError, err.Error())
		}
		return
	}
	if s.rl.attach(rid, t.g.job) {
		s.drv.abort(t.g.job)
	}
	reply := func(n, cached int, fin *tokenapi.FinishReason) tokenapi.GenerateResponse {
		out := t.output(n)
		m := tokenapi.MetaInfo{ID: rid, FinishReason: fin, PromptTokens: len(prompt), CompletionTokens: n, CachedTokens: cached,
			WeightVersion: s.WeightVersion(), E2ELatency: time.Since(t.start).Seconds()}
		if req.ReturnLogprob {
			m.OutputTokenLogprobs = appendTriples(nil, out, func(i int) float64 { return tokenLogprob(t.g.seed, i) })
			if req.LogprobStartLen != nil && *req.LogprobStartLen >= 0 {
				m.InputTokenLogprobs = t.inputLogprobs(*req.LogprobStartLen)
			}
			if req.TopLogprobsNum > 0 {
				m.OutputTopLogprobs = t.topLogprobs(out, req.TopLogprobsNum)
			}
		}
		return tokenapi.GenerateResponse{Text: t.g.text(n), OutputIDs: tokenapi.AppendIDs(nil, out), MetaInfo: m}
	}
	finish := func(n int, aborted bool) *tokenapi.FinishReason {
		switch {
		case aborted:
			return &tokenapi.FinishReason{Type: tokenapi.FinishAbort, Message: "Abort in waiting queue or by request"}
		case t.matched != nil:
			return &tokenapi.FinishReason{Type: tokenapi.FinishStop, Matched: t.matched}
		case t.g.limited:
			return &tokenapi.FinishReason{Type: tokenapi.FinishLength, Length: n}
		}
		return &tokenapi.FinishReason{Type: tokenapi.FinishStop}
	}
	if !req.Stream {
		n, cached, aborted, err := t.follow(r.Context(), nil, func(int, int) error { return nil })
		if err != nil {
			if r.Context().Err() == nil {
				fail(http.StatusInternalServerError, err.Error())
			}
			return
		}
		release()
		if rf.cutAfter > 0 {
			panic(http.ErrAbortHandler)
		}
		apiwire.WriteJSON(w, http.StatusOK, reply(n, cached, finish(n, aborted)))
		return
	}
	sw := apiwire.NewSSEWriter(w)
	n, cached, aborted, err := t.follow(r.Context(), &rf, func(_, to int) error {
		_, c := t.g.s.cachedNow(t.g.job)
		return sw.Data(reply(to, c, nil))
	})
	if err != nil {
		if sw.Err() == nil && r.Context().Err() == nil {
			var e tokenapi.SGLangError
			e.Error.Message = err.Error()
			sw.Data(e)
			sw.Done()
		}
		return
	}
	release()
	sw.Data(reply(n, cached, finish(n, aborted)))
	sw.Done()
}

// cachedNow returns a job's cached prompt tokens as known now.
func (s *Server) cachedNow(j *job) (int, int) {
	gen, _, c, _ := s.drv.progress(j)
	return gen, c
}

// appendTriples writes SGLang's [[logprob, token_id, null], ...].
func appendTriples(b []byte, ids []uint32, lp func(i int) float64) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendFloat(b, lp(i), 'g', -1, 64)
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(id), 10)
		b = append(b, ",null]"...)
	}
	return append(b, ']')
}

// inputLogprobs returns input_token_logprobs from position start: the
// first token of the prompt has none (null), as SGLang reports.
func (t *tokenTurn) inputLogprobs(start int) []byte {
	b := []byte{'['}
	for i := start; i < len(t.prompt); i++ {
		if i > start {
			b = append(b, ',')
		}
		b = append(b, '[')
		if i == 0 {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendFloat(b, tokenLogprob(promptSeed(t.prompt[:i]), 0), 'g', -1, 64)
		}
		b = append(b, ',')
		b = strconv.AppendUint(b, uint64(t.prompt[i]), 10)
		b = append(b, ",null]"...)
	}
	return append(b, ']')
}

// topLogprobs returns output_top_logprobs: per output token, k
// alternatives, the sampled token first.
func (t *tokenTurn) topLogprobs(out []uint32, k int) []byte {
	k = min(k, len(wordtok.Words))
	b := []byte{'['}
	for i, id := range out {
		if i > 0 {
			b = append(b, ',')
		}
		lp := tokenLogprob(t.g.seed, i)
		alts := []uint32{id}
		for w := 0; len(alts) < k; w++ {
			if a := wordtok.WordID(wordtok.Words[w]); a != id {
				alts = append(alts, a)
			}
		}
		b = appendTriples(b, alts, func(j int) float64 { return lp - float64(j) })
	}
	return append(b, ']')
}

// ---- vLLM POST /inference/v1/generate ----

// vllmGenerate serves vLLM's POST /inference/v1/generate.
func (s *Server) vllmGenerate(w http.ResponseWriter, r *http.Request) {
	b, ok := s.readBody(w, r, false)
	if !ok {
		return
	}
	fail := func(status int, msg string) { apiwire.WriteOpenAIError(w, status, msg) }
	var req tokenapi.InferenceRequest
	if err := json.Unmarshal(b, &req); err != nil {
		fail(http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	if !s.checkModel(req.Model) {
		s.unknownModel(w, false, req.Model)
		return
	}
	prompt, err := tokenapi.ParseIDs(nil, req.TokenIDs, "token_ids", tokenapi.DefaultVocab, tokenapi.MaxIDs)
	if err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if len(prompt) == 0 {
		fail(http.StatusBadRequest, "token_ids: at least one token id is required")
		return
	}
	var sp tokenapi.VLLMSampling
	if len(req.SamplingParams) == 0 || string(req.SamplingParams) == "null" {
		fail(http.StatusBadRequest, "sampling_params: field required")
		return
	}
	if err := json.Unmarshal(req.SamplingParams, &sp); err != nil {
		fail(http.StatusBadRequest, "sampling_params: "+err.Error())
		return
	}
	maxTokens := tokenapi.DefaultMaxTokens
	if sp.MaxTokens != nil {
		maxTokens = *sp.MaxTokens
	}
	if sp.Logprobs != nil && *sp.Logprobs < 0 {
		fail(http.StatusBadRequest, "sampling_params.logprobs must not be negative")
		return
	}
	rid := req.RequestID
	if rid == "" {
		rid = newRID()
	}
	if !s.rl.reserve(rid) {
		fail(http.StatusBadRequest, "request_id "+strconv.Quote(rid)+" is already in flight")
		return
	}
	// The rid is free once the generation has ended, before its last
	// reply goes out: a client that read it may reuse or abort the rid.
	release := sync.OnceFunc(func() { s.rl.release(rid) })
	defer release()
	rf, ok := s.begin(w, r, false)
	if !ok {
		return
	}
	var salt string
	if req.CacheSalt != nil {
		salt = *req.CacheSalt
	}
	t, err := s.generateTokens(prompt, maxTokens, sp.IgnoreEOS, sp.StopTokenIDs, salt)
	if err != nil {
		s.replyError(w, r, false, err)
		return
	}
	if s.rl.attach(rid, t.g.job) {
		s.drv.abort(t.g.job)
	}
	logprobs := func(from, to int) *tokenapi.Logprobs {
		if sp.Logprobs == nil {
			return nil
		}
		lp := &tokenapi.Logprobs{Content: make([]tokenapi.LogprobContent, 0, to-from)}
		for i, id := range t.output(to)[from:] {
			v := tokenLogprob(t.g.seed, from+i)
			c := tokenapi.LogprobContent{Token: tokenapi.TokenString(id), Logprob: v, TopLogprobs: []tokenapi.TopLogprob{}}
			for k := 0; k < *sp.Logprobs && k < len(wordtok.Words); k++ {
				alt := id
				if k > 0 {
					alt = wordtok.WordID(wordtok.Words[k-1])
				}
				c.TopLogprobs = append(c.TopLogprobs, tokenapi.TopLogprob{Token: tokenapi.TokenString(alt), Logprob: v - float64(k)})
			}
			lp.Content = append(lp.Content, c)
		}
		return lp
	}
	finish := func(aborted bool) *string {
		f := "stop"
		if aborted {
			f = "abort"
		} else if t.g.limited {
			f = "length"
		}
		return &f
	}
	model := s.replyModel(req.Model)
	if !req.Stream {
		n, cached, aborted, err := t.follow(r.Context(), nil, func(int, int) error { return nil })
		if err != nil {
			if r.Context().Err() == nil {
				fail(http.StatusInternalServerError, err.Error())
			}
			return
		}
		release()
		if rf.cutAfter > 0 {
			panic(http.ErrAbortHandler)
		}
		apiwire.WriteJSON(w, http.StatusOK, tokenapi.InferenceResponse{RequestID: rid, Model: model, Created: time.Now().Unix(),
			Choices: []tokenapi.InferenceChoice{{Logprobs: logprobs(0, n), FinishReason: finish(aborted), TokenIDs: tokenapi.AppendIDs(nil, t.output(n))}},
			Usage:   tokenapi.NewUsage(len(prompt), n, cached), PromptLogprobs: jsonNull})
		return
	}
	sw := apiwire.NewSSEWriter(w)
	chunk := func(from, to int, fin *string) tokenapi.InferenceResponse {
		return tokenapi.InferenceResponse{RequestID: rid, PromptLogprobs: jsonNull,
			Choices: []tokenapi.InferenceChoice{{Logprobs: logprobs(from, to), FinishReason: fin, TokenIDs: tokenapi.AppendIDs(nil, t.output(to)[from:])}}}
	}
	n, cached, aborted, err := t.follow(r.Context(), &rf, func(from, to int) error { return sw.Data(chunk(from, to, nil)) })
	if err != nil {
		s.streamError(sw, err)
		return
	}
	release()
	last := chunk(n, n, finish(aborted))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		last.Usage = tokenapi.NewUsage(len(prompt), n, cached)
	}
	sw.Data(last)
	sw.Done()
}
