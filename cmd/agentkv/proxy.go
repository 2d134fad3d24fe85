package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/hftok"
	"github.com/agentkv/agentkv/kvhint"
)

func init() {
	register(&command{
		name:    "proxy",
		summary: "a session-aware KV router serving the OpenAI and Anthropic APIs in front of vLLM workers",
		usage:   "--worker URL[,events=tcp://HOST:5557][,replay=tcp://HOST:5558][,dp=N][,apis=LIST] [--worker ...] [flags]",
		help: `
Serve OpenAI /v1/chat/completions, /v1/completions, /v1/responses and
/v1/models and Anthropic /v1/messages and /v1/messages/count_tokens (each
streaming and not), routing each request to the worker that already holds
the most of its prompt in KV cache (or by round-robin / random), with agent
sessions recognised from the headers Claude Code, Codex, OpenCode, Dynamo,
ThunderAgent (program_id) and SGLang-gateway clients send. This command is a
flag layer over the importable package gateway; see its documentation for
the details.

Per request: the agent session is read from the headers and body; the
prompt is tokenized through its chat-completions form by a worker's
/tokenize (which applies the chat template exactly as the engine will; when
no worker can, the prompt text is chunked into pseudo-tokens, counted in
agentkv_gateway_prompt_tokens_source_total{source="approximate"}); the
Router picks a worker (held while program-aware admission says wait, with
--admission); the request is passed through byte for byte when the worker
serves its API natively (apis= of --worker), else translated to and from
chat completions; the usage in the reply is reported back to the Router.
Replies carry X-Agentkv-Worker, X-Agentkv-Worker-Id (ID/DP rank) and
X-Agentkv-Cached-Tokens, and X-Agentkv-Shared-Tokens when a shared KV pool
(with --nats, fed by "agentkv relay --store") credits the worker.

Each --worker is a vLLM server's base URL, optionally followed by
comma-separated options: events=tcp://HOST:PORT subscribes to the engine's KV
events (vLLM --kv-events-config endpoint; DP rank r on PORT+r), replay=
names its replay socket, dp=N its data-parallel size (requests are pinned
to the chosen rank with X-Data-Parallel-Rank), apis= the APIs it serves
natively, joined by + (chat+completions+responses+messages, or all; default
chat+completions, which every OpenAI-compatible engine serves). Workers get
IDs 0, 1, ... in the order given. While any worker publishes no events the
router runs in approximate mode (it remembers its own routing decisions as
if they were cached blocks). --affinity auto (the default) is soft: a
session stays on the worker that served it unless that worker is busy, so
a quick next turn that beats its KV events still finds its prefix.

--trace-out FILE writes one content-free request_end record per request
(session, parent, tokens, cached tokens, worker, TTFT, total time, API,
error kind; .gz/.zst compress) that "agentkv trace inspect", "simulate" and
"replay" read back.

KV capacity and block size are read from each worker's /metrics
(vllm:cache_config_info) at startup, and every --refresh after. A worker
that does not answer at startup is waited for in the background, with
backoff, and joins when it answers; without --block-size the proxy waits
for a first worker to learn it from, answering /healthz (200, live),
/readyz (503) and API requests (503) meanwhile. /readyz is 200 while at
least one worker is routable: health probes (GET /health) and a circuit
breaker per worker take a dead or failing worker out, retries move a
request that failed before its first byte, and --migration-limit lets a
cut chat stream continue on another worker. A control-loop tick runs every --tick. SIGINT or
SIGTERM shuts the server down cleanly: held requests get 503, requests in
flight finish (up to --shutdown-timeout), event subscribers close.`,
		run: runProxy,
	})
}

// Defaults of the proxy.
const (
	defaultProxyListen   = "127.0.0.1:8000"
	defaultShutdownGrace = 30 * time.Second
)

// workerFlags collects repeated --worker flags.
type workerFlags []gateway.WorkerSpec

func (f *workerFlags) String() string { return fmt.Sprint(len(*f), " workers") }

func (f *workerFlags) Set(s string) error {
	ws, err := gateway.ParseWorkerSpec(s)
	if err != nil {
		return err
	}
	*f = append(*f, ws)
	return nil
}

// serveStack runs the HTTP server on ln until ctx ends, then shuts down:
// held requests are dropped (503), requests in flight get grace to finish,
// the stack closes.
func serveStack(ctx context.Context, s *gateway.Stack, h http.Handler, ln net.Listener, grace time.Duration,
	sc gateway.ServerConfig, log *slog.Logger) error {
	sc.Logger, sc.Registerer = log, s.Registry()
	srv, err := gateway.NewServer(h, sc)
	if err != nil {
		_ = s.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	return runServer(ctx, s, srv, errc, grace, log)
}

// runServer waits until ctx ends or srv stops serving (errc), then shuts
// srv and the stack down as serveStack says.
func runServer(ctx context.Context, s *gateway.Stack, srv *http.Server, errc <-chan error, grace time.Duration, log *slog.Logger) error {
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(sctx) }()
	s.DropHeld() // held requests answer 503 instead of waiting out the grace
	if err := <-shut; err != nil {
		log.Warn("proxy: requests still running at the end of the shutdown grace; closing them", "err", err)
		_ = srv.Close()
	}
	_ = s.Close()
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// lateHandler serves starting until the stack's handler is set: the
// proxy listens before its stack is built, which waits for a first worker
// when no --block-size is given, so /healthz, /readyz and /metrics answer
// (and API requests get a clean 503) meanwhile, instead of a refused
// connection that a liveness probe or a load balancer takes for a dead
// proxy.
type lateHandler struct {
	h        atomic.Pointer[http.Handler]
	starting http.Handler
}

func (l *lateHandler) set(h http.Handler) { l.h.Store(&h) }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	l.starting.ServeHTTP(w, r)
}

// startingMessage is what the proxy answers while its stack starts.
const startingMessage = "agentkv proxy: starting: waiting for a worker to answer (its KV block size and capacity)"

// startingHandler answers while the stack starts: /healthz 200 (live),
// /readyz 503, metrics at metricsPath, every other request 503 in its
// API's error shape with Retry-After.
func startingHandler(metricsPath string, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	if metricsPath != "" {
		mux.Handle("GET "+metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok: live; "+strings.TrimPrefix(startingMessage, "agentkv proxy: "))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not ready: "+startingMessage, http.StatusServiceUnavailable)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		gateway.WriteError(w, r, http.StatusServiceUnavailable, startingMessage)
	})
	return mux
}

// proxySignals are the signals that stop "agentkv proxy".
var proxySignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// proxyHooks lets other files of the command add workers (the mock
// workers of --mock-workers) before the stack starts: each hook registers
// its flags on fs and returns a start function called after parsing, which
// returns worker specs to append and a stop function.
var proxyHooks []func(fs flagSet) func(ctx context.Context, log *slog.Logger) ([]gateway.WorkerSpec, func(), error)

// flagSet is the part of *flag.FlagSet the hooks use.
type flagSet interface {
	Int(name string, value int, usage string) *int
	String(name string, value string, usage string) *string
	Bool(name string, value bool, usage string) *bool
	Float64(name string, value float64, usage string) *float64
	Duration(name string, value time.Duration, usage string) *time.Duration
}

func runProxy(env *cmdEnv, args []string) error {
	c := commands["proxy"]
	fs := newFlags(env, c)
	var workers workerFlags
	listen := fs.String("listen", defaultProxyListen, "address to serve the APIs on")
	fs.Var(&workers, "worker", "vLLM base URL[,events=tcp://HOST:PORT][,replay=tcp://HOST:PORT][,dp=N][,apis=chat+responses+...][,hints=inline|control|off] (repeatable)")
	blockSize := fs.Int("block-size", 0, "KV block size in tokens (0: read from the workers' /metrics; must match the engines)")
	policy := fs.String("policy", "kv", "worker selection: kv, round-robin or random")
	affinity := fs.String("affinity", "auto", "session affinity: auto (soft: a session stays on its worker unless that one is busy), off, soft or hard")
	adm := fs.Bool("admission", false, "enable program-aware admission control (admission.Agentic: ThunderAgent with bounded waits, growth-sized placement and home-first resumes)")
	metrics := fs.String("metrics", "/metrics", "path serving Prometheus metrics (empty: none)")
	maxBody := fs.Int64("max-body", gateway.DefaultMaxBodyBytes, "largest request body in bytes (larger: 413)")
	tick := fs.Duration("tick", gateway.DefaultTick, "control-loop period (admission, expiry sweeps)")
	refresh := fs.Duration("refresh", gateway.DefaultRefresh, "how often to re-read worker capacity (0: never)")
	bodyTimeout := fs.Duration("body-timeout", gateway.DefaultBodyReadTimeout, "how long a request body may take to arrive (then 408)")
	maxHeader := fs.Int("max-header", gateway.DefaultMaxHeaderBytes, "largest request header block in bytes (larger: 431)")
	maxInFlight := fs.Int64("max-body-in-flight", gateway.DefaultMaxBodyBytesInFlight, "request body bytes held in memory at once, all requests together (beyond: 503)")
	grace := fs.Duration("shutdown-timeout", defaultShutdownGrace, "how long requests in flight may finish on shutdown")
	traceOut := fs.String("trace-out", "", "write content-free request records (JSONL; .gz or .zst compress) to this file")
	migration := fs.Int("migration-limit", 0, "times a cut chat stream may move to another worker and continue (0: off; the client then gets the API's error event)")
	probe := fs.Duration("probe-interval", failover.DefaultProbeInterval, "how often each worker's /health is probed while it is up (down: from 100 ms, doubling up to this)")
	firstByte := fs.Duration("first-byte-timeout", gateway.DefaultFirstByteTimeout, "longest wait for a stream's first byte from a worker before trying another (0: none)")
	stripBilling := fs.Bool("strip-billing-header", true, "remove Claude Code's per-request billing preamble from Messages system prompts")
	tokDir := fs.String("tokenizer", "", "the served model's Hugging Face directory (tokenizer.json, tokenizer_config.json, chat_template.jinja): --worker prompts are tokenized in process, checked against the workers' /tokenize now and then, instead of a /tokenize call per request")
	hints := fs.String("hints", "off", "KV hint policies, comma-separated: share, tail, pin, release, all or off; sent to workers whose spec says hints=inline|control (--mock-workers: inline)")
	nf := addNATSFlags(fs)
	var starts []func(ctx context.Context, log *slog.Logger) ([]gateway.WorkerSpec, func(), error)
	for _, h := range proxyHooks {
		starts = append(starts, h(fs))
	}
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("proxy: unexpected argument %q", fs.Arg(0))
	}
	pol, err := agentkv.ParsePolicy(*policy)
	if err != nil {
		return usagef("proxy: --policy: %v", err)
	}
	hintPolicies, err := kvhint.NamedPolicies(*hints)
	if err != nil {
		return usagef("proxy: --hints: %v", err)
	}
	switch {
	case *blockSize < 0:
		return usagef("proxy: --block-size must be ≥ 0, got %d", *blockSize)
	case *maxBody <= 0:
		return usagef("proxy: --max-body must be > 0, got %d", *maxBody)
	case *bodyTimeout <= 0 || *maxHeader <= 0 || *maxInFlight < *maxBody:
		return usagef("proxy: --body-timeout and --max-header must be > 0 and --max-body-in-flight ≥ --max-body")
	case *tick <= 0:
		return usagef("proxy: --tick must be > 0, got %v", *tick)
	case *refresh < 0:
		return usagef("proxy: --refresh must be ≥ 0, got %v", *refresh)
	case *migration < 0 || *firstByte < 0 || *probe <= 0:
		return usagef("proxy: --migration-limit and --first-byte-timeout must be ≥ 0, --probe-interval > 0")
	case *grace <= 0:
		return usagef("proxy: --shutdown-timeout must be > 0, got %v", *grace)
	case *metrics != "" && !strings.HasPrefix(*metrics, "/"):
		return usagef("proxy: --metrics must be a path starting with /, got %q", *metrics)
	}
	if *affinity != "auto" {
		if _, err := parseAffinity(*affinity); err != nil {
			return usagef("proxy: %v", err)
		}
	}
	if *refresh == 0 {
		*refresh = -1 // StackConfig: negative disables
	}

	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	logger := slog.New(slog.NewTextHandler(env.stderr, nil))
	for _, start := range starts {
		specs, stopWorkers, err := start(ctx, logger)
		if err != nil {
			return err
		}
		if stopWorkers != nil {
			defer stopWorkers()
		}
		workers = append(workers, specs...)
	}
	if len(workers) == 0 {
		return usagef("proxy: at least one --worker URL (or --mock-workers N) is required")
	}
	if *tokDir != "" {
		chat, err := hftok.LoadChat(*tokDir, hftok.ChatConfig{})
		if err != nil {
			return usagef("proxy: --tokenizer: %v", err)
		}
		for i := range workers {
			if workers[i].Tokenizer == nil { // mock workers bring their own
				workers[i].Tokenizer = chat
			}
		}
	}
	aff := gateway.DefaultAffinity
	if *affinity != "auto" {
		aff, _ = parseAffinity(*affinity)
	}
	cfg := gateway.StackConfig{Workers: workers, BlockSize: *blockSize, Policy: pol, Affinity: aff,
		Admission: *adm, Tick: *tick, Refresh: *refresh, Logger: logger, Hints: hintPolicies,
		Gateway: gateway.Config{MaxBodyBytes: *maxBody, StripBillingHeader: *stripBilling,
			Failover:         failover.Config{MigrationLimit: *migration, Probe: failover.ProbeConfig{Interval: *probe}},
			FirstByteTimeout: *firstByte}}
	if *firstByte == 0 {
		cfg.Gateway.FirstByteTimeout = -1 // Config: negative disables
	}
	if *traceOut != "" {
		fh, tw, err := openTraceOut(*traceOut)
		if err != nil {
			return fmt.Errorf("proxy: --trace-out: %w", err)
		}
		defer fh.Close()
		defer tw.Close() // after the stack: the last records are flushed
		cfg.Trace = tw
	}
	// Listen first: while the stack starts (it waits for a first worker
	// when the block size is not given) the proxy answers /healthz,
	// /readyz and /metrics, and API requests get 503.
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	cfg.Registry = prometheus.NewRegistry()
	cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	late := &lateHandler{starting: startingHandler(*metrics, cfg.Registry)}
	srv, err := gateway.NewServer(late, gateway.ServerConfig{MaxBodyBytes: *maxBody, BodyReadTimeout: *bodyTimeout,
		MaxHeaderBytes: *maxHeader, MaxBodyBytesInFlight: *maxInFlight, Logger: logger, Registerer: cfg.Registry})
	if err != nil {
		_ = ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	nr, err := nf.prepare(ctx, &cfg, *listen, logger, env.stdout)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer nr.stop()
	// Workers that are down are waited for (in the background once the
	// block size is known), never fatal; only a signal ends the wait.
	s, err := gateway.NewStack(ctx, cfg)
	if err != nil {
		_ = srv.Close()
		return err
	}
	handler := s.Handler(*metrics)
	if nr != nil {
		if handler, err = nr.start(s, handler, "http://"+ln.Addr().String(), *adm, *maxBody); err != nil {
			_ = s.Close()
			_ = srv.Close()
			return err
		}
	}
	late.set(handler)
	mode := "KV events"
	if nr != nil {
		mode = "KV events from the event plane"
	}
	if s.Approximate() {
		mode = "approximate (no KV events from some workers)"
	}
	affName := map[agentkv.AffinityMode]string{agentkv.AffinityOff: "off", agentkv.AffinitySoft: "soft", agentkv.AffinityHard: "hard"}[aff]
	fmt.Fprintf(env.stdout, "agentkv proxy listening on http://%s: %d workers, block size %d, policy %s, affinity %s, admission %v, index %s\n",
		ln.Addr(), s.Workers(), s.BlockSize(), pol, affName, *adm, mode)
	err = runServer(ctx, s, srv, errc, *grace, logger)
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
	return 0, fmt.Errorf("--affinity: unknown mode %q (want auto, off, soft or hard)", s)
}
