package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

func init() {
	register(&command{
		name:    "proxy",
		summary: "an OpenAI-compatible, session-aware KV router in front of vLLM workers",
		usage:   "--worker URL[,events=tcp://HOST:5557][,replay=tcp://HOST:5558][,dp=N] [--worker ...] [flags]",
		help: `
Serve /v1/chat/completions and /v1/completions, routing each request to the
vLLM worker that already holds the most of its prompt in KV cache (or by
round-robin / random), with agent sessions recognised from the headers Claude
Code, Codex, OpenCode and Dynamo clients send.

Per request: the agent session is read from the headers (and body fallbacks);
the prompt is tokenized by a worker's /tokenize endpoint, which applies the
chat template exactly as the engine will (if no worker can tokenize it, the
prompt's text is chunked into pseudo-tokens instead: prefix affinity is kept,
cache-overlap credit from engine events is lost); the Router picks a worker
(and holds the request while program-aware admission says wait, with
--admission); the request is forwarded, streams pass through byte for byte,
and the usage in the reply (for streams, stream_options.include_usage is
turned on so the final chunk carries it) is reported back to the Router.
Responses carry X-Agentkv-Worker (the worker's URL), X-Agentkv-Worker-Id
(ID/DP rank) and X-Agentkv-Cached-Tokens (prompt tokens the router expected
the worker to hold, all tiers) for debugging.

Each --worker is a vLLM server's base URL, optionally followed by
comma-separated options: events=tcp://HOST:PORT subscribes to the engine's KV
events (vLLM --kv-events-config endpoint; DP rank r on PORT+r), replay= names
its replay socket, dp=N its data-parallel size (requests are pinned to the
chosen rank with X-Data-Parallel-Rank). Workers get IDs 0, 1, ... in the
order given. While any worker publishes no events the router runs in
approximate mode: it remembers its own routing decisions for a while as if
they were cached blocks.

KV capacity and block size are read from each worker's /metrics
(vllm:cache_config_info) at startup, where an unreadable worker is an error,
and every --refresh after. A control-loop tick runs every --tick. SIGINT or
SIGTERM shuts the server down cleanly: held requests get 503, requests in
flight finish (up to --shutdown-timeout), event subscribers close.`,
		run: runProxy,
	})
}

// Defaults of the proxy.
const (
	defaultProxyListen   = "127.0.0.1:8000"
	defaultMaxBody       = 32 << 20
	defaultTickEvery     = 5 * time.Second
	defaultRefreshEvery  = 30 * time.Second
	defaultShutdownGrace = 30 * time.Second
	tokenizeTimeout      = 10 * time.Second
)

// Response headers for debugging.
const (
	headerWorker       = "X-Agentkv-Worker"
	headerWorkerID     = "X-Agentkv-Worker-Id"
	headerCachedTokens = "X-Agentkv-Cached-Tokens"
	// headerDPRank is vLLM's (and SGLang's) header pinning a request to a
	// data-parallel rank.
	headerDPRank = "X-Data-Parallel-Rank"
)

// workerSpec is one --worker flag.
type workerSpec struct {
	URL     string
	Events  string // ZMQ PUB endpoint of the engine's KV events; "" = none
	Replay  string // ZMQ ROUTER replay endpoint; "" = none
	DPRanks int    // data-parallel ranks; 0 means 1
}

// parseWorkerSpec parses "URL[,events=EP][,replay=EP][,dp=N]".
func parseWorkerSpec(s string) (workerSpec, error) {
	parts := strings.Split(s, ",")
	ws := workerSpec{URL: strings.TrimSpace(parts[0])}
	if ws.URL == "" {
		return ws, fmt.Errorf("empty worker URL in %q", s)
	}
	if _, err := vllm.NewClient(ws.URL, nil); err != nil {
		return ws, fmt.Errorf("worker %q: want an http:// or https:// base URL", ws.URL)
	}
	for _, p := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok || v == "" {
			return ws, fmt.Errorf("worker %q: bad option %q (want key=value)", ws.URL, p)
		}
		switch k {
		case "events":
			ws.Events = v
		case "replay":
			ws.Replay = v
		case "dp":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1024 {
				return ws, fmt.Errorf("worker %q: dp must be an integer in [1, 1024], got %q", ws.URL, v)
			}
			ws.DPRanks = n
		default:
			return ws, fmt.Errorf("worker %q: unknown option %q (want events, replay or dp)", ws.URL, k)
		}
	}
	if ws.Replay != "" && ws.Events == "" {
		return ws, fmt.Errorf("worker %q: replay= needs events=", ws.URL)
	}
	return ws, nil
}

// workerFlags collects repeated --worker flags.
type workerFlags []workerSpec

func (f *workerFlags) String() string { return fmt.Sprint(len(*f), " workers") }

func (f *workerFlags) Set(s string) error {
	ws, err := parseWorkerSpec(s)
	if err != nil {
		return err
	}
	*f = append(*f, ws)
	return nil
}

// proxyConfig configures a proxy. Zero fields mean the documented defaults.
type proxyConfig struct {
	Workers []workerSpec
	// BlockSize is the router's block size; 0 takes the first worker's.
	// Every worker must agree with it.
	BlockSize int
	Policy    agentkv.Policy
	Affinity  agentkv.AffinityMode
	// Admission enables program-aware admission with its defaults (ticking
	// every Tick).
	Admission bool
	// MetricsPath serves Prometheus metrics there; "" disables.
	MetricsPath string
	// MaxBodyBytes bounds a request body (default 32 MiB): larger is 413.
	MaxBodyBytes int64
	// Tick is the control-loop period (default 5 s); Refresh the capacity
	// refresh period (default 30 s; negative disables).
	Tick, Refresh time.Duration
	// HTTPClient talks to the workers (nil: a client without timeouts, so
	// long generations are not cut).
	HTTPClient *http.Client
	// Logger receives warnings (nil discards).
	Logger *slog.Logger
	// Registry receives the metrics (nil: a new one with the Go and process
	// collectors).
	Registry *prometheus.Registry
}

// proxyWorker is one vLLM worker as the proxy and the router see it. It
// implements agentkv.Worker (vllm.Worker has no Info method).
type proxyWorker struct {
	spec workerSpec
	id   uint64
	vw   *vllm.Worker

	mu       sync.Mutex // guards capRank
	capRank  int        // KV capacity of one DP rank, tokens
	idHeader string     // "ID" for headerWorkerID without the rank
}

func (w *proxyWorker) ranks() int { return max(w.spec.DPRanks, 1) }

// Info implements agentkv.Worker.
func (w *proxyWorker) Info() agentkv.WorkerInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	return agentkv.WorkerInfo{ID: w.id, DPRanks: w.ranks(), BlockSize: w.vw.BlockSize(), KVCapacityTokens: w.capRank}
}

// proxyMetrics are the proxy's own metrics, next to the router's.
type proxyMetrics struct {
	responses *prometheus.CounterVec // code
	usage     *prometheus.CounterVec // kind: prompt, completion, cached
	fallback  prometheus.Counter
	capacity  *prometheus.GaugeVec // worker
}

func newProxyMetrics(reg prometheus.Registerer) (*proxyMetrics, error) {
	m := &proxyMetrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "proxy", Name: "responses_total",
			Help: "Completion requests answered, by HTTP status (the engine's, or the proxy's own).",
		}, []string{"code"}),
		usage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "proxy", Name: "usage_tokens_total",
			Help: "Token usage the engines reported and the proxy passed to Decision.Done, by kind (prompt, completion, cached).",
		}, []string{"kind"}),
		fallback: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "proxy", Name: "tokenize_fallback_total",
			Help: "Requests hashed from approximate pseudo-tokens because no worker's /tokenize answered.",
		}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "agentkv", Subsystem: "proxy", Name: "worker_kv_capacity_tokens",
			Help: "KV cache capacity of one DP rank of each worker, from vllm:cache_config_info.",
		}, []string{"worker"}),
	}
	for _, c := range []prometheus.Collector{m.responses, m.usage, m.fallback, m.capacity} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// proxy is the server: a Router, its workers, the HTTP handler and the
// background loops. It is safe for concurrent use.
type proxy struct {
	cfg     proxyConfig
	log     *slog.Logger
	router  *agentkv.Router
	workers []*proxyWorker // by ID
	reg     *prometheus.Registry
	m       *proxyMetrics
	handler http.Handler
	tokIdx  atomic.Uint64 // the worker tried first for /tokenize

	reqSeq atomic.Uint64

	cancel    context.CancelFunc
	wg        sync.WaitGroup // background loops
	once      sync.Once      // Close
	closeOnce sync.Once      // dropHeld
}

// newProxy connects to every worker (reading its capacity), builds the
// router, starts the event subscribers and the tick and refresh loops.
func newProxy(ctx context.Context, cfg proxyConfig) (*proxy, error) {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = defaultMaxBody
	}
	if cfg.Tick <= 0 {
		cfg.Tick = defaultTickEvery
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = defaultRefreshEvery
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{}
	}
	if cfg.MetricsPath != "" && !strings.HasPrefix(cfg.MetricsPath, "/") {
		return nil, fmt.Errorf("metrics path %q must start with /", cfg.MetricsPath)
	}
	p := &proxy{cfg: cfg, log: cfg.Logger, reg: cfg.Registry}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.reg == nil {
		p.reg = prometheus.NewRegistry()
		p.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var err error
	if p.m, err = newProxyMetrics(p.reg); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	rm, err := agentkv.NewMetrics(p.reg)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}

	// Events arrive only after Start, when p.router is set.
	sink := vllm.SinkFunc(func(ev *flashindex.Event) error { return p.router.ApplyEvent(ev) })
	blockSize := cfg.BlockSize
	approximate := false
	for i, spec := range cfg.Workers {
		wc := vllm.WorkerConfig{ID: uint64(i), URL: spec.URL, HTTPClient: cfg.HTTPClient, DPRanks: spec.DPRanks,
			BlockSize: blockSize}
		if spec.Events != "" {
			wc.Events = &vllm.Config{Endpoint: spec.Events, ReplayEndpoint: spec.Replay, Sink: sink, Logger: p.log}
		} else {
			approximate = true
		}
		vw, err := vllm.NewWorker(ctx, wc)
		if err != nil {
			p.closeWorkers()
			if errors.Is(err, vllm.ErrBlockSizeMismatch) {
				return nil, fmt.Errorf("worker %s: %w (the router hashes with block size %d; every worker must use the same)",
					spec.URL, err, blockSize)
			}
			return nil, fmt.Errorf("worker %s: cannot read its KV capacity from %s (%s): %w",
				spec.URL, vllmMetricsURL(spec.URL), vllm.CacheConfigMetric, err)
		}
		if blockSize == 0 {
			blockSize = vw.BlockSize()
		}
		pw := &proxyWorker{spec: spec, id: uint64(i), vw: vw, capRank: vw.KVCapacityTokens() / max(spec.DPRanks, 1),
			idHeader: strconv.Itoa(i)}
		p.workers = append(p.workers, pw)
		p.m.capacity.WithLabelValues(pw.idHeader).Set(float64(pw.capRank))
	}
	if blockSize == 0 {
		blockSize = 16 // no workers: any valid size
	}
	rc := agentkv.Config{BlockSize: blockSize, Policy: cfg.Policy, Affinity: cfg.Affinity, Approximate: approximate,
		Logger: p.log, Metrics: rm}
	if cfg.Admission {
		rc.Admission = &admission.Config{Interval: cfg.Tick}
	}
	if p.router, err = agentkv.New(rc); err != nil {
		p.closeWorkers()
		return nil, err
	}
	for _, w := range p.workers {
		if err := p.router.AddWorker(w); err != nil {
			p.closeWorkers()
			return nil, fmt.Errorf("worker %s: %w", w.spec.URL, err)
		}
	}
	bg, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for _, w := range p.workers {
		if err := w.vw.Start(bg); err != nil {
			cancel()
			p.closeWorkers()
			return nil, fmt.Errorf("worker %s: events: %w", w.spec.URL, err)
		}
	}
	p.wg.Add(1)
	go p.tickLoop(bg)
	if cfg.Refresh > 0 {
		p.wg.Add(1)
		go p.refreshLoop(bg)
	}
	p.handler = p.newHandler()
	return p, nil
}

func vllmMetricsURL(base string) string { return strings.TrimRight(base, "/") + "/metrics" }

func (p *proxy) closeWorkers() {
	for _, w := range p.workers {
		if err := w.vw.Close(); err != nil {
			p.log.Warn("proxy: closing worker events", "worker", w.spec.URL, "err", err)
		}
	}
}

// Close stops the loops, drops held requests, closes the subscribers and
// the router. Requests in flight may still call Done. Safe to call twice.
func (p *proxy) Close() error {
	p.once.Do(func() {
		p.dropHeld()
		p.cancel()
		p.wg.Wait()
		p.closeWorkers()
	})
	return nil
}

// dropHeld closes the router: held requests give up (503) and new ones are
// refused; requests in flight still finish.
func (p *proxy) dropHeld() {
	p.closeOnce.Do(func() { _ = p.router.Close() })
}

func (p *proxy) tickLoop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			res := p.router.Tick()
			if res.SweptRequests > 0 {
				p.log.Warn("proxy: forgot requests that showed no sign of life", "count", res.SweptRequests)
			}
		}
	}
}

func (p *proxy) refreshLoop(ctx context.Context) {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.Refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, w := range p.workers {
				p.refresh(ctx, w)
			}
		}
	}
}

// refresh re-reads one worker's KV capacity and tells the router when it
// changed. A worker that cannot be read keeps its last capacity.
func (p *proxy) refresh(ctx context.Context, w *proxyWorker) {
	rctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
	defer cancel()
	cs, err := w.vw.Client().CacheConfigs(rctx)
	if err != nil {
		p.log.Warn("proxy: cannot refresh worker capacity; keeping the last one", "worker", w.spec.URL, "err", err)
		return
	}
	total := 0
	for _, c := range cs {
		if c.BlockSize != w.vw.BlockSize() {
			p.log.Error("proxy: worker changed its block size; restart the proxy", "worker", w.spec.URL,
				"was", w.vw.BlockSize(), "now", c.BlockSize)
			return
		}
		total += c.CapacityTokens()
	}
	perRank := total / w.ranks()
	w.mu.Lock()
	changed := perRank != w.capRank
	w.capRank = perRank
	w.mu.Unlock()
	if changed {
		p.m.capacity.WithLabelValues(w.idHeader).Set(float64(perRank))
		err := p.router.AddWorker(w)
		if err != nil {
			p.log.Warn("proxy: capacity update refused", "worker", w.spec.URL, "err", err)
		}
	}
}

// Handler returns the proxy's HTTP handler.
func (p *proxy) Handler() http.Handler { return p.handler }

func (p *proxy) newHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+vllm.ChatPath, session.Middleware(p.completion(vllm.ChatPath)))
	mux.Handle("POST "+vllm.CompletionPath, session.Middleware(p.completion(vllm.CompletionPath)))
	for _, path := range []string{vllm.ChatPath, vllm.CompletionPath} {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", http.MethodPost)
			writeAPIError(w, http.StatusMethodNotAllowed, "invalid_request_error", r.Method+" "+r.URL.Path+": use POST")
		})
	}
	mux.HandleFunc("GET /v1/models", p.models)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "ok: %d worker ranks\n", len(p.router.Workers()))
	})
	if p.cfg.MetricsPath != "" {
		mux.Handle("GET "+p.cfg.MetricsPath, promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeAPIError(w, http.StatusNotFound, "not_found", "agentkv proxy: no route for "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// writeAPIError writes an OpenAI-style JSON error.
func writeAPIError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Type, body.Error.Code = msg, typ, code
	_ = json.NewEncoder(w).Encode(body)
}

func (p *proxy) fail(w http.ResponseWriter, code int, typ, msg string) {
	p.m.responses.WithLabelValues(strconv.Itoa(code)).Inc()
	writeAPIError(w, code, typ, msg)
}

// isJSONObject reports whether b is one well-formed JSON object.
func isJSONObject(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '{' && json.Valid(b)
}

// completion serves one OpenAI completion or chat completion request.
func (p *proxy) completion(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				p.fail(w, http.StatusRequestEntityTooLarge, "invalid_request_error",
					fmt.Sprintf("request body exceeds %d bytes", p.cfg.MaxBodyBytes))
				return
			}
			p.fail(w, http.StatusBadRequest, "invalid_request_error", "reading request body: "+err.Error())
			return
		}
		if !isJSONObject(body) {
			p.fail(w, http.StatusBadRequest, "invalid_request_error", "request body is not a JSON object")
			return
		}
		if len(p.workers) == 0 {
			p.fail(w, http.StatusServiceUnavailable, "service_unavailable", "agentkv proxy: no workers")
			return
		}
		if body, err = vllm.EnsureStreamUsage(body); err != nil {
			p.fail(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		tokens, err := p.tokens(ctx, path, body)
		if err != nil {
			p.fail(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		ac, _ := session.FromContext(ctx)
		d, err := p.route(ctx, &agentkv.Request{Tokens: tokens, Agent: ac})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return // the client went away while admission held the request
		case errors.Is(err, agentkv.ErrNoWorkers), errors.Is(err, agentkv.ErrDropped), errors.Is(err, agentkv.ErrClosed):
			p.fail(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
			return
		default:
			p.fail(w, http.StatusInternalServerError, "internal_error", err.Error())
			return
		}
		if d.Worker.ID >= uint64(len(p.workers)) {
			p.done(d, agentkv.Usage{Failed: true})
			p.fail(w, http.StatusServiceUnavailable, "service_unavailable", "agentkv proxy: routed to an unknown worker")
			return
		}
		pw := p.workers[d.Worker.ID]
		hdr := r.Header.Clone()
		hdr.Del(headerDPRank)
		if pw.ranks() > 1 {
			hdr.Set(headerDPRank, strconv.FormatUint(uint64(d.Worker.DPRank), 10))
		}
		h := w.Header()
		h.Set(headerWorker, pw.spec.URL)
		h.Set(headerWorkerID, pw.idHeader+"/"+strconv.FormatUint(uint64(d.Worker.DPRank), 10))
		h.Set(headerCachedTokens, strconv.Itoa(d.Cached.Device+d.Cached.Host+d.Cached.Disk))
		tw := &trackingWriter{ResponseWriter: w, d: d}
		u, ferr := pw.vw.Forward(ctx, tw, path, hdr, body)
		if ferr != nil && !tw.headerSent {
			// Nothing came back (connection refused, reset): the client gets
			// a gateway error instead of an empty reply.
			p.log.Warn("proxy: forwarding failed", "worker", pw.spec.URL, "err", ferr)
			p.fail(w, http.StatusBadGateway, "bad_gateway", "agentkv proxy: worker "+pw.spec.URL+" did not answer: "+ferr.Error())
		} else {
			p.m.responses.WithLabelValues(strconv.Itoa(tw.status)).Inc()
		}
		p.done(d, agentkv.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens,
			CachedTokens: u.CachedTokens, FinishReason: u.FinishReason, ToolCalls: u.ToolCalls, Failed: ferr != nil})
		if u.HasUsage {
			p.m.usage.WithLabelValues("prompt").Add(float64(u.PromptTokens))
			p.m.usage.WithLabelValues("completion").Add(float64(u.CompletionTokens))
			p.m.usage.WithLabelValues("cached").Add(float64(u.CachedTokens))
		}
	})
}

// route is Router.Route under a proxy-wide request id: it blocks while
// admission holds the request, returns ctx.Err() when the client leaves
// first and agentkv.ErrDropped when the proxy closes (the held turn is
// withdrawn either way).
func (p *proxy) route(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error) {
	req.ID = "px" + strconv.FormatUint(p.reqSeq.Add(1), 10)
	return p.router.Route(ctx, req)
}

func (p *proxy) done(d *agentkv.Decision, u agentkv.Usage) { d.Done(u) }

// tokens returns the prompt's token ids from the first worker whose
// /tokenize answers (the last one that did is tried first), or the
// documented approximate pseudo-tokens when none does. err is non-nil only
// for a body no worker could take (not an object, no prompt).
func (p *proxy) tokens(ctx context.Context, path string, body []byte) ([]uint32, error) {
	n := uint64(len(p.workers))
	first := p.tokIdx.Load()
	for i := uint64(0); i < n; i++ {
		k := (first + i) % n
		tctx, cancel := context.WithTimeout(ctx, tokenizeTimeout)
		toks, err := p.workers[k].vw.Client().Tokenize(tctx, path, body)
		cancel()
		if err == nil {
			if k != first {
				p.tokIdx.Store(k)
			}
			return toks, nil
		}
		var se *vllm.StatusError
		if errors.Is(err, vllm.ErrUnsupportedPrompt) || ctx.Err() != nil ||
			(errors.As(err, &se) && se.Code/100 == 4 && se.Code != http.StatusNotFound) {
			break // another worker would refuse it too
		}
	}
	text, err := vllm.PromptText(path, body)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, fmt.Errorf("agentkv proxy: cannot read the prompt: field %q holds a JSON %s", te.Field, te.Value)
		}
		return nil, fmt.Errorf("agentkv proxy: cannot read the prompt: %w", err)
	}
	p.m.fallback.Inc()
	return vllm.ApproxTokens(nil, text), nil
}

// models forwards GET /v1/models to the first worker that answers.
func (p *proxy) models(w http.ResponseWriter, r *http.Request) {
	for _, pw := range p.workers {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, pw.vw.Client().URL("/v1/models"), nil)
		if err != nil {
			continue
		}
		if a := r.Header.Get("Authorization"); a != "" {
			req.Header.Set("Authorization", a)
		}
		resp, err := p.cfg.HTTPClient.Do(req)
		if err != nil {
			continue
		}
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
		resp.Body.Close()
		return
	}
	writeAPIError(w, http.StatusServiceUnavailable, "service_unavailable", "agentkv proxy: no worker answered /v1/models")
}

// trackingWriter reports the first byte of a reply as the request's first
// token and later writes as progress, so the router moves the request from
// prefill to decode load and never sweeps a long stream.
type trackingWriter struct {
	http.ResponseWriter
	d          *agentkv.Decision
	headerSent bool
	status     int
	wrote      bool
	lastProg   time.Time
}

func (t *trackingWriter) WriteHeader(code int) {
	if !t.headerSent {
		t.headerSent, t.status = true, code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if !t.headerSent {
		t.WriteHeader(http.StatusOK)
	}
	if len(b) > 0 {
		now := time.Now()
		switch {
		case !t.wrote:
			t.wrote, t.lastProg = true, now
			t.d.FirstToken()
		case now.Sub(t.lastProg) >= time.Second:
			t.lastProg = now
			t.d.Progress()
		}
	}
	return t.ResponseWriter.Write(b)
}

// Flush passes flushes through, so streams stay streams.
func (t *trackingWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// serve runs the HTTP server on ln until ctx ends, then shuts down: held
// requests are dropped (503), requests in flight get grace to finish, the
// subscribers close.
func (p *proxy) serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	srv := &http.Server{Handler: p.handler, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn)}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	p.dropHeld() // held requests answer 503 instead of waiting out the grace
	if err := <-shut; err != nil {
		p.log.Warn("proxy: requests still running at the end of the shutdown grace; closing them", "err", err)
		_ = srv.Close()
	}
	_ = p.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// proxySignals are the signals that stop "agentkv proxy".
var proxySignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

func runProxy(env *cmdEnv, args []string) error {
	c := commands["proxy"]
	fs := newFlags(env, c)
	var workers workerFlags
	listen := fs.String("listen", defaultProxyListen, "address to serve the OpenAI-compatible API on")
	fs.Var(&workers, "worker", "vLLM base URL[,events=tcp://HOST:PORT][,replay=tcp://HOST:PORT][,dp=N] (repeatable)")
	blockSize := fs.Int("block-size", 0, "KV block size in tokens (0: read from the workers' /metrics; must match the engines)")
	policy := fs.String("policy", "kv", "worker selection: kv, round-robin or random")
	affinity := fs.String("affinity", "off", "session affinity: off, soft or hard")
	adm := fs.Bool("admission", false, "enable program-aware admission control (ThunderAgent defaults)")
	metrics := fs.String("metrics", "/metrics", "path serving Prometheus metrics (empty: none)")
	maxBody := fs.Int64("max-body", defaultMaxBody, "largest request body in bytes (larger: 413)")
	tick := fs.Duration("tick", defaultTickEvery, "control-loop period (admission, expiry sweeps)")
	refresh := fs.Duration("refresh", defaultRefreshEvery, "how often to re-read worker capacity (0: never)")
	grace := fs.Duration("shutdown-timeout", defaultShutdownGrace, "how long requests in flight may finish on shutdown")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("proxy: unexpected argument %q", fs.Arg(0))
	}
	if len(workers) == 0 {
		return usagef("proxy: at least one --worker URL is required")
	}
	pol, err := agentkv.ParsePolicy(*policy)
	if err != nil {
		return usagef("proxy: --policy: %v", err)
	}
	aff, err := parseAffinity(*affinity)
	if err != nil {
		return usagef("proxy: %v", err)
	}
	switch {
	case *blockSize < 0:
		return usagef("proxy: --block-size must be ≥ 0, got %d", *blockSize)
	case *maxBody <= 0:
		return usagef("proxy: --max-body must be > 0, got %d", *maxBody)
	case *tick <= 0:
		return usagef("proxy: --tick must be > 0, got %v", *tick)
	case *refresh < 0:
		return usagef("proxy: --refresh must be ≥ 0, got %v", *refresh)
	case *grace <= 0:
		return usagef("proxy: --shutdown-timeout must be > 0, got %v", *grace)
	case *metrics != "" && !strings.HasPrefix(*metrics, "/"):
		return usagef("proxy: --metrics must be a path starting with /, got %q", *metrics)
	}
	if *refresh == 0 {
		*refresh = -1 // proxyConfig: negative disables
	}

	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	logger := slog.New(slog.NewTextHandler(env.stderr, nil))
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	p, err := newProxy(startCtx, proxyConfig{Workers: workers, BlockSize: *blockSize, Policy: pol, Affinity: aff,
		Admission: *adm, MetricsPath: *metrics, MaxBodyBytes: *maxBody, Tick: *tick, Refresh: *refresh, Logger: logger})
	cancel()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = p.Close()
		return err
	}
	info := p.workers[0].Info()
	mode := "KV events"
	for _, w := range p.workers {
		if w.spec.Events == "" {
			mode = "approximate (no KV events from some workers)"
		}
	}
	fmt.Fprintf(env.stdout, "agentkv proxy listening on http://%s: %d workers, block size %d, policy %s, affinity %s, admission %v, index %s\n",
		ln.Addr(), len(p.workers), info.BlockSize, pol, *affinity, *adm, mode)
	err = p.serve(ctx, ln, *grace)
	fmt.Fprintln(env.stdout, "agentkv proxy stopped")
	return err
}

func parseAffinity(s string) (agentkv.AffinityMode, error) {
	switch s {
	case "off", "":
		return agentkv.AffinityOff, nil
	case "soft":
		return agentkv.AffinitySoft, nil
	case "hard":
		return agentkv.AffinityHard, nil
	}
	return 0, fmt.Errorf("--affinity: unknown mode %q (want off, soft or hard)", s)
}
