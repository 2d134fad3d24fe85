package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
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
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/hftok"
	"github.com/agentkv/agentkv/kvhint"
)

func init() {
	register(&command{
		name:    "proxy",
		summary: "a session-aware KV router serving the OpenAI and Anthropic APIs in front of vLLM workers",
		usage:   "--worker URL[,events=tcp://HOST:5557][,replay=tcp://HOST:5558][,dp=N][,apis=LIST][,tokens=LIST] [--worker ...] [flags]",
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
	go func() { errc <- srv.Serve(gateway.ShapeErrors(ln)) }()
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

// proxyFlags are runProxy's flags, one field per flag (register adds
// them to a FlagSet), and config turns them into the stack's
// configuration. As in the library, 0 means a flag's default; "off"
// disables what can be disabled.
type proxyFlags struct {
	listen       string
	workers      workerFlags
	blockSize    int
	policy       string
	affinity     string
	infer        bool
	hints        string
	admission    bool
	metrics      string
	maxBody      int64
	tick         time.Duration
	refresh      offDuration
	bodyTimeout  time.Duration
	maxHeader    int
	maxInFlight  int64
	grace        time.Duration
	traceOut     string
	migration    offInt
	probe        time.Duration
	firstByte    offDuration
	fbFactor     float64
	fbFloor      time.Duration
	streamIdle   offDuration
	ejectionTime time.Duration
	contextToks  int
	ejectShare   float64
	latencyEject float64
	stripBilling bool
	tokenizer    string
	modelAliases modelAliasFlags
	apiKeys      string
	tenantCap    int
	hideWorkers  bool
	nats         *natsFlags
}

// register adds the flags to fs with their defaults.
func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", defaultProxyListen, "address to serve the APIs on")
	fs.Var(&f.workers, "worker", "vLLM base URL[,events=tcp://HOST:PORT][,replay=tcp://HOST:PORT][,dp=N][,apis=chat+responses+...][,tokens=generate+inference+completions][,hints=inline|control|off][,engine=vllm|sglang] (repeatable)")
	fs.IntVar(&f.blockSize, "block-size", 0, "KV block size in tokens (0: read from the workers' /metrics; must match the engines)")
	fs.StringVar(&f.policy, "policy", "kv", "worker selection: kv, round-robin, random or global-lb (VERL's default rollout balancer: sticky per session, else the fewest requests in flight)")
	fs.StringVar(&f.affinity, "affinity", "auto", "session affinity: auto (soft: a session stays on its worker unless that one is busy; off with --policy global-lb, which is sticky itself), off, soft or hard")
	fs.StringVar(&f.hints, "hints", "off", "KV hint policies, comma-separated: share, tail, pin, release, all or off; sent to workers whose spec says hints=inline|control (--mock-workers: inline)")
	fs.BoolVar(&f.infer, "infer-sessions", false, "infer the session of a request that names none from its prompt (README: How agentkv recognises sessions)")
	fs.BoolVar(&f.admission, "admission", false, "enable program-aware admission control (admission.Agentic: ThunderAgent with bounded waits, growth-sized placement, home-first resumes, and probes that start a rollout batch's programs while they wait)")
	fs.StringVar(&f.metrics, "metrics", "/metrics", "path serving Prometheus metrics (empty: none)")
	fs.Int64Var(&f.maxBody, "max-body", gateway.DefaultMaxBodyBytes, "largest request body in bytes (larger: 413)")
	fs.DurationVar(&f.tick, "tick", gateway.DefaultTick, "control-loop period (admission, expiry sweeps)")
	fs.Var(&f.refresh, "refresh", fmt.Sprintf("how often to re-read worker capacity (0: the default, %v; off: never)", gateway.DefaultRefresh))
	fs.DurationVar(&f.bodyTimeout, "body-timeout", gateway.DefaultBodyReadTimeout, "how long a request body may take to arrive (then 408)")
	fs.IntVar(&f.maxHeader, "max-header", gateway.DefaultMaxHeaderBytes, "largest request header block in bytes (larger: 431)")
	fs.Int64Var(&f.maxInFlight, "max-body-in-flight", gateway.DefaultMaxBodyBytesInFlight, "request body bytes held in memory at once, all requests together (beyond: 503)")
	fs.DurationVar(&f.grace, "shutdown-timeout", defaultShutdownGrace, "how long requests in flight may finish on shutdown")
	fs.StringVar(&f.traceOut, "trace-out", "", "write content-free request records (JSONL; .gz or .zst compress) to this file")
	fs.Var(&f.migration, "migration-limit", "times a cut chat stream may move to another worker and continue (0 or off: off, the library's default; the client then gets the API's error event)")
	fs.DurationVar(&f.probe, "probe-interval", failover.DefaultProbeInterval, "how often each worker's /health is probed while it is up (down: from 100 ms, doubling up to this)")
	fs.Var(&f.firstByte, "first-byte-timeout", fmt.Sprintf("longest wait for a stream's first byte from a worker before trying another (0: the default, %v; off: none)", gateway.DefaultFirstByteTimeout))
	fs.Float64Var(&f.fbFactor, "first-byte-factor", failover.DefaultFirstByteFactor, "a request's first-byte deadline is --first-byte-floor + this × its expected time (its prompt at the worker's observed prefill speed; for a whole reply, its output budget too)")
	fs.DurationVar(&f.fbFloor, "first-byte-floor", failover.DefaultFirstByteFloor, "the fixed part of a request's first-byte deadline")
	fs.Var(&f.streamIdle, "stream-idle-timeout", fmt.Sprintf("longest silence in a worker's stream before it counts as stalled (retried, migrated or ended like a cut stream; 0: the default, %v; off: none)", gateway.DefaultStreamIdleTimeout))
	fs.DurationVar(&f.ejectionTime, "ejection-time", failover.DefaultOpenFor, "how long a worker ejected for timeouts, errors or latency stays out the first time (the n-th ejection lasts n × this, up to 10 ×; then it is on trial)")
	fs.IntVar(&f.contextToks, "context-tokens", failover.DefaultContextTokens, "the served model's context length: a whole (not streamed) reply with no max_tokens may generate up to this less its prompt, and its first-byte deadline allows for that")
	fs.Float64Var(&f.ejectShare, "max-ejected-share", failover.DefaultMaxEjectedShare, "most of the workers ejected at once for timeouts, errors or latency (at least one)")
	fs.Float64Var(&f.latencyEject, "latency-eject-factor", failover.DefaultLatencyFactor, "eject a worker whose time to first token per prompt token is over this × its peers' median (0: off)")
	fs.BoolVar(&f.stripBilling, "strip-billing-header", true, "remove Claude Code's per-request billing preamble from Messages system prompts")
	fs.StringVar(&f.tokenizer, "tokenizer", "", "the served model's Hugging Face directory (tokenizer.json, tokenizer_config.json, chat_template.jinja): --worker prompts are tokenized in process, checked against the workers' /tokenize now and then, instead of a /tokenize call per request; default: each worker's model (GET /v1/models) looked up in the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub), /tokenize where it is not there; off: always /tokenize")
	fs.Var(&f.modelAliases, "model-alias", "PATTERN=MODEL: requests for a model matching the glob PATTERN go to MODEL, the served model (repeatable; first match wins; listed in /v1/models), e.g. 'claude-*=Qwen/Qwen3-8B' for Claude Code's built-in model names")
	fs.StringVar(&f.apiKeys, "api-keys", "", "file of API keys, one 'NAME KEY [admin] [weight=N] [max-in-flight=N] [max-sessions=N] [max-programs=N] [shared-cache]' a line (see gateway/tenant): every request needs a key (401 otherwise), tenants' sessions and cached prefixes are kept apart, /metrics needs an admin key; reloaded on SIGHUP")
	fs.IntVar(&f.tenantCap, "tenant-capacity", 0, "with --api-keys: requests in flight, all tenants together, past which each tenant is held to its weighted share (429 beyond it; 0: no fair-share limit); a tenant over its share also has its prefills paced while another tenant has been active in the last 30 s")
	fs.BoolVar(&f.hideWorkers, "hide-worker-addresses", false, "name workers to clients by their index (X-Agentkv-Worker: worker-N, error replies, /readyz) instead of their URL")
	f.nats = addNATSFlags(fs)
}

// config checks the flags and returns the stack's configuration (its
// workers are the --worker flags; the caller adds mock workers, the
// tokenizer, the logger, the trace and the registry) and the server's.
func (f *proxyFlags) config() (gateway.StackConfig, gateway.ServerConfig, error) {
	var cfg gateway.StackConfig
	sc := gateway.ServerConfig{MaxBodyBytes: f.maxBody, BodyReadTimeout: f.bodyTimeout,
		MaxHeaderBytes: f.maxHeader, MaxBodyBytesInFlight: f.maxInFlight}
	pol, err := agentkv.ParsePolicy(f.policy)
	if err != nil {
		return cfg, sc, usagef("proxy: --policy: %v", err)
	}
	switch {
	case f.blockSize < 0:
		return cfg, sc, usagef("proxy: --block-size must be ≥ 0, got %d", f.blockSize)
	case f.maxBody <= 0:
		return cfg, sc, usagef("proxy: --max-body must be > 0, got %d", f.maxBody)
	case f.bodyTimeout <= 0 || f.maxHeader <= 0 || f.maxInFlight < f.maxBody:
		return cfg, sc, usagef("proxy: --body-timeout and --max-header must be > 0 and --max-body-in-flight ≥ --max-body")
	case f.tick <= 0:
		return cfg, sc, usagef("proxy: --tick must be > 0, got %v", f.tick)
	case f.probe <= 0:
		return cfg, sc, usagef("proxy: --probe-interval must be > 0, got %v", f.probe)
	case !(f.fbFactor > 0) || f.fbFloor < 0:
		return cfg, sc, usagef("proxy: --first-byte-factor must be > 0, --first-byte-floor ≥ 0")
	case f.ejectionTime <= 0 || f.contextToks <= 0:
		return cfg, sc, usagef("proxy: --ejection-time and --context-tokens must be > 0")
	case !(f.ejectShare >= 0 && f.ejectShare <= 1) || f.latencyEject < 0 || (f.latencyEject > 0 && f.latencyEject < 1):
		return cfg, sc, usagef("proxy: --max-ejected-share must be in [0, 1], --latency-eject-factor 0 (off) or ≥ 1")
	case f.grace <= 0:
		return cfg, sc, usagef("proxy: --shutdown-timeout must be > 0, got %v", f.grace)
	case f.metrics != "" && !strings.HasPrefix(f.metrics, "/"):
		return cfg, sc, usagef("proxy: --metrics must be a path starting with /, got %q", f.metrics)
	case f.tenantCap < 0 || (f.tenantCap > 0 && f.apiKeys == ""):
		return cfg, sc, usagef("proxy: --tenant-capacity needs --api-keys and must be ≥ 0")
	}
	hintPolicies, err := kvhint.NamedPolicies(f.hints)
	if err != nil {
		return cfg, sc, usagef("proxy: --hints: %v", err)
	}
	var keys *tenant.Set
	if f.apiKeys != "" {
		if keys, err = tenant.Load(f.apiKeys); err != nil {
			return cfg, sc, usagef("proxy: --api-keys: %v", err)
		}
	}
	aff := gateway.DefaultAffinity
	if pol == agentkv.GlobalLB {
		aff = agentkv.AffinityOff // global-lb is sticky itself, as VERL's balancer
	}
	if f.affinity != "auto" {
		if aff, err = parseAffinity(f.affinity); err != nil {
			return cfg, sc, usagef("proxy: %v", err)
		}
	}
	cfg = gateway.StackConfig{Workers: append([]gateway.WorkerSpec(nil), f.workers...), BlockSize: f.blockSize, Policy: pol, Affinity: aff,
		Admission: f.admission, Tick: f.tick, Refresh: f.refresh.value(), Hints: hintPolicies,
		Gateway: gateway.Config{MaxBodyBytes: f.maxBody, StripBillingHeader: f.stripBilling, ModelAliases: f.modelAliases,
			Failover: failover.Config{MigrationLimit: int(f.migration), Probe: failover.ProbeConfig{Interval: f.probe},
				Breaker: failover.BreakerConfig{OpenFor: f.ejectionTime},
				Outlier: failover.OutlierConfig{FirstByteFactor: f.fbFactor, FirstByteFloor: f.fbFloor,
					MaxEjectedShare: f.ejectShare, LatencyFactor: f.latencyEject, ContextTokens: f.contextToks}},
			FirstByteTimeout: f.firstByte.value(), StreamIdleTimeout: f.streamIdle.value(),
			Keys: keys, TenantLimits: tenant.LimitsConfig{Capacity: f.tenantCap}, HideWorkerAddresses: f.hideWorkers}}
	if f.infer {
		cfg.InferSessions = &agentkv.InferConfig{}
	}
	o := &cfg.Gateway.Failover.Outlier
	if f.fbFloor == 0 {
		o.FirstByteFloor = -1 // OutlierConfig: negative is no floor (0 is its default)
	}
	if f.ejectShare == 0 {
		o.MaxEjectedShare = 1e-9 // at least one worker, as documented
	}
	if f.latencyEject == 0 {
		o.LatencyFactor = -1 // OutlierConfig: negative disables
	}
	return cfg, sc, nil
}

// modelAliasFlags collects repeated --model-alias PATTERN=MODEL flags.
type modelAliasFlags []gateway.ModelAlias

func (f *modelAliasFlags) String() string { return fmt.Sprint(len(*f), " aliases") }

func (f *modelAliasFlags) Set(s string) error {
	a, err := gateway.ParseModelAlias(s)
	if err != nil {
		return err
	}
	*f = append(*f, a)
	return nil
}

// offDuration is a duration flag that also takes "off": 0 means the
// library's default, "off" disables (a negative value in the library's
// Config).
type offDuration struct {
	d   time.Duration
	off bool
}

func (o *offDuration) String() string {
	if o.off {
		return "off"
	}
	return o.d.String()
}

func (o *offDuration) Set(s string) error {
	if s == "off" {
		*o = offDuration{off: true}
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("want a duration ≥ 0 or off, got %q", s)
	}
	*o = offDuration{d: d}
	return nil
}

// value is the Config value: the duration, or -1 for off.
func (o offDuration) value() time.Duration {
	if o.off {
		return -1
	}
	return o.d
}

// offInt is a count flag that also takes "off" (0: the library's default,
// which for the migration limit is off).
type offInt int

func (o *offInt) String() string { return strconv.Itoa(int(*o)) }

func (o *offInt) Set(s string) error {
	if s == "off" {
		*o = 0
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return fmt.Errorf("want a number ≥ 0 or off, got %q", s)
	}
	*o = offInt(n)
	return nil
}

func runProxy(env *cmdEnv, args []string) error {
	c := commands["proxy"]
	fs := newFlags(env, c)
	var f proxyFlags
	f.register(fs)
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
	cfg, sc, err := f.config()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), proxySignals...)
	defer stop()
	logger := slog.New(slog.NewTextHandler(env.stderr, nil))
	cfg.Logger = logger
	if keys := cfg.Gateway.Keys; keys != nil {
		logger.Info("proxy: API keys required", "file", f.apiKeys, "keys", keys.Keys().Len(), "tenants", len(keys.Keys().Tenants()))
		defer reloadOnHUP(ctx, keys, logger)()
	} else if !loopback(f.listen) {
		logger.Warn("proxy: listening beyond loopback without --api-keys: anyone who reaches "+f.listen+
			" can use any session, end or release it, and read /metrics", "listen", f.listen)
	}
	for _, start := range starts {
		specs, stopWorkers, err := start(ctx, logger)
		if err != nil {
			return err
		}
		if stopWorkers != nil {
			defer stopWorkers()
		}
		cfg.Workers = append(cfg.Workers, specs...)
	}
	if len(cfg.Workers) == 0 {
		return usagef("proxy: at least one --worker URL (or --mock-workers N) is required")
	}
	switch f.tokenizer {
	case "off":
		logger.Info("proxy: --tokenizer off: every request is tokenized by a worker's /tokenize")
	case "": // the served model's tokenizer from the Hugging Face cache, where there is one
		hs := &hubTokenizers{log: logger, client: &http.Client{}, retry: 2 * time.Second}
		tctx, cancel := context.WithCancel(ctx)
		defer hs.wait()
		defer cancel()
		hs.attach(tctx, cfg.Workers)
	default:
		chat, err := hftok.LoadChat(f.tokenizer, hftok.ChatConfig{})
		if err != nil {
			return usagef("proxy: --tokenizer: %v", err)
		}
		for i := range cfg.Workers {
			if cfg.Workers[i].Tokenizer == nil { // mock workers bring their own
				cfg.Workers[i].Tokenizer = chat
			}
		}
	}
	if f.traceOut != "" {
		fh, tw, err := openTraceOut(f.traceOut)
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
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	cfg.Registry = prometheus.NewRegistry()
	cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	startMetrics := f.metrics
	if cfg.Gateway.Keys != nil {
		startMetrics = "" // /metrics needs an admin key, which the stack checks once it is up
	}
	late := &lateHandler{starting: startingHandler(startMetrics, cfg.Registry)}
	sc.Logger, sc.Registerer = logger, cfg.Registry
	srv, err := gateway.NewServer(late, sc)
	if err != nil {
		_ = ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(gateway.ShapeErrors(ln)) }()
	nr, err := f.nats.prepare(ctx, &cfg, f.listen, logger, env.stdout)
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
	handler := s.Handler(f.metrics)
	if nr != nil {
		if handler, err = nr.start(s, handler, "http://"+ln.Addr().String(), f.admission, f.maxBody); err != nil {
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
	affName := map[agentkv.AffinityMode]string{agentkv.AffinityOff: "off", agentkv.AffinitySoft: "soft", agentkv.AffinityHard: "hard"}[cfg.Affinity]
	fmt.Fprintf(env.stdout, "agentkv proxy listening on http://%s: %d workers, block size %d, policy %s, affinity %s, admission %v, index %s\n",
		ln.Addr(), s.Workers(), s.BlockSize(), cfg.Policy, affName, f.admission, mode)
	err = runServer(ctx, s, srv, errc, f.grace, logger)
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
