package agentkv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/radix"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
)

// Policy chooses how the router picks a worker.
type Policy uint8

const (
	// KVAware minimises the cost function over the workers' cached prefix
	// (device, host, disk, shared pool) and active load. The default.
	KVAware Policy = iota
	// RoundRobin cycles through the workers, ignoring the cache.
	RoundRobin
	// Random picks a worker uniformly at random.
	Random
)

func (p Policy) String() string {
	switch p {
	case KVAware:
		return "kv"
	case RoundRobin:
		return "round-robin"
	case Random:
		return "random"
	}
	return fmt.Sprintf("policy(%d)", uint8(p))
}

// ParsePolicy parses "kv", "round-robin" or "random".
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "kv", "kv-aware":
		return KVAware, nil
	case "round-robin", "rr":
		return RoundRobin, nil
	case "random":
		return Random, nil
	}
	return 0, fmt.Errorf("agentkv: unknown policy %q (want kv, round-robin or random)", s)
}

// AffinityMode binds a session to the worker that served it.
type AffinityMode uint8

const (
	// AffinityOff routes every request on its own merits.
	AffinityOff AffinityMode = iota
	// AffinitySoft prefers the session's worker while it is not busy or
	// filtered out; otherwise it routes freely and rebinds.
	AffinitySoft
	// AffinityHard sends every request of a session to its worker while the
	// binding lives and the worker exists.
	AffinityHard
)

// Defaults of the router's lifecycle settings (see Config).
const (
	// DefaultTickInterval is Config.TickInterval's default without
	// admission (with it, admission.Config.Interval).
	DefaultTickInterval = 5 * time.Second
	// DefaultHeldTTL is Config.HeldTTL's default.
	DefaultHeldTTL = time.Minute
	// DefaultMaxHeld is Config.MaxHeld's default.
	DefaultMaxHeld = 1 << 16
)

// DefaultHashCacheTokens is the default Config.HashCacheTokens: 64M prompt
// tokens, 32 MiB of hashes at block size 16 (two thousand 32K-token
// sessions).
const DefaultHashCacheTokens = 64 << 20

// Config configures a Router. Zero fields mean the documented defaults.
type Config struct {
	// BlockSize is the KV block size in tokens, shared by every worker.
	// Required.
	BlockSize int
	// Policy picks the worker selection (default KVAware).
	Policy Policy
	// Cost weights the KV-aware cost function.
	Cost CostConfig
	// Affinity binds sessions to workers (default off) for AffinityTTL
	// (default 10 minutes).
	Affinity    AffinityMode
	AffinityTTL time.Duration
	// BusyThreshold, when positive, skips workers whose tracked decode
	// blocks exceed this fraction of their KV capacity, unless every
	// worker is that busy.
	BusyThreshold float64
	// Admission enables program-aware admission control with this
	// configuration; nil disables it. Its OnDecision must be nil: the
	// router consumes the decisions.
	Admission *admission.Config
	// Sessions configures the session table (its OnRemove is the router's).
	Sessions session.TableConfig
	// MaxBlocksPerWorker bounds the index per worker (see flashindex).
	MaxBlocksPerWorker int
	// Approximate records each routing decision in the index with
	// ApproxTTL (default 120 s), for engines that publish no KV events.
	Approximate bool
	ApproxTTL   time.Duration
	// RequestTTL is how long a routed request may go without a sign of
	// life (route, first token, progress) before the sweep forgets its
	// load. Default 10 minutes.
	RequestTTL time.Duration
	// Now is the clock (default time.Now). Simulators inject virtual time.
	Now func() time.Time
	// TickInterval is how often Run calls Tick (default
	// Admission.Interval with admission, else DefaultTickInterval).
	TickInterval time.Duration
	// Ticker makes Run's ticks: a channel that delivers one every d and a
	// function that stops it (default: a time.Ticker). Tests and simulators
	// inject their own to drive Run step by step.
	Ticker func(d time.Duration) (ticks <-chan time.Time, stop func())
	// OnTick, if set, is called by Run with every Tick's result.
	OnTick func(TickResult)
	// HeldTTL is how long a request held for a TryRoute caller may wait,
	// once admission released it, for that caller's retry: after it the
	// next Tick ends the turn and drops the request (OnRelease is told
	// ErrDropped), so callers that gave up leak nothing. Requests Route
	// holds are retried at once and never expire; a held request not yet
	// released waits at most admission's MaxWait. Default DefaultHeldTTL.
	HeldTTL time.Duration
	// MaxHeld bounds the requests held at once (default DefaultMaxHeld); a
	// request admission would hold beyond it is withdrawn and refused with
	// ErrTooManyHeld. A client sending many request IDs for one paused
	// session would otherwise grow the held set without bound.
	MaxHeld int
	// Seed seeds tie-breaking and sampling; the same seed and inputs give
	// the same decisions.
	Seed uint64
	// OnRelease, if set, is called (outside the router's locks) with the
	// ID of each request TryRoute held, once its fate is decided: err is
	// nil when admission released it (retry TryRoute with the same ID), or
	// ErrDropped when it will never run (its session ended, or the router
	// closed).
	OnRelease func(requestID string, err error)
	// Lineage configures the session-prefix tree (radix) that records each
	// session's context chain; it feeds hint policies.
	Lineage radix.Config
	// Hints are evaluated when a turn is routed or resumed, at every tick
	// for sessions between turns, and when a session ends; the hints go to
	// workers that implement HintReceiver.
	Hints []kvhint.Policy
	// SharedPool, if set, credits each worker with the shared-pool pages
	// beyond everything it holds itself (Cost.SharedWeight per block).
	// Requests must carry Tokens for the pool's page hashes.
	SharedPool *sharedpool.Pool
	// Trace, if set, receives a request_end record per finished request.
	Trace TraceSink
	// HashCacheTokens bounds, in prompt tokens covered, the per-session
	// prompt cache that lets an agent turn hash only the blocks it appended
	// (the resent prefix is verified first, by a keyed fingerprint per
	// 1,024-token chunk). An entry costs 8 bytes per block (0.5 B per token
	// at block size 16). 0 means DefaultHashCacheTokens; negative disables
	// it.
	HashCacheTokens int
	// Logger receives warnings (rejected events, gaps); nil discards.
	Logger *slog.Logger
	// Metrics, if set, receives the router's metrics.
	Metrics *Metrics
	// IndexSnapshot, if set, is a flashindex snapshot New restores the
	// index from (a replica starting warm; see replicas.go).
	IndexSnapshot io.Reader
}

// Request is one model call to route.
type Request struct {
	// ID identifies the request; it must stay the same when a held request
	// is retried with TryRoute. Empty means the router assigns one.
	ID string
	// Tokens is the prompt. Alternatively SequenceHashes carries the
	// prompt's block sequence hashes precomputed (then InputTokens gives
	// the prompt length).
	Tokens         []uint32
	SequenceHashes []uint64
	InputTokens    int
	// ExpectedOutputTokens estimates the completion length for decode load.
	ExpectedOutputTokens int
	// Agent is the session the request belongs to (zero: an isolated call).
	Agent session.AgentContext
	// LoRA names the adapter; it changes the block hashes.
	LoRA string
	// Override adjusts this request's routing.
	Override *Override
}

// Override adjusts routing for one request.
type Override struct {
	// Cost replaces the router's cost weights and temperature.
	Cost *CostConfig
	// AllowedWorkers restricts the candidates to these worker IDs.
	AllowedWorkers []uint64
	// AllowedRanks restricts the candidates to these worker ranks (a
	// session binding held outside this router; see replicas.go).
	AllowedRanks []flashindex.Worker
}

// TierTokens counts prompt tokens per tier.
type TierTokens struct {
	Device, Host, Disk int
}

// Decision is where a request goes and why.
type Decision struct {
	// RequestID is the request's ID (assigned when the request had none).
	RequestID string
	// Worker is the chosen worker and DP rank.
	Worker flashindex.Worker
	// Cached is the prompt tokens the chosen worker is expected to hold,
	// per tier (exclusive depths times the block size).
	Cached TierTokens
	// SharedBlocks is the shared-pool credit in blocks beyond the worker's
	// own prefix.
	SharedBlocks int
	// Cost is the chosen worker's cost breakdown; Candidates how many
	// workers were scored.
	Cost       Cost
	Candidates int
	// Admission is the admission outcome (zero when admission is off);
	// Waited how long admission held the request.
	Admission admission.Admission
	Waited    time.Duration
	// Affinity is set when a session binding chose the worker.
	Affinity bool
	// Hints counts the hint actions delivered for this request.
	Hints int

	received     time.Time
	firstToken   time.Time
	replayHashes []uint64
	// recorded is the approximate entries' blocks this route added (beyond
	// the worker's matched device prefix), boundHere whether it bound the
	// session: what a failure undoes.
	recorded  []uint64
	boundHere bool

	r       *Router
	id      uint64
	program string
	agent   session.AgentContext
	prompt  int
	once    sync.Once
}

// Usage is what the engine reported for a finished request.
type Usage struct {
	PromptTokens, CompletionTokens, CachedTokens int
	FinishReason                                 string
	ToolCalls                                    []string
	// Failed is set when the request errored or was cancelled (a client
	// that went away included). Done then also undoes what routing
	// recorded for the request: the approximate index entries it added and
	// the session binding it made (see Config.Approximate, Affinity).
	Failed bool
}

var (
	// ErrNoWorkers means no worker (after filters) can take the request.
	ErrNoWorkers = errors.New("agentkv: no worker available")
	// ErrHeld is returned by TryRoute when admission holds the request; it
	// is released later (Config.OnRelease, Tick's result) and must then be
	// retried with the same ID.
	ErrHeld = errors.New("agentkv: request held by admission control")
	// ErrDropped means a held request will never run: its session ended
	// or the router closed while it waited.
	ErrDropped = errors.New("agentkv: held request dropped")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("agentkv: router closed")
	// ErrTooManyHeld means admission would hold the request but
	// Config.MaxHeld requests are held already; nothing was recorded.
	ErrTooManyHeld = errors.New("agentkv: too many held requests")
)

// Router routes agent requests to workers. It is safe for concurrent use;
// Route may block on admission, every other method returns promptly.
type Router struct {
	cfg     Config
	index   *flashindex.Index
	table   *session.Table
	tree    *radix.Tree
	batcher *kvhint.Batcher
	log     *slog.Logger
	metrics *Metrics

	hashers sync.Map // LoRA name → *flashindex.Hasher
	hashes  *hashCache
	loadObs atomic.Pointer[func(flashindex.Worker)] // SetLoadObserver

	mu sync.Mutex // guards everything below
	// workers in insertion order; byKey and byAdm index them.
	workers []*workerState
	byKey   map[flashindex.Worker]int
	byAdm   map[admission.WorkerID]flashindex.Worker
	nextAdm admission.WorkerID
	loads   *loadTracker
	adm     *admission.Controller
	decBuf  []admission.Decision
	// held requests (TryRoute/Route waiting for admission), by request ID,
	// and the request IDs held per program in arrival order.
	held     map[string]*heldRequest
	heldByPg map[string][]string
	// acting holds sessions between turns (for tick-time hint policies).
	acting map[string]actingSession
	rr     int
	rng    *rand.Rand
	nextID uint64
	closed bool
}

type heldRequest struct {
	program    string
	since      time.Time
	waiter     bool // a Route call is blocked on ready (it never expires)
	released   bool
	releasedAt time.Time
	adm        admission.Admission
	ready      chan struct{} // closed on release or drop
	dropped    bool
}

// New validates cfg and returns a Router with no workers.
func New(cfg Config) (*Router, error) {
	if cfg.BlockSize < 1 || cfg.BlockSize > flashindex.MaxBlockSize {
		return nil, fmt.Errorf("agentkv: Config.BlockSize must be in [1, %d], got %d", flashindex.MaxBlockSize, cfg.BlockSize)
	}
	if cfg.Policy > Random {
		return nil, fmt.Errorf("agentkv: unknown Config.Policy %d", cfg.Policy)
	}
	if err := cfg.Cost.validate(); err != nil {
		return nil, err
	}
	if cfg.BusyThreshold < 0 {
		return nil, fmt.Errorf("agentkv: Config.BusyThreshold must be ≥ 0, got %v", cfg.BusyThreshold)
	}
	cfg.Cost = cfg.Cost.withDefaults()
	if cfg.AffinityTTL == 0 {
		cfg.AffinityTTL = 10 * time.Minute
	}
	if cfg.ApproxTTL == 0 {
		cfg.ApproxTTL = flashindex.DefaultApproxTTL
	}
	if cfg.RequestTTL == 0 {
		cfg.RequestTTL = 10 * time.Minute
	}
	if err := cfg.fillLifecycle(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Router{
		cfg:      cfg,
		log:      cfg.Logger,
		metrics:  cfg.Metrics,
		byKey:    map[flashindex.Worker]int{},
		byAdm:    map[admission.WorkerID]flashindex.Worker{},
		loads:    newLoadTracker(),
		held:     map[string]*heldRequest{},
		heldByPg: map[string][]string{},
		acting:   map[string]actingSession{},
		batcher:  kvhint.NewBatcher("agentkv"),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.HashCacheTokens == 0:
		r.hashes = newHashCache(DefaultHashCacheTokens, cfg.BlockSize)
	case cfg.HashCacheTokens > 0:
		r.hashes = newHashCache(cfg.HashCacheTokens, cfg.BlockSize)
	}
	var err error
	icfg := flashindex.Config{
		BlockSize:          cfg.BlockSize,
		MaxBlocksPerWorker: cfg.MaxBlocksPerWorker,
		Now:                cfg.Now,
		OnGap:              r.onGap,
	}
	if cfg.IndexSnapshot != nil {
		r.index, err = flashindex.Restore(cfg.IndexSnapshot, icfg)
	} else {
		r.index, err = flashindex.New(icfg)
	}
	if err != nil {
		return nil, err
	}
	if r.tree, err = radix.New(cfg.Lineage); err != nil {
		return nil, err
	}
	tc := cfg.Sessions
	if tc.Now == nil {
		tc.Now = cfg.Now
	}
	if tc.AffinityTTL == 0 {
		tc.AffinityTTL = cfg.AffinityTTL
	}
	tc.OnRemove = r.onSessionRemoved
	if r.table, err = session.NewTable(tc); err != nil {
		return nil, err
	}
	if cfg.Admission != nil {
		ac := *cfg.Admission
		if ac.OnDecision != nil {
			return nil, errors.New("agentkv: Config.Admission.OnDecision must be nil; the router consumes decisions")
		}
		if r.adm, err = admission.NewController(ac); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Index returns the router's KV block index (for snapshots and stats).
func (r *Router) Index() *flashindex.Index { return r.index }

// Sessions returns the router's session table.
func (r *Router) Sessions() *session.Table { return r.table }

// AddWorker adds a worker with each of its DP ranks. A worker whose block
// size differs from the router's is refused with *BlockSizeMismatchError.
// Adding a worker ID that exists updates its capacity. It updates every
// rank or, on error, none.
func (r *Router) AddWorker(w Worker) error {
	info := w.Info()
	if info.BlockSize != r.cfg.BlockSize {
		return &BlockSizeMismatchError{Worker: info.ID, Router: r.cfg.BlockSize, Engine: info.BlockSize}
	}
	if info.KVCapacityTokens < 0 || info.DPRanks < 0 {
		return fmt.Errorf("agentkv: worker %d: negative capacity or DP ranks", info.ID)
	}
	// Admission counts an unknown (0) capacity as one token, so that the
	// worker's programs pause until a refresh reports the real one.
	admCap := int64(max(info.KVCapacityTokens, 1))
	if r.adm != nil && admCap > admission.MaxTokens {
		return fmt.Errorf("agentkv: worker %d: KV capacity %d exceeds %d tokens", info.ID, admCap, admission.MaxTokens)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	for rank := 0; rank < info.ranks(); rank++ {
		key := flashindex.Worker{ID: info.ID, DPRank: uint32(rank)}
		capBlock := info.KVCapacityTokens / r.cfg.BlockSize
		if i, ok := r.byKey[key]; ok {
			ws := r.workers[i]
			if r.adm != nil {
				// Cannot fail: the worker is known and admCap valid.
				_ = r.adm.SetCapacity(ws.admID, admCap)
			}
			ws.info, ws.adapter, ws.capBlock = info, w, capBlock
			continue
		}
		ws := &workerState{key: key, info: info, adapter: w, capBlock: capBlock}
		if r.adm != nil {
			ws.admID = r.nextAdm
			if err := r.adm.AddWorker(ws.admID, admCap); err != nil {
				return err // a fresh id and a valid capacity: not reached
			}
			r.nextAdm++
			r.byAdm[ws.admID] = key
		}
		r.byKey[key] = len(r.workers)
		r.workers = append(r.workers, ws)
		r.loads.addWorker(key)
	}
	return nil
}

// RemoveWorker removes every DP rank of worker id: its index entries, its
// load, and (with admission) its programs, which are paused and resumed
// elsewhere by later ticks.
func (r *Router) RemoveWorker(id uint64) {
	r.mu.Lock()
	var removed []*workerState
	kept := r.workers[:0]
	for _, ws := range r.workers {
		if ws.key.ID == id {
			removed = append(removed, ws)
			continue
		}
		kept = append(kept, ws)
	}
	clear(r.workers[len(kept):])
	r.workers = kept
	clear(r.byKey)
	for i, ws := range r.workers {
		r.byKey[ws.key] = i
	}
	now := r.cfg.Now()
	for _, ws := range removed {
		r.loads.removeWorker(ws.key)
		if r.adm != nil {
			_ = r.adm.RemoveWorker(now, ws.admID)
			delete(r.byAdm, ws.admID)
		}
	}
	rel := r.drainAdmissionLocked()
	r.mu.Unlock()
	for _, ws := range removed {
		r.index.RemoveWorker(ws.key)
	}
	r.notify(rel)
}

// ApplyEvent applies one KV event from a worker adapter to the index. A
// rejected event returns the index's typed error and is counted.
func (r *Router) ApplyEvent(ev *flashindex.Event) error {
	err := r.index.Apply(ev)
	if r.metrics != nil {
		r.metrics.observeEvent(ev.Worker, err)
	}
	if err != nil {
		r.log.Warn("agentkv: KV event rejected", "worker", ev.Worker.String(), "kind", ev.Kind.String(), "err", err)
	}
	return err
}

func (r *Router) onGap(g flashindex.Gap) {
	if r.metrics != nil {
		r.metrics.observeGap(g.Worker)
	}
	r.log.Warn("agentkv: KV event gap; the adapter should resync", "gap", g.String())
}

func (r *Router) hasher(lora string) (*flashindex.Hasher, error) {
	if h, ok := r.hashers.Load(lora); ok {
		return h.(*flashindex.Hasher), nil
	}
	h, err := flashindex.NewHasher(r.cfg.BlockSize, lora)
	if err != nil {
		return nil, err
	}
	got, _ := r.hashers.LoadOrStore(lora, h)
	return got.(*flashindex.Hasher), nil
}

// Route routes req, blocking while admission control holds it. It returns
// ctx.Err() if ctx ends first, with the held turn withdrawn. The caller
// must call Decision.Done when the request finishes.
func (r *Router) Route(ctx context.Context, req *Request) (*Decision, error) {
	d, h, err := r.route(req, true)
	if !errors.Is(err, ErrHeld) {
		return d, err
	}
	select {
	case <-h.ready:
	case <-ctx.Done():
		// Cancel withdraws the held turn, or ends it if its release raced
		// with the cancellation.
		r.Cancel(req.ID)
		return nil, ctx.Err()
	}
	if h.dropped {
		return nil, ErrDropped
	}
	d, _, err = r.route(req, true)
	return d, err
}

// TryRoute routes req without blocking. When admission holds it, TryRoute
// returns ErrHeld; the request keeps its place and, once released (see
// Config.OnRelease and Tick), the caller retries TryRoute with the same
// Request.ID to obtain the decision.
func (r *Router) TryRoute(req *Request) (*Decision, error) {
	d, _, err := r.route(req, false)
	return d, err
}

// Cancel withdraws a held request; a request not held is ignored. A
// request already released but not yet retried has its turn ended.
func (r *Router) Cancel(requestID string) {
	r.mu.Lock()
	h := r.held[requestID]
	if h == nil {
		r.mu.Unlock()
		return
	}
	delete(r.held, requestID)
	r.unlinkHeld(h.program, requestID)
	now := r.cfg.Now()
	if h.released {
		// The turn was released and counted as running: end it.
		_ = r.adm.EndRequest(now, h.program, 0, 0)
	} else {
		_ = r.adm.Cancel(now, h.program)
	}
	rel := r.drainAdmissionLocked()
	r.mu.Unlock()
	r.notify(rel)
}

func (r *Router) unlinkHeld(program, id string) {
	ids := r.heldByPg[program]
	if i := slices.Index(ids, id); i >= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(r.heldByPg, program)
	} else {
		r.heldByPg[program] = ids
	}
}

// scratch holds per-call buffers.
type scratch struct {
	seq     []uint64
	matches []flashindex.Match
	logits  []float64
	cands   []candidate
}

type candidate struct {
	ws     *workerState
	match  flashindex.Match
	shared int // shared-pool blocks credited
	cost   Cost
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// route is Route and TryRoute. With hold, a turn that must wait is held in
// admission; the returned heldRequest signals its release.
func (r *Router) route(req *Request, hold bool) (*Decision, *heldRequest, error) {
	start := r.cfg.Now()
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)

	// 1. Hash the prompt (outside the lock).
	t0 := time.Now()
	seq := req.SequenceHashes
	promptTokens := req.InputTokens
	if seq == nil {
		h, err := r.hasher(req.LoRA)
		if err != nil {
			return nil, nil, err
		}
		sc.seq = r.hashes.hash(h, req.Agent.SessionID, req.LoRA, req.Tokens, sc.seq)
		seq = sc.seq
		if promptTokens == 0 {
			promptTokens = len(req.Tokens)
		}
	}
	if promptTokens < len(seq)*r.cfg.BlockSize {
		promptTokens = len(seq) * r.cfg.BlockSize
	}
	tHash := time.Since(t0)

	// 2. Overlap per worker and tier (the index has its own concurrency).
	t1 := time.Now()
	if r.cfg.Policy == KVAware {
		sc.matches = r.index.FindMatches(seq, sc.matches[:0])
	} else {
		sc.matches = sc.matches[:0]
	}
	tMatch := time.Since(t1)

	// Shared-pool hits (page hashes need the tokens).
	hits := r.sharedHits(req.Tokens)

	// 3. Session affinity (the session table learns of the request once a
	// decision is made).
	ac := req.Agent
	var binding session.Binding
	var bound bool
	if ac.Valid() && r.cfg.Affinity != AffinityOff {
		binding, bound = r.table.Affinity(ac.SessionID)
	}

	t2 := time.Now()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, nil, ErrClosed
	}
	if req.ID == "" {
		r.nextID++
		req.ID = "r" + strconv.FormatUint(r.nextID, 10)
	}

	// 4. Candidates and their costs.
	cost := r.cfg.Cost
	if req.Override != nil && req.Override.Cost != nil {
		cost = req.Override.Cost.withDefaults()
	}
	sc.cands = sc.cands[:0]
	for _, ws := range r.workers {
		if req.Override != nil && len(req.Override.AllowedWorkers) > 0 && !slices.Contains(req.Override.AllowedWorkers, ws.key.ID) {
			continue
		}
		if req.Override != nil && len(req.Override.AllowedRanks) > 0 && !slices.Contains(req.Override.AllowedRanks, ws.key) {
			continue
		}
		sc.cands = append(sc.cands, candidate{ws: ws})
	}
	if len(sc.cands) == 0 {
		r.mu.Unlock()
		return nil, nil, ErrNoWorkers
	}
	for _, m := range sc.matches {
		for i := range sc.cands {
			if sc.cands[i].ws.key == m.Worker {
				sc.cands[i].match = m
				break
			}
		}
	}
	for i := range sc.cands {
		c := &sc.cands[i]
		l := r.loads.load(c.ws.key)
		c.shared = sharedBlocks(hits, c.match)
		c.cost = cost.cost(costInput{
			blockSize: r.cfg.BlockSize, requestTokens: promptTokens,
			device: c.match.Device, host: c.match.Host, disk: c.match.Disk, shared: c.shared,
			activePrefillTokens: l.PrefillTokens, decodeBlocks: l.DecodeBlocks, requests: l.Requests,
		})
	}

	// 5. Admission: may this turn run now, and where? A new program is
	// offered the workers in cost order, so it lands where its prefix is.
	var adm admission.Admission
	var waited time.Duration
	program := programID(ac)
	hasAdm := false
	if r.adm != nil && program != "" {
		if h := r.held[req.ID]; h != nil {
			if !h.released {
				r.mu.Unlock()
				return nil, h, ErrHeld
			}
			adm, waited = h.adm, start.Sub(h.since)
			delete(r.held, req.ID)
		} else {
			var prefer []admission.WorkerID
			if r.adm.Status(program) == admission.StatusUnknown && r.cfg.Policy == KVAware {
				prefer = r.preferenceLocked(sc.cands)
			}
			var a admission.Admission
			var err error
			if ac.ParentSessionID != "" && ac.ProgramID == "" {
				// A subagent: its parent waits for it, so it does not queue
				// at the door behind new programs.
				a, err = r.adm.StartSubRequest(start, program, ac.ParentSessionID, int64(promptTokens), prefer)
			} else {
				a, err = r.adm.StartRequestOn(start, program, int64(promptTokens), prefer)
			}
			if err != nil {
				r.mu.Unlock()
				return nil, nil, err
			}
			if !a.Run && len(r.held) >= r.cfg.MaxHeld {
				_ = r.adm.Cancel(start, program)
				rel := r.drainAdmissionLocked()
				r.mu.Unlock()
				r.notify(rel)
				return nil, nil, ErrTooManyHeld
			}
			if !a.Run {
				h := &heldRequest{program: program, since: start, waiter: hold, ready: make(chan struct{})}
				r.held[req.ID] = h
				r.heldByPg[program] = append(r.heldByPg[program], req.ID)
				rel := r.drainAdmissionLocked()
				r.mu.Unlock()
				r.notify(rel)
				if r.metrics != nil {
					r.metrics.observeHeld()
				}
				return nil, h, ErrHeld
			}
			adm = a
		}
		// The program runs on its admission worker.
		admWorker, ok := r.byAdm[adm.Worker]
		keep := sc.cands[:0]
		for _, c := range sc.cands {
			if ok && c.ws.key == admWorker {
				keep = append(keep, c)
			}
		}
		sc.cands = keep
		if len(sc.cands) == 0 {
			_ = r.adm.EndRequest(start, program, 0, 0)
			rel := r.drainAdmissionLocked()
			r.mu.Unlock()
			r.notify(rel)
			return nil, nil, ErrNoWorkers
		}
		hasAdm = true
	} else {
		r.filterBusy(sc)
	}

	// 6. Select.
	pick, viaAffinity := -1, false
	if bound && !hasAdm {
		bw := flashindex.Worker{ID: binding.Worker.ID, DPRank: binding.Worker.DPRank}
		for i := range sc.cands {
			if sc.cands[i].ws.key == bw {
				pick, viaAffinity = i, true
			}
		}
	}
	if pick < 0 {
		switch r.cfg.Policy {
		case RoundRobin:
			pick = r.rr % len(sc.cands)
			r.rr++
		case Random:
			pick = r.rng.IntN(len(sc.cands))
		default:
			sc.logits = sc.logits[:0]
			for _, c := range sc.cands {
				sc.logits = append(sc.logits, c.cost.Logit)
			}
			pick = selectIndex(sc.logits, cost.Temperature, r.rng.Float64)
		}
	}
	c := sc.cands[pick]

	// 7. Book the load.
	r.nextID++
	internal := r.nextID
	uncached := max(0, promptTokens-c.match.Device*r.cfg.BlockSize)
	blocks := (promptTokens + req.ExpectedOutputTokens + r.cfg.BlockSize - 1) / r.cfg.BlockSize
	r.loads.start(internal, c.ws.key, uncached, blocks, start)
	if ac.Valid() {
		delete(r.acting, ac.SessionID)
	}
	rel := r.drainAdmissionLocked()
	r.mu.Unlock()
	tSched := time.Since(t2)
	r.notify(rel)
	r.observeLoad(c.ws.key)

	if ac.Valid() {
		if _, err := r.table.Begin(ac); err != nil {
			r.log.Debug("agentkv: session not tracked", "session", ac.SessionID, "err", err)
		}
	}
	boundHere := false
	if ac.Valid() && r.cfg.Affinity != AffinityOff && !viaAffinity {
		mode := session.Soft
		if r.cfg.Affinity == AffinityHard {
			mode = session.Hard
		}
		boundHere = r.table.Bind(ac.SessionID, session.Worker{ID: c.ws.key.ID, DPRank: c.ws.key.DPRank}, mode) == nil
	}
	var recorded []uint64
	if r.cfg.Approximate && len(seq) > 0 {
		r.index.Record(c.ws.key, seq, r.cfg.ApproxTTL)
		if c.match.Device < len(seq) {
			recorded = slices.Clone(seq[c.match.Device:])
		}
	}
	d := &Decision{
		RequestID: req.ID,
		Worker:    c.ws.key,
		Cached: TierTokens{
			Device: c.match.Device * r.cfg.BlockSize,
			Host:   c.match.Host * r.cfg.BlockSize,
			Disk:   c.match.Disk * r.cfg.BlockSize,
		},
		SharedBlocks: c.shared,
		Cost:         c.cost,
		Candidates:   len(sc.cands),
		received:     start,
		Admission:    adm,
		Waited:       waited,
		Affinity:     viaAffinity,
		recorded:     recorded,
		boundHere:    boundHere,
		r:            r,
		id:           internal,
		program:      program,
		agent:        ac,
		prompt:       promptTokens,
	}
	r.updateLineage(ac, seq)
	r.hintsOnRoute(d, seq, sc.matches)
	if r.cfg.Trace != nil {
		var h *flashindex.Hasher
		if req.SequenceHashes == nil {
			h, _ = r.hasher(req.LoRA)
		}
		d.replayHashes = replayHashes(h, seq, req.Tokens)
	}
	if r.metrics != nil {
		r.metrics.observeRoute(d, len(seq), tHash, tMatch, tSched, time.Since(t0))
	}
	return d, nil, nil
}

// preferenceLocked returns the candidates' admission ids, cheapest first.
func (r *Router) preferenceLocked(cands []candidate) []admission.WorkerID {
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		la, lb := cands[a].cost.Logit, cands[b].cost.Logit
		switch {
		case la < lb:
			return -1
		case la > lb:
			return 1
		}
		return 0
	})
	out := make([]admission.WorkerID, 0, len(cands))
	for _, i := range order {
		out = append(out, cands[i].ws.admID)
	}
	return out
}

// filterBusy drops candidates over the busy threshold unless all are.
func (r *Router) filterBusy(sc *scratch) {
	if r.cfg.BusyThreshold <= 0 {
		return
	}
	keep := sc.cands[:0:0]
	for _, c := range sc.cands {
		l := r.loads.load(c.ws.key)
		if c.ws.capBlock == 0 || float64(l.DecodeBlocks) <= r.cfg.BusyThreshold*float64(c.ws.capBlock) {
			keep = append(keep, c)
		}
	}
	if len(keep) > 0 && len(keep) < len(sc.cands) {
		sc.cands = append(sc.cands[:0], keep...)
	}
}

func programID(ac session.AgentContext) string {
	if ac.ProgramID != "" {
		return ac.ProgramID
	}
	return ac.SessionID
}

// FirstToken records that the request's prefill finished: its tokens move
// from prefill to decode load.
func (d *Decision) FirstToken() {
	r := d.r
	r.mu.Lock()
	now := r.cfg.Now()
	r.loads.prefilled(d.id, now)
	if d.firstToken.IsZero() {
		d.firstToken = now
	}
	r.mu.Unlock()
	r.observeLoad(d.Worker)
}

// Progress records that the request is still streaming, so the expiry
// sweep never forgets a long-running request.
func (d *Decision) Progress() {
	r := d.r
	r.mu.Lock()
	r.loads.touch(d.id, r.cfg.Now())
	r.mu.Unlock()
}

// Done reports the request finished with the engine's usage. Admission, the
// session table and metrics learn from these real numbers. Only the first
// call counts.
func (d *Decision) Done(u Usage) {
	d.once.Do(func() { d.r.done(d, u) })
}

func (r *Router) done(d *Decision, u Usage) {
	now := r.cfg.Now()
	prompt := u.PromptTokens
	if prompt == 0 {
		prompt = d.prompt
	}
	if u.Failed {
		r.undoRoute(d)
	}
	r.mu.Lock()
	r.loads.finish(d.id)
	if d.agent.Valid() && !d.agent.Final && !u.Failed {
		r.acting[d.agent.SessionID] = actingSession{worker: d.Worker, since: now}
	}
	var rel []release
	if r.adm != nil && d.program != "" {
		_ = r.adm.EndRequest(now, d.program, int64(prompt), int64(u.CompletionTokens))
		if d.agent.Final {
			_ = r.adm.EndSession(now, d.program)
		}
		rel = r.drainAdmissionLocked()
	}
	r.mu.Unlock()
	r.notify(rel)
	r.observeLoad(d.Worker)
	if d.agent.Valid() {
		_, _ = r.table.End(d.agent.SessionID, session.Usage{
			InputTokens: uint64(prompt), OutputTokens: uint64(u.CompletionTokens), CachedTokens: uint64(u.CachedTokens),
		})
	}
	r.traceRecord(d, u, now)
	if r.metrics != nil {
		r.metrics.observeFinished(u.Failed)
	}
}

// EndSession ends a session explicitly (its program, table entry and
// affinity), e.g. when a client disconnects for good.
func (r *Router) EndSession(id string) {
	r.table.Finish(id)
	if !r.table.Remove(id) {
		// Not in the table (its only requests are held): end the rest.
		r.onSessionRemoved(session.Removal{ID: id})
	}
}

func (r *Router) onSessionRemoved(rm session.Removal) {
	r.hintsOnFinish(rm.ID, "")
	r.tree.RemoveSession(rm.ID)
	r.hashes.forget(rm.ID)
	r.mu.Lock()
	delete(r.acting, rm.ID)
	var rel []release
	if r.adm != nil {
		_ = r.adm.EndSession(r.cfg.Now(), rm.ID)
		rel = r.drainAdmissionLocked()
	}
	r.mu.Unlock()
	r.notify(rel)
}

// TickResult summarises one control-loop round.
type TickResult struct {
	Admission admission.TickResult
	// Released lists the held request IDs that may now be retried.
	Released []string
	// SweptRequests counts requests forgotten for lack of any sign of life.
	SweptRequests int
	// ExpiredSessions counts sessions removed for idleness.
	ExpiredSessions int
	// ExpiredHeld counts released requests dropped because their TryRoute
	// caller did not retry within Config.HeldTTL.
	ExpiredHeld int
}

// Tick runs one control-loop round: admission pause/resume, the expiry
// sweeps of requests, sessions and approximate index entries. Call it
// periodically (every 5 s by default; see admission.Config.Interval).
func (r *Router) Tick() TickResult {
	now := r.cfg.Now()
	var res TickResult
	res.ExpiredSessions = r.table.Expire()
	r.index.Expire()
	r.mu.Lock()
	res.SweptRequests = r.loads.sweep(now.Add(-r.cfg.RequestTTL))
	var swept []flashindex.Worker
	if res.SweptRequests > 0 && r.loadObs.Load() != nil {
		for _, ws := range r.workers {
			swept = append(swept, ws.key)
		}
	}
	waiting := 0
	var rel []release
	if r.adm != nil {
		rel = r.expireHeldLocked(now)
		res.ExpiredHeld = len(rel)
		res.Admission = r.adm.Tick(now)
		waiting = r.adm.Waiting()
	}
	rel = append(rel, r.drainAdmissionLocked()...)
	r.mu.Unlock()
	for _, x := range rel {
		if x.id != "" && !x.dropped {
			res.Released = append(res.Released, x.id)
		}
	}
	r.notify(rel)
	for _, w := range swept {
		r.observeLoad(w)
	}
	r.hintsOnTick(now)
	if r.metrics != nil && r.adm != nil {
		r.metrics.observeTick(waiting)
	}
	return res
}

// release is a held request whose fate admission decided.
type release struct {
	id      string
	h       *heldRequest
	dropped bool
	woken   bool // h.ready is closed already (an expired release)
}

// drainAdmissionLocked consumes admission decisions and marks released or
// dropped held requests. Callers hold r.mu and pass the result to notify
// after unlocking.
func (r *Router) drainAdmissionLocked() []release {
	if r.adm == nil {
		return nil
	}
	r.decBuf = r.adm.Drain(r.decBuf[:0])
	var out []release
	for _, d := range r.decBuf {
		if r.metrics != nil {
			r.metrics.observeAdmission(d)
		}
		if !d.Released || d.Kind == admission.KindCancel {
			// A cancel is the router withdrawing one turn itself (Cancel,
			// MaxHeld): that request is gone already, its siblings wait on.
			continue
		}
		ids := r.heldByPg[d.Program]
		delete(r.heldByPg, d.Program)
		for _, id := range ids {
			h := r.held[id]
			if h == nil {
				continue
			}
			switch d.Kind {
			case admission.KindResume:
				h.released, h.releasedAt = true, d.At
				h.adm = admission.Admission{Run: true, Worker: d.Worker, Priority: d.Priority,
					Status: admission.StatusRunnable, Reason: d.Reason}
			default: // terminated or cancelled: the turn will never run
				h.dropped = true
				delete(r.held, id)
			}
			out = append(out, release{id: id, h: h, dropped: h.dropped})
		}
	}
	return out
}

// notify wakes waiters and calls OnRelease, outside the router's lock.
func (r *Router) notify(rel []release) {
	for _, x := range rel {
		if !x.woken {
			close(x.h.ready)
		}
		if r.cfg.OnRelease != nil {
			var err error
			if x.dropped {
				err = ErrDropped
			}
			r.cfg.OnRelease(x.id, err)
		}
	}
}

// WorkerLoad returns the tracked load of a worker rank.
func (r *Router) WorkerLoad(w flashindex.Worker) Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads.load(w)
}

// Workers returns the worker ranks the router routes to.
func (r *Router) Workers() []flashindex.Worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]flashindex.Worker, len(r.workers))
	for i, ws := range r.workers {
		out[i] = ws.key
	}
	return out
}

// AdmissionStats returns the admission counters (zero when admission is
// off).
func (r *Router) AdmissionStats() admission.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adm == nil {
		return admission.Stats{}
	}
	return r.adm.Stats()
}

// Close stops routing; held requests are dropped.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var rel []release
	for id, h := range r.held {
		h.dropped = true
		rel = append(rel, release{id: id, h: h, dropped: true})
	}
	clear(r.held)
	clear(r.heldByPg)
	r.mu.Unlock()
	r.notify(rel)
	return nil
}
