package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/jsonscan"
	"github.com/agentkv/agentkv/session"
)

// This file is the request path, as route.go is the router's: one API
// request passes the stages below top to bottom: read the body, translate
// it (the chat completions form every worker and tokenizer reads),
// identify the agent session, tokenize, then the forward loop (route,
// attempt on a worker in relay.go, retry or migrate in retry.go), and
// finish (report to the router, count, answer a failure).

// call is one request on its way through the gateway, its fields grouped
// by the stage that fills them.
type call struct {
	// serve and read
	api   API
	hdr   http.Header // the client's request headers (only `forwarded` ones are sent on)
	start time.Time

	// translate
	body   []byte               // as forwarded to a worker serving the API natively
	chat   *apiwire.ChatRequest // the chat translation (nil for Chat and Completions)
	chatB  []byte               // chat (or completions) body for translating workers and /tokenize
	stream bool
	model  string
	custom map[string]bool // Responses custom tools

	// identify
	tenant *tenant.Tenant // nil without Config.Keys
	salted bool           // body (and chatB) carry the tenant's cache_salt
	agent  session.AgentContext

	// tokenize
	tokens []uint32
	// waitedReady: the request has waited for a routable worker
	// (awaitRoutable waits once per request).
	waitedReady bool

	// forward
	id     string        // request id, also the translated reply's id
	ticket tenant.Ticket // the attempt's place in the yield gate (yield.go)
}

// serve handles one API request: read, translate, identify, tokenize,
// then forward (route, attempt, retry or migrate, finish).
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, a API) {
	start := time.Now()
	t, ok := g.authenticate(w, r, a)
	if !ok {
		return
	}
	body, ok := g.readBody(w, r, a)
	if !ok {
		return
	}
	c, err := g.parse(a, body, t)
	if err != nil {
		g.reject(w, a, http.StatusBadRequest, err.Error())
		return
	}
	c.hdr, c.start = r.Header, start
	if err := g.identify(c, r, body); err != nil {
		g.reject(w, a, http.StatusBadRequest, err.Error())
		return
	}
	if !g.admitTenant(w, c) {
		return
	}
	defer g.limits.Release(c.tenant)
	if len(g.set().order) == 0 {
		g.reject(w, a, http.StatusServiceUnavailable, "agentkv gateway: no workers")
		return
	}
	ctx := r.Context()
	if c.tokens, err = g.tokens(ctx, c); err != nil {
		g.reject(w, a, http.StatusBadRequest, err.Error())
		return
	}
	if a == CountTokens {
		g.countTokens(w, c)
		return
	}
	if err := salt(c); err != nil {
		g.reject(w, a, http.StatusBadRequest, err.Error())
		return
	}
	c.id = "gw" + strconv.FormatUint(g.reqSeq.Add(1), 10)
	g.forward(ctx, w, c)
}

// --- read ---

func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && jsonscan.Valid(b)
}

// readAll is io.ReadAll into a buffer of the body's declared length n
// (when it is known and at most max), so a known body is read without the
// copies of a growing buffer.
func readAll(r io.Reader, n, max int64) ([]byte, error) {
	if n <= 0 || n > max {
		return io.ReadAll(r)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	var one [1]byte // a body longer than declared (net/http's never is)
	if k, err := r.Read(one[:]); k > 0 {
		rest, err := io.ReadAll(r)
		return append(append(b, one[0]), rest...), err
	} else if err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}

// readBody reads the request body within MaxBodyBytes and checks it is a
// JSON object; on failure it has answered the client.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, a API) ([]byte, bool) {
	body, ok := BufferedBody(r) // read ahead, within its limits, by a Limiter
	var err error
	if !ok || int64(len(body)) > g.cfg.MaxBodyBytes {
		body, err = readAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBodyBytes), r.ContentLength, g.cfg.MaxBodyBytes)
		if err == nil { // a Limiter decodes a compressed body itself
			body, err = decodeBody(r.Header.Get("Content-Encoding"), body, g.cfg.MaxBodyBytes)
		}
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			g.reject(w, a, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", g.cfg.MaxBodyBytes))
		case errors.Is(err, errEncoding):
			g.reject(w, a, http.StatusUnsupportedMediaType, err.Error())
		default:
			g.reject(w, a, http.StatusBadRequest, "reading request body: "+err.Error())
		}
		return nil, false
	}
	if !isJSONObject(body) {
		g.reject(w, a, http.StatusBadRequest, "request body is not a JSON object")
		return nil, false
	}
	return body, true
}

// --- translate ---

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// parse builds the call from the body: the body as forwarded natively,
// its chat translation, the stream flag. Errors match ErrBadRequest. The
// tenant t (nil: none) is the caller's: a streamed chat body gets its
// stream_options and t's cache_salt in one splice, so that the body is
// copied at most once (salt does the rest).
func (g *Gateway) parse(a API, body []byte, t *tenant.Tenant) (*call, error) {
	c := &call{api: a, body: body, tenant: t}
	var head requestHead
	if err := readHead(body, &head); err != nil {
		return nil, badRequest("%v", err)
	}
	if m, ok := aliasModel(g.cfg.ModelAliases, head.Model); ok && m != head.Model {
		nb, err := withModel(body, m) // Config.ModelAliases: the served model's name
		if err != nil {
			return nil, badRequest("%v", err)
		}
		body, c.body, head.Model = nb, nb, m
	}
	c.model, c.stream = head.Model, head.Stream
	var err error
	switch c.api {
	case Chat, Completions:
		switch {
		case !head.Stream:
		case len(head.StreamOptions) == 0:
			// The common case: splice the option in rather than decode
			// and re-encode the whole body.
			i := bytes.IndexByte(body, '{')
			var salt []byte
			if t != nil && t.Salt != "" && !bytes.Contains(body, []byte(`"cache_salt"`)) {
				v, _ := json.Marshal(t.Salt)
				salt = append(append([]byte(`"cache_salt":`), v...), ',')
				c.salted = true
			}
			c.body = append(append(append(append(make([]byte, 0, len(body)+40+len(salt)), body[:i+1]...),
				`"stream_options":{"include_usage":true},`...), salt...), body[i+1:]...)
		default:
			if c.body, err = vllm.EnsureStreamUsage(body); err != nil {
				return nil, badRequest("%v", err)
			}
		}
		c.chatB = c.body
	case Responses:
		if c.chat, c.custom, err = translate.ResponsesToChatMemo(body, g.memos); err != nil {
			return nil, err
		}
	case Messages, CountTokens:
		if g.cfg.StripBillingHeader {
			if nb, ok := translate.StripBilling(body); ok {
				c.body = nb
				g.m.billingStripped.Inc()
			}
		}
		if c.chat, err = translate.MessagesToChatMemo(c.body, g.memos); err != nil {
			return nil, err
		}
		if c.api == CountTokens {
			c.stream, c.chat.Stream, c.chat.StreamOptions = false, false, nil
		}
	}
	if c.chat != nil {
		if c.chatB, err = translate.MarshalChat(c.chat, c.body, g.memos); err != nil {
			return nil, badRequest("%v", err)
		}
	}
	return c, nil
}

// --- identify ---

// identify reads the agent session from the request's headers and its
// body as the client sent it.
func (g *Gateway) identify(c *call, r *http.Request, body []byte) error {
	ac, err := g.sess.FromRequest(r, body)
	c.agent = ac
	scope(c)
	return err
}

// --- tokenize ---

// tokens returns the prompt's token ids for routing, from the first
// source that answers: a worker's in-process Tokenizer (chat shapes; one
// that a check found wrong is skipped, see checkTokens), a routable
// worker's /tokenize (the one that answered last is tried first), or the
// documented approximation (vllm.ApproxTokens of vllm.PromptText) when no
// worker can tokenize. Every API is tokenized through its chat translation,
// as the engine's chat template will see it. err is non-nil only for a
// body no worker could take.
func (g *Gateway) tokens(ctx context.Context, c *call) ([]uint32, error) {
	path := vllm.ChatPath
	if c.api == Completions {
		path = vllm.CompletionPath
	}
	api := c.api.String()
	if path == vllm.ChatPath {
		for _, wk := range g.set().order {
			if wk.Tokenizer == nil || wk.tok.off.Load() {
				continue
			}
			if t, err := g.tokenizeInProcess(wk, c); err == nil {
				g.m.tokenize.WithLabelValues(api, "inprocess").Inc()
				g.checkTokens(wk, c.chatB, t)
				return t, nil
			}
		}
	}
	if toks, ok := g.tokenizeRemote(ctx, c, path); ok {
		g.m.tokenize.WithLabelValues(api, "tokenize").Inc()
		return toks, nil
	}
	text, err := vllm.PromptText(path, c.chatB)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, badRequest("cannot read the prompt: field %q holds a JSON %s", te.Field, te.Value)
		}
		return nil, fmt.Errorf("%w: cannot read the prompt: %v", ErrBadRequest, err)
	}
	g.m.tokenize.WithLabelValues(api, "approximate").Inc()
	return vllm.ApproxTokens(nil, text), nil
}

// tokenizeInProcess tokenizes with the worker's Tokenizer: incrementally
// for a request with a session when it is a SessionTokenizer (whose
// memory of the session's last prompt is its own).
func (g *Gateway) tokenizeInProcess(wk *worker, c *call) ([]uint32, error) {
	if st, ok := wk.Tokenizer.(SessionTokenizer); ok && c.agent.Valid() {
		return st.TokenizeChatSession(c.agent.SessionID, c.chatB)
	}
	return wk.Tokenizer.TokenizeChat(c.chatB)
}

// tokenizeRemote asks the routable workers' /tokenize, the one that
// answered last first (a dead or black-holed one would cost a
// TokenizeTimeout each). With none routable yet (at start, before the
// first probes answer) it waits for one, then, if still none, tries them
// all. false: no worker tokenized the body.
func (g *Gateway) tokenizeRemote(ctx context.Context, c *call, path string) ([]uint32, bool) {
	order := g.set().order
	n := uint64(len(order))
	if n == 0 {
		return nil, false
	}
	first := g.tokIdx.Load()
	g.awaitRoutable(ctx, c)
	anyRoutable := g.tracker.Ready()
	for i := uint64(0); i < n; i++ {
		k := (first + i) % n
		if anyRoutable && !g.tracker.Routable(order[k].ID) {
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, g.cfg.TokenizeTimeout)
		toks, err := order[k].client.Tokenize(tctx, path, c.chatB)
		cancel()
		if err == nil {
			if k != first {
				g.tokIdx.Store(k)
			}
			return toks, true
		}
		var se *vllm.StatusError
		if errors.Is(err, vllm.ErrUnsupportedPrompt) || ctx.Err() != nil ||
			(errors.As(err, &se) && se.Code/100 == 4 && se.Code != http.StatusNotFound) {
			break // another worker would refuse it too
		}
	}
	return nil, false
}

// awaitRoutable waits, at most once per request and up to ReadyWait, for a
// worker to be routable when none is (workers starting, or all ejected a
// moment ago), as a client would retry.
func (g *Gateway) awaitRoutable(ctx context.Context, c *call) {
	if c.waitedReady || g.cfg.ReadyWait <= 0 || g.tracker.Ready() {
		return
	}
	c.waitedReady = true
	wctx, cancel := context.WithTimeout(ctx, g.cfg.ReadyWait)
	_ = g.tracker.WaitReady(wctx)
	cancel()
}

// --- forward: route, attempt, retry or migrate ---

// forwarding is the forward loop's state across a request's attempts.
type forwarding struct {
	retry   *failover.Retry
	tried   []uint64 // workers that failed this request
	allowed []uint64
	sv      streamSoFar
	last    *AttemptResult // the last failed attempt, and its worker
	lastWk  *worker
}

// step says how the forward loop goes on after a stage.
type step uint8

const (
	proceed  step = iota // on to the next stage
	again                // the next try
	stop                 // the request is answered
	migrated             // a migration: its retries start over
)

// forward routes c to a healthy worker and serves it there, moving on to
// the next-best worker (bounded, with backoff and jitter) while attempts
// fail before the first byte with a retryable kind, and migrating a cut
// chat stream (Config.Failover.MigrationLimit). Each attempt is one router
// decision, ended (Done) before the next: a failed attempt's load and
// approximate-index record are undone, its worker's breaker told.
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, c *call) {
	fw := &forwarding{retry: g.tracker.Retry()}
	for try := 1; ; try++ {
		d, wk, next := g.route(ctx, w, c, fw, try)
		switch next {
		case again:
			continue
		case stop:
			return
		}
		res := g.attempt(ctx, w, c, wk, d, &fw.sv)
		switch g.moveOn(ctx, c, fw, d, wk, &res, try) {
		case again:
			continue
		case migrated:
			try = 0 // a migration starts its own retries
			continue
		case stop:
			return
		}
		if fw.sv.tr == nil {
			// A migrated pass-through stream's usage event was corrected
			// on its way (writeEvents), the sniffer's figures are the
			// worker's: the router hears what the client did. (A
			// translated stream's usage was learnt corrected.)
			fw.sv.carry(&res.Usage.PromptTokens, &res.Usage.CompletionTokens, &res.Usage.CachedTokens)
		}
		g.respond(w, c, d, wk, &res, &fw.sv)
		return
	}
}

// route asks the router for a worker among the routable ones not tried
// yet (waiting once for one when none is). On anything but proceed the
// request has been answered (stop) or should be tried again (again).
func (g *Gateway) route(ctx context.Context, w http.ResponseWriter, c *call, fw *forwarding, try int) (*agentkv.Decision, *worker, step) {
	route := g.router.Route
	if g.cfg.Route != nil {
		route = g.cfg.Route
	}
	fw.allowed = g.tracker.Allowed(fw.allowed[:0], fw.tried)
	if len(fw.allowed) == 0 && try == 1 && !fw.sv.started {
		g.awaitRoutable(ctx, c)
		fw.allowed = g.tracker.Allowed(fw.allowed[:0], fw.tried)
	}
	if len(fw.allowed) == 0 {
		g.giveUp(ctx, w, c, fw)
		return nil, nil, stop
	}
	reqID := c.id
	if try > 1 {
		reqID += "-" + strconv.Itoa(try)
	}
	var cacheSalt string
	if c.tenant != nil {
		cacheSalt = c.tenant.Salt
	}
	st := g.standing(c.tenant)
	d, err := route(ctx, &agentkv.Request{ID: reqID, Tokens: c.tokens, Agent: c.agent, CacheSalt: cacheSalt,
		Override: &agentkv.Override{AllowedWorkers: fw.allowed, PrefillFirst: st == tenant.Under}})
	switch {
	case err == nil:
		if a := d.Agent(); a.Inferred && !c.agent.Valid() {
			c.agent = a // a retry stays in the session inferred for it
		}
	case ctx.Err() != nil:
		g.clientGone(c)
		return nil, nil, stop // the client left while admission held the request
	case errors.Is(err, agentkv.ErrNoWorkers) && fw.last != nil:
		g.giveUp(ctx, w, c, fw)
		return nil, nil, stop
	case errors.Is(err, agentkv.ErrNoWorkers) && len(fw.allowed) < len(g.set().order) && try < fw.retry.MaxTries():
		// The routable workers are not the ones the router knows (at
		// start, workers probed up before they joined the router):
		// health and membership change within moments, so try again.
		// (A program admission placed on a worker that is not routable
		// is relocated by the router itself.)
		if !sleepCtx(ctx, fw.retry.Backoff(try)) {
			g.clientGone(c)
			return nil, nil, stop
		}
		return nil, nil, again
	case errors.Is(err, agentkv.ErrNoWorkers), errors.Is(err, agentkv.ErrDropped), errors.Is(err, agentkv.ErrClosed):
		g.endWith(w, c, &fw.sv, http.StatusServiceUnavailable, err.Error())
		return nil, nil, stop
	default:
		g.endWith(w, c, &fw.sv, http.StatusInternalServerError, err.Error())
		return nil, nil, stop
	}
	wk := g.set().byID[d.Worker.ID]
	if wk == nil {
		g.finish(c, d, Usage{}, ErrUnknownWorker)
		g.endWith(w, c, &fw.sv, http.StatusServiceUnavailable, "agentkv gateway: routed to an unknown worker")
		return nil, nil, stop
	}
	if c.ticket, err = g.enterGate(ctx, st, wk.ID); err != nil {
		g.finish(c, d, Usage{}, fmt.Errorf("%w: %w", ErrClientGone, err))
		g.clientGone(c)
		return nil, nil, stop // the client left while its request yielded
	}
	return d, wk, proceed
}

// sleepCtx waits d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// --- finish ---

// respond ends a request with its last attempt: a failure before the
// first byte is answered in the client's shape, a cut stream ended with
// its API's error event (a cut whole reply aborts the connection), and the
// router told.
func (g *Gateway) respond(w http.ResponseWriter, c *call, d *agentkv.Decision, wk *worker, res *AttemptResult, sv *streamSoFar) {
	abort := false
	switch res.Outcome {
	case FailedBeforeFirstByte:
		g.writeFailure(w, c, wk, res)
	case CutMidStream:
		abort = !g.endStream(w, c, sv, "agentkv gateway: the worker's stream broke off ("+ErrorKind(res.Err)+"): "+g.redact(res.Err.Error()))
	case ClientGone:
		g.log.Info("gateway: client went away", "status", 499, "api", c.api.String(), "request", c.id,
			"worker", wk.URL, "session", c.agent.SessionID)
	}
	g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(res.Status)).Inc()
	g.finish(c, d, res.Usage, res.Err)
	g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(c.start).Seconds())
	if abort {
		// A whole reply cut part-way: abort the connection so the
		// client sees the truncation, not a short body.
		panic(http.ErrAbortHandler)
	}
}

// finish reports the request's end to the router (with the API and error
// kind for its trace record) and ends the session when the client said it
// was the last.
func (g *Gateway) finish(c *call, d *agentkv.Decision, u Usage, err error) {
	kind := ErrorKind(err)
	d.Done(agentkv.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
		CachedTokens: u.CachedTokens, FinishReason: u.FinishReason, ToolCalls: u.ToolCalls, Failed: err != nil,
		API: c.api.String(), ErrorKind: kind})
	if u.HasUsage {
		api := c.api.String()
		g.m.usage.WithLabelValues(api, "prompt").Add(float64(u.PromptTokens))
		g.m.usage.WithLabelValues(api, "completion").Add(float64(u.CompletionTokens))
		g.m.usage.WithLabelValues(api, "cached").Add(float64(u.CachedTokens))
	}
	if kind != "" {
		g.m.failures.WithLabelValues(c.api.String(), kind).Inc()
	}
	if c.agent.Final && c.agent.Valid() {
		g.router.EndSession(c.agent.SessionID)
		g.limits.EndSession(c.tenant, c.agent.SessionID)
	}
}

// ErrorKind names the kind of a failed attempt's error ("" for nil):
// connect, status, cut, timeout, client_gone, bad_reply, unknown_worker,
// no_healthy_worker, other; and, for an attempt the request moved on from
// (its worker failed and another took over), retried (before the first
// byte) or migrated (a cut stream continued elsewhere).
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errRetried):
		return "retried"
	case errors.Is(err, errMigrated):
		return "migrated"
	case errors.Is(err, ErrConnect):
		return "connect"
	case errors.Is(err, ErrStatus):
		return "status"
	case errors.Is(err, ErrCut):
		return "cut"
	case errors.Is(err, ErrClientGone):
		return "client_gone"
	case errors.Is(err, ErrBadReply):
		return "bad_reply"
	case errors.Is(err, ErrUnknownWorker):
		return "unknown_worker"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrNoHealthyWorker):
		return "no_healthy_worker"
	}
	return "other"
}

// writeFailure answers a request whose attempt failed before anything
// reached the client: the worker's own error reply when it is in the
// client's API shape, else an error in that shape.
func (g *Gateway) writeFailure(w http.ResponseWriter, c *call, wk *worker, res *AttemptResult) {
	if res.Status == 0 {
		res.Status = http.StatusBadGateway
	}
	if res.ErrBody != nil && res.Native {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(res.Status)
		_, _ = w.Write(res.ErrBody)
		return
	}
	msg := "agentkv gateway: worker " + g.workerName(wk) + " failed: " + g.redact(res.Err.Error())
	if res.ErrBody != nil {
		msg = "agentkv gateway: worker " + g.workerName(wk) + " answered " + strconv.Itoa(res.Status) + ": " + g.redact(res.upstreamMsg)
	}
	writeError(w, c.api.Anthropic(), res.Status, msg)
}

// jobj is a JSON object written ad hoc.
type jobj = map[string]any

// endStream ends a client stream that broke off with its API's own error
// event: an OpenAI error chunk, Responses response.failed, Anthropic
// event: error. It returns false for a reply that was not a stream (the
// caller aborts the connection instead).
func (g *Gateway) endStream(w http.ResponseWriter, c *call, sv *streamSoFar, msg string) bool {
	if !c.stream {
		return false
	}
	if sv.tr != nil {
		sv.tr.End(Usage{}, false, msg)
		return true
	}
	ew := translate.NewEventWriter(w)
	switch c.api {
	case Responses:
		ew.Event("response.failed", jobj{"type": "response.failed", "response": jobj{"id": "resp_" + c.id,
			"object": "response", "status": "failed", "model": c.model,
			"error": jobj{"code": "server_error", "message": msg}}})
	case Messages:
		ew.Event("error", jobj{"type": "error", "error": jobj{"type": "api_error", "message": msg}})
	default:
		ew.Data(jobj{"error": jobj{"message": msg, "type": "server_error", "code": "worker_stream_cut"}})
	}
	return true
}

// endWith answers a request the gateway could not serve: an error reply in
// the caller's API shape, or, when the client's stream already started (a
// migration found no worker), the stream's error event.
func (g *Gateway) endWith(w http.ResponseWriter, c *call, sv *streamSoFar, code int, msg string) {
	if sv.started {
		_ = g.endStream(w, c, sv, msg)
	} else {
		writeError(w, c.api.Anthropic(), code, msg)
	}
	g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(code)).Inc()
	g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(c.start).Seconds())
}

// giveUp ends a request no (further) worker can take: with the last
// attempt's failure when there was one, else 503.
func (g *Gateway) giveUp(ctx context.Context, w http.ResponseWriter, c *call, fw *forwarding) {
	switch {
	case ctx.Err() != nil:
		g.clientGone(c)
	case fw.last == nil:
		g.m.failures.WithLabelValues(c.api.String(), ErrorKind(ErrNoHealthyWorker)).Inc()
		g.endWith(w, c, &fw.sv, http.StatusServiceUnavailable, ErrNoHealthyWorker.Error()+": every worker is down or ejected")
	case fw.sv.started:
		g.endWith(w, c, &fw.sv, http.StatusBadGateway, "agentkv gateway: no worker could continue the stream: "+g.redact(fw.last.Err.Error()))
	default:
		g.writeFailure(w, c, fw.lastWk, fw.last)
		g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(fw.last.Status)).Inc()
		g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(c.start).Seconds())
	}
}

// clientGone counts and logs a client that left before it was answered.
func (g *Gateway) clientGone(c *call) {
	g.m.responses.WithLabelValues(c.api.String(), "499").Inc()
	g.m.failures.WithLabelValues(c.api.String(), "client_gone").Inc()
	g.log.Info("gateway: client went away", "status", 499, "api", c.api.String(), "request", c.id,
		"session", c.agent.SessionID, "after", time.Since(c.start))
}
