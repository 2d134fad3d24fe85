package admission

import (
	"sort"
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
	// groups by name (Config.Groups), while they have programs
	groups map[string]*group
	// grown holds the final tails of the last len(grown) programs that
	// ended after two turns or more (Config.Door), nGrown how many were
	// recorded in all, nEnded how many programs ended at all; learned is
	// the lower quartile of grown once growthMin are recorded (0 before);
	// growthEst is the cold-start prior until growthMin programs have
	// ended (Door.ColdStartPrograms), then learned.
	grown     [64]int64
	nGrown    int
	nEnded    int
	learned   int64
	growthEst int64
	// maxTail is the largest unique tail a program had at the end of a
	// turn (Door.ColdStartObserved).
	maxTail int64
	// turnDur holds how long the last len(turnDur) turns ran (first run
	// to the tool boundary), nTurns how many were recorded in all: the
	// lead with which a swap marks programs (Waits.MaxWait).
	turnDur [64]time.Duration
	nTurns  int
	// burst is the latest burst of new programs (Door.Probe).
	burst *burst
	// sibs counts the programs by the key of their first prefix
	// (SetFirstPrefix), nSib how many have one; sibLong holds, during a
	// probe pass, the sibling groups one of which runs long
	// (Door.Probe.Siblings).
	sibs    map[uint64]int
	nSib    int
	sibLong map[uint64]bool
}

// burst counts the new programs offered within burstSpan of its first,
// as a rollout step offers its batch.
type burst struct {
	start time.Time
	n     int
}

// burstSpan is how long after its first program a burst takes others.
const burstSpan = time.Second

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
	// the room Config.Door keeps for them, actGrowth the same over its
	// Acting ones (the door keeps Door.ActingGrowth of it); both
	// kept by attach and detach, recomputed when growthEst changes.
	growth, actGrowth int64
	// backlog is the prefill backlog the caller last reported (SetBacklog).
	backlog int64
	// engine is the KV in use that the worker's engine last reported
	// (SetEngineUsage), in tokens, 0 when none was; unmodelled what of it
	// the programs here did not account for when it came.
	engine, unmodelled int64
	// probes counts the turns running here as probes (Door.Probe),
	// probing their tokens, which count as used.
	probes  int
	probing int64
}

type program struct {
	// first is the prefix its first prompt shares with programs known
	// before it, sib the key naming it (SetFirstPrefix; 0: none).
	first     int64
	sib       uint64
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
	arrival     time.Time // when a new program was first offered (its place at the door)
	probe       *worker   // where its probe runs (nil: none in flight)
	probeN      int64     // the tokens that turn counts there
	probed      bool      // it has run a probe: it has started (Door.Probe)
	burst       *burst    // the burst it was offered in (nil: a subagent)
	pauseSeq    uint64
	waiting     bool    // counted in nWaiting
	grp         *group  // its group (Config.Groups; nil: none)
	tag         float64 // scratch: its weighted fair tag at the door (doorOrder)

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
func (c *RawAdmitter) Config() Config { return c.cfg.clone() }

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
		Acting: p.actingTotal, FirstPrefix: p.first, SiblingKey: p.sib,
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
