package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/trace"
)

// Router places requests on engines. The replay calls it for every request
// on its own goroutine, in virtual-time order, never concurrently.
//
// Route picks the engine for req (Decision.Worker, an index into the
// replay's engines) or holds it (Decision.Hold): a held request waits in
// the replay, its session paused, until a later Finished or Tick returns
// its ID; the replay then calls Route for it again. Finished reports a
// request that completed (or was rejected by its engine) and may release
// held requests; Tick is called every ReplayConfig.TickInterval of virtual
// time and may release held requests. Released IDs are routed in the order
// given; IDs that are not held are ignored and counted.
//
// req and its slices are valid until Finished returns for it; the router
// must not modify them.
type Router interface {
	Route(now time.Duration, req *Request) (Decision, error)
	Finished(now time.Duration, req *Request) (release []uint64)
	Tick(now time.Duration) (release []uint64)
}

// FirstTokenObserver is implemented by routers that want to know when a
// request's prefill is done (its first token sampled), for example to move
// its load from prefill to decode accounting.
type FirstTokenObserver interface {
	FirstToken(now time.Duration, req *Request)
}

// Decision is a router's answer for one request.
type Decision struct {
	// Worker is the index of the engine to run the request on.
	Worker int
	// Hold keeps the request in the replay until the router releases it;
	// Worker is then ignored.
	Hold bool
}

// Defaults of a zero ReplayConfig.
const (
	DefaultTickInterval = 5 * time.Second // ThunderAgent's admission tick
	DefaultStallTimeout = time.Hour
)

// ReplayConfig configures a Replay. Zero fields mean the documented
// defaults.
type ReplayConfig struct {
	// TickInterval is the virtual time between Router.Tick calls; 0 means
	// 5 s, a negative value disables ticks.
	TickInterval time.Duration
	// MaxActiveSessions bounds the agent programs (root sessions with
	// their subagents) running at once in closed-loop replay: the next root
	// session starts, in workload order, at the later of its Start and the
	// end of a running program. 0 means no bound.
	MaxActiveSessions int
	// StallTimeout is how long requests may stay held with nothing else
	// happening before Run gives up with ErrStalled; 0 means 1 h.
	StallTimeout time.Duration
	// MaxRunning is a fixed global concurrency cap at the door (the
	// simplest admission control): of the MaxActiveSessions programs
	// offered, at most MaxRunning run at once; the others wait, in offer
	// order, for a running program to end, and that wait counts in their
	// first turn's Held and TTFT. 0 means no cap.
	MaxRunning int
	// TTFTSLO is the time-to-first-token objective of Result.Goodput;
	// 0 means DefaultTTFTSLO.
	TTFTSLO time.Duration
}

// DefaultTTFTSLO is the default time-to-first-token objective: an agent's
// model turn that waits longer than this, held or queued, misses it.
const DefaultTTFTSLO = 10 * time.Second

// Replay runs a workload against engines on a virtual clock, routing every
// request through a Router. A Replay runs once and is not safe for
// concurrent use.
type Replay struct {
	w       *trace.Workload
	engines []*Engine
	router  Router
	ftObs   FirstTokenObserver
	cfg     ReplayConfig
	bs      int

	sess    []sessState
	byID    map[string]int
	waiters map[int][]int
	roots   []int
	rootAt  int
	active  int
	progOut []int // per root: sessions started or scheduled and not finished
	running int   // programs started (past the door)
	door    []int // roots offered and waiting for MaxRunning
	offered []time.Duration
	doorAt  []time.Duration   // per root: how long it waited at the door
	offers  []time.Duration   // offer times of roots, in offer order
	compl   []time.Duration   // program completion times (offer → end)
	busyBkt [][]time.Duration // per engine: busy time per second of virtual time

	h       eventHeap
	seq     uint64
	nonTick int
	now     time.Duration

	busy    []bool
	kicked  []bool
	hkicked []bool // an evHints is queued for the engine
	pending []StepResult

	held     map[uint64]*Request
	holdFrom map[uint64]time.Duration
	reqs     []*Request
	lastProg time.Duration
	ran      bool

	res      Result
	ttft     []time.Duration
	e2e      []time.Duration
	finished int
}

type sessState struct {
	s          *trace.Session
	parent     int
	root       int
	atTurn     []int // children spawned by ParentTurn, sorted by ParentTurn
	atStart    []int // children with ParentTurn -1
	started    bool
	done       bool
	finishedAt time.Duration
	turnsDone  int
	waitLeft   int
	waitBase   time.Duration
	waitTurn   int
	prevChain  []uint64
}

const (
	evStart uint8 = iota
	evArrive
	evStepEnd
	evKick
	evTick
	evHints // apply an idle engine's hints; like evTick, not counted as work
)

// NewReplay validates w against the engines and returns a Replay. All
// engines must share one block size that divides, or is a multiple of,
// w.BlockTokens. w is only read; it must not change while the replay runs.
func NewReplay(w *trace.Workload, engines []*Engine, r Router, cfg ReplayConfig) (*Replay, error) {
	if w == nil || r == nil || len(engines) == 0 {
		return nil, fmt.Errorf("%w: a workload, a router and at least one engine are required", ErrConfig)
	}
	if cfg.TickInterval == 0 {
		cfg.TickInterval = DefaultTickInterval
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.TTFTSLO == 0 {
		cfg.TTFTSLO = DefaultTTFTSLO
	}
	if cfg.MaxActiveSessions < 0 || cfg.StallTimeout < 0 || cfg.MaxRunning < 0 || cfg.TTFTSLO < 0 {
		return nil, fmt.Errorf("%w: negative MaxActiveSessions, MaxRunning, StallTimeout or TTFTSLO", ErrConfig)
	}
	bs := engines[0].cfg.BlockSize
	for i, e := range engines {
		if e == nil {
			return nil, fmt.Errorf("%w: engine %d is nil", ErrConfig, i)
		}
		if e.cfg.BlockSize != bs {
			return nil, fmt.Errorf("%w: engine 0 has %d-token blocks, engine %d has %d", ErrBlockSize, bs, i, e.cfg.BlockSize)
		}
	}
	rp := &Replay{
		w: w, engines: engines, router: r, cfg: cfg, bs: bs,
		byID:     make(map[string]int, len(w.Sessions)),
		waiters:  make(map[int][]int),
		busy:     make([]bool, len(engines)),
		kicked:   make([]bool, len(engines)),
		hkicked:  make([]bool, len(engines)),
		pending:  make([]StepResult, len(engines)),
		held:     make(map[uint64]*Request),
		holdFrom: make(map[uint64]time.Duration),
	}
	rp.ftObs, _ = r.(FirstTokenObserver)
	peers := Peers(func(w flashindex.Worker) *Engine {
		for _, e := range engines {
			if e.cfg.Worker == w {
				return e
			}
		}
		return nil
	})
	for _, e := range engines {
		if e.hints.peers == nil {
			e.hints.peers = peers
		}
	}
	if err := rp.index(); err != nil {
		return nil, err
	}
	return rp, nil
}

func (rp *Replay) index() error {
	w := rp.w
	rp.sess = make([]sessState, len(w.Sessions))
	hasIDs := false
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if _, dup := rp.byID[s.ID]; dup {
			return &WorkloadError{Session: s.ID, Turn: -1, Reason: "duplicate session ID"}
		}
		rp.byID[s.ID] = i
		rp.sess[i] = sessState{s: s, parent: -1, root: i}
		for k, t := range s.Turns {
			if t.InputTokens < 1 || t.OutputTokens < 0 {
				return &WorkloadError{Session: s.ID, Turn: k, Reason: fmt.Sprintf("%d input and %d output tokens", t.InputTokens, t.OutputTokens)}
			}
			if t.Delay < 0 || t.Arrival < 0 {
				return &WorkloadError{Session: s.ID, Turn: k, Reason: "negative delay or arrival"}
			}
			hasIDs = hasIDs || len(t.HashIDs) > 0
		}
		if s.Start < 0 {
			return &WorkloadError{Session: s.ID, Turn: -1, Reason: "negative start"}
		}
	}
	if hasIDs {
		if err := checkBlockSizes(w.BlockTokens, rp.bs); err != nil {
			return err
		}
	}
	for i := range rp.sess {
		st := &rp.sess[i]
		s := st.s
		if s.Parent == "" {
			continue
		}
		p, ok := rp.byID[s.Parent]
		if !ok {
			return &WorkloadError{Session: s.ID, Turn: -1, Reason: fmt.Sprintf("unknown parent %q", s.Parent)}
		}
		if s.ParentTurn < -1 || s.ParentTurn >= len(w.Sessions[p].Turns) {
			return &WorkloadError{Session: s.ID, Turn: -1, Reason: fmt.Sprintf("parent turn %d out of range", s.ParentTurn)}
		}
		st.parent = p
		if s.ParentTurn == -1 {
			rp.sess[p].atStart = append(rp.sess[p].atStart, i)
		} else {
			rp.sess[p].atTurn = append(rp.sess[p].atTurn, i)
		}
	}
	for i := range rp.sess {
		st := &rp.sess[i]
		// Root of the program, with a bound against parent cycles.
		r, hops := i, 0
		for rp.sess[r].parent >= 0 {
			r = rp.sess[r].parent
			if hops++; hops > len(rp.sess) {
				return &WorkloadError{Session: st.s.ID, Turn: -1, Reason: "parent cycle"}
			}
		}
		st.root = r
		slices.SortStableFunc(st.atTurn, func(a, b int) int { return rp.sess[a].s.ParentTurn - rp.sess[b].s.ParentTurn })
		for k, t := range st.s.Turns {
			for _, id := range t.WaitFor {
				if _, ok := rp.byID[id]; !ok {
					return &WorkloadError{Session: st.s.ID, Turn: k, Reason: fmt.Sprintf("waits for unknown session %q", id)}
				}
			}
		}
		if st.parent < 0 {
			rp.roots = append(rp.roots, i)
		}
	}
	rp.progOut = make([]int, len(rp.sess))
	rp.offered = make([]time.Duration, len(rp.sess))
	rp.doorAt = make([]time.Duration, len(rp.sess))
	rp.busyBkt = make([][]time.Duration, len(rp.engines))
	return nil
}

// Requests returns every request of the run in ID (arrival) order, with
// the engine's and the replay's fields filled in. The slice is owned by the
// Replay; the requests' hash slices are nil once they finished.
func (rp *Replay) Requests() []*Request { return rp.reqs }

// Run replays the workload to the end and returns its metrics. It returns
// the first error of the router, an engine or an event sink, or
// ErrStalled.
func (rp *Replay) Run() (*Result, error) {
	if rp.ran {
		return nil, fmt.Errorf("%w: a Replay runs once", ErrConfig)
	}
	rp.ran = true
	if rp.w.OpenLoop {
		for i := range rp.sess {
			for k, t := range rp.sess[i].s.Turns {
				rp.push(t.Arrival, evArrive, int32(i), int32(k))
			}
		}
	} else {
		for _, r := range rp.roots {
			if rp.cfg.MaxActiveSessions > 0 && rp.active >= rp.cfg.MaxActiveSessions {
				break
			}
			rp.startProgram(r, rp.sess[r].s.Start)
		}
	}
	if rp.cfg.TickInterval > 0 {
		rp.push(rp.cfg.TickInterval, evTick, 0, 0)
	}
	for len(rp.h) > 0 {
		ev := rp.h.pop()
		if ev.kind != evTick && ev.kind != evHints {
			rp.nonTick--
		}
		rp.now = ev.t
		var err error
		switch ev.kind {
		case evStart:
			rp.startSession(int(ev.a))
		case evArrive:
			err = rp.arrive(int(ev.a), int(ev.b))
		case evKick:
			rp.kicked[ev.a] = false
			err = rp.step(int(ev.a))
		case evHints:
			rp.hkicked[ev.a] = false
			err = rp.step(int(ev.a))
		case evStepEnd:
			err = rp.stepEnd(int(ev.a))
		case evTick:
			err = rp.tick()
		}
		if err != nil {
			return nil, err
		}
	}
	if len(rp.held) > 0 {
		return nil, fmt.Errorf("%w: %d requests still held by the router at %v", ErrStalled, len(rp.held), rp.now)
	}
	for i := range rp.sess {
		if !rp.sess[i].done && (rp.w.OpenLoop || rp.sess[i].started) {
			return nil, fmt.Errorf("%w: session %q never finished (waiting for sessions that never ran?)", ErrStalled, rp.sess[i].s.ID)
		}
	}
	return rp.result(), nil
}

func (rp *Replay) push(t time.Duration, kind uint8, a, b int32) {
	rp.seq++
	if kind != evTick && kind != evHints {
		rp.nonTick++
	}
	rp.h.push(event{t: t, seq: rp.seq, kind: kind, a: a, b: b})
}

// startProgram offers a root session at at: it starts then, or waits at
// the door while MaxRunning programs run.
func (rp *Replay) startProgram(r int, at time.Duration) {
	rp.active++
	rp.rootAt++
	rp.progOut[r]++
	rp.offered[r] = at
	rp.offers = append(rp.offers, at)
	if rp.cfg.MaxRunning > 0 && rp.running >= rp.cfg.MaxRunning {
		rp.door = append(rp.door, r)
		return
	}
	rp.running++
	rp.push(at, evStart, int32(r), 0)
}

func (rp *Replay) startSession(i int) {
	st := &rp.sess[i]
	st.started = true
	for _, c := range st.atStart {
		rp.progOut[st.root]++
		rp.push(rp.now+rp.sess[c].s.Start, evStart, int32(c), 0)
	}
	if len(st.s.Turns) == 0 {
		rp.sessionDone(i)
		return
	}
	rp.prepare(i, 0, rp.now)
}

// prepare schedules turn k of session i once its dependencies are done:
// it arrives Delay after the later of base and the end of the last
// session it waits for.
func (rp *Replay) prepare(i, k int, base time.Duration) {
	st := &rp.sess[i]
	t := &st.s.Turns[k]
	left := 0
	for _, id := range t.WaitFor {
		c := rp.byID[id]
		if rp.sess[c].done {
			base = max(base, rp.sess[c].finishedAt)
			continue
		}
		left++
		rp.waiters[c] = append(rp.waiters[c], i)
	}
	if left > 0 {
		st.waitLeft, st.waitBase, st.waitTurn = left, base, k
		return
	}
	rp.push(base+t.Delay, evArrive, int32(i), int32(k))
}

func (rp *Replay) arrive(i, k int) error {
	st := &rp.sess[i]
	s := st.s
	t := &s.Turns[k]
	id := uint64(len(rp.reqs))
	req := &Request{
		ID: id, Session: s.ID, Root: rp.sess[st.root].s.ID, Parent: s.Parent, Turn: k,
		Arrival: rp.now, InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, Worker: -1,
	}
	if k == 0 && st.parent < 0 && rp.doorAt[i] > 0 {
		// The program's first turn waited at the door (MaxRunning).
		req.Arrival -= rp.doorAt[i]
		req.Held = rp.doorAt[i]
		req.DoorHeld = true
	}
	wt := rp.w.BlockTokens
	if len(t.HashIDs) == 0 {
		wt = rp.bs
	}
	n := t.InputTokens / rp.bs
	local, seq, err := AppendBlockHashes(make([]uint64, 0, n), make([]uint64, 0, n), t.HashIDs, wt, rp.bs, t.InputTokens, id)
	if err != nil {
		return err
	}
	req.LocalHashes, req.SeqHashes = local, seq
	rp.reqs = append(rp.reqs, req)
	return rp.route(req)
}

// kickHints schedules a step, now, for every idle engine the router sent
// hints to, so that they are applied at the virtual time they were sent
// (a busy engine applies them when its step ends).
func (rp *Replay) kickHints() {
	for w := range rp.engines {
		rp.kickHintsOf(w)
	}
}

func (rp *Replay) kickHintsOf(w int) {
	if rp.engines[w].PendingHints() > 0 && !rp.busy[w] && !rp.kicked[w] && !rp.hkicked[w] {
		rp.hkicked[w] = true
		rp.push(rp.now, evHints, int32(w), 0)
	}
}

func (rp *Replay) route(req *Request) error {
	d, err := rp.router.Route(rp.now, req)
	if err != nil {
		return fmt.Errorf("sim: router: request %d: %w", req.ID, err)
	}
	defer rp.kickHints()
	if d.Hold {
		if _, again := rp.holdFrom[req.ID]; !again {
			rp.res.Pauses++
			rp.holdFrom[req.ID] = rp.now
		}
		rp.held[req.ID] = req
		return nil
	}
	if d.Worker < 0 || d.Worker >= len(rp.engines) {
		return fmt.Errorf("%w: request %d to worker %d of %d", ErrDecision, req.ID, d.Worker, len(rp.engines))
	}
	if from, wasHeld := rp.holdFrom[req.ID]; wasHeld {
		delete(rp.holdFrom, req.ID)
		req.Held += rp.now - from
		rp.res.Resumes++
		rp.res.HeldTime += req.Held
	}
	req.Worker = d.Worker
	req.Dispatched = rp.now
	rp.lastProg = rp.now
	if err := rp.engines[d.Worker].Add(req); err != nil {
		if !errors.Is(err, ErrTooLarge) {
			return err
		}
		req.Finished = rp.now
		return rp.complete(req)
	}
	if !rp.busy[d.Worker] && !rp.kicked[d.Worker] {
		rp.kicked[d.Worker] = true
		rp.push(rp.now, evKick, int32(d.Worker), 0)
	}
	return nil
}

func (rp *Replay) release(ids []uint64) error {
	for _, id := range ids {
		req, ok := rp.held[id]
		if !ok {
			rp.res.BadReleases++
			continue
		}
		delete(rp.held, id)
		if err := rp.route(req); err != nil {
			return err
		}
	}
	return nil
}

func (rp *Replay) step(w int) error {
	if rp.busy[w] {
		return nil
	}
	res, err := rp.engines[w].Step(rp.now)
	if err != nil {
		return err
	}
	if res.Duration == 0 {
		return nil
	}
	rp.busy[w] = true
	rp.pending[w] = res
	rp.addBusy(w, rp.now, res.Duration)
	rp.push(rp.now+res.Duration, evStepEnd, int32(w), 0)
	return nil
}

func (rp *Replay) stepEnd(w int) error {
	rp.busy[w] = false
	res := rp.pending[w]
	rp.pending[w] = StepResult{}
	if rp.ftObs != nil {
		for _, r := range res.FirstTokens {
			rp.ftObs.FirstToken(rp.now, r)
		}
	}
	for _, r := range res.Finished {
		if err := rp.complete(r); err != nil {
			return err
		}
	}
	if rp.engines[w].HasWork() && !rp.kicked[w] {
		rp.kicked[w] = true
		rp.push(rp.now, evKick, int32(w), 0)
	}
	rp.kickHintsOf(w)
	return nil
}

// complete accounts a finished (or rejected) request and moves its session
// on.
func (rp *Replay) complete(req *Request) error {
	rp.lastProg = rp.now
	rp.account(req)
	rel := rp.router.Finished(rp.now, req)
	rp.kickHints()
	if err := rp.release(rel); err != nil {
		return err
	}
	i := rp.byID[req.Session]
	st := &rp.sess[i]
	st.prevChain = req.SeqHashes
	req.LocalHashes, req.SeqHashes = nil, nil
	st.turnsDone++
	if rp.w.OpenLoop {
		if st.turnsDone == len(st.s.Turns) {
			st.done, st.finishedAt = true, rp.now
		}
		return nil
	}
	k := req.Turn
	for _, c := range st.atTurn {
		if rp.sess[c].s.ParentTurn == k {
			rp.progOut[st.root]++
			rp.push(rp.now+rp.sess[c].s.Start, evStart, int32(c), 0)
		}
	}
	if k+1 < len(st.s.Turns) {
		rp.prepare(i, k+1, rp.now)
		return nil
	}
	rp.sessionDone(i)
	return nil
}

func (rp *Replay) sessionDone(i int) {
	st := &rp.sess[i]
	st.done, st.finishedAt = true, rp.now
	for _, wi := range rp.waiters[i] {
		ws := &rp.sess[wi]
		ws.waitBase = max(ws.waitBase, rp.now)
		if ws.waitLeft--; ws.waitLeft == 0 {
			rp.push(ws.waitBase+ws.s.Turns[ws.waitTurn].Delay, evArrive, int32(wi), int32(ws.waitTurn))
		}
	}
	delete(rp.waiters, i)
	r := st.root
	if rp.progOut[r]--; rp.progOut[r] == 0 {
		rp.active--
		rp.running--
		rp.compl = append(rp.compl, rp.now-rp.offered[r])
		if len(rp.door) > 0 {
			next := rp.door[0]
			rp.door = rp.door[1:]
			rp.running++
			rp.doorAt[next] = rp.now - rp.offered[next]
			rp.push(rp.now, evStart, int32(next), 0)
		}
		if rp.cfg.MaxActiveSessions > 0 && rp.rootAt < len(rp.roots) {
			next := rp.roots[rp.rootAt]
			rp.startProgram(next, max(rp.now, rp.sess[next].s.Start))
		}
	}
}

func (rp *Replay) tick() error {
	rel := rp.router.Tick(rp.now)
	rp.kickHints()
	if err := rp.release(rel); err != nil {
		return err
	}
	if rp.nonTick == 0 && len(rp.held) == 0 {
		return nil // nothing left to do: stop ticking
	}
	if rp.nonTick == 0 && rp.now-rp.lastProg >= rp.cfg.StallTimeout {
		return fmt.Errorf("%w: %d requests held for %v with nothing else to do", ErrStalled, len(rp.held), rp.now-rp.lastProg)
	}
	rp.push(rp.now+rp.cfg.TickInterval, evTick, 0, 0)
	return nil
}

// event is one entry of the virtual-time queue; seq breaks ties in push
// order, which makes runs deterministic.
type event struct {
	t    time.Duration
	seq  uint64
	kind uint8
	a, b int32
}

type eventHeap []event

func (h eventHeap) less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l, m := 2*i+1, i
		if l < n && s.less(l, m) {
			m = l
		}
		if r := l + 1; r < n && s.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
