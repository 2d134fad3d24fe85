package agentkv

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/radix"
	"github.com/agentkv/agentkv/session"
)

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
	infer   *Inferrer // nil without Config.InferSessions
	batcher *kvhint.Batcher
	// refs is kvhint.RefsBound of the hint policies: where the lineage
	// tree stops counting a shared block's sessions (0: counts them all).
	refs int
	// renewals is what lease renewals the hint policies sent
	// (kvhint.Renewals), this router's own.
	renewals *kvhint.Renewals
	// needs is kvhint.Needs of the hint policies for each event.
	needs   [kvhint.EventFinish + 1]kvhint.Need
	log     *slog.Logger
	metrics *Metrics

	hashers sync.Map // LoRA name → *flashindex.Hasher
	evented sync.Map // flashindex.Worker → struct{}: ranks whose KV events were applied
	hashes  *hashCache
	loadObs atomic.Pointer[func(flashindex.Worker)] // SetLoadObserver

	mu sync.Mutex // guards everything below
	// workers in insertion order; byKey and byAdm index them.
	workers []*workerState
	byKey   map[flashindex.Worker]int
	byAdm   map[admission.WorkerID]flashindex.Worker
	nextAdm admission.WorkerID
	loads   *loadTracker
	// adm is the sync core, not admission.Admitter, because the router
	// must admit under mu, atomically with its workers, loads and held
	// requests, offering workers in cost order (StartRequestOn), and holds
	// each request itself (TryRoute, HeldTTL, MaxHeld) where Admitter
	// blocks a program's callers.
	adm   *admission.RawAdmitter
	moves *admission.Moves // adm's Config().Moves (nil: off), read per turn
	// siblings: adm groups programs by their first prompt's shared prefix
	// (Door.Probe.Siblings), which the router names (firstPrefixLocked).
	siblings bool
	// pol is Config.AdmissionPolicy; polWake collects the request ids its
	// events woke, for drainAdmissionLocked; polWorkers is scratch.
	pol        admission.Policy
	polWake    []string
	polWorkers []admission.PolicyWorker
	decBuf     []admission.Decision
	// held requests (TryRoute/Route waiting for admission), by request ID,
	// and the request IDs held per program in arrival order.
	held     map[string]*heldRequest
	heldByPg map[string][]string
	// acting holds sessions between turns, for tick-time hint policies
	// (empty when there are none).
	acting map[string]actingSession
	rr     int
	sticky *stickyLB // GlobalLB's sessions
	rng    *rand.Rand
	nextID uint64
	closed bool
}

// New validates cfg and returns a Router with no workers.
func New(cfg Config) (*Router, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
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
		refs:     int(kvhint.RefsBound(cfg.Hints)),
		renewals: kvhint.NewRenewals(),
		sticky:   newStickyLB(GlobalLBSessions),
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
	}
	for ev := range r.needs {
		r.needs[ev] = kvhint.Needs(cfg.Hints, kvhint.Event(ev))
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if cfg.HashCacheTokens > 0 {
		r.hashes = newHashCache(cfg.HashCacheTokens, cfg.BlockSize)
	}
	if err := r.newParts(); err != nil {
		return nil, err
	}
	return r, nil
}

// newParts builds the index, the lineage tree, the session table and
// admission from r.cfg.
func (r *Router) newParts() error {
	cfg := r.cfg
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
		return err
	}
	if r.tree, err = radix.New(cfg.Lineage); err != nil {
		return err
	}
	if cfg.InferSessions != nil {
		if r.infer, err = newInferrer(*cfg.InferSessions, cfg.BlockSize, r.tree); err != nil {
			return err
		}
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
		return err
	}
	if cfg.Admission != nil {
		if r.adm, err = admission.NewRawAdmitter(*cfg.Admission); err != nil {
			return err
		}
		r.moves = r.adm.Config().Moves
		if d := r.adm.Config().Door; d != nil && d.Probe != nil && d.Probe.Siblings > 0 {
			r.siblings = true
		}
	}
	r.pol = cfg.AdmissionPolicy
	return nil
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
			ws.info, ws.adapter, ws.capBlock, ws.hints = info, w, capBlock, hintSink(w)
			continue
		}
		ws := &workerState{key: key, info: info, adapter: w, capBlock: capBlock, hints: hintSink(w)}
		if r.adm != nil || r.pol != nil {
			ws.admID = r.nextAdm
			if r.adm != nil {
				if err := r.adm.AddWorker(ws.admID, admCap); err != nil {
					return err // a fresh id and a valid capacity: not reached
				}
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
		}
		delete(r.byAdm, ws.admID)
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
	} else if _, ok := r.evented.Load(ev.Worker); !ok {
		r.evented.Store(ev.Worker, struct{}{})
	}
	return err
}

// approximateFor reports whether decisions routed to w are recorded in the
// index (Config.Index).
func (r *Router) approximateFor(w flashindex.Worker) bool {
	switch r.cfg.Index {
	case IndexApproximate:
		return true
	case IndexExact:
		return false
	}
	_, evented := r.evented.Load(w)
	return !evented
}

// affinityFor is the affinity that applies to sessions on w: Config.Affinity,
// or under IndexAuto with affinity off, soft while w has sent no KV event.
func (r *Router) affinityFor(w flashindex.Worker) AffinityMode {
	if r.cfg.Affinity != AffinityOff || r.cfg.Index != IndexAuto || !r.approximateFor(w) {
		return r.cfg.Affinity
	}
	return AffinitySoft
}

// affinityMayApply reports whether any session may be bound: identify
// reads bindings only then.
func (r *Router) affinityMayApply() bool {
	return r.cfg.Affinity != AffinityOff || r.cfg.Index == IndexAuto
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
	if r.infer != nil {
		r.infer.Forget(rm.ID)
	}
	r.hashes.forget(rm.ID)
	r.mu.Lock()
	delete(r.acting, rm.ID)
	var rel []release
	if r.adm != nil {
		r.syncBacklogLocked()
		_ = r.adm.EndSession(r.cfg.Now(), rm.ID)
		rel = r.drainAdmissionLocked()
	}
	r.mu.Unlock()
	r.notify(rel)
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

// AdmissionConfig returns the admission configuration in force, defaults
// filled in, and whether admission is on.
func (r *Router) AdmissionConfig() (admission.Config, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adm == nil {
		return admission.Config{}, false
	}
	return r.adm.Config(), true
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
		// A released request's ready channel is closed already (its
		// caller has not come back for it yet): do not close it twice.
		rel = append(rel, release{id: id, h: h, dropped: true, woken: h.released})
	}
	clear(r.held)
	clear(r.heldByPg)
	r.mu.Unlock()
	r.notify(rel)
	return nil
}
