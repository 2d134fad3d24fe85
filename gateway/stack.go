package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/sglang"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/sharedpool"
)

// Defaults of StackConfig.
const (
	DefaultTick    = 5 * time.Second
	DefaultRefresh = 30 * time.Second
)

// WorkerSpec names one vLLM-compatible worker for a Stack.
type WorkerSpec struct {
	// URL is the engine's base URL.
	URL string
	// Events is the ZMQ PUB endpoint of its KV events ("" = none; the
	// router then runs in approximate mode); Replay its replay endpoint.
	Events, Replay string
	// DPRanks is the engine's data-parallel size (0 means 1).
	DPRanks int
	// Native is the set of APIs the engine serves itself (0: Baseline).
	Native APIs
	// Tokenizer, if set, tokenizes for routing in process.
	Tokenizer Tokenizer
	// Hints is how the engine takes KV hints ("hints=inline|control|off";
	// the zero value: none). See HintChannel.
	Hints HintMode
	// TokenAPIs are the token APIs the engine serves ("tokens=LIST"; 0:
	// all); a token-API request is translated to one it does (package
	// translate, tokens.go).
	TokenAPIs TokenAPIs
	// Engine is the engine's kind ("engine=vllm|sglang"; the zero value:
	// vLLM). It chooses the KV event shape, where the KV capacity is
	// read, and how hints name blocks (sglang.go).
	Engine Engine
}

// ParseWorkerSpec parses
// "URL[,events=EP][,replay=EP][,dp=N][,apis=LIST][,tokens=LIST][,hints=MODE][,engine=vllm|sglang]",
// LIST being API names separated by '+' (or "all"), e.g.
// apis=chat+completions+responses+messages; tokens= lists the token APIs
// the engine serves (generate, inference, completions; default all).
func ParseWorkerSpec(s string) (WorkerSpec, error) {
	parts := strings.Split(s, ",")
	ws := WorkerSpec{URL: strings.TrimSpace(parts[0])}
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
		case "hints":
			m, err := ParseHintMode(v)
			if err != nil {
				return ws, fmt.Errorf("worker %q: %w", ws.URL, err)
			}
			ws.Hints = m
		case "engine":
			e, err := ParseEngine(v)
			if err != nil {
				return ws, fmt.Errorf("worker %q: %w", ws.URL, err)
			}
			ws.Engine = e
		case "apis":
			set, ok := ParseAPIs(strings.ReplaceAll(v, "+", ","))
			if !ok || set == 0 {
				return ws, fmt.Errorf("worker %q: apis: want API names joined by + (chat, completions, responses, messages, count_tokens) or all, got %q", ws.URL, v)
			}
			ws.Native = set
		case "tokens":
			set, ok := translate.ParseTokenAPIs(v)
			if !ok {
				return ws, fmt.Errorf("worker %q: tokens: want token APIs joined by + (generate, inference, completions) or all, got %q", ws.URL, v)
			}
			ws.TokenAPIs = set
		default:
			return ws, fmt.Errorf("worker %q: unknown option %q (want events, replay, dp, apis, tokens, hints or engine)", ws.URL, k)
		}
	}
	if ws.Replay != "" && ws.Events == "" {
		return ws, fmt.Errorf("worker %q: replay= needs events=", ws.URL)
	}
	return ws, nil
}

// DefaultAffinity is the affinity "agentkv proxy" uses when the user
// chose none: soft. When some worker publishes no KV events
// the router cannot see its cache at all, so a session is kept on the
// worker that served it; when all do, the events still arrive a few
// milliseconds after the turn that caused them, and an agent whose tool
// call is quick sends its next turn before then (measured with the mock
// workers: an OpenCode-style turn after a tool call moved worker without
// it). Soft affinity yields to the cost function when the session's
// worker is busy or gone.
const DefaultAffinity = agentkv.AffinitySoft

// StackConfig configures a Stack. Zero fields mean the documented
// defaults.
type StackConfig struct {
	Workers []WorkerSpec
	// BlockSize is the router's block size; 0 takes the first worker's.
	// Every worker must agree with it.
	BlockSize int
	Policy    agentkv.Policy
	Affinity  agentkv.AffinityMode
	// Admission enables program-aware admission as admission.Agentic
	// configures it (ticking every Tick); with Gateway.Keys, its door and
	// pauses are shared by tenant (admission.Groups: each tenant's weight
	// and max-programs).
	Admission bool
	// InferSessions is the router's Config.InferSessions: requests that
	// name no session get one inferred from their prompts (nil: off).
	InferSessions *agentkv.InferConfig
	// Tick is the control-loop period (default 5 s); Refresh the capacity
	// refresh period (default 30 s; negative disables).
	Tick, Refresh time.Duration
	// Trace, if set, receives a request record per finished request,
	// annotated with the API and error kind.
	Trace agentkv.TraceSink
	// Gateway configures the front door; its Router, Workers and
	// Registerer are filled in by the Stack.
	Gateway Config
	// HTTPClient talks to the workers (nil: NewHTTPClient()).
	HTTPClient *http.Client
	// Logger receives warnings (nil discards).
	Logger *slog.Logger
	// Registry receives the metrics (nil: a new one with the Go and
	// process collectors).
	Registry *prometheus.Registry
	// ExternalEvents says the KV events reach the router another way (the
	// event plane's relays): workers without events= do not switch the
	// router to approximate mode.
	ExternalEvents bool
	// IndexSnapshot, if set, is the router's Config.IndexSnapshot (a
	// replica starting warm).
	IndexSnapshot io.Reader
	// Hints are the router's KV hint policies (agentkv.Config.Hints, e.g.
	// kvhint.NamedPolicies("share")); workers whose spec says hints=
	// receive them (HintChannel).
	Hints []kvhint.Policy
	// SharedPool, if set, is the router's Config.SharedPool: the shared
	// KV pool (SGLang HiCache on Mooncake) whose pages credit every
	// worker. Something else feeds it (the event plane's replica, or an
	// engine/sglang StoreSubscriber).
	SharedPool *sharedpool.Pool
}

// Stack is a complete router in front of vLLM-compatible workers: the
// engine adapters (capacity from /metrics, KV event subscribers), the
// Router, the Gateway, the tick and capacity-refresh loops, and the
// metrics. It is what "agentkv proxy" serves. It is safe for concurrent
// use.
type Stack struct {
	cfg    StackConfig
	log    *slog.Logger
	router *agentkv.Router
	gw     *Gateway
	// set holds the workers, indexed by ID (nil where one was removed),
	// copy-on-write: readers load it without a lock; regMu serializes the
	// writers (registry.go).
	set     atomic.Pointer[[]*stackWorker]
	regMu   sync.Mutex
	removed map[uint64]WorkerStatus // recently removed workers; guarded by regMu
	reg     *prometheus.Registry
	handler http.Handler

	capacity  *prometheus.GaugeVec // worker
	sink      vllm.EventSink
	hintText  *kvhint.HashText // the workers' hint channels share it (hints.go)
	blockSize int              // the router's

	cancel    context.CancelFunc
	bg        context.Context // the loops' context, ended by Close
	wg        sync.WaitGroup  // background loops
	once      sync.Once       // Close
	closeOnce sync.Once       // DropHeld
}

// stackWorker is one vLLM worker as the router sees it (agentkv.Worker).
type stackWorker struct {
	spec  WorkerSpec
	id    uint64
	hints *HintChannel // nil: takes no hints (hints.go)
	// names maps an SGLang worker's block names to the router's (nil for
	// vLLM); replaced on each connect, fed by its events (sglang.go).
	names atomic.Pointer[sglang.Names]

	// state is the worker's registry state (registry.go); member guards
	// its router membership against a drain (rejoin).
	state   atomic.Int32
	member  sync.Mutex
	stop    context.CancelFunc     // ends its join attempts; set before it is shared
	failMsg atomic.Pointer[string] // why it failed (stateFailed)

	mu      sync.Mutex   // guards vw, capRank
	vw      *vllm.Worker // nil until the worker answered (connect)
	capRank int          // KV capacity of one DP rank, tokens
}

func (w *stackWorker) connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.vw != nil
}

func (w *stackWorker) adapter() *vllm.Worker {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.vw
}

func (w *stackWorker) ranks() int { return max(w.spec.DPRanks, 1) }

// Info implements agentkv.Worker.
func (w *stackWorker) Info() agentkv.WorkerInfo {
	w.mu.Lock()
	defer w.mu.Unlock()
	bs := 0
	if w.vw != nil {
		bs = w.vw.BlockSize()
	}
	return agentkv.WorkerInfo{ID: w.id, DPRanks: w.ranks(), BlockSize: bs, KVCapacityTokens: w.capRank, Endpoint: w.hintEndpoint()}
}

// NewStack connects to every worker (reading its capacity from /metrics),
// builds the router and the gateway, starts the event subscribers and the
// loops. Workers get IDs 0, 1, ... in order. A worker that does not answer
// is not fatal: it joins the router, with backoff, once it does, and is
// health-probed and routable (counted by /readyz) only from then (with no
// BlockSize configured, NewStack waits until ctx ends for a first worker
// to learn it from). A worker whose health probes fail leaves the router
// and rejoins when it is up again.
func NewStack(ctx context.Context, cfg StackConfig) (*Stack, error) {
	s, rm, err := newStack(cfg)
	if err != nil {
		return nil, err
	}
	cfg = s.cfg
	// Events arrive only after Start, when s.router is set.
	s.sink = vllm.SinkFunc(func(ev *flashindex.Event) error { return s.router.ApplyEvent(ev) })
	index := agentkv.IndexAuto
	var list []*stackWorker
	for i, spec := range cfg.Workers {
		w := &stackWorker{spec: spec, id: uint64(i), stop: func() {}}
		w.hints = s.workerHints(w)
		list = append(list, w)
		if spec.Events == "" && !cfg.ExternalEvents {
			index = agentkv.IndexApproximate
		}
	}
	s.set.Store(&list)
	blockSize, err := s.connectAll(ctx)
	if err != nil {
		s.closeWorkers()
		return nil, err
	}
	s.blockSize = blockSize
	rc := agentkv.Config{BlockSize: blockSize, Policy: cfg.Policy, Affinity: cfg.Affinity, Index: index,
		Logger: s.log, Metrics: rm, IndexSnapshot: cfg.IndexSnapshot, TickInterval: cfg.Tick, SharedPool: cfg.SharedPool,
		Trace: cfg.Trace, InferSessions: cfg.InferSessions, Hints: cfg.Hints}
	if cfg.Admission {
		ac := admission.Agentic()
		ac.Interval = cfg.Tick
		if keys := cfg.Gateway.Keys; keys != nil {
			ac.Groups = &admission.Groups{Of: tenantGroup(keys)}
		}
		rc.Admission = &ac
	}
	if s.router, err = agentkv.New(rc); err != nil {
		s.closeWorkers()
		return nil, err
	}
	gc := cfg.Gateway
	gc.Router, gc.Registerer, gc.HTTPClient = s.router, s.reg, cfg.HTTPClient
	if gc.Logger == nil {
		gc.Logger = s.log
	}
	gc.Failover.OnHealth = s.onHealth
	gc.Failover.OnEject = s.onEject
	gc.Workers = nil
	for _, w := range list {
		gc.Workers = append(gc.Workers, w.gatewayWorker())
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.bg = bg
	for _, w := range list {
		if w.connected() {
			if err := s.join(bg, w); err != nil {
				cancel()
				s.closeWorkers()
				return nil, err
			}
			w.state.Store(stateJoined)
		}
	}
	if s.gw, err = New(gc); err != nil {
		cancel()
		s.closeWorkers()
		return nil, err
	}
	s.gw.registry = s
	s.start(bg)
	return s, nil
}

// gatewayWorker is the worker as the gateway forwards to it.
func (w *stackWorker) gatewayWorker() Worker {
	return Worker{ID: w.id, URL: w.spec.URL, DPRanks: w.spec.DPRanks, Native: w.spec.Native,
		TokenAPIs: w.spec.TokenAPIs, Tokenizer: w.spec.Tokenizer, Hints: w.hints}
}

// newStack returns a Stack with cfg's defaults filled in and its metrics
// registered (the router's included), before any worker is reached.
func newStack(cfg StackConfig) (*Stack, *agentkv.Metrics, error) {
	if cfg.Tick <= 0 {
		cfg.Tick = DefaultTick
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = NewHTTPClient()
	}
	s := &Stack{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, hintText: kvhint.NewHashText(0)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.capacity = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "agentkv", Subsystem: "gateway",
		Name: "worker_kv_capacity_tokens", Help: "KV cache capacity of one DP rank of each worker, from vllm:cache_config_info."},
		[]string{"worker"})
	if err := s.reg.Register(s.capacity); err != nil {
		return nil, nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	rm, err := agentkv.NewMetrics(s.reg)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	return s, rm, nil
}

// start runs the stack's goroutines: a join for each worker not connected
// yet, the router's control loop, the capacity and usage polls.
func (s *Stack) start(bg context.Context) {
	cfg := s.cfg
	for _, w := range s.list() {
		if !w.connected() {
			// Not routable (nor probed) until it joined the router: its
			// probes could find it up before await connects it, and /readyz
			// would say 200 with no worker to route to.
			s.gw.tracker.Remove(w.id)
			jctx, stop := context.WithCancel(bg)
			w.stop = stop // before the registry can drain it
			s.wg.Add(1)
			go s.await(jctx, w, true)
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.router.Run(bg)
	}()
	if cfg.Refresh > 0 {
		s.wg.Add(1)
		go s.everyWorker(bg, cfg.Refresh, s.Refresh)
	}
	if cfg.Admission {
		// Each worker's KV usage, for admission, once a tick.
		s.wg.Add(1)
		go s.everyWorker(bg, cfg.Tick, s.RefreshUsage)
	}
}

// connectTimeout bounds the first attempt to read a worker's capacity at
// start; a worker that does not answer in time is waited for in the
// background.
const connectTimeout = 3 * time.Second

// connectAll reads every worker's capacity once, all workers at once (a
// black-holed host costs start-up one connectTimeout, not one each). A
// worker that does not answer is left to await (it joins when it does);
// only a block size that disagrees is fatal. With no block size
// configured and no worker answering, it waits, with backoff, for the
// first one (until ctx ends): the router cannot hash without it.
func (s *Stack) connectAll(ctx context.Context) (int, error) {
	bs := s.cfg.BlockSize
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		var pending []*stackWorker
		for _, w := range s.list() {
			if !w.connected() {
				pending = append(pending, w)
			}
		}
		errs := make([]error, len(pending))
		var wg sync.WaitGroup
		for i, w := range pending {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, connectTimeout)
				defer cancel()
				errs[i] = s.connect(cctx, w, bs)
			}()
		}
		wg.Wait()
		for i, w := range pending {
			err := errs[i]
			if err == nil && bs != 0 && w.vw.BlockSize() != bs {
				// Connected with the worker's own size (none was known yet),
				// and another worker answered with a different one.
				err = fmt.Errorf("%w: worker uses %d tokens", vllm.ErrBlockSizeMismatch, w.vw.BlockSize())
			}
			switch {
			case errors.Is(err, vllm.ErrBlockSizeMismatch):
				return 0, fmt.Errorf("worker %s: %w (the router hashes with block size %d; every worker must use the same)",
					w.spec.URL, err, bs)
			case errors.Is(err, vllm.ErrNoMetric) || errors.Is(err, vllm.ErrNoCapacity):
				// It answered, but not as a vLLM worker: a configuration error.
				return 0, fmt.Errorf("worker %s: cannot read its KV capacity from %s/metrics (%s): %w",
					w.spec.URL, strings.TrimRight(w.spec.URL, "/"), vllm.CacheConfigMetric, err)
			case err != nil:
				s.log.Warn("gateway: worker not answering at start; it joins when it does", "worker", w.spec.URL,
					"metrics", strings.TrimRight(w.spec.URL, "/")+"/metrics", "err", err)
			case bs == 0:
				bs = w.vw.BlockSize()
			}
		}
		if bs != 0 || len(s.list()) == 0 {
			return max(bs, 16), nil // no workers: any valid size
		}
		s.log.Warn("gateway: waiting for a worker to answer, to learn the KV block size (or give it with BlockSize / --block-size)", "retry_in", wait)
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("gateway: no worker answered %s (its KV capacity and block size): %w", vllm.CacheConfigMetric, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// connect reads w's capacity (vllm.NewWorker) with block size bs (0: the
// worker's).
func (s *Stack) connect(ctx context.Context, w *stackWorker, bs int) error {
	spec := w.spec
	wc := vllm.WorkerConfig{ID: w.id, URL: spec.URL, HTTPClient: s.cfg.HTTPClient, DPRanks: spec.DPRanks, BlockSize: bs}
	if spec.Events != "" {
		wc.Events = s.eventsConfig(w)
	}
	if spec.Engine == EngineSGLang {
		if err := s.sglangCapacity(ctx, &wc); err != nil {
			return err
		}
	}
	vw, err := vllm.NewWorker(ctx, wc)
	if err != nil {
		return err
	}
	if err := w.setNames(vw.BlockSize()); err != nil {
		return err
	}
	w.mu.Lock()
	w.vw, w.capRank = vw, vw.KVCapacityTokens()/w.ranks()
	w.mu.Unlock()
	s.capacity.WithLabelValues(strconv.FormatUint(w.id, 10)).Set(float64(vw.KVCapacityTokens() / w.ranks()))
	return nil
}

// join adds a connected worker to the router and starts its KV events.
func (s *Stack) join(ctx context.Context, w *stackWorker) error {
	if err := s.router.AddWorker(w); err != nil {
		return fmt.Errorf("worker %s: %w", w.spec.URL, err)
	}
	if err := w.vw.Start(ctx); err != nil {
		return fmt.Errorf("worker %s: events: %w", w.spec.URL, err)
	}
	return nil
}

// await connects a worker that was down at start (or added at run time:
// it tries at once, not first waiting), with backoff, and joins it to the
// router once it answers. A worker whose drain began stops it.
func (s *Stack) await(ctx context.Context, w *stackWorker, waitFirst bool) {
	defer s.wg.Done()
	bs := s.blockSize
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		if waitFirst {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		waitFirst = true
		cctx, cancel := context.WithTimeout(ctx, connectTimeout)
		err := s.connect(cctx, w, bs)
		cancel()
		if errors.Is(err, vllm.ErrBlockSizeMismatch) || errors.Is(err, vllm.ErrNoMetric) || errors.Is(err, vllm.ErrNoCapacity) {
			s.log.Error("gateway: worker answered but cannot be routed to (block size or KV capacity)", "worker", w.spec.URL, "err", err)
			w.setState(stateJoining, stateFailed, err)
			return
		}
		if err == nil {
			switch err := s.joinMember(ctx, w); {
			case errors.Is(err, errDraining) || errors.Is(err, failover.ErrClosed):
				return // drained before it joined, or the gateway is closing
			case err != nil:
				s.log.Error("gateway: worker answered but cannot join", "worker", w.spec.URL, "err", err)
				w.setState(stateJoining, stateFailed, err)
				return
			}
			s.log.Info("gateway: worker joined", "worker", w.spec.URL)
			return
		}
	}
}

// onHealth follows the probes: a worker that went down leaves the router
// (its index entries and load go: when it comes back its cache is not
// what it was), and rejoins when it is up again.
func (s *Stack) onHealth(id uint64, from, to failover.Health) {
	w := s.worker(id)
	if w == nil || !w.connected() {
		return
	}
	switch {
	case to == failover.Down:
		s.router.RemoveWorker(id)
	case to == failover.Up && from == failover.Down:
		for _, st := range s.gw.tracker.Status() {
			if st.ID == id && st.Ejected && st.EjectReason != failover.ReasonConnect {
				return // an outlier ejection: onEject adds it back when it ends
			}
		}
		if err := s.rejoin(w); err != nil {
			s.log.Warn("gateway: returning worker refused", "worker", w.spec.URL, "err", err)
		}
	}
}

// Router returns the stack's router.
func (s *Stack) Router() *agentkv.Router { return s.router }

// Gateway returns the stack's gateway.
func (s *Stack) Gateway() *Gateway { return s.gw }

// Registry returns the registry holding the stack's metrics.
func (s *Stack) Registry() *prometheus.Registry { return s.reg }

// Handler returns the gateway's handler with the metrics served at path
// (none when path is "").
func (s *Stack) Handler(metricsPath string) http.Handler {
	if metricsPath == "" {
		return s.gw
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+metricsPath, s.gw.RequireAdmin(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})))
	mux.Handle("/", s.gw)
	return mux
}

// WorkerInfo returns what the router knows of worker id (zero for an
// unknown or removed one).
func (s *Stack) WorkerInfo(id int) agentkv.WorkerInfo {
	if w := s.worker(uint64(id)); w != nil {
		return w.Info()
	}
	return agentkv.WorkerInfo{}
}

// BlockSize returns the router's KV block size.
func (s *Stack) BlockSize() int { return s.blockSize }

// Workers returns the number of worker IDs given out (removed workers
// included: IDs are not reused).
func (s *Stack) Workers() int { return len(*s.set.Load()) }

func (s *Stack) closeWorkers() {
	for _, w := range s.list() {
		vw := w.adapter()
		if vw == nil {
			continue
		}
		if err := vw.Close(); err != nil {
			s.log.Warn("gateway: closing worker events", "worker", w.spec.URL, "err", err)
		}
	}
}

// Close stops the loops, drops held requests, closes the subscribers and
// the router. Requests in flight may still finish. Safe to call twice.
func (s *Stack) Close() error {
	s.once.Do(func() {
		s.DropHeld()
		s.cancel()
		s.wg.Wait()
		_ = s.gw.Close()
		s.closeHints()
		s.closeWorkers()
	})
	return nil
}

// DropHeld closes the router: held requests give up (503) and new ones
// are refused; requests in flight still finish.
func (s *Stack) DropHeld() {
	s.closeOnce.Do(func() { _ = s.router.Close() })
}

// everyWorker calls f for every worker once a period until ctx ends.
func (s *Stack) everyWorker(ctx context.Context, period time.Duration, f func(context.Context, int)) {
	defer s.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, w := range s.list() {
				f(ctx, int(w.id))
			}
		}
	}
}

// Refresh re-reads worker i's KV capacity and tells the router when it
// changed. A worker that cannot be read keeps its last capacity.
func (s *Stack) Refresh(ctx context.Context, i int) {
	w := s.worker(uint64(i))
	if w == nil {
		return
	}
	vw := w.adapter()
	if vw == nil {
		return // not joined yet: await reads it
	}
	rctx, cancel := context.WithTimeout(ctx, DefaultTokenizeTimeout)
	defer cancel()
	cs, err := vw.Client().CacheConfigs(rctx)
	if err != nil {
		s.log.Warn("gateway: cannot refresh worker capacity; keeping the last one", "worker", w.spec.URL, "err", err)
		return
	}
	total := 0
	for _, c := range cs {
		if c.BlockSize != vw.BlockSize() {
			s.log.Error("gateway: worker changed its block size; restart the proxy", "worker", w.spec.URL,
				"was", vw.BlockSize(), "now", c.BlockSize)
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
		s.capacity.WithLabelValues(strconv.Itoa(i)).Set(float64(perRank))
		if err := s.rejoin(w); err != nil {
			s.log.Warn("gateway: capacity update refused", "worker", w.spec.URL, "err", err)
		}
	}
}

// RefreshUsage reads worker i's KV cache usage from its /metrics
// (vllm:kv_cache_usage_perc: blocks held by requests) and reports it to
// the router for every rank, in tokens of the rank's capacity: admission
// then counts the worker as at least that full when it places programs,
// so KV that no program it knows accounts for (requests that bypass the
// proxy, say) takes room all the same. A worker that cannot be read has
// its report cleared: no report is better than a stale one.
func (s *Stack) RefreshUsage(ctx context.Context, i int) {
	w := s.worker(uint64(i))
	if w == nil {
		return
	}
	vw := w.adapter()
	if vw == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, DefaultTokenizeTimeout)
	defer cancel()
	u, err := vw.Client().KVCacheUsage(rctx)
	tokens := int64(-1)
	if err != nil {
		s.log.Debug("gateway: cannot read worker KV cache usage", "worker", w.spec.URL, "err", err)
	} else {
		w.mu.Lock()
		tokens = int64(u * float64(w.capRank))
		w.mu.Unlock()
	}
	for rank := range w.ranks() {
		s.router.SetEngineUsage(flashindex.Worker{ID: w.id, DPRank: uint32(rank)}, tokens)
	}
}

// Approximate reports whether some worker publishes no KV events (and
// they do not come another way: StackConfig.ExternalEvents).
func (s *Stack) Approximate() bool {
	for _, w := range s.list() {
		if w.spec.Events == "" && !s.cfg.ExternalEvents {
			return true
		}
	}
	return false
}

// tenantGroup is admission's group of a program under API keys: its
// tenant, the name its session id is scoped by (tenant.Scope), with the
// tenant's weight and max-programs as the key file holds them now.
func tenantGroup(keys *tenant.Set) func(program string) admission.Group {
	return func(program string) admission.Group {
		name, _, _ := strings.Cut(program, "/")
		g := admission.Group{Name: name, Weight: 1}
		if t := keys.Keys().Tenant(name); t != nil {
			g.Weight, g.MaxAdmitted = t.Weight, t.MaxPrograms
		}
		return g
	}
}
