package admission

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// RawAdmitter is the synchronous admission core: a deterministic state
// machine driven by request starts, request ends, session ends and ticks,
// each carrying the current time. It has no locks and starts no goroutines;
// it is not safe for concurrent use (wrap it in an Admitter, or serialise
// calls yourself). The same sequence of calls yields the same decisions.
type RawAdmitter struct {
	cfg     Config
	ceiling float64

	workers []*worker // sorted by id
	byID    map[WorkerID]*worker
	progs   map[string]*program
	paused  []*program // every Paused program, any order (pslot indexes it)

	nWaiting int // Paused programs with a held turn
	seq      uint64
	pauseSeq uint64
	tickNo   uint64

	pending []Decision
	stats   Stats

	// scratch reused across ticks
	sItems []Item
	sBins  []Bin
	sDst   []int
	sProgs []*program
	sBinW  []*worker
	// grown holds the final tails of the last len(grown) programs that
	// ended after two turns or more (ReserveGrowth), nGrown how many were
	// recorded in all, nEnded how many programs ended at all; learned is
	// the lower quartile of grown once growthMin are recorded (0 before);
	// growthEst is the cold-start prior until growthMin programs have
	// ended (Config.ColdStartPrograms), then learned.
	grown     [64]int64
	nGrown    int
	nEnded    int
	learned   int64
	growthEst int64
	// turnDur holds how long the last len(turnDur) turns ran (first run
	// to the tool boundary), nTurns how many were recorded in all: the
	// lead with which a swap marks programs (Config.MaxWait).
	turnDur [64]time.Duration
	nTurns  int
}

type worker struct {
	id        WorkerID
	cap       int64
	progs     []*program // Active programs placed here; program.slot indexes it
	reasoning int64      // Σ unique tails (tokens − shared) of Reasoning programs
	acting    int64      // Σ unique tails of Acting programs (unweighted)
	marked    int64      // Σ unique tails of marked programs (all Reasoning)
	// The shared prefixes of its programs, counted once: the worker's
	// cache holds one copy of each. sharedN counts its programs by shared
	// prefix; sharedSum sums the lengths of the prefixes it holds.
	sharedN   map[sharedKey]int
	sharedSum int64
	nAct      int
	demoted   bool
	demUntil  time.Time
	// reserved is the tick in which a held turn past MaxWait waits for
	// room here (markFor): resume places nothing else on it in that tick.
	reserved uint64
	// growth is Σ max(0, growthEst − tail) over its Reasoning programs:
	// the room ReserveGrowth keeps for them, actGrowth the same over its
	// Acting ones (the door keeps Config.DoorActingGrowth of it); both
	// kept by attach and detach, recomputed when growthEst changes.
	growth, actGrowth int64
	// backlog is the prefill backlog the caller last reported (SetBacklog).
	backlog int64
	// engine is the KV in use that the worker's engine last reported
	// (SetEngineUsage), in tokens, 0 when none was; unmodelled what of it
	// the programs here did not account for when it came.
	engine, unmodelled int64
}

type program struct {
	id        string
	phase     Phase
	life      Lifecycle
	w         *worker // non-nil iff Active
	home      *worker // where it last ran (nil: never placed, or removed)
	placed    bool    // was ever placed (false: a queued new program)
	tokens    int64
	shared    int64  // leading tokens shared with other programs (SetShared), ≤ tokens when counted
	sharedID  uint64 // which prefix (SetShared's key)
	steps     int
	inflight  int // turns started and not ended: running + held
	held      int // turns held while Paused
	marked    bool
	swapMark  bool // marked to make room for a swap: the pause target does not unmark it
	boost     bool // next released or started turn gets ResumeBoost
	resumedAt uint64
	runSince  time.Time // when its running turn began to run (zero: none)

	actingSince time.Time
	actingTotal time.Duration
	pausedAt    time.Time
	waitSince   time.Time // first held turn's arrival; zero when none held
	pauseSeq    uint64
	waiting     bool // counted in nWaiting

	slot, pslot int

	// undo for Cancel of the first held turn
	undo struct {
		actingTotal time.Duration
	}
}

// NewRawAdmitter validates cfg (zero fields mean defaults) and returns an
// empty controller with no workers.
func NewRawAdmitter(cfg Config) (*RawAdmitter, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &RawAdmitter{
		cfg:     c,
		ceiling: c.PauseThreshold - c.Hysteresis,
		byID:    make(map[WorkerID]*worker),
		progs:   make(map[string]*program),
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (c *RawAdmitter) Config() Config { return c.cfg }

// ---------------------------------------------------------------- workers

// MaxTokens bounds every token count and capacity the controller accepts
// (2^40), so sums over many programs cannot overflow.
const MaxTokens = 1 << 40

// AddWorker adds a worker with a KV capacity in tokens.
func (c *RawAdmitter) AddWorker(id WorkerID, capacity int64) error {
	if capacity <= 0 || capacity > MaxTokens {
		return ErrBadCapacity
	}
	if _, ok := c.byID[id]; ok {
		return ErrWorkerExists
	}
	w := &worker{id: id, cap: capacity}
	c.byID[id] = w
	i := sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= id })
	c.workers = append(c.workers, nil)
	copy(c.workers[i+1:], c.workers[i:])
	c.workers[i] = w
	c.refreshGrowth()
	return nil
}

// SetCapacity changes a worker's capacity; the next Tick acts on it.
func (c *RawAdmitter) SetCapacity(id WorkerID, capacity int64) error {
	if capacity <= 0 || capacity > MaxTokens {
		return ErrBadCapacity
	}
	w, ok := c.byID[id]
	if !ok {
		return ErrUnknownWorker
	}
	w.cap = capacity
	c.refreshGrowth()
	return nil
}

// SetBacklog records a worker's prefill backlog: the uncached prompt
// tokens of requests sent to it that have not produced their first token
// (a router's load accounting). With Rebalance, the resume pass places
// no program on a worker whose backlog is RebalanceMargin or more while
// another worker has room: a turn placed there would queue behind that
// prefill. Unknown workers are ignored; negative values count as zero.
func (c *RawAdmitter) SetBacklog(id WorkerID, tokens int64) {
	if w, ok := c.byID[id]; ok {
		w.backlog = min(max(tokens, 0), MaxTokens)
	}
}

// SetEngineUsage records the KV a worker's engine reports in use, in
// tokens: its blocks held by requests (vLLM's kv_cache_usage_perc ×
// capacity), not those only cached. What of it the worker's Reasoning
// programs and shared prefixes do not account for, less 5 % of its
// capacity (decoding and block rounding run an engine a few percent over
// the token sums), is KV that admission does not see, such as traffic
// that bypasses it or prompts its estimates undercount: placement (the
// door, resumes, moves) counts it as used on top of the programs until
// the next report. Only that excess is kept, not the whole report, since
// a report is up to a poll old while the programs' weights change with
// every turn. Pause decisions count the programs only. Unknown workers
// are ignored; a negative value clears the report.
func (c *RawAdmitter) SetEngineUsage(id WorkerID, tokens int64) {
	w, ok := c.byID[id]
	if !ok {
		return
	}
	w.engine = min(max(tokens, 0), MaxTokens)
	known := float64(w.reasoning+w.sharedSum) + engineSlack*float64(w.cap)
	w.unmodelled = int64(max(float64(w.engine)-known, 0))
}

// engineSlack is the part of a worker's capacity by which its engine's
// report may exceed its programs' weight before placement counts the
// excess: tokens decoded since a turn started and block rounding run the
// engine a little over the token sums (up to 2.6 % of a worker in the
// simulated study), which the Buffer and the resume ceiling allow for.
const engineSlack = 0.05

// roomUsed is what placement counts as used on w, given the programs'
// weight u there: u plus the KV its engine last reported beyond them.
func roomUsed(w *worker, u float64) float64 {
	return u + float64(w.unmodelled)
}

// RemoveWorker removes a worker. Its programs are paused (reason
// ReasonWorkerRemoved) and those that fit on another worker under the
// resume ceiling are resumed there at once (the rest by later ticks), so
// a worker's death does not cost its sessions a tick's wait. Turns that
// were running on it stay in flight until the caller ends them with
// EndRequest; a retry is a new StartRequest, which runs where the program
// resumed, or is held until it does.
func (c *RawAdmitter) RemoveWorker(now time.Time, id WorkerID) error {
	w, ok := c.byID[id]
	if !ok {
		return ErrUnknownWorker
	}
	for len(w.progs) > 0 {
		p := w.progs[len(w.progs)-1]
		if p.marked {
			c.setMarked(p, false)
		}
		c.pause(now, p, ReasonWorkerRemoved)
	}
	delete(c.byID, id)
	i := sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= id })
	c.workers = append(c.workers[:i], c.workers[i+1:]...)
	c.refreshGrowth()
	for _, p := range c.paused {
		if p.home == w {
			p.home = nil
		}
	}
	var r TickResult
	c.resume(now, &r)
	return nil
}

// Workers appends a snapshot of every worker, by id, to dst.
func (c *RawAdmitter) Workers(dst []WorkerInfo) []WorkerInfo {
	for _, w := range c.workers {
		dst = append(dst, WorkerInfo{
			ID: w.id, Capacity: w.cap, Used: c.used(w), Util: c.util(w),
			Marked: float64(w.marked), Programs: len(w.progs), Demoted: w.demoted,
			Reasoning: len(w.progs) - w.nAct, ActingN: w.nAct, Backlog: w.backlog, EngineUsed: w.engine,
		})
	}
	return dst
}

// Worker returns a snapshot of one worker.
func (c *RawAdmitter) Worker(id WorkerID) (WorkerInfo, bool) {
	w, ok := c.byID[id]
	if !ok {
		return WorkerInfo{}, false
	}
	return c.Workers(nil)[c.workerIndex(w)], true
}

func (c *RawAdmitter) workerIndex(w *worker) int {
	return sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= w.id })
}

func (c *RawAdmitter) used(w *worker) float64 {
	return float64(w.reasoning) + c.cfg.ActingWeight*float64(w.acting) + float64(w.sharedSum)
}

// tail is the program's unique tail: its tokens less the prefix it shares
// with other programs, which its worker counts once (sharedSum).
func tail(p *program) int64 {
	return p.tokens - min(p.shared, p.tokens)
}

// need is the room p takes on w: its tail, the buffer, and the part of its
// shared prefix longer than what w's programs already share. The growth
// reserve (ReserveGrowth) never takes it past w's room under the resume
// ceiling: a program that would grow past a whole worker reserves the
// worker, and a swap can still make room for it.
func (c *RawAdmitter) need(p *program, w *worker) int64 {
	var shared int64
	if k := sharedOf(p); k.n > 0 && w.sharedN[k] == 0 {
		shared = k.n
	}
	n := c.grownSize(tail(p)) + c.cfg.Buffer + shared
	if lim := int64(c.ceiling * float64(w.cap)); n > lim {
		n = max(lim, tail(p)+c.cfg.Buffer+shared)
	}
	return n
}

// growthMin is how many programs must have ended before ReserveGrowth
// sizes programs by their growth.
const growthMin = 8

// grownSize is the size a program of tail tokens is placed as: with
// ReserveGrowth, at least the lower quartile of ended programs' final
// sizes.
func (c *RawAdmitter) grownSize(tail int64) int64 {
	return max(tail, c.growthEst)
}

// reserved is the room w keeps for its programs' growth (ReserveGrowth):
// how far each Reasoning program is below the lower quartile of final
// sizes (an Acting one, in a tool call, reserves nothing).
func (c *RawAdmitter) reserved(w *worker) float64 { return float64(w.growth) }

// doorIf is, when door is set, the room w keeps from new programs at the
// door beyond reserved: DoorActingGrowth of its Acting programs' growth.
func (c *RawAdmitter) doorIf(w *worker, door bool) float64 {
	if !door {
		return 0
	}
	return c.cfg.DoorActingGrowth * float64(w.actGrowth)
}

// growthOf is what p reserves on its worker (see reserved).
func (c *RawAdmitter) growthOf(p *program) int64 {
	if p.phase != Reasoning {
		return 0
	}
	return max(0, c.growthEst-tail(p))
}

// actGrowthOf is an Acting p's growth (see doorIf).
func (c *RawAdmitter) actGrowthOf(p *program) int64 {
	if p.phase != Acting {
		return 0
	}
	return max(0, c.growthEst-tail(p))
}

// recordTurn records how long p's turn ran, if it began to run here.
func (c *RawAdmitter) recordTurn(now time.Time, p *program) {
	if p.runSince.IsZero() {
		return
	}
	c.turnDur[c.nTurns%len(c.turnDur)] = max(now.Sub(p.runSince), 0)
	c.nTurns++
	p.runSince = time.Time{}
}

// turnLead is how long a turn runs at the 90th percentile of the last
// len(turnDur) recorded (0 before growthMin are): how far ahead of
// MaxWait a swap marks programs, so that the room they free at their tool
// boundaries comes by then.
func (c *RawAdmitter) turnLead() time.Duration {
	n := min(c.nTurns, len(c.turnDur))
	if n < growthMin {
		return 0
	}
	var buf [len(c.turnDur)]time.Duration
	d := buf[:n]
	copy(d, c.turnDur[:n])
	slices.Sort(d)
	return d[(n*9)/10]
}

// recordEnd counts an ended program and, when it ran two turns or more,
// adds its final tail to the window and re-learns the lower quartile once
// the window holds growthMin.
func (c *RawAdmitter) recordEnd(p *program) {
	c.nEnded++
	if p.steps >= 2 {
		c.grown[c.nGrown%len(c.grown)] = tail(p)
		c.nGrown++
		if n := min(c.nGrown, len(c.grown)); n >= growthMin {
			w := make([]int64, n)
			copy(w, c.grown[:n])
			slices.Sort(w)
			c.learned = w[n/4]
		}
	}
	c.refreshGrowth()
}

// refreshGrowth sets growthEst (ReserveGrowth): the cold-start prior until
// growthMin programs have ended, an equal share of the largest worker's
// room for ColdStartPrograms programs; then what was learned. The
// workers' growth sums follow.
func (c *RawAdmitter) refreshGrowth() {
	if !c.cfg.ReserveGrowth {
		return
	}
	est := c.learned
	if c.nEnded < growthMin && c.cfg.ColdStartPrograms > 0 {
		est = int64(c.ceiling * float64(c.maxCap()) / float64(c.cfg.ColdStartPrograms))
	}
	if est == c.growthEst {
		return
	}
	c.growthEst = est
	for _, wk := range c.workers {
		wk.growth, wk.actGrowth = 0, 0
		for _, p := range wk.progs {
			wk.growth += c.growthOf(p)
			wk.actGrowth += c.actGrowthOf(p)
		}
	}
}

// sharedKey identifies a shared prefix: its key and its counted length.
type sharedKey struct {
	key uint64
	n   int64
}

func sharedOf(p *program) sharedKey {
	return sharedKey{p.sharedID, min(p.shared, p.tokens)}
}

// SetShared records that the leading shared tokens of program id's context
// are a prefix other programs share too (a system prompt and tools, a
// parent's context; the router's session-prefix index knows it), named by
// key (any value equal for every program sharing that prefix, such as the
// sequence hash of its last block). A worker counts each program's unique
// tail, tokens − shared, plus each distinct shared prefix of its programs
// once, since its cache holds one copy. The value stays until the next
// call; shared 0 (the default) counts the whole context.
func (c *RawAdmitter) SetShared(id string, shared int64, key uint64) error {
	if shared < 0 || shared > MaxTokens {
		return ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	w := p.w
	if w != nil {
		c.detach(p)
	}
	p.shared, p.sharedID = shared, key
	if w != nil {
		c.attach(p, w)
	}
	return nil
}

func (w *worker) addShared(k sharedKey) {
	if k.n <= 0 {
		return
	}
	if w.sharedN == nil {
		w.sharedN = map[sharedKey]int{}
	}
	if w.sharedN[k]++; w.sharedN[k] == 1 {
		w.sharedSum += k.n
	}
}

func (w *worker) dropShared(k sharedKey) {
	if k.n <= 0 {
		return
	}
	if w.sharedN[k]--; w.sharedN[k] > 0 {
		return
	}
	delete(w.sharedN, k)
	w.sharedSum -= k.n
}

func (c *RawAdmitter) util(w *worker) float64 {
	return c.used(w) / float64(w.cap)
}

func (c *RawAdmitter) weight(p *program) float64 {
	if p.phase == Acting {
		return c.cfg.ActingWeight * float64(tail(p))
	}
	return float64(tail(p))
}

// ---------------------------------------------------------------- programs

// Program returns a snapshot of one program at time now.
func (c *RawAdmitter) Program(now time.Time, id string) (Program, bool) {
	p, ok := c.progs[id]
	if !ok {
		return Program{ID: id, Lifecycle: Terminated}, false
	}
	return c.snapshot(now, p), true
}

// Programs appends snapshots of every program, by id, to dst.
func (c *RawAdmitter) Programs(now time.Time, dst []Program) []Program {
	start := len(dst)
	for _, p := range c.progs {
		dst = append(dst, c.snapshot(now, p))
	}
	out := dst[start:]
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return dst
}

// Len returns the number of live (not terminated) programs.
func (c *RawAdmitter) Len() int { return len(c.progs) }

func (c *RawAdmitter) snapshot(now time.Time, p *program) Program {
	s := Program{
		ID: p.id, Phase: p.phase, Lifecycle: p.life, Status: status(p),
		Tokens: p.tokens, Steps: p.steps, Inflight: p.inflight, Held: p.held, Marked: p.marked,
		Acting: p.actingTotal,
	}
	if p.w != nil {
		s.Worker, s.HasWorker = p.w.id, true
	}
	if p.phase == Acting && p.inflight == 0 && now.After(p.actingSince) {
		s.Acting += now.Sub(p.actingSince)
	}
	if p.life == Paused {
		s.PausedAt = p.pausedAt
	}
	return s
}

func status(p *program) Status {
	switch {
	case p.life == Active:
		return StatusRunnable
	case !p.placed:
		return StatusQueued
	case p.held > 0:
		return StatusHeld
	default:
		return StatusPaused
	}
}

// Status says whether the program's next turn may run now. Unknown
// programs report StatusUnknown (their first turn is a new program).
func (c *RawAdmitter) Status(id string) Status {
	p, ok := c.progs[id]
	if !ok {
		return StatusUnknown
	}
	return status(p)
}

// Waiting returns the number of held turns' programs (queued or paused
// with a turn held).
func (c *RawAdmitter) Waiting() int { return c.nWaiting }

// Stats returns the decision counters.
func (c *RawAdmitter) Stats() Stats { return c.stats }

// ---------------------------------------------------------------- events

// StartRequest records that a request (a model turn) of session id starts
// at now. promptTokens, when positive, is the request's prompt length in
// tokens (exact, from the router's tokeniser) and replaces the program's
// token total; zero keeps the last reported total.
//
// An Active program's turn runs at once (Admission.Run). A Paused program's
// turn is held, and a new program is placed on the least-utilised worker
// with room under the resume ceiling, or queued when none has room or when
// other turns are already held (so new programs cannot overtake them). A
// program too large for any worker's room under the ceiling is placed on a
// worker with no programs, if there is one (ReasonEmptyWorker). A held turn
// is released by a KindResume decision with Released set.
func (c *RawAdmitter) StartRequest(now time.Time, id string, promptTokens int64) (Admission, error) {
	return c.StartRequestOn(now, id, promptTokens, nil)
}

// StartRequestOn is StartRequest with a placement preference for a new
// program: the first worker of prefer with room under the resume ceiling
// takes it (ReasonPreferred), else placement proceeds as in StartRequest.
// A router passes its workers ranked by KV-cache cost, so a new program
// lands where its prefix is cached. prefer is only read; it is ignored for
// programs the controller already knows, except with Config.Rebalance (an
// Acting program moves to the first worker of prefer with room, when no
// turn waits or it escapes a backlogged worker; see Config.Rebalance).
func (c *RawAdmitter) StartRequestOn(now time.Time, id string, promptTokens int64, prefer []WorkerID) (Admission, error) {
	if id == "" {
		return Admission{}, ErrEmptyID
	}
	if promptTokens < 0 || promptTokens > MaxTokens {
		return Admission{}, ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return c.startNew(now, id, promptTokens, prefer), nil
	}
	p.steps++
	if p.life == Active {
		w := p.w
		why := ReasonActive
		if c.cfg.Rebalance && (c.nWaiting == 0 || w.backlog >= c.cfg.RebalanceMargin) && p.inflight == 0 {
			for _, id := range prefer {
				if to := c.workerByID(id); to != nil && to != w && (to.backlog < c.cfg.RebalanceMargin || c.nWaiting == 0) && roomUsed(to, c.used(to))+float64(c.need(p, to)) <= c.cfg.PauseThreshold*float64(to.cap) {
					w, why = to, ReasonPreferred
					break
				}
			}
		}
		c.detach(p)
		if promptTokens > 0 {
			p.tokens = promptTokens
		}
		if p.inflight == 0 && p.phase == Acting && now.After(p.actingSince) {
			p.actingTotal += now.Sub(p.actingSince)
		}
		p.phase = Reasoning
		if p.inflight == 0 {
			p.runSince = now
		}
		p.inflight++
		c.attach(p, w)
		prio := 0.0
		if p.boost {
			prio += c.cfg.ResumeBoost
			p.boost = false
		}
		if w.demoted && now.Before(w.demUntil) {
			prio += c.cfg.SoftDemotePriority
		}
		c.stats.Admitted++
		c.emit(Decision{At: now, Kind: KindAdmit, Reason: why, Program: id, Worker: w.id, HasWorker: true,
			Tokens: p.tokens, Util: c.util(w), Priority: prio})
		return Admission{Run: true, Worker: w.id, Priority: prio, Status: StatusRunnable, Reason: why}, nil
	}
	// Paused: hold the turn.
	if p.held == 0 {
		p.undo.actingTotal = p.actingTotal
		if p.phase == Acting && now.After(p.actingSince) {
			p.actingTotal += now.Sub(p.actingSince)
		}
		p.waitSince = now
	}
	if promptTokens > 0 {
		p.tokens = promptTokens
	}
	p.phase = Reasoning
	p.inflight++
	p.held++
	c.updateWaiting(p)
	c.stats.Held++
	c.emit(Decision{At: now, Kind: KindHold, Reason: ReasonPaused, Program: id, Tokens: p.tokens})
	return Admission{Status: status(p), Reason: ReasonPaused}, nil
}

// StartSubRequest is StartRequestOn for the first turn of a subagent
// whose parent program is parent: the parent waits for it, so it does not
// queue behind new programs at the door. A new subagent program is placed
// on the parent's worker when that has room under the resume ceiling,
// else as StartRequestOn places it but without waiting for held turns to
// go first; when no worker has room it is held as a turn of a running
// program (resumed before new programs, and swapped in at Config.MaxWait
// with the parent's worker as its home). For a program the controller
// knows, or an unknown parent, it is StartRequestOn.
func (c *RawAdmitter) StartSubRequest(now time.Time, id, parent string, promptTokens int64, prefer []WorkerID) (Admission, error) {
	pp, ok := c.progs[parent]
	if _, known := c.progs[id]; known || !ok || id == "" || parent == id || promptTokens < 0 || promptTokens > MaxTokens {
		return c.StartRequestOn(now, id, promptTokens, prefer)
	}
	home := pp.w
	if home == nil {
		home = pp.home
	}
	if home != nil {
		prefer = append([]WorkerID{home.id}, prefer...)
	}
	return c.startNewAs(now, id, promptTokens, prefer, home), nil
}

func (c *RawAdmitter) startNew(now time.Time, id string, tokens int64, prefer []WorkerID) Admission {
	return c.startNewAs(now, id, tokens, prefer, nil)
}

// startNewAs places or queues a new program; with a non-nil home (a
// subagent's parent worker) it skips the fairness queue and, held, counts
// as a placed program's held turn.
func (c *RawAdmitter) startNewAs(now time.Time, id string, tokens int64, prefer []WorkerID, home *worker) Admission {
	p := &program{id: id, phase: Reasoning, steps: 1, inflight: 1, held: 1, tokens: tokens, slot: -1, pslot: -1, home: home}
	c.progs[id] = p
	reason := ReasonFairness
	if c.nWaiting == 0 || home != nil {
		need := c.grownSize(tokens) + c.cfg.Buffer
		door := home == nil && c.cfg.MaxWait > 0 // a new program, not a subagent of a running one
		w, why := c.preferredWithRoom(need, prefer, door), ReasonPreferred
		if w == nil {
			w, why = c.leastUtilisedWithRoom(need, door), ReasonRoom
		}
		if w == nil {
			w, why = c.emptyWorker(), ReasonEmptyWorker
		}
		if w != nil {
			p.life = Active
			p.placed = true
			p.held = 0
			p.runSince = now
			c.attach(p, w)
			c.stats.Admitted++
			prio := 0.0
			if w.demoted && now.Before(w.demUntil) {
				prio = c.cfg.SoftDemotePriority
			}
			c.emit(Decision{At: now, Kind: KindAdmit, Reason: why, Program: id, Worker: w.id, HasWorker: true,
				Tokens: tokens, Util: c.util(w), Priority: prio})
			return Admission{Run: true, Worker: w.id, Priority: prio, Status: StatusRunnable, Reason: why}
		}
		reason = ReasonNoRoom
	}
	p.life = Paused
	p.waitSince = now
	if home != nil {
		p.placed = true // part of a running program: a held turn, not the door
	}
	c.addPaused(now, p)
	c.updateWaiting(p)
	c.stats.Queued++
	c.emit(Decision{At: now, Kind: KindQueue, Reason: reason, Program: id, Tokens: tokens})
	return Admission{Status: StatusQueued, Reason: reason}
}

func (c *RawAdmitter) workerByID(id WorkerID) *worker { return c.byID[id] }

// Relocate moves an Active program, with the turn it is running, off a
// worker the caller cannot use (it is failing, or has left routing while
// still known here) to the first worker of prefer that has room for it
// under the resume ceiling, or, where none has, to the one of them with
// the most room: losing the session would be worse than an overcommit,
// which the next Tick's pause pass corrects. prefer lists the workers the
// caller can use, best first; the program's own worker is skipped. It
// reports false, changing nothing, for a program that is not Active or
// when prefer names no other known worker.
func (c *RawAdmitter) Relocate(now time.Time, id string, prefer []WorkerID) (Admission, bool) {
	p, ok := c.progs[id]
	if !ok || p.life != Active {
		return Admission{}, false
	}
	var to, roomiest *worker
	best := math.Inf(-1)
	for _, wid := range prefer {
		w := c.workerByID(wid)
		if w == nil || w == p.w {
			continue
		}
		room := c.ceiling*float64(w.cap) - roomUsed(w, c.used(w)) - c.reserved(w) - float64(c.need(p, w))
		if room >= 0 {
			to = w
			break
		}
		if room > best {
			roomiest, best = w, room
		}
	}
	if to == nil {
		to = roomiest
	}
	if to == nil {
		return Admission{}, false
	}
	if p.marked {
		c.setMarked(p, false)
	}
	c.detach(p)
	c.attach(p, to)
	p.home = to
	c.stats.Relocated++
	prio := 0.0
	if to.demoted && now.Before(to.demUntil) {
		prio = c.cfg.SoftDemotePriority
	}
	c.emit(Decision{At: now, Kind: KindAdmit, Reason: ReasonRelocated, Program: id, Worker: to.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(to), Priority: prio})
	return Admission{Run: true, Worker: to.id, Priority: prio, Status: StatusRunnable, Reason: ReasonRelocated}, true
}

// preferredWithRoom returns the first worker of prefer that has room for
// need under the resume ceiling, or nil.
func (c *RawAdmitter) preferredWithRoom(need int64, prefer []WorkerID, door bool) *worker {
	for _, id := range prefer {
		w := c.workerByID(id)
		if w != nil && roomUsed(w, c.used(w))+c.reserved(w)+c.doorIf(w, door)+float64(need) <= c.ceiling*float64(w.cap) {
			return w
		}
	}
	return nil
}

// emptyWorker returns the worker with the largest capacity among those with
// no programs at all (ties: lowest id), or nil.
func (c *RawAdmitter) emptyWorker() *worker {
	var best *worker
	for _, w := range c.workers {
		if len(w.progs) == 0 && (best == nil || w.cap > best.cap) {
			best = w
		}
	}
	return best
}

// leastUtilisedWithRoom returns the worker with the lowest U among those
// where used + need ≤ ceiling·capacity (ties: lowest id), or nil.
func (c *RawAdmitter) leastUtilisedWithRoom(need int64, door bool) *worker {
	var best *worker
	var bestU float64
	for _, w := range c.workers {
		u := roomUsed(w, c.used(w)) + c.reserved(w) + c.doorIf(w, door)
		if u+float64(need) > c.ceiling*float64(w.cap) {
			continue
		}
		if uu := u / float64(w.cap); best == nil || uu < bestU {
			best, bestU = w, uu
		}
	}
	return best
}

// EndRequest records that a turn of session id ended at now, with the
// engine-reported usage; the program's token total becomes prompt +
// completion. With no other turn in flight the program turns Acting (a tool
// boundary): a program marked for pause is paused here.
func (c *RawAdmitter) EndRequest(now time.Time, id string, promptTokens, completionTokens int64) error {
	if promptTokens < 0 || completionTokens < 0 || promptTokens > MaxTokens || completionTokens > MaxTokens {
		return ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	if p.inflight-p.held == 0 {
		return ErrNoRequest
	}
	total := promptTokens + completionTokens
	if p.life == Active {
		w := p.w
		c.detach(p)
		p.inflight--
		if total > 0 {
			p.tokens = total
		}
		if p.inflight == 0 {
			p.phase = Acting
			p.actingSince = now
			c.recordTurn(now, p)
			if p.marked {
				swap := p.swapMark
				p.marked, p.swapMark = false, false
				p.life = Active // pause expects an attached program
				c.attach(p, w)
				c.pause(now, p, ReasonToolBoundary)
				if swap {
					// The room a held turn waits for (swapIn): give it now,
					// not at the next Tick, which may be past MaxWait.
					w.reserved = 0
					var r TickResult
					c.resume(now, &r)
				}
				return nil
			}
		}
		c.attach(p, w)
		return nil
	}
	// A paused program's running turn ended: it ran on a worker that was
	// removed.
	p.inflight--
	if total > 0 {
		p.tokens = total
	}
	if p.inflight == 0 {
		p.phase = Acting
		p.actingSince = now
		p.runSince = time.Time{}
	}
	return nil
}

// Cancel withdraws a held turn of session id (the caller gave up waiting).
// The program's state is restored to what it was before the turn started:
// a queued new program is forgotten, a paused one returns to its previous
// phase and step count.
func (c *RawAdmitter) Cancel(now time.Time, id string) error {
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	if p.life != Paused || p.held == 0 {
		return ErrNotHeld
	}
	waited := now.Sub(p.waitSince)
	p.inflight--
	p.held--
	p.steps--
	if p.held == 0 {
		p.waitSince = time.Time{}
	}
	if p.inflight == 0 {
		if !p.placed {
			c.removePaused(p)
			p.waiting = false
			c.nWaiting--
			delete(c.progs, id)
			c.stats.Cancelled++
			c.emit(Decision{At: now, Kind: KindCancel, Reason: ReasonCancelled, Program: id, Tokens: p.tokens, Released: true, Waited: waited})
			return nil
		}
		// Nothing in flight any more: back to Acting, with the acting time
		// the hold had added taken off again.
		p.phase = Acting
		p.actingTotal = p.undo.actingTotal
	}
	c.updateWaiting(p)
	c.stats.Cancelled++
	c.emit(Decision{At: now, Kind: KindCancel, Reason: ReasonCancelled, Program: id, Tokens: p.tokens, Released: true, Waited: waited})
	return nil
}

// EndSession terminates session id and forgets it: its tokens stop
// counting, and any held turn is dropped (KindTerminate with Released).
func (c *RawAdmitter) EndSession(now time.Time, id string) error {
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	d := Decision{At: now, Kind: KindTerminate, Reason: ReasonSessionEnd, Program: id, Tokens: p.tokens}
	freed := p.life == Active
	if freed {
		w := p.w
		if p.marked {
			c.setMarked(p, false)
		}
		c.detach(p)
		d.Worker, d.HasWorker, d.Util = w.id, true, c.util(w)
	} else {
		if p.held > 0 {
			d.Released = true
			d.Waited = now.Sub(p.waitSince)
		}
		c.removePaused(p)
		if p.waiting {
			p.waiting = false
			c.nWaiting--
		}
	}
	if c.cfg.ReserveGrowth {
		c.recordEnd(p)
	}
	p.life = Terminated
	delete(c.progs, id)
	c.stats.Terminated++
	c.emit(d)
	if freed && c.cfg.ResumeOnEnd && len(c.paused) > 0 {
		var r TickResult
		c.resume(now, &r)
	}
	return nil
}

// ---------------------------------------------------------------- tick

// TickResult summarises one Tick.
type TickResult struct {
	Forced, Resumed, Paused, Marked, Unmarked int
	// Released counts resumed programs whose held turn may now run.
	Released int
}

// Tick runs one control-loop round at now, in this order:
//
//  1. forced resume: every held turn that has waited ≥ ForcedResume is
//     resumed on the least-utilised worker, regardless of room;
//  2. resume: on workers with U ≤ the resume ceiling, paused programs are
//     bin-packed (size = tokens + Buffer) under the ceiling by the
//     Placement, offered in resume priority order;
//  3. pause: on each worker with U ≥ PauseThreshold, the smallest Acting
//     programs are paused until U − marked ≤ PauseTarget; with no Acting
//     program left, the smallest unmarked Reasoning program is marked, and
//     its weight counted as a future free, until the same bound holds.
//     Programs resumed in this tick are not paused in it. Marks on a worker
//     whose U has fallen to PauseTarget are withdrawn;
//  4. soft demote: workers with SoftDemote ≤ U < PauseThreshold are in the
//     band until 1.5 Interval after now.
func (c *RawAdmitter) Tick(now time.Time) TickResult {
	c.tickNo++
	var r TickResult
	c.forceResume(now, &r)
	c.swapIn(now, &r)
	c.resume(now, &r)
	c.pauseOver(now, &r)
	c.softDemote(now)
	return r
}

// NextForcedResume returns the earliest time at which a held turn reaches
// the forced-resume cap, so an event-driven simulator can schedule a Tick
// exactly then.
func (c *RawAdmitter) NextForcedResume() (time.Time, bool) {
	var t time.Time
	found := false
	for _, p := range c.paused {
		if p.held == 0 {
			continue
		}
		d := p.waitSince.Add(c.cfg.ForcedResume)
		if !found || d.Before(t) {
			t, found = d, true
		}
	}
	return t, found
}

func (c *RawAdmitter) forceResume(now time.Time, r *TickResult) {
	if len(c.workers) == 0 || c.nWaiting == 0 {
		return
	}
	due := c.sProgs[:0]
	for _, p := range c.paused {
		// With MaxWait, placed programs are swapped in long before the
		// cap, and new ones wait at the door in order: no forced resume
		// overcommits a worker for them.
		if p.held > 0 && now.Sub(p.waitSince) >= c.cfg.ForcedResume && (c.cfg.MaxWait <= 0 || p.placed && now.Sub(p.waitSince) >= 2*c.cfg.ForcedResume) {
			due = append(due, p)
		}
	}
	slices.SortFunc(due, func(a, b *program) int {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	})
	for _, p := range due {
		var best *worker
		var bestU float64
		for _, w := range c.workers {
			u := c.resumeUsed(now, w) / float64(w.cap)
			if best == nil || u < bestU {
				best, bestU = w, u
			}
		}
		c.resumeOn(now, p, best, ReasonForced, r)
		r.Forced++
	}
	c.sProgs = due[:0]
}

// resumeUsed is a worker's load as the resume side sees it: with
// DecayHalfLife set, Acting programs' weights decay with time acting.
func (c *RawAdmitter) resumeUsed(now time.Time, w *worker) float64 {
	if c.cfg.DecayHalfLife <= 0 || w.nAct == 0 {
		return c.used(w)
	}
	u := float64(w.reasoning) + float64(w.sharedSum)
	hl := c.cfg.DecayHalfLife.Seconds()
	for _, p := range w.progs {
		if p.phase != Acting {
			continue
		}
		t := now.Sub(p.actingSince).Seconds()
		if t < 0 {
			t = 0
		}
		u += c.cfg.ActingWeight * float64(tail(p)) * math.Exp2(-t/hl)
	}
	return u
}

// resumeGroup: 0 = held turn of a placed program, 1 = queued new program,
// 2 = paused with no turn held.
func resumeGroup(p *program) int {
	switch {
	case !p.placed:
		return 1
	case p.held == 0:
		return 2
	default:
		return 0
	}
}

// resumeOrder is the resume priority order (the fair order of the package
// documentation): group, then fewer tokens, then paused earlier.
func resumeOrder(a, b *program) int {
	if c := cmp.Compare(resumeGroup(a), resumeGroup(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.tokens, b.tokens); c != 0 {
		return c
	}
	return cmp.Compare(a.pauseSeq, b.pauseSeq)
}

// agedOrder is the resume order with Config.MaxWait: group, then held
// turns and queued programs by how long they have waited (oldest first),
// paused programs with no turn held smallest first.
func agedOrder(a, b *program) int {
	ga, gb := resumeGroup(a), resumeGroup(b)
	if c := cmp.Compare(ga, gb); c != 0 {
		return c
	}
	if ga < 2 {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	}
	return resumeOrder(a, b)
}

func (c *RawAdmitter) resume(now time.Time, r *TickResult) {
	if len(c.paused) == 0 {
		return
	}
	bins, binW := c.sBins[:0], c.sBinW[:0]
	for _, w := range c.workers {
		if roomUsed(w, c.used(w)) > c.ceiling*float64(w.cap) || w.reserved == c.tickNo && c.cfg.MaxWait > 0 {
			continue
		}
		// Reasoning weight is a lower bound on the (decayed) load: skip the
		// decay pass where even that leaves no more than the buffer.
		if c.ceiling*float64(w.cap)-float64(w.reasoning) <= float64(c.cfg.Buffer) {
			continue
		}
		free := int64(math.Floor(c.ceiling*float64(w.cap) - roomUsed(w, c.resumeUsed(now, w)) - c.reserved(w)))
		if free > c.cfg.Buffer {
			bins = append(bins, Bin{Worker: w.id, Free: free, Capacity: w.cap})
			binW = append(binW, w)
		}
	}
	if c.cfg.Rebalance {
		bins, binW = c.skipBacklogged(bins, binW)
	}
	c.sBins, c.sBinW = bins, binW
	if len(bins) == 0 {
		return
	}
	cand := append(c.sProgs[:0], c.paused...)
	if c.cfg.MaxWait > 0 {
		slices.SortFunc(cand, agedOrder)
	} else {
		slices.SortFunc(cand, resumeOrder)
	}
	if c.cfg.HomeFirst {
		cand = c.resumeHome(now, cand, bins, binW, r)
	}
	if c.cfg.MaxWait > 0 {
		// Held turns of placed programs are placed first, and a queued new
		// program or a paused one with nothing held only once all of them
		// are: the Placement skips what does not fit, and a smaller new
		// program would otherwise take the room a waiting turn needs,
		// leaving that turn to the swap, which pauses others.
		k := 0
		for k < len(cand) && resumeGroup(cand[k]) == 0 {
			k++
		}
		if !c.place(now, cand[:k], bins, binW, r) {
			c.sProgs = c.sProgs[:0]
			return
		}
		cand = cand[k:]
		// The door, first come, first served: a newcomer that does not
		// fit keeps the worker with the most room for itself, and later
		// ones may only take the others (backfill).
		reserved := false
		if c.cfg.DoorActingGrowth > 0 {
			// What the Acting programs' growth keeps from the door.
			k := 0
			for j := range bins {
				bins[j].Free -= int64(math.Ceil(c.doorIf(binW[j], true)))
				if bins[j].Free > c.cfg.Buffer {
					bins[k], binW[k] = bins[j], binW[j]
					k++
				}
			}
			bins, binW = bins[:k], binW[:k]
			if k == 0 {
				c.sProgs = c.sProgs[:0]
				return
			}
		}
		for len(cand) > 0 && resumeGroup(cand[0]) == 1 {
			if !c.place(now, cand[:1], bins, binW, r) {
				best := 0
				for j := range bins {
					if bins[j].Free > bins[best].Free {
						best = j
					}
				}
				bins = append(bins[:best:best], bins[best+1:]...)
				binW = append(binW[:best:best], binW[best+1:]...)
				reserved = true
				if len(bins) == 0 {
					break
				}
			}
			cand = cand[1:]
		}
		if reserved {
			// No paused program with nothing held resumes (a speculative
			// resume) while a newcomer waits.
			c.sProgs = c.sProgs[:0]
			return
		}
	}
	c.place(now, cand, bins, binW, r)
	c.sProgs = c.sProgs[:0]
}

// skipBacklogged drops, from the bins, the workers with a prefill backlog
// of RebalanceMargin or more, unless that would leave none.
func (c *RawAdmitter) skipBacklogged(bins []Bin, binW []*worker) ([]Bin, []*worker) {
	k := 0
	for j := range bins {
		if binW[j].backlog < c.cfg.RebalanceMargin {
			bins[k], binW[k] = bins[j], binW[j]
			k++
		}
	}
	if k == 0 {
		return bins, binW
	}
	return bins[:k], binW[:k]
}

// place offers cand, in order, to the Placement over bins (charging the
// room it gives to bins) and resumes those it places; it reports whether
// every candidate was resumed.
func (c *RawAdmitter) place(now time.Time, cand []*program, bins []Bin, binW []*worker, r *TickResult) bool {
	if len(cand) == 0 {
		return true
	}
	items := c.sItems[:0]
	for _, p := range cand {
		// The tail: its shared prefix is most likely on every worker
		// already (the system prompt); home and swap placements, which
		// know the worker, count what the worker lacks of it.
		items = append(items, Item{Size: c.grownSize(tail(p)) + c.cfg.Buffer})
	}
	dst := c.sDst[:0]
	for range items {
		dst = append(dst, -1)
	}
	c.sItems, c.sDst = items, dst
	free := make([]int64, len(bins)) // the controller's own view, for validation
	for i, b := range bins {
		free[i] = b.Free
	}
	scratch := make([]Bin, len(bins))
	copy(scratch, bins)
	c.cfg.Placement.Place(items, scratch, dst)
	for i, j := range dst {
		if j < 0 {
			continue
		}
		if j >= len(bins) || items[i].Size > free[j] {
			c.stats.PlacementRejects++
			continue
		}
		free[j] -= items[i].Size
		c.resumeOn(now, cand[i], binW[j], ReasonBinPacked, r)
		dst[i] = -2 // placed
	}
	for j := range bins {
		bins[j].Free = free[j]
	}
	// A program larger than every worker's room under the ceiling would
	// otherwise wait for the forced-resume cap: give it an empty worker.
	for i, p := range cand {
		if dst[i] == -2 || p.life != Paused || p.held == 0 && p.placed {
			continue
		}
		if items[i].Size <= int64(c.ceiling*float64(c.maxCap())) {
			continue // it fits somewhere once room frees up
		}
		w := c.emptyWorker()
		if w == nil {
			break
		}
		c.resumeOn(now, p, w, ReasonEmptyWorker, r)
		dst[i] = -2
	}
	for i := range cand {
		if dst[i] != -2 {
			return false
		}
	}
	return true
}

// maxCap returns the largest worker capacity.
func (c *RawAdmitter) maxCap() int64 {
	var m int64
	for _, w := range c.workers {
		m = max(m, w.cap)
	}
	return m
}

// resumeHome resumes, in order, the candidates whose home worker is one
// of bins and still has room for them, charging the room to the bin; it
// returns the others, in order.
func (c *RawAdmitter) resumeHome(now time.Time, cand []*program, bins []Bin, binW []*worker, r *TickResult) []*program {
	keep := cand[:0]
	for _, p := range cand {
		placed := false
		if p.home != nil && (p.held > 0 || !p.placed) {
			for j, w := range binW {
				if need := c.need(p, w); w == p.home && need <= bins[j].Free {
					bins[j].Free -= need
					c.resumeOn(now, p, w, ReasonHome, r)
					placed = true
					break
				}
			}
		}
		if !placed {
			keep = append(keep, p)
		}
	}
	return keep
}

// swapIn resumes every held turn of a placed program that has waited
// MaxWait, oldest first, making room for it by pausing Acting programs on
// its home worker or the worker where that pauses least; where no worker
// can make room by pausing, it marks Reasoning programs on the home
// worker (or the least used) so the room comes at their tool boundaries.
func (c *RawAdmitter) swapIn(now time.Time, r *TickResult) {
	if c.cfg.MaxWait <= 0 || c.nWaiting == 0 || len(c.workers) == 0 {
		return
	}
	// Due a Tick and a turn (turnLead) ahead of MaxWait: where only
	// marking Reasoning programs can make room, they then reach their tool
	// boundaries by MaxWait.
	dueAt := max(c.cfg.MaxWait-c.cfg.Interval-c.turnLead(), 0)
	due := c.sProgs[:0]
	for _, p := range c.paused {
		if p.held > 0 && p.placed && now.Sub(p.waitSince) >= dueAt {
			due = append(due, p)
		}
	}
	slices.SortFunc(due, func(a, b *program) int {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	})
	due = slices.Clone(due) // pause below reuses the scratch slices
	for _, p := range due {
		best := c.swapTarget(p)
		if best == nil {
			c.markFor(now, p, r)
			continue
		}
		need := float64(c.need(p, best))
		room := c.ceiling*float64(best.cap) - c.used(best)
		if room < need {
			cand := make([]*program, 0, best.nAct)
			for _, q := range best.progs {
				if q.phase == Acting {
					cand = append(cand, q)
				}
			}
			slices.SortFunc(cand, func(a, b *program) int {
				if c := cmp.Compare(b.tokens, a.tokens); c != 0 {
					return c
				}
				return a.actingSince.Compare(b.actingSince)
			})
			for _, q := range cand {
				if room >= need {
					break
				}
				if q.marked {
					c.setMarked(q, false)
				}
				c.pause(now, q, ReasonSwap)
				c.stats.SwapPaused++
				r.Paused++
				need = float64(c.need(p, best))
				room = c.ceiling*float64(best.cap) - c.used(best)
			}
			if room < need {
				c.markFor(now, p, r) // shared prefixes stayed: room comes later
				continue
			}
		}
		c.resumeOn(now, p, best, ReasonSwap, r)
		c.stats.Swapped++
	}
	c.sProgs = c.sProgs[:0]
}

// swapTarget returns the worker where pausing Acting programs makes room
// for p at the least cost (p's home worker counting half its size
// cheaper: its cache is there), or nil where pausing every Acting program
// would not do on any.
func (c *RawAdmitter) swapTarget(p *program) *worker {
	var best *worker
	bestCost := math.Inf(1)
	for _, w := range c.workers {
		need := float64(c.need(p, w))
		room := c.ceiling*float64(w.cap) - c.used(w)
		short := need - room
		freed := float64(w.acting) * c.cfg.ActingWeight
		if w.nAct == len(w.progs) {
			freed = c.used(w) // their shared prefixes go too
		}
		if short > freed+1e-9 {
			continue // pausing every Acting program would not do
		}
		cost := max(short, 0)
		if w == p.home {
			cost -= need / 2 // its cache is there: prefer it unless another is clearly cheaper
		}
		if best == nil || cost < bestCost {
			best, bestCost = w, cost
		}
	}
	return best
}

// markFor marks Reasoning programs so that p fits once they pause at
// their tool boundaries: on p's home worker if p can fit there at all,
// else on the worker with the most weight to reclaim; enough of them
// (smallest first) that, with its Acting programs paused then, p fits under
// the resume ceiling. A program too large for every worker is left to the
// empty-worker placement of resume.
func (c *RawAdmitter) markFor(now time.Time, p *program, r *TickResult) {
	fits := func(w *worker) bool { return float64(p.tokens+c.cfg.Buffer) <= c.ceiling*float64(w.cap) }
	reclaim := func(w *worker) float64 { return c.cfg.ActingWeight*float64(w.acting) + float64(w.reasoning-w.marked) }
	w := p.home
	if w == nil || !fits(w) {
		w = nil
		for _, x := range c.workers {
			if fits(x) && (w == nil || reclaim(x) > reclaim(w)) {
				w = x
			}
		}
	}
	if w == nil {
		return
	}
	w.reserved = c.tickNo
	short := float64(c.need(p, w)) - (c.ceiling*float64(w.cap) - c.used(w)) - c.cfg.ActingWeight*float64(w.acting) - float64(w.marked)
	if short <= 0 {
		return
	}
	cand := make([]*program, 0, len(w.progs))
	for _, q := range w.progs {
		if q.phase == Reasoning && !q.marked && q.resumedAt != c.tickNo {
			cand = append(cand, q)
		}
	}
	slices.SortFunc(cand, smallerFirst)
	for _, q := range cand {
		if short <= 0 {
			break
		}
		short -= c.weight(q)
		c.setMarked(q, true)
		q.swapMark = true
		c.stats.Marked++
		r.Marked++
		c.emit(Decision{At: now, Kind: KindMark, Reason: ReasonSwap, Program: q.id, Worker: w.id, HasWorker: true,
			Tokens: q.tokens, Util: c.util(w)})
	}
}

func (c *RawAdmitter) resumeOn(now time.Time, p *program, w *worker, reason Reason, r *TickResult) {
	c.removePaused(p)
	p.life = Active
	p.placed = true
	p.resumedAt = c.tickNo
	c.attach(p, w)
	d := Decision{At: now, Kind: KindResume, Reason: reason, Program: p.id, Worker: w.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(w)}
	if p.held > 0 {
		p.held = 0
		p.runSince = now
		d.Released = true
		d.Waited = now.Sub(p.waitSince)
		d.Priority = c.cfg.ResumeBoost
		if w.demoted && now.Before(w.demUntil) {
			d.Priority += c.cfg.SoftDemotePriority
		}
		p.waitSince = time.Time{}
		r.Released++
	} else {
		p.boost = true
	}
	c.updateWaiting(p)
	c.stats.Resumed++
	if reason == ReasonForced {
		c.stats.Forced++
	}
	r.Resumed++
	c.emit(d)
}

func (c *RawAdmitter) pauseOver(now time.Time, r *TickResult) {
	for _, w := range c.workers {
		capf := float64(w.cap)
		u := c.used(w)
		if w.marked > 0 && u <= c.cfg.PauseTarget*capf {
			c.unmarkAll(now, w, r)
		}
		if u < c.cfg.PauseThreshold*capf {
			continue
		}
		// A worker's only program is never paused or marked: no other
		// program could use the room, and it would only be resumed on an
		// empty worker again.
		if len(w.progs) == 1 {
			continue
		}
		target := c.cfg.PauseTarget * capf
		eff := u - float64(w.marked)
		if eff <= target {
			continue
		}
		// Acting programs, smallest first.
		cand := c.sProgs[:0]
		for _, p := range w.progs {
			if p.phase == Acting && p.resumedAt != c.tickNo {
				cand = append(cand, p)
			}
		}
		slices.SortFunc(cand, smallerFirst)
		for _, p := range cand {
			if eff <= target {
				break
			}
			eff -= c.weight(p)
			c.pause(now, p, ReasonOverThreshold)
			r.Paused++
		}
		if eff > target {
			cand = cand[:0]
			for _, p := range w.progs {
				if p.phase == Reasoning && !p.marked && p.resumedAt != c.tickNo {
					cand = append(cand, p)
				}
			}
			slices.SortFunc(cand, smallerFirst)
			for _, p := range cand {
				if eff <= target {
					break
				}
				eff -= c.weight(p)
				c.setMarked(p, true)
				c.stats.Marked++
				r.Marked++
				c.emit(Decision{At: now, Kind: KindMark, Reason: ReasonOverThreshold, Program: p.id, Worker: w.id, HasWorker: true,
					Tokens: p.tokens, Util: c.util(w)})
			}
		}
		c.sProgs = cand[:0]
	}
}

func smallerFirst(a, b *program) int {
	if c := cmp.Compare(a.tokens, b.tokens); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func (c *RawAdmitter) unmarkAll(now time.Time, w *worker, r *TickResult) {
	cand := c.sProgs[:0]
	for _, p := range w.progs {
		if p.marked && !p.swapMark {
			cand = append(cand, p)
		}
	}
	slices.SortFunc(cand, smallerFirst)
	for _, p := range cand {
		c.setMarked(p, false)
		c.stats.Unmarked++
		r.Unmarked++
		c.emit(Decision{At: now, Kind: KindUnmark, Reason: ReasonBelowTarget, Program: p.id, Worker: w.id, HasWorker: true,
			Tokens: p.tokens, Util: c.util(w)})
	}
	c.sProgs = cand[:0]
}

func (c *RawAdmitter) softDemote(now time.Time) {
	for _, w := range c.workers {
		u := c.util(w)
		in := u >= c.cfg.SoftDemote && u < c.cfg.PauseThreshold
		if in {
			w.demUntil = now.Add(c.cfg.Interval * 3 / 2)
		}
		if in != w.demoted {
			w.demoted = in
			k := KindDemote
			if !in {
				k = KindUndemote
			}
			c.emit(Decision{At: now, Kind: k, Reason: ReasonBand, Worker: w.id, HasWorker: true, Util: u})
		}
	}
}

// ---------------------------------------------------------------- helpers

func (c *RawAdmitter) pause(now time.Time, p *program, reason Reason) {
	w := p.w
	p.home = w
	c.detach(p)
	p.life = Paused
	c.addPaused(now, p)
	c.stats.Paused++
	c.emit(Decision{At: now, Kind: KindPause, Reason: reason, Program: p.id, Worker: w.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(w)})
}

func (c *RawAdmitter) addPaused(now time.Time, p *program) {
	c.pauseSeq++
	p.pauseSeq = c.pauseSeq
	p.pausedAt = now
	p.pslot = len(c.paused)
	c.paused = append(c.paused, p)
}

func (c *RawAdmitter) removePaused(p *program) {
	i := p.pslot
	if i < 0 || i >= len(c.paused) || c.paused[i] != p {
		return
	}
	last := len(c.paused) - 1
	c.paused[i] = c.paused[last]
	c.paused[i].pslot = i
	c.paused[last] = nil
	c.paused = c.paused[:last]
	p.pslot = -1
}

func (c *RawAdmitter) updateWaiting(p *program) {
	want := p.life == Paused && p.held > 0
	if want != p.waiting {
		p.waiting = want
		if want {
			c.nWaiting++
		} else {
			c.nWaiting--
		}
	}
}

// attach places an Active program on w and adds its weight.
func (c *RawAdmitter) attach(p *program, w *worker) {
	p.w = w
	p.slot = len(w.progs)
	w.progs = append(w.progs, p)
	t := tail(p)
	if p.phase == Acting {
		w.acting += t
		w.nAct++
	} else {
		w.reasoning += t
	}
	if p.marked {
		w.marked += t
	}
	w.growth += c.growthOf(p)
	w.actGrowth += c.actGrowthOf(p)
	w.addShared(sharedOf(p))
}

// detach removes p from its worker's sums and list (p.w becomes nil).
func (c *RawAdmitter) detach(p *program) {
	w := p.w
	if w == nil {
		return
	}
	t := tail(p)
	if p.phase == Acting {
		w.acting -= t
		w.nAct--
	} else {
		w.reasoning -= t
	}
	if p.marked {
		w.marked -= t
	}
	w.growth -= c.growthOf(p)
	w.actGrowth -= c.actGrowthOf(p)
	w.dropShared(sharedOf(p))
	last := len(w.progs) - 1
	w.progs[p.slot] = w.progs[last]
	w.progs[p.slot].slot = p.slot
	w.progs[last] = nil
	w.progs = w.progs[:last]
	p.w = nil
	p.slot = -1
}

func (c *RawAdmitter) setMarked(p *program, m bool) {
	if !m {
		p.swapMark = false
	}
	if p.marked == m {
		return
	}
	w := p.w
	if w != nil {
		c.detach(p)
	}
	p.marked = m
	if w != nil {
		c.attach(p, w)
	}
}

func (c *RawAdmitter) emit(d Decision) {
	c.seq++
	d.Seq = c.seq
	if c.cfg.OnDecision != nil {
		c.cfg.OnDecision(d)
		return
	}
	if len(c.pending) >= c.cfg.MaxPending {
		c.stats.DroppedDecisions++
		return
	}
	c.pending = append(c.pending, d)
}

// Drain appends the buffered decisions to dst, in order, and empties the
// buffer. It returns nothing new when Config.OnDecision is set.
func (c *RawAdmitter) Drain(dst []Decision) []Decision {
	dst = append(dst, c.pending...)
	clear(c.pending)
	c.pending = c.pending[:0]
	return dst
}
