package agentkv

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
	"github.com/zeebo/xxh3"
)

// This file is the request path: Route and TryRoute, and route's stages
// in the order a request passes them.

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
	// Agent is the session the request belongs to (zero: an isolated call,
	// or, with Config.InferSessions, a session inferred from the prompt:
	// routing then fills Agent with it, Inferred set).
	Agent session.AgentContext
	// Client names the caller's scope for inferred sessions (a tenant, an
	// API key's hash, a connection): a request only joins sessions
	// inferred for the same Client. "" is one scope shared by all.
	Client string
	// LoRA names the adapter; it changes the block hashes.
	LoRA string
	// CacheSalt is the cache salt the engine gets with the request (vLLM's
	// cache_salt; a tenant's, see gateway/tenant): mixed into the first
	// block's hash as the engine mixes it, so the request is credited only
	// with blocks cached under the same salt. Empty: unsalted.
	CacheSalt string
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
	// PrefillFirst prices the workers for the request's time to first
	// token: by the prompt tokens to compute there (the prefills in
	// flight and the request's uncached tokens), the decode load counting
	// only PrefillFirstDecodeWeight as much. Dynamo's cost weighs a block
	// of a decoding sequence as much as a block of prompt still to
	// compute, which balances KV memory; an engine step, though, costs
	// ~66 µs per prompt token and ~0.1 µs per token of decode context
	// (engine/sim's Llama-3-8B timing), so a latency-bound request placed
	// by decode blocks lands beside the prefills it then waits for. The
	// gateway sets it for a tenant under its fair share while another is
	// over (gateway/tenant.Under).
	PrefillFirst bool
}

// PrefillFirstDecodeWeight is the weight of the decode load when
// Override.PrefillFirst is set: a tie-break.
const PrefillFirstDecodeWeight = 1.0 / 1024

// Route routes req, blocking while admission control holds it. It returns
// ctx.Err() if ctx ends first, with the held turn withdrawn. The caller
// must call Decision.Done when the request finishes.
func (r *Router) Route(ctx context.Context, req *Request) (*Decision, error) {
	for {
		// A released turn is held again when the worker it was released
		// to left before this call came back for it (releasedToGoneLocked).
		d, h, err := r.route(req, true)
		if !errors.Is(err, ErrHeld) {
			return d, err
		}
		select {
		case <-h.ready:
		case <-ctx.Done():
			// Cancel withdraws the held turn, or ends it if its release
			// raced with the cancellation.
			r.Cancel(req.ID)
			return nil, ctx.Err()
		}
		if h.dropped {
			return nil, ErrDropped
		}
	}
}

// TryRoute routes req without blocking. When admission holds it, TryRoute
// returns ErrHeld; the request keeps its place and, once released (see
// Config.OnRelease and Tick), the caller retries TryRoute with the same
// Request.ID to obtain the decision.
func (r *Router) TryRoute(req *Request) (*Decision, error) {
	d, _, err := r.route(req, false)
	return d, err
}

// routing is one request on its way through route's stages; each stage
// fills the fields it owns. The Request travels beside it, not in it: a
// pointer stored in the struct would make escape analysis move every
// caller's Request to the heap.
type routing struct {
	start time.Time // the router's clock when the request arrived
	t0    time.Time // wall clock, for the stage metrics
	// identify
	program string // admission program ("" with no session)
	session string // the request's session id (GlobalLB's key)
	binding session.Binding
	bound   bool // the session has a live binding
	// hash
	seq    []uint64 // the prompt's block sequence hashes
	prompt int      // prompt tokens
	// match (sc.matches holds the index's answer)
	hits *sharedpool.Hits
	// price, admit, select
	cost        CostConfig // the weights in force
	adm         admission.Admission
	waited      time.Duration
	admitted    bool // admission chose the worker
	heldNow     bool // admission held the turn in this call
	tracked     bool // Config.AdmissionPolicy tracks the request
	pick        candidate
	viaAffinity bool
	inferred    bool // the Infer stage gave the request its session
	wasHeld     bool // admission held the turn before it ran
	continuing  bool // admission kept a running program's worker
	// book
	id   uint64        // the load tracker's id of the request
	prev actingSession // the session's previous turn, when hints keep it
	// stage timings for Metrics
	tHash, tMatch, tSched time.Duration
}

// scratch holds per-call buffers.
type scratch struct {
	seq     []uint64
	matches []flashindex.Match
	logits  []float64
	cands   []candidate
	// GlobalLB's candidates and their requests in flight
	keys     []flashindex.Worker
	inflight []int
}

type candidate struct {
	ws     *workerState
	match  flashindex.Match
	shared int // shared-pool blocks credited
	cost   Cost
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// route is Route and TryRoute: the request passes identify, hash and match
// outside the router's lock, price, admit, select and book under it, and
// commit outside it again. With hold (Route), a turn that must wait is
// held for a blocked caller; the returned heldRequest signals its release.
func (r *Router) route(req *Request, hold bool) (*Decision, *heldRequest, error) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	rt := &routing{start: r.cfg.Now(), t0: time.Now()}
	r.identify(rt, req)
	if err := r.hashPrompt(rt, req, sc); err != nil {
		return nil, nil, err
	}
	r.inferSession(rt, req)
	r.matchPrompt(rt, req, sc)

	t := time.Now()
	r.mu.Lock()
	h, err := r.decideLocked(rt, req, sc, hold)
	rel := r.drainAdmissionLocked()
	r.mu.Unlock()
	rt.tSched = time.Since(t)
	r.notify(rel)
	if err != nil && !errors.Is(err, ErrHeld) && rt.inferred {
		r.infer.End(req.Agent.SessionID) // it never ran
	}
	if err != nil {
		if rt.heldNow && r.metrics != nil {
			r.metrics.observeHeld()
		}
		return nil, h, err
	}
	r.observeLoad(rt.pick.ws.key)
	return r.commit(rt, req, sc), nil, nil
}

// identify is the first stage: which session and admission program the
// request belongs to, and the worker the session is bound to, if any (the
// session table learns of the request only once it is routed, in commit).
func (r *Router) identify(rt *routing, req *Request) {
	if !req.Agent.Inferred && strings.HasPrefix(req.Agent.SessionID, InferredPrefix) {
		// No client may address an inferred session.
		req.Agent.SessionID, req.Agent.ParentSessionID = "", ""
	}
	ac := req.Agent
	rt.program = programID(ac)
	if ac.Valid() && r.affinityMayApply() {
		rt.binding, rt.bound = r.table.Affinity(ac.SessionID)
	}
}

// hashPrompt is the hash stage: the prompt's block sequence hashes (given,
// or computed through the session's hash cache) and its length in tokens,
// at least its full blocks.
func (r *Router) hashPrompt(rt *routing, req *Request, sc *scratch) error {
	rt.seq, rt.prompt = req.SequenceHashes, req.InputTokens
	if rt.seq == nil {
		h, err := r.hasher(req.LoRA)
		if err != nil {
			return err
		}
		key := req.LoRA
		if req.CacheSalt != "" {
			h, key = h.Salted(req.CacheSalt), req.LoRA+"\x00salt:"+req.CacheSalt
		}
		sc.seq = r.hashes.hash(h, req.Agent.SessionID, key, req.Tokens, sc.seq)
		rt.seq = sc.seq
		if rt.prompt == 0 {
			rt.prompt = len(req.Tokens)
		}
	}
	rt.prompt = max(rt.prompt, len(rt.seq)*r.cfg.BlockSize)
	rt.tHash = time.Since(rt.t0)
	return nil
}

// matchPrompt is the match stage: each worker's cached prefix per tier
// (KVAware only; the index has its own concurrency) and the shared pool's
// pages of the prompt.
func (r *Router) matchPrompt(rt *routing, req *Request, sc *scratch) {
	t := time.Now()
	sc.matches = sc.matches[:0]
	if r.cfg.Policy == KVAware {
		sc.matches = r.index.FindMatches(rt.seq, sc.matches)
	}
	rt.tMatch = time.Since(t)
	rt.hits = r.sharedHits(req.Tokens)
}

// decideLocked runs the stages under the router's lock: price the
// candidates, admit the turn (or hold it), select a worker and book the
// load. A held turn returns its heldRequest and ErrHeld.
func (r *Router) decideLocked(rt *routing, req *Request, sc *scratch, hold bool) (*heldRequest, error) {
	if r.closed {
		return nil, ErrClosed
	}
	if req.ID == "" {
		r.nextID++
		req.ID = "r" + strconv.FormatUint(r.nextID, 10)
	}
	if err := r.priceLocked(rt, req, sc); err != nil {
		return nil, err
	}
	if h, err := r.admitLocked(rt, req, sc, hold); err != nil {
		return h, err
	}
	rt.session = req.Agent.SessionID
	r.selectLocked(rt, sc)
	r.bookLocked(rt, req)
	if rt.tracked {
		r.policyEventLocked(admission.Event{Kind: admission.Dispatched, ID: req.ID, Worker: rt.pick.ws.admID, At: rt.start})
	}
	return nil, nil
}

// priceLocked is the price stage: the candidates (the workers the
// request's Override allows) with their matched prefix, shared-pool credit
// and cost.
func (r *Router) priceLocked(rt *routing, req *Request, sc *scratch) error {
	o := req.Override
	rt.cost = r.cfg.Cost
	if o != nil && o.Cost != nil {
		rt.cost = o.Cost.withDefaults()
	}
	sc.cands = sc.cands[:0]
	for _, ws := range r.workers {
		if o.allows(ws.key) {
			sc.cands = append(sc.cands, candidate{ws: ws})
		}
	}
	if len(sc.cands) == 0 {
		return ErrNoWorkers
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
		c.shared = sharedBlocks(rt.hits, c.match)
		c.cost = rt.cost.cost(costInput{
			blockSize: r.cfg.BlockSize, requestTokens: rt.prompt,
			device: c.match.Device, host: c.match.Host, disk: c.match.Disk, shared: c.shared,
			activePrefillTokens: l.PrefillTokens, decodeBlocks: l.DecodeBlocks, requests: l.Requests,
			prefillFirst: o != nil && o.PrefillFirst,
		})
	}
	return nil
}

// allows reports whether the override lets the request go to w (a nil
// Override allows every worker).
func (o *Override) allows(w flashindex.Worker) bool {
	if o == nil {
		return true
	}
	return (len(o.AllowedWorkers) == 0 || slices.Contains(o.AllowedWorkers, w.ID)) &&
		(len(o.AllowedRanks) == 0 || slices.Contains(o.AllowedRanks, w))
}

// admitLocked is the admit stage. With admission, it asks whether the turn
// may run now and where: a new program is offered the workers in cost
// order, so it lands where its prefix is; a turn that must wait is held
// (ErrHeld); one that runs keeps only its admission worker as candidate.
// Without admission it drops the candidates over the busy threshold.
func (r *Router) admitLocked(rt *routing, req *Request, sc *scratch, hold bool) (*heldRequest, error) {
	if r.pol != nil {
		return r.admitPolicyLocked(rt, req, sc, hold)
	}
	if r.adm == nil || rt.program == "" {
		r.filterBusy(sc)
		return nil, nil
	}
	id := req.ID
	if h := r.held[id]; h != nil {
		if !h.released {
			return h, ErrHeld
		}
		rt.adm, rt.waited, rt.wasHeld = h.adm, rt.start.Sub(h.since), true
		delete(r.held, id)
		if _, ok := r.byAdm[h.adm.Worker]; !ok {
			if held, again, err := r.releasedToGoneLocked(rt, req, sc, hold); !again {
				return held, err
			}
		}
	} else {
		var prefer []admission.WorkerID
		st := r.adm.Status(rt.program)
		rt.continuing = st != admission.StatusUnknown
		if r.cfg.Policy == KVAware {
			switch {
			case st == admission.StatusUnknown:
				prefer = r.preferenceLocked(sc.cands)
			case st == admission.StatusRunnable && r.moves != nil:
				prefer = r.rebalancePreferenceLocked(rt, sc.cands)
			}
		}
		a, err := r.startTurnLocked(rt, req, prefer)
		if err != nil {
			return nil, err
		}
		if st == admission.StatusUnknown {
			r.firstPrefixLocked(rt, req)
		}
		if !a.Run {
			return r.holdLocked(rt, req, hold)
		}
		rt.adm = a
	}
	rt.admitted = true
	return nil, r.keepAdmissionWorkerLocked(rt, sc)
}

// releasedToGoneLocked handles a held turn released to a worker that left
// (RemoveWorker) before its caller came back for it. Where the removal
// paused the program, the release is void: the turn counted as running
// ends, and starts again (it runs on a worker admission has room on, or is
// held until the program resumes). Where admission has the program running
// elsewhere already, the turn goes there (again: carry on admitting).
func (r *Router) releasedToGoneLocked(rt *routing, req *Request, sc *scratch, hold bool) (held *heldRequest, again bool, err error) {
	if p, _ := r.adm.Program(rt.start, rt.program); p.Lifecycle == admission.Active && p.HasWorker {
		rt.adm.Worker = p.Worker
		return nil, true, nil
	}
	_ = r.adm.EndRequest(rt.start, rt.program, 0, 0)
	a, err := r.startTurnLocked(rt, req, r.preferenceLocked(sc.cands))
	if err != nil {
		return nil, false, err
	}
	if !a.Run {
		held, err = r.holdLocked(rt, req, hold)
		return held, false, err
	}
	rt.adm = a
	return nil, true, nil
}

// startTurnLocked asks admission to start the request's turn. A
// subagent's parent waits for it, so it does not queue at the door behind
// new programs.
func (r *Router) startTurnLocked(rt *routing, req *Request, prefer []admission.WorkerID) (admission.Admission, error) {
	ac := req.Agent
	if ac.ParentSessionID != "" && ac.ProgramID == "" {
		return r.adm.StartSubRequest(rt.start, rt.program, ac.ParentSessionID, int64(rt.prompt), prefer)
	}
	return r.adm.StartRequestOn(rt.start, rt.program, int64(rt.prompt), prefer)
}

// firstPrefixLocked tells admission the prefix a new program's first
// prompt shares with the sessions the lineage tree knows, which groups the
// rollouts of one task (Door.Probe.Siblings). A subagent is a turn of its
// parent's program, not a newcomer at the door: it gets none.
func (r *Router) firstPrefixLocked(rt *routing, req *Request) {
	if !r.siblings || req.Agent.ParentSessionID != "" && req.Agent.ProgramID == "" {
		return
	}
	if d := r.tree.Junction(rt.seq); d > 0 {
		_ = r.adm.SetFirstPrefix(rt.program, int64(d*r.cfg.BlockSize), rt.seq[d-1])
	}
}

// holdLocked holds the request's turn, unless MaxHeld requests are held
// already: then the turn is withdrawn and refused.
func (r *Router) holdLocked(rt *routing, req *Request, hold bool) (*heldRequest, error) {
	if len(r.held) >= r.cfg.MaxHeld {
		_ = r.adm.Cancel(rt.start, rt.program)
		return nil, ErrTooManyHeld
	}
	h := &heldRequest{program: rt.program, since: rt.start, waiter: hold, ready: make(chan struct{})}
	if rt.inferred {
		h.inferred = req.Agent
	}
	r.held[req.ID] = h
	r.heldByPg[rt.program] = append(r.heldByPg[rt.program], req.ID)
	rt.heldNow = true
	return h, ErrHeld
}

// keepAdmissionWorkerLocked narrows the candidates to the worker admission
// runs the program on. When that worker is not a candidate (it is failing,
// or the request's Override excludes it), the program moves, with this
// turn, to the cheapest candidate admission finds room on (Relocate): a
// session must not die with its worker. Only with no candidate at all does
// the turn end and the request get refused.
func (r *Router) keepAdmissionWorkerLocked(rt *routing, sc *scratch) error {
	w, ok := r.byAdm[rt.adm.Worker]
	if (!ok || !slices.ContainsFunc(sc.cands, func(c candidate) bool { return c.ws.key == w })) && len(sc.cands) > 0 {
		if a, moved := r.adm.Relocate(rt.start, rt.program, r.preferenceLocked(sc.cands)); moved {
			rt.adm = a
			w, ok = r.byAdm[a.Worker]
		}
	}
	keep := sc.cands[:0]
	for _, c := range sc.cands {
		if ok && c.ws.key == w {
			keep = append(keep, c)
		}
	}
	sc.cands = keep
	if len(sc.cands) == 0 {
		_ = r.adm.EndRequest(rt.start, rt.program, 0, 0)
		return ErrNoWorkers
	}
	return nil
}

// selectLocked is the select stage: the session's bound worker when it is
// a candidate (and admission did not choose), else the policy's pick.
func (r *Router) selectLocked(rt *routing, sc *scratch) {
	pick := -1
	if bw := indexWorker(rt.binding.Worker); rt.bound && !rt.admitted && r.affinityFor(bw) != AffinityOff {
		for i := range sc.cands {
			if sc.cands[i].ws.key == bw {
				pick, rt.viaAffinity = i, true
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
		case GlobalLB:
			pick = r.pickGlobalLBLocked(rt.session, sc)
		default:
			sc.logits = sc.logits[:0]
			for _, c := range sc.cands {
				sc.logits = append(sc.logits, c.cost.Logit)
			}
			pick = selectIndex(sc.logits, rt.cost.Temperature, r.rng.Float64)
			if rt.cost.Temperature == 0 && rt.session != "" {
				pick = sessionTieBreak(sc, pick, rt.session)
			}
		}
	}
	rt.pick = sc.cands[pick]
}

// sessionTieBreak replaces the random choice among equally cheap workers
// with a rendezvous hash of the session id over them: two routers (replicas
// cut off from each other, or a restart) that see the same costs send a
// new session to the same worker without talking.
func sessionTieBreak(sc *scratch, pick int, id string) int {
	lo, best := sc.logits[pick], uint64(0)
	var b [12]byte
	for i, c := range sc.cands {
		if sc.logits[i] != lo {
			continue
		}
		binary.LittleEndian.PutUint64(b[:8], c.ws.key.ID)
		binary.LittleEndian.PutUint32(b[8:], c.ws.key.DPRank)
		if h := xxh3.HashStringSeed(id, xxh3.Hash(b[:])); h >= best {
			pick, best = i, h
		}
	}
	return pick
}

// bookLocked books the request's load on its worker: its uncached prompt
// as prefill, prompt plus expected output as decode blocks.
func (r *Router) bookLocked(rt *routing, req *Request) {
	r.nextID++
	rt.id = r.nextID
	bs := r.cfg.BlockSize
	uncached := max(0, rt.prompt-rt.pick.match.Device*bs)
	blocks := (rt.prompt + req.ExpectedOutputTokens + bs - 1) / bs
	r.loads.start(rt.id, rt.pick.ws.key, uncached, blocks, rt.start)
	if req.Agent.Valid() && (len(r.cfg.Hints) > 0 || r.approximateFor(rt.pick.ws.key)) {
		rt.prev = r.acting[req.Agent.SessionID]
		delete(r.acting, req.Agent.SessionID)
	}
}

// record writes what routing rt to d.Worker implies into the approximate
// index: the prompt's blocks are about to be on the worker. A session's
// next turn on the same worker whose prompt extends the last one's chain,
// while the index still shows the worker holding all of it, records only
// its new blocks (flashindex.RecordTail), so a turn's cost grows with what
// it adds, not with its context; the context's entries are refreshed
// whole again once a quarter of ApproxTTL has passed since they last were,
// so they never come within three quarters of it of expiring while the
// session keeps coming back.
func (r *Router) record(d *Decision, rt *routing) {
	ttl := r.cfg.ApproxTTL
	p := &rt.prev
	from := 0
	if d.agent.Valid() && p.chainLen > 0 && p.worker == d.Worker && p.chainLen <= len(rt.seq) &&
		rt.seq[p.chainLen-1] == p.chainLast && rt.pick.match.Device >= p.chainLen &&
		!p.wholeAt.IsZero() && rt.start.Sub(p.wholeAt) < ttl/4 {
		from, d.wholeAt = p.chainLen, p.wholeAt
	}
	if from == 0 && d.agent.Valid() {
		d.wholeAt = rt.start
	}
	r.index.RecordTail(d.Worker, rt.seq, from, ttl)
}

// commit is the last stage, outside the lock: the session table learns of
// the request (and binds the session to its worker), the approximate index
// records the prompt on the worker, the lineage tree and hint policies see
// the turn, and the Decision is made.
func (r *Router) commit(rt *routing, req *Request, sc *scratch) *Decision {
	d := r.newDecision(rt, req, len(sc.cands))
	d.boundHere = r.beginSession(rt, req)
	if n := len(rt.seq); n > 0 && d.agent.Valid() {
		d.chainLen, d.chainLast = n, rt.seq[n-1]
	}
	if len(rt.seq) > 0 && r.approximateFor(d.Worker) {
		r.record(d, rt)
		if dev := rt.pick.match.Device; dev < len(rt.seq) {
			d.recorded = slices.Clone(rt.seq[dev:])
		}
	}
	recorded := r.updateLineage(d.agent, rt.seq)
	r.hintsOnRoute(d, rt, sc.matches, recorded)
	if r.cfg.Trace != nil {
		var h *flashindex.Hasher
		if req.SequenceHashes == nil {
			h, _ = r.hasher(req.LoRA)
		}
		d.replayHashes = replayHashes(h, rt.seq, req.Tokens)
	}
	if r.metrics != nil {
		r.metrics.observeRoute(d, len(rt.seq), rt.tHash, rt.tMatch, rt.tSched, time.Since(rt.t0))
	}
	return d
}

// beginSession records the request's start in the session table and, with
// affinity on and the worker not chosen by the binding, binds the session
// to its worker; it reports whether it bound.
func (r *Router) beginSession(rt *routing, req *Request) bool {
	ac := req.Agent
	if !ac.Valid() {
		return false
	}
	info, err := r.table.Begin(ac)
	if err != nil {
		r.log.Debug("agentkv: session not tracked", "session", ac.SessionID, "err", err)
	}
	if ac.Compaction || info.Compacted {
		r.compacted(ac.SessionID)
	}
	w := rt.pick.ws.key
	aff := r.affinityFor(w)
	if aff == AffinityOff || rt.viaAffinity {
		return false
	}
	return r.table.Bind(ac.SessionID, sessionWorker(w), sessionMode(aff)) == nil
}

// newDecision is the routed request's Decision.
func (r *Router) newDecision(rt *routing, req *Request, candidates int) *Decision {
	c, bs := rt.pick, r.cfg.BlockSize
	return &Decision{
		RequestID: req.ID,
		Worker:    c.ws.key,
		Cached: TierTokens{
			Device: c.match.Device * bs,
			Host:   c.match.Host * bs,
			Disk:   c.match.Disk * bs,
		},
		SharedBlocks: c.shared,
		Cost:         c.cost,
		Candidates:   candidates,
		received:     rt.start,
		Admission:    rt.adm,
		Waited:       rt.waited,
		Affinity:     rt.viaAffinity,
		Reason:       rt.reason(req.Agent),
		r:            r,
		id:           rt.id,
		program:      rt.program,
		agent:        req.Agent,
		prompt:       rt.prompt,
		tracked:      rt.tracked,
	}
}

// rebalancePreferenceLocked is the preference offered for a running
// program's turn under admission's Moves: the candidates that cost at least
// Moves.Margin tokens of prefill less than the program's own worker,
// cheapest first (none: the turn stays home). Admission then gets the
// workers' current prefill backlogs, for its escape rule.
func (r *Router) rebalancePreferenceLocked(rt *routing, cands []candidate) []admission.WorkerID {
	p, ok := r.adm.Program(rt.start, rt.program)
	if !ok || !p.HasWorker || len(cands) < 2 {
		return nil
	}
	home, best := math.Inf(1), math.Inf(1)
	for _, c := range cands {
		if c.ws.admID == p.Worker {
			home = c.cost.Logit
		}
		best = min(best, c.cost.Logit)
	}
	margin := float64(r.moves.Margin) / float64(r.cfg.BlockSize)
	if math.IsInf(home, 1) || home-best < margin {
		return nil
	}
	r.syncBacklogLocked()
	out := r.preferenceLocked(cands)
	n := 0
	for _, c := range cands {
		if home-c.cost.Logit >= margin {
			n++
		}
	}
	return out[:n] // the cheapest first, each at least the margin below home
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
