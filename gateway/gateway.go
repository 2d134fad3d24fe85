package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/session"
)

// Defaults of Config.
const (
	DefaultMaxBodyBytes    = 32 << 20
	DefaultTokenizeTimeout = 10 * time.Second
)

// Response headers the gateway sets on every routed reply.
const (
	// HeaderWorker is the chosen worker's base URL.
	HeaderWorker = "X-Agentkv-Worker"
	// HeaderWorkerID is "ID/DP rank" of the chosen worker.
	HeaderWorkerID = "X-Agentkv-Worker-Id"
	// HeaderCachedTokens is how many prompt tokens the router expected the
	// worker to hold (all tiers).
	HeaderCachedTokens = "X-Agentkv-Cached-Tokens"
	// HeaderSharedTokens is how many more prompt tokens the router
	// credited the worker with from the shared KV pool (StackConfig
	// SharedPool: Mooncake pages beyond everything the worker holds
	// itself); absent when none.
	HeaderSharedTokens = "X-Agentkv-Shared-Tokens"
	// HeaderWaited is how long admission control held the request before
	// it was routed, in milliseconds ("0" when it was not held).
	HeaderWaited = "X-Agentkv-Waited-Ms"
	// HeaderRoute says why the worker was chosen: session, inferred,
	// prefix, load or held (agentkv.Decision.Reason).
	HeaderRoute = "X-Agentkv-Route"
	// HeaderDPRank is vLLM's (and SGLang's) header pinning a request to a
	// data-parallel rank; the gateway sets it for workers with DPRanks > 1.
	HeaderDPRank = "X-Data-Parallel-Rank"
)

// Tokenizer is an in-process tokenizer that reproduces a worker's
// /tokenize exactly for a chat completions body (messages, tools, chat
// template), so routing needs no round trip. It must be safe for
// concurrent use.
type Tokenizer interface {
	TokenizeChat(body []byte) ([]uint32, error)
}

// SessionTokenizer is a Tokenizer that tokenizes an agent session's turns
// incrementally (hftok.Chat does): the session's previous prompt gives
// the ids of the unchanged prefix, so a turn costs its new tokens, not
// its context. The result must equal TokenizeChat's; the caller does not
// modify it. It may keep body as the session's memory: the gateway never
// modifies a body once tokenized (a change makes a new one). The gateway
// uses it for requests with a session.
type SessionTokenizer interface {
	Tokenizer
	TokenizeChatSession(session string, body []byte) ([]uint32, error)
}

// Worker is one worker (engine instance) the gateway forwards to: the
// router knows it by ID (its agentkv.WorkerInfo.ID).
type Worker struct {
	// ID is the router's worker ID.
	ID uint64
	// URL is the engine's base URL ("http://host:8000").
	URL string
	// DPRanks is the engine's data-parallel size (0 means 1); the chosen
	// rank is sent in X-Data-Parallel-Rank when it is more than 1.
	DPRanks int
	// Native is the set of APIs the engine serves itself; those are passed
	// through byte for byte, the others are translated to chat
	// completions. Zero means Baseline (chat and text completions).
	Native APIs
	// TokenAPIs are the token APIs the engine serves (0: all of them); a
	// token-API request for one it does not is translated (generate.go).
	TokenAPIs TokenAPIs
	// Tokenizer, if set, tokenizes for routing in process instead of the
	// engine's /tokenize.
	Tokenizer Tokenizer
	// Hints, if set, adds the worker's waiting KV hints to its requests
	// (HintChannel.Body); nil leaves every byte as it is.
	Hints *HintChannel
}

// Config configures a Gateway. Zero fields mean the documented defaults.
type Config struct {
	// Router routes the requests. Required; the caller adds the workers
	// to it (AddWorker) and owns its lifecycle.
	Router *agentkv.Router
	// Workers are the engines, each with the ID the Router knows it by.
	Workers []Worker
	// HTTPClient talks to the workers (nil: NewHTTPClient()).
	HTTPClient *http.Client
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes):
	// larger is 413.
	MaxBodyBytes int64
	// ModelAliases rename the model a request asks for before it is
	// routed and forwarded: the first alias whose Pattern matches wins
	// (see ModelAlias). GET /v1/models lists them after the workers'
	// models. Nil: names pass unchanged.
	ModelAliases []ModelAlias
	// TokenizeTimeout bounds one /tokenize call (default 10 s).
	TokenizeTimeout time.Duration
	// TokenizerCheckEvery: a worker's first in-process tokenization and
	// every TokenizerCheckEvery-th after it are compared, in the
	// background, with the worker's own /tokenize of the same body; a
	// mismatch turns that worker's in-process Tokenizer off (logged and
	// counted in agentkv_gateway_tokenizer_checks_total). 0 means
	// DefaultTokenizerCheckEvery, negative never checks.
	TokenizerCheckEvery int
	// Sessions extracts agent sessions (nil: session.Default).
	Sessions *session.Extractor
	// StripBillingHeader removes Claude Code's per-request billing
	// preamble from a Messages request's system prompt before routing and
	// forwarding (see StripBilling), so the shared prefix is shared.
	StripBillingHeader bool
	// Registerer receives the gateway's metrics (nil: none are exported).
	Registerer prometheus.Registerer
	// Route, if set, routes each request instead of Router.Route, through
	// Router (a replica of package eventplane routes with the session
	// bindings shared by every replica).
	Route func(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error)
	// Logger receives warnings (nil discards).
	Logger *slog.Logger

	// Failover configures worker health and failover (package failover):
	// active /health probes, a circuit breaker per worker fed by the
	// request path, retries on the next-best worker before the first byte,
	// and, with MigrationLimit > 0 (off by default), cut chat streams
	// continued on another worker. Its HTTPClient, Registerer and Logger
	// default to the gateway's.
	Failover failover.Config
	// ReadyWait bounds how long a request waits for a routable worker when
	// none is (workers starting, or all just ejected) before it is
	// answered 503 (default DefaultReadyWait, 5 s; negative: no wait).
	ReadyWait time.Duration
	// Each attempt waits for its first byte at most the tracker's
	// first-byte deadline, scaled by its prompt (failover.OutlierConfig:
	// floor + factor × the expected prefill, and for a whole reply its
	// output budget too), and for a stream at most FirstByteTimeout;
	// StreamIdleTimeout bounds the silence between two reads of a stream:
	// past either the attempt counts as a timeout (retried before the
	// first byte, a cut after). Defaults DefaultFirstByteTimeout (120 s)
	// and DefaultStreamIdleTimeout (60 s); a negative FirstByteTimeout
	// turns every first-byte deadline off, a negative StreamIdleTimeout
	// the idle bound (the proxy's --stream-idle-timeout off).
	FirstByteTimeout, StreamIdleTimeout time.Duration

	// Keys, if set, authenticates every API request (package tenant): a
	// request without a valid key gets 401 in its API's shape and reaches
	// no worker; a tenant's session ids are scoped by the tenant, its
	// requests carry its cache salt (to the engine as cache_salt, to the
	// router as Request.CacheSalt), and the client's own Authorization
	// and x-api-key are not sent on to workers. nil: no authentication.
	Keys *tenant.Set
	// TenantLimits configures the per-tenant limits and fair share (used
	// only with Keys).
	TenantLimits tenant.LimitsConfig
	// TenantYield configures the yield gate (tenant.Gate), used with Keys
	// and TenantLimits.Capacity > 0: while the engines are contended, a
	// tenant over its weighted share has its requests held in the gateway
	// (at most MaxHold) while the worker they were routed to computes
	// another tenant's prompt, and sent to each worker Slots at a time;
	// a tenant under its share has its new sessions placed by the prompt
	// tokens queued on each worker (agentkv.Override.PrefillFirst). A
	// negative MaxHold turns both off.
	TenantYield tenant.GateConfig
	// HideWorkerAddresses names workers to clients by their router ID
	// ("worker 2") instead of their URL: in X-Agentkv-Worker, in error
	// replies and stream error events (worker addresses and hosts in
	// upstream errors are replaced too) and in /readyz. Logs and metrics
	// keep the URLs.
	HideWorkerAddresses bool
}

// NewHTTPClient returns the client the gateway talks to workers with when
// Config.HTTPClient is nil: no overall timeout (long generations are not
// cut), up to 1,024 idle connections kept per worker (so hundreds of
// concurrent streams reuse connections instead of dialing one each: Go's
// default keeps 2), no transparent compression (a stream must reach the
// client as the engine flushed it).
func NewHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 4096, 1024
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("gateway: invalid config")

// Gateway is the front door: an http.Handler serving the OpenAI and
// Anthropic APIs over a Router and its workers. It is safe for concurrent
// use.
type Gateway struct {
	cfg    Config
	log    *slog.Logger
	router *agentkv.Router
	sess   *session.Extractor
	// ws is the worker set, copy-on-write (registry.go): the request path
	// loads it without a lock; setMu serializes the writers.
	ws      atomic.Pointer[workerSet]
	setMu   sync.Mutex
	dropped []uint64 // removed workers still in ws.byID, oldest first; guarded by setMu
	m       *metrics
	mux     *http.ServeMux
	tokIdx  atomic.Uint64 // the worker tried first for /tokenize
	// memos keeps what decoding recent Messages and Responses bodies
	// left, so an agent's next turn decodes only its new items.
	memos   *translate.Memos
	reqSeq  atomic.Uint64
	rids    rids      // token-API requests in flight by rid (generate.go)
	pause   pauseGate // the router-level pause (control.go)
	tracker *failover.Tracker
	limits  *tenant.Limits // with Config.Keys
	gate    *tenant.Gate   // with Config.Keys, a Capacity and TenantYield on (yield.go)
	// registry is the Stack that adds and drains workers at run time
	// (registry.go); nil for a Gateway built alone.
	registry *Stack
	// migrationLimit is Config.Failover.MigrationLimit.
	migrationLimit int
	background
}

type worker struct {
	Worker
	client *vllm.Client
	idStr  string
	tok    tokCheck
}

// New validates cfg and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if cfg.Router == nil {
		return nil, fmt.Errorf("%w: no Router", ErrConfig)
	}
	if cfg.MaxBodyBytes < 0 || cfg.TokenizeTimeout < 0 {
		return nil, fmt.Errorf("%w: negative MaxBodyBytes or TokenizeTimeout", ErrConfig)
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.TokenizeTimeout == 0 {
		cfg.TokenizeTimeout = DefaultTokenizeTimeout
	}
	if cfg.TokenizerCheckEvery == 0 {
		cfg.TokenizerCheckEvery = DefaultTokenizerCheckEvery
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NewHTTPClient()
	}
	cfg.ReadyWait = orDefault(cfg.ReadyWait, DefaultReadyWait)
	cfg.FirstByteTimeout = orDefault(cfg.FirstByteTimeout, DefaultFirstByteTimeout)
	cfg.StreamIdleTimeout = orDefault(cfg.StreamIdleTimeout, DefaultStreamIdleTimeout)
	g := &Gateway{cfg: cfg, log: cfg.Logger, router: cfg.Router, sess: cfg.Sessions, memos: translate.NewMemos(0)}
	g.bgCtx, g.bgCancel = context.WithCancel(context.Background())
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.sess == nil {
		g.sess = session.Default
	}
	set := &workerSet{byID: map[uint64]*worker{}}
	for _, w := range cfg.Workers {
		if _, dup := set.byID[w.ID]; dup {
			return nil, fmt.Errorf("%w: worker ID %d twice", ErrConfig, w.ID)
		}
		wk, err := newWorker(w, cfg.HTTPClient)
		if err != nil {
			return nil, err
		}
		set.byID[w.ID] = wk
		set.order = append(set.order, wk)
	}
	g.ws.Store(set)
	var err error
	if g.m, err = newMetrics(cfg.Registerer); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	fc := cfg.Failover
	if fc.HTTPClient == nil {
		fc.HTTPClient = cfg.HTTPClient
	}
	if fc.Registerer == nil {
		fc.Registerer = cfg.Registerer
	}
	if fc.Logger == nil {
		fc.Logger = g.log
	}
	if g.tracker, err = failover.New(fc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	g.migrationLimit = g.tracker.MigrationLimit()
	for _, wk := range set.order {
		if err := g.tracker.Add(wk.ID, wk.URL); err != nil {
			_ = g.tracker.Close()
			return nil, err
		}
	}
	if cfg.Keys != nil {
		g.limits = tenant.NewLimits(cfg.TenantLimits)
		if cfg.TenantLimits.Capacity > 0 && cfg.TenantYield.MaxHold >= 0 {
			g.gate = tenant.NewGate(cfg.TenantYield)
		}
	}
	g.mux = g.routes()
	return g, nil
}

// orDefault returns def for 0, 0 for a negative d (off), else d.
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// Close stops the workers' health probes. Requests in flight finish.
func (g *Gateway) Close() error {
	g.bgCancel()
	g.bg.Wait()
	return g.tracker.Close()
}

// Tracker returns the workers' health and breakers.
func (g *Gateway) Tracker() *failover.Tracker { return g.tracker }

// Ready reports whether at least one worker is routable (nil), else why
// not: what /readyz answers.
func (g *Gateway) Ready() error {
	if g.tracker.Ready() {
		return nil
	}
	var b strings.Builder
	tracked := map[uint64]failover.WorkerStatus{}
	for _, st := range g.tracker.Status() {
		tracked[st.ID] = st
	}
	for i, wk := range g.set().order {
		if i > 0 {
			b.WriteString("; ")
		}
		st, ok := tracked[wk.ID]
		if !ok {
			// A Stack tracks a worker once it joined the router.
			fmt.Fprintf(&b, "worker %d %s: not joined yet (waiting for it to answer)", wk.ID, wk.URL)
			continue
		}
		fmt.Fprintf(&b, "worker %d %s: health %s, breaker %s", st.ID, st.URL, st.Health, st.Breaker)
		if st.LastError != "" {
			b.WriteString(", last error: " + st.LastError)
		}
	}
	if b.Len() == 0 {
		b.WriteString("no workers")
	}
	return fmt.Errorf("%w: %s", ErrNoHealthyWorker, g.redact(b.String()))
}

// workerName is how a client is told which worker served it: its URL, or
// with HideWorkerAddresses its router ID.
func (g *Gateway) workerName(wk *worker) string {
	if g.cfg.HideWorkerAddresses {
		return "worker-" + wk.idStr
	}
	return wk.URL
}

// redact replaces every worker's URL and host:port in msg by its name when
// HideWorkerAddresses is set.
func (g *Gateway) redact(msg string) string {
	if !g.cfg.HideWorkerAddresses {
		return msg
	}
	for _, wk := range g.set().order {
		name := "worker-" + wk.idStr
		msg = strings.ReplaceAll(msg, strings.TrimRight(wk.URL, "/"), name)
		if u, err := url.Parse(wk.URL); err == nil && u.Host != "" {
			msg = strings.ReplaceAll(msg, u.Host, name)
		}
	}
	return msg
}

// ServeHTTP serves the APIs.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

func (g *Gateway) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, a := range []API{Chat, Completions, Responses, Messages, CountTokens} {
		mux.HandleFunc("POST "+a.Path(), func(w http.ResponseWriter, r *http.Request) { g.serve(w, r, a) })
		mux.HandleFunc(a.Path(), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			g.reject(w, a, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": use POST")
		})
	}
	mux.HandleFunc("GET "+ModelsPath, g.models)
	mux.HandleFunc("POST "+GeneratePath, func(w http.ResponseWriter, r *http.Request) { g.serveTokens(w, r, true) })
	mux.HandleFunc("POST "+InferenceGeneratePath, func(w http.ResponseWriter, r *http.Request) { g.serveTokens(w, r, false) })
	mux.HandleFunc("POST "+AbortPath, g.abortRequest)
	for p := range engineControls {
		mux.HandleFunc("POST "+p, g.engineControl)
	}
	mux.HandleFunc("GET /flush_cache", g.engineControl)
	mux.HandleFunc("POST "+PausePath, g.routerPause(true))
	mux.HandleFunc("POST "+ResumePath, g.routerPause(false))
	mux.HandleFunc("GET "+WorkersPath, g.listWorkers)
	g.registryRoutes(mux)
	mux.HandleFunc("POST "+ReleasePath, g.release)
	// /healthz is liveness: the process serves. /readyz is readiness: at
	// least one worker can take a request (503 when none).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		routable := 0
		for _, st := range g.tracker.Status() {
			if st.Routable {
				routable++
			}
		}
		fmt.Fprintf(w, "ok: live; %d of %d workers routable\n", routable, len(g.set().order))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := g.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error()+"\n"+g.ejections(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		fmt.Fprint(w, g.ejections())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusNotFound
		writeError(w, wantsAnthropic(r), code, "agentkv gateway: no route for "+r.Method+" "+r.URL.Path)
		g.m.responses.WithLabelValues("none", strconv.Itoa(code)).Inc()
	})
	return mux
}

// reject answers a request the gateway refuses before routing (the router
// never hears of it).
func (g *Gateway) reject(w http.ResponseWriter, a API, code int, msg string) {
	g.m.responses.WithLabelValues(a.String(), strconv.Itoa(code)).Inc()
	writeError(w, a.Anthropic(), code, msg)
}

// countTokens answers /v1/messages/count_tokens from the tokens counted.
func (g *Gateway) countTokens(w http.ResponseWriter, c *call) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, len(c.tokens))
	g.m.responses.WithLabelValues(c.api.String(), "200").Inc()
}

// models forwards GET /v1/models to the first worker that answers, in
// Anthropic's shape when the request carries anthropic-version.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	anth := r.Header.Get("Anthropic-Version") != ""
	for _, wk := range g.set().order {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, wk.client.URL(ModelsPath), nil)
		if err != nil {
			continue
		}
		g.copyAuth(req.Header, r.Header)
		resp, err := g.cfg.HTTPClient.Do(req)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode/100 != 2 {
			continue
		}
		if b, err = aliasModels(b, g.cfg.ModelAliases); err != nil {
			continue
		}
		if anth {
			if b, err = anthropicModels(b); err != nil {
				continue
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	}
	writeError(w, anth, http.StatusServiceUnavailable, "agentkv gateway: no worker answered "+ModelsPath)
}

// anthropicModels turns an OpenAI model list into Anthropic's.
func anthropicModels(b []byte) ([]byte, error) {
	var in struct {
		Data []struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return nil, err
	}
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	out := struct {
		Data    []model `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{Data: []model{}}
	for _, m := range in.Data {
		out.Data = append(out.Data, model{Type: "model", ID: m.ID, DisplayName: m.ID,
			CreatedAt: time.Unix(m.Created, 0).UTC().Format(time.RFC3339)})
	}
	if n := len(out.Data); n > 0 {
		out.FirstID, out.LastID = &out.Data[0].ID, &out.Data[n-1].ID
	}
	return json.Marshal(out)
}

// forwarded are the request headers a worker may need; nothing else of
// the client's header set is sent on.
var forwarded = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta", "X-Request-Id", "Accept",
	"X-Smg-Routing-Key"}

func (g *Gateway) copyAuth(dst, src http.Header) {
	if g.cfg.Keys != nil {
		return // the client's key is the gateway's, not the worker's
	}
	for _, k := range forwarded[:2] {
		if v := src.Get(k); v != "" {
			dst.Set(k, v)
		}
	}
}

// ReleasePath is ThunderAgent's end-of-program call: POST {"program_id":
// ID} ends the program (its session, admission program and affinity), as
// a request with X-Dynamo-Session-Final: true does. The reply is
// {"program_id": ID, "released": true}; releasing an unknown or already
// released program is not an error. With Config.Keys the caller's key is
// required and the id is its tenant's (a tenant releases only its own
// programs); an admin key releases the id as given, a tenant's program as
// "TENANT/ID".
const ReleasePath = "/programs/release"

func (g *Gateway) release(w http.ResponseWriter, r *http.Request) {
	t, ok := g.authenticate(w, r, Chat)
	if !ok {
		return
	}
	body, ok := g.readBody(w, r, Chat)
	if !ok {
		return
	}
	var req struct {
		ProgramID string `json:"program_id"`
	}
	if json.Unmarshal(body, &req) != nil || req.ProgramID == "" || len(req.ProgramID) > session.DefaultMaxIDLen {
		g.reject(w, Chat, http.StatusBadRequest, fmt.Sprintf("want {\"program_id\": ID}, ID of 1 to %d bytes", session.DefaultMaxIDLen))
		return
	}
	id := req.ProgramID
	if t != nil && !t.Admin {
		id = tenant.Scope(t, id)
		g.limits.EndSession(t, id)
	}
	g.router.EndSession(id)
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(struct {
		ProgramID string `json:"program_id"`
		Released  bool   `json:"released"`
	}{req.ProgramID, true})
	_, _ = w.Write(b)
}

// WorkerURL returns the base URL of the worker with this router ID.
func (g *Gateway) WorkerURL(id uint64) (string, bool) {
	if wk := g.set().byID[id]; wk != nil {
		return wk.URL, true
	}
	return "", false
}
