package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/internal/tokenapi"
	"github.com/agentkv/agentkv/session"
)

// This file serves the token-in, token-out APIs of RL rollout frameworks:
// SGLang's POST /generate (slime, ROLL, AReaL) and vLLM's POST
// /inference/v1/generate (SkyRL), routed on the token ids the client sent
// (no tokenizer: the block hashes are exact), passed through byte for byte
// to the chosen worker, and POST /abort_request, sent to the worker that
// holds the request. The agent session comes from X-SMG-Routing-Key,
// X-Session-ID or the body (package session).

// Paths of the token APIs.
const (
	GeneratePath          = tokenapi.GeneratePath
	InferenceGeneratePath = tokenapi.InferenceGeneratePath
	AbortPath             = tokenapi.AbortPath
)

// rids maps the rid (or request_id) of each token-API request in flight
// to its entry, from before it is routed (an abort reaches a request
// still waiting for its admission turn) to its end, for /abort_request.
type rids struct {
	mu sync.Mutex // guards m
	m  map[string]*ridEntry
}

// ridEntry is one token-API request in flight.
type ridEntry struct {
	cancel  context.CancelFunc // ends its routing wait or its translated reply
	aborted atomic.Bool
	mu      sync.Mutex // guards wk, native
	wk      *worker    // nil until routed
	native  bool       // passed through: the worker itself takes the abort
}

// routed records where the request went.
func (e *ridEntry) routed(wk *worker, native bool) {
	e.mu.Lock()
	e.wk, e.native = wk, native
	e.mu.Unlock()
}

// target returns the worker to pass an abort to, nil when the gateway
// aborts the request itself (waiting, or translated).
func (e *ridEntry) target() *worker {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.native {
		return e.wk
	}
	return nil
}

// abort ends a request the gateway holds: its wait for a turn, or its
// translated reply (the worker's connection closes: vLLM and SGLang abort
// a request whose client left), which then ends with finish reason abort.
func (e *ridEntry) abort() {
	e.aborted.Store(true)
	e.cancel()
}

func (r *rids) add(rid string, cancel context.CancelFunc) (*ridEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]*ridEntry{}
	}
	if _, ok := r.m[rid]; ok {
		return nil, false
	}
	e := &ridEntry{cancel: cancel}
	r.m[rid] = e
	return e, true
}

func (r *rids) del(rid string) {
	r.mu.Lock()
	delete(r.m, rid)
	r.mu.Unlock()
}

func (r *rids) get(rid string) *ridEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[rid]
}

// abortHeld aborts every request the gateway holds itself (abort_all).
func (r *rids) abortHeld() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.m {
		if e.target() == nil {
			e.abort()
		}
	}
}

// tokenCall is one token-API request as the gateway reads it.
type tokenCall struct {
	sglang bool
	api    TokenAPI
	rid    string
	tokens []uint32
	text   bool // the prompt was text (SGLang's "text"): tokens approximate
	stream bool
	body   []byte
}

// readTokenCall decodes a token-API body: its rid and its token ids, with
// tokenapi.ParseIDs' checks (integers, none negative, within the
// vocabulary, at most tokenapi.MaxIDs). A text prompt (SGLang's "text") is
// routed on approximate tokens.
func readTokenCall(sglang bool, body []byte) (*tokenCall, error) {
	tc := &tokenCall{sglang: sglang, api: TokenInference, body: body}
	if sglang {
		tc.api = TokenGenerate
	}
	var err error
	if sglang {
		var req tokenapi.GenerateRequest
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest("malformed JSON body: %v", err)
		}
		rid, ok := req.RIDString()
		if !ok {
			return nil, badRequest("rid must be one string: send one prompt per request")
		}
		tc.rid, tc.stream = rid, req.Stream
		switch {
		case len(req.InputIDs) > 0 && string(req.InputIDs) != "null":
			if tc.tokens, err = tokenapi.ParseIDs(nil, req.InputIDs, "input_ids", tokenapi.DefaultVocab, tokenapi.MaxIDs); err != nil {
				return nil, badRequest("%v", err)
			}
		case req.Text != nil:
			tc.tokens, tc.text = vllm.ApproxTokens(nil, []byte(*req.Text)), true
		default:
			return nil, badRequest("Either text or input_ids should be provided.")
		}
		return tc, nil
	}
	var req tokenapi.InferenceRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, badRequest("malformed JSON body: %v", err)
	}
	tc.rid, tc.stream = req.RequestID, req.Stream
	if tc.tokens, err = tokenapi.ParseIDs(nil, req.TokenIDs, "token_ids", tokenapi.DefaultVocab, tokenapi.MaxIDs); err != nil {
		return nil, badRequest("%v", err)
	}
	if len(tc.tokens) == 0 {
		return nil, badRequest("token_ids: at least one token id is required")
	}
	return tc, nil
}

// tokenError answers in the API's error shape: SGLang's {"error":
// {"message"}} or OpenAI's (vLLM's).
func tokenError(w http.ResponseWriter, sglang bool, status int, msg string) {
	if sglang {
		tokenapi.WriteSGLangError(w, status, msg)
		return
	}
	writeError(w, false, status, msg)
}

// serveTokens serves /generate (sglang) and /inference/v1/generate:
// passed through to a worker that serves the API, translated to one it
// does serve otherwise (translateTokens).
func (g *Gateway) serveTokens(w http.ResponseWriter, r *http.Request, sglang bool) {
	tc, tn, agent, cacheSalt, release, ok := g.readTokens(w, r, sglang)
	if !ok {
		return
	}
	defer release()
	if len(g.set().order) == 0 {
		tokenError(w, sglang, http.StatusServiceUnavailable, "agentkv gateway: no workers")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ent := &ridEntry{cancel: cancel}
	if tc.rid != "" {
		if ent, ok = g.rids.add(tc.rid, cancel); !ok {
			tokenError(w, sglang, http.StatusBadRequest, "Duplicate request ID: "+strconv.Quote(tc.rid)+" is in flight")
			return
		}
		defer g.rids.del(tc.rid)
	}
	var d *agentkv.Decision
	st := g.standing(tn)
	err := g.pause.wait(ctx)
	if err == nil {
		id := "gw" + strconv.FormatUint(g.reqSeq.Add(1), 10)
		d, err = g.router.Route(ctx, &agentkv.Request{ID: id, Tokens: tc.tokens, Agent: agent, CacheSalt: cacheSalt,
			Override: &agentkv.Override{AllowedWorkers: g.tracker.Allowed(nil, nil), PrefillFirst: st == tenant.Under}})
	}
	switch {
	case err != nil && ent.aborted.Load():
		g.abortedReply(w, tc) // aborted while it waited for its turn
		return
	case err != nil:
		if r.Context().Err() == nil {
			tokenError(w, sglang, http.StatusServiceUnavailable, err.Error())
		}
		return
	}
	wk := g.set().byID[d.Worker.ID]
	if wk == nil {
		d.Done(agentkv.Usage{Failed: true})
		tokenError(w, sglang, http.StatusServiceUnavailable, "agentkv gateway: routed to an unknown worker")
		return
	}
	tk, err := g.enterGate(ctx, st, wk.ID)
	if err != nil { // the client left (or aborted the rid) while it yielded
		d.Done(agentkv.Usage{Failed: true})
		if ent.aborted.Load() {
			g.abortedReply(w, tc)
		}
		return
	}
	defer tk.Done()
	target := tokenTarget(wk, tc.api)
	ent.routed(wk, target == tc.api)
	var u agentkv.Usage
	var ferr error
	if target == tc.api {
		u, ferr = g.passTokens(ctx, w, wk, tc.api.Path(), tc.body, d, sglang, &tk)
	} else {
		u, ferr = g.translateTokens(ctx, w, wk, target, tc, d, ent, &tk)
	}
	u.Failed = ferr != nil
	u.API = tc.api.Path()
	d.Done(u)
}

// tokenTarget is the token API to send a call of api to wk in: api when
// wk serves it, else the other engine's, else the completions API.
func tokenTarget(wk *worker, api TokenAPI) TokenAPI {
	if wk.TokenAPIs.Has(api) {
		return api
	}
	for _, t := range []TokenAPI{TokenGenerate, TokenInference, TokenCompletions} {
		if wk.TokenAPIs.Has(t) {
			return t
		}
	}
	return api
}

// readTokens authenticates and reads a token-API call, scoping its
// session and rid by its tenant and taking the tenant's limits (release
// gives them back); false when it has answered.
func (g *Gateway) readTokens(w http.ResponseWriter, r *http.Request, sglang bool) (tc *tokenCall, tn *tenant.Tenant, agent session.AgentContext, cacheSalt string, release func(), ok bool) {
	release = func() {}
	var err error
	tn, err = g.authenticateKey(r)
	if err != nil {
		tokenError(w, sglang, http.StatusUnauthorized, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes))
	if err != nil {
		tokenError(w, sglang, http.StatusRequestEntityTooLarge, "reading the request body: "+err.Error())
		return
	}
	if tc, err = readTokenCall(sglang, body); err != nil {
		tokenError(w, sglang, http.StatusBadRequest, err.Error())
		return
	}
	if agent, err = g.sess.FromRequest(r, body); err != nil {
		tokenError(w, sglang, http.StatusBadRequest, err.Error())
		return
	}
	if tn == nil {
		return tc, nil, agent, "", release, true
	}
	// A tenant's sessions and rids are its own. The vLLM token API takes
	// the tenant's cache_salt; SGLang's /generate has no cache salt, so
	// tenants' prefixes are not isolated on SGLang engines (README).
	agent.SessionID, agent.ParentSessionID = tenant.Scope(tn, agent.SessionID), tenant.Scope(tn, agent.ParentSessionID)
	if tc.rid != "" {
		tc.rid = tenant.Scope(tn, tc.rid)
	}
	if ref := g.limits.Acquire(tn, agent.SessionID); ref != tenant.OK {
		g.m.tenantRejected.WithLabelValues(ref.String()).Inc()
		w.Header().Set("Retry-After", "1")
		tokenError(w, sglang, http.StatusTooManyRequests, "agentkv gateway: tenant "+tn.Name+" is past its limit ("+ref.String()+"); retry shortly")
		return
	}
	release = func() { g.limits.Release(tn) }
	if !sglang {
		cacheSalt = tn.Salt
		if tc.body, err = setCacheSalt(tc.body, cacheSalt); err != nil {
			release()
			tokenError(w, sglang, http.StatusBadRequest, err.Error())
			return nil, nil, agent, "", func() {}, false
		}
	}
	return tc, tn, agent, cacheSalt, release, true
}

// passTokens forwards body to wk and copies the reply through, reading
// the usage from it (meta_info, or vLLM's usage) for the router.
func (g *Gateway) passTokens(ctx context.Context, w http.ResponseWriter, wk *worker, path string, body []byte, d *agentkv.Decision, sglang bool, tk *tenant.Ticket) (agentkv.Usage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.URL+path, bytes.NewReader(body))
	if err != nil {
		tokenError(w, sglang, http.StatusInternalServerError, err.Error())
		return agentkv.Usage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.doGated(req, tk)
	if err != nil {
		if ctx.Err() == nil {
			tokenError(w, sglang, http.StatusBadGateway, "agentkv gateway: worker "+wk.URL+" failed: "+err.Error())
		}
		return agentkv.Usage{}, err
	}
	defer resp.Body.Close()
	h := w.Header()
	for _, k := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	tokenHeaders(h, wk, d)
	w.WriteHeader(resp.StatusCode)
	var last []byte // the last JSON object of the reply
	rc := http.NewResponseController(w)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if _, werr := w.Write(line); werr != nil {
				return agentkv.Usage{}, werr
			}
			if t := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))); len(t) > 0 && t[0] == '{' {
				last = append(last[:0], t...)
			}
			if bytes.HasPrefix(line, []byte("data:")) {
				rc.Flush()
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return agentkv.Usage{}, err
		}
	}
	if resp.StatusCode != http.StatusOK {
		return agentkv.Usage{}, errStatus(resp.StatusCode)
	}
	return tokenUsage(last), nil
}

// tokenHeaders sets the gateway's headers on a token-API reply.
func tokenHeaders(h http.Header, wk *worker, d *agentkv.Decision) {
	h.Set(HeaderWorker, wk.URL)
	h.Set(HeaderCachedTokens, strconv.Itoa(d.Cached.Device+d.Cached.Host+d.Cached.Disk))
	if d.Waited > 0 {
		h.Set(HeaderWaited, strconv.FormatFloat(float64(d.Waited)/float64(time.Millisecond), 'f', 3, 64))
	}
}

type errStatus int

func (e errStatus) Error() string { return "worker answered " + strconv.Itoa(int(e)) }

// tokenUsage reads the usage from the reply's last JSON object: SGLang's
// meta_info or vLLM's usage (and its finish reason).
func tokenUsage(b []byte) agentkv.Usage {
	var v struct {
		Meta *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Cached     int `json:"cached_tokens"`
			Finish     *struct {
				Type string `json:"type"`
			} `json:"finish_reason"`
		} `json:"meta_info"`
		Usage *struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Details    *struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
		Choices []struct {
			Finish *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &v) != nil {
		return agentkv.Usage{}
	}
	var u agentkv.Usage
	switch {
	case v.Meta != nil:
		u.PromptTokens, u.CompletionTokens, u.CachedTokens = v.Meta.Prompt, v.Meta.Completion, v.Meta.Cached
		if v.Meta.Finish != nil {
			u.FinishReason = v.Meta.Finish.Type
		}
	case v.Usage != nil:
		u.PromptTokens, u.CompletionTokens = v.Usage.Prompt, v.Usage.Completion
		if v.Usage.Details != nil {
			u.CachedTokens = v.Usage.Details.Cached
		}
	}
	if len(v.Choices) > 0 && v.Choices[0].Finish != nil {
		u.FinishReason = *v.Choices[0].Finish
	}
	return u
}

// abortRequest serves POST /abort_request: {"rid"} goes to the worker
// holding that request (its reply ends with finish reason abort, and the
// request's end releases its admission turn); {"abort_all": true} goes to
// every worker. An unknown rid is a 400 in SGLang's shape.
func (g *Gateway) abortRequest(w http.ResponseWriter, r *http.Request) {
	tn, err := g.authenticateKey(r)
	if err != nil {
		tokenapi.WriteSGLangError(w, http.StatusUnauthorized, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	var req tokenapi.AbortRequest
	if err := json.Unmarshal(body, &req); err != nil {
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	var targets []*worker
	switch {
	case req.AbortAll:
		if tn != nil && !tn.Admin {
			tokenapi.WriteSGLangError(w, http.StatusForbidden, "abort_request: abort_all needs an admin key")
			return
		}
		targets = g.set().order
	case req.RID == "":
		tokenapi.WriteSGLangError(w, http.StatusBadRequest, "abort_request: give rid or abort_all")
		return
	default:
		e := g.rids.get(tenant.Scope(tn, req.RID))
		if e == nil {
			tokenapi.WriteSGLangError(w, http.StatusBadRequest, "abort_request: unknown rid "+strconv.Quote(req.RID))
			return
		}
		wk := e.target()
		if wk == nil {
			e.abort() // waiting for its turn, or translated: the gateway ends it
			w.WriteHeader(http.StatusOK)
			return
		}
		targets = []*worker{wk}
	}
	if req.AbortAll {
		g.rids.abortHeld()
	}
	failed := 0
	for _, wk := range targets {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, wk.URL+AbortPath, bytes.NewReader(body))
		if err != nil {
			failed++
			continue
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := g.cfg.HTTPClient.Do(req)
		if err != nil {
			failed++
			continue
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			failed++
		}
	}
	if failed > 0 && !req.AbortAll {
		tokenapi.WriteSGLangError(w, http.StatusBadGateway, "abort_request: the worker did not take the abort")
		return
	}
	w.WriteHeader(http.StatusOK)
}
