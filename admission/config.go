package admission

import (
	"math"
	"time"
)

// Defaults, as in ThunderAgent and Dynamo's port of it.
const (
	DefaultPauseThreshold     = 0.95
	DefaultPauseTarget        = 0.80
	DefaultSoftDemote         = 0.80
	DefaultHysteresis         = 0.10
	DefaultSoftDemotePriority = -2.0
	DefaultResumeBoost        = 1.0
	DefaultBuffer             = 100
	DefaultForcedResume       = 30 * time.Minute
	DefaultInterval           = 5 * time.Second
	DefaultActingWeight       = 1.0
	DefaultMaxPending         = 1 << 16
)

// Config configures a RawAdmitter. The top-level fields are ThunderAgent's
// thresholds: each zero field means its documented default, so Config{} is
// ThunderAgent as upstream runs it. Door, Waits and Moves are agentkv's
// mechanisms, each off when nil; Agentic sets them. Negative values are
// invalid (New returns a *ConfigError). The README's "What the simulation
// shows" measures each mechanism and says why it is sized as it is.
type Config struct {
	// PauseThreshold: a worker with U ≥ PauseThreshold pauses programs at
	// the next Tick. Default 0.95.
	PauseThreshold float64
	// PauseTarget: pausing (and marking) stops once U, less the weight of
	// marked programs, is ≤ PauseTarget. Default 0.80; ≤ PauseThreshold.
	PauseTarget float64
	// SoftDemote: U in [SoftDemote, PauseThreshold) after a Tick puts the
	// worker in the soft-demote band. Default 0.80.
	SoftDemote float64
	// Hysteresis: programs resume, and new ones are admitted, only under
	// the resume ceiling PauseThreshold − Hysteresis. Default 0.10.
	Hysteresis float64
	// SoftDemotePriority is added to new turns on a worker in the band.
	// Default −2.0; must be ≤ 0.
	SoftDemotePriority float64
	// ResumeBoost is added to the first turn after a resume. Default +1.0.
	ResumeBoost float64
	// Buffer is the per-program token reserve when fitting a program onto
	// a worker. Default 100.
	Buffer int64
	// ForcedResume caps a held turn's wait: it resumes on the least
	// utilised worker regardless of room. Default 30 minutes.
	ForcedResume time.Duration
	// Interval is the expected time between ticks (default 5 s); a soft
	// demotion expires 1.5 intervals after the last Tick that saw it.
	Interval time.Duration
	// ActingWeight multiplies Acting programs' tokens in U. Default 1.0.
	ActingWeight float64
	// DecayHalfLife, when positive, decays an Acting program's weight by
	// 2^(−t/DecayHalfLife) on the resume side only, as upstream does.
	DecayHalfLife time.Duration
	// Placement places resumed programs. Nil means WorstFit (upstream's).
	Placement Placement
	// OnDecision, when set, receives every decision synchronously, in
	// order; it must not call back into the RawAdmitter. Nil: decisions
	// are buffered for Drain (at most MaxPending, default 65536).
	OnDecision func(Decision)
	MaxPending int

	// Door sizes new programs by what programs grow to. Nil: by their
	// current context.
	Door *Door
	// Waits bounds how long a held turn of a running program waits. Nil:
	// upstream's order and the forced resume only.
	Waits *Waits
	// Moves lets a program between turns change workers. Nil: a placed
	// program's turns always run on its worker.
	Moves *Moves
	// Groups shares the door between groups of programs (tenants) by
	// weight and bounds each group's admitted programs. Nil: one group.
	Groups *Groups
}

// Door sizes programs at the door by the lower quartile of the final
// unique tails of the last 64 programs that ended after two turns or more,
// once 8 have: a program needs room for that much to be placed or resumed,
// and each Reasoning program keeps room reserved for its growth up to it.
// Pausing still follows actual sizes.
type Door struct {
	// ColdStartPrograms: until 8 programs have ended, every program is
	// reserved at least the largest worker's room under the resume
	// ceiling divided by this (8 on 440 K-token workers: 47 K each). Zero:
	// no prior.
	ColdStartPrograms int
	// ColdStartObserved, when positive, caps that prior at this many times
	// the largest unique tail any program had at the end of a turn so far:
	// a batch offered at once, where nothing ends for minutes, is not held
	// to the prior when no program comes near it. Zero: the prior alone.
	// The tail is read at EndRequest with the shared prefix last given to
	// SetShared: the root router calls SetShared after EndRequest, so a
	// first turn counts its whole prompt. Agentic's 1.5 is measured with
	// that (in simulation, SWE-bench-shaped batches of 128, 256 and 512
	// programs took 171, 261 and 491 minutes with first turns counted by
	// their tail, against 152, 240 and 465).
	ColdStartObserved float64
	// ColdStartFloor, when positive (with ColdStartObserved), keeps that
	// capped prior at least the largest worker's room under the resume
	// ceiling divided by this: the cold start begins at this many programs
	// a worker (16 on 440 K-token workers: 23 K each) and tightens toward
	// ColdStartPrograms as the running programs grow, sized by what they
	// have grown to so far. Zero: no floor.
	ColdStartFloor int
	// ActingGrowth, in [0, 1], is the share of its Acting programs' growth
	// reserve that a worker keeps from new programs (with Waits.MaxWait).
	// Zero: the door sees only the Reasoning programs' reserve.
	ActingGrowth float64
	// Probe, when set, starts programs of a rollout batch while they wait
	// at the door (see Probe).
	Probe *Probe
}

// Probe starts the programs of a batch offered at once (an RL rollout
// step) while they wait at the door, so that their tool calls overlap the
// wait: a program's first turn runs once it has waited After, and its
// later turns too while its unique tail is at most Tail tokens, each
// worker running such turns (probes) up to Share of its room under the
// resume ceiling, and at least one. A probed program stays at the door,
// unplaced; a turn it cannot probe waits there, where programs that have
// started go before those that have not, then by first offer. A subagent
// it starts (StartSubRequest) takes its place in line and runs its first
// turn as a probe where a worker has room. Only programs offered in a
// burst, Burst or more within one second, are probed: a batch, not the
// steady arrivals of a closed loop or of a service, where a probe only
// moves a newcomer's wait from its first turn to its second.
//
// A probe counts against Share as its whole context, or, while more than
// Queue programs a worker wait at the door (a batch several times what the
// engines run at once), as its unique tail: the shared prefix is then in
// every worker's cache, and the door, not the engines, is what delays the
// step (Claude Code sessions tiled to 512 programs: 141 minutes against
// KV routing's 131 when charged whole, 132 charged their tail). A
// shallower queue keeps the whole charge: there, more probes slow the
// programs already running. Queue 0 always charges the whole context.
//
// Siblings, when positive, starts first the programs whose siblings run
// long. Programs whose first prompts share a prefix past what a quarter
// or more of the programs share (SetFirstPrefix: the router names it from
// its lineage index; several rollouts of one task) are siblings. While a
// program has been in one tool call for Siblings, its siblings that have
// not started go before every other probe, and their first turn's probe
// counts as its unique tail: a step ends with its last program, and a
// program with a long tool call let in late ends it late (Claude Code
// sessions tiled to 512 programs, 22 copies of one with a 96-minute tool
// call: 110 minutes against 131 without, KV routing's 131). Programs that
// all share one prefix (a system prompt) are no group: the door's order
// among them stays first come, first served.
type Probe struct {
	After    time.Duration
	Burst    int
	Share    float64
	Tail     int64
	Queue    int
	Siblings time.Duration
}

// Waits bounds the wait of a held turn of a program that has run before.
type Waits struct {
	// MaxWait, when positive, swaps a held turn in a Tick and a turn (the
	// 90th percentile of the last 64 turns, from the first 8 on) ahead of
	// MaxWait: on its home worker or the cheapest, pausing Acting programs
	// (largest first) or marking Reasoning ones until it fits
	// (ReasonSwap). Held turns resume oldest first; new programs wait at
	// the door first come, first served (a newcomer that does not fit
	// keeps the worker with the most room; smaller ones backfill others),
	// and none is placed ahead of a held turn. Zero: no bound but
	// ForcedResume, upstream's order.
	MaxWait time.Duration
	// HomeFirst resumes a program on its home worker (where it last ran)
	// when it fits there, before the Placement sees it.
	HomeFirst bool
	// ResumeOnEnd runs the resume pass when a running program ends
	// (EndSession), not only at the next Tick.
	ResumeOnEnd bool
}

// Moves lets a turn of an Active program between turns (Acting) move to
// the first worker of StartRequestOn's prefer list (the router's, at least
// Margin cheaper than its own) with room under the resume ceiling
// (ReasonPreferred), only while no turn waits for room; while turns wait,
// a program still escapes a worker whose backlog (SetBacklog) is Margin or
// more to one under it with room under PauseThreshold, and resumes avoid
// such a worker while another has room.
type Moves struct {
	// Margin, in tokens of prefill (queued plus the prompt's uncached
	// tokens). Zero: move whenever another worker is cheaper at all.
	Margin int64
}

// The mechanisms' settings, zero where off.
func (c *Config) maxWait() time.Duration {
	if c.Waits == nil {
		return 0
	}
	return c.Waits.MaxWait
}
func (c *Config) homeFirst() bool     { return c.Waits != nil && c.Waits.HomeFirst }
func (c *Config) resumeOnEnd() bool   { return c.Waits != nil && c.Waits.ResumeOnEnd }
func (c *Config) reserveGrowth() bool { return c.Door != nil }
func (c *Config) coldStart() int {
	if c.Door == nil {
		return 0
	}
	return c.Door.ColdStartPrograms
}
func (c *Config) doorActing() float64 {
	if c.Door == nil {
		return 0
	}
	return c.Door.ActingGrowth
}
func (c *Config) coldObserved() float64 {
	if c.Door == nil {
		return 0
	}
	return c.Door.ColdStartObserved
}
func (c *Config) coldFloor() int {
	if c.Door == nil {
		return 0
	}
	return c.Door.ColdStartFloor
}
func (c *Config) probe() *Probe {
	if c.Door == nil {
		return nil
	}
	return c.Door.Probe
}
func (c *Config) rebalance() bool { return c.Moves != nil }
func (c *Config) margin() int64 {
	if c.Moves == nil {
		return 0
	}
	return c.Moves.Margin
}

// clone copies the sub-configs, so that neither the caller's Config nor
// the one Config returns shares them with the controller.
func (c Config) clone() Config {
	if c.Door != nil {
		d := *c.Door
		if d.Probe != nil {
			p := *d.Probe
			d.Probe = &p
		}
		c.Door = &d
	}
	if c.Waits != nil {
		w := *c.Waits
		c.Waits = &w
	}
	if c.Moves != nil {
		m := *c.Moves
		c.Moves = &m
	}
	return c
}

func (c Config) withDefaults() (Config, error) {
	c = c.clone()
	neg := func(name string, v float64) error {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return &ConfigError{name, "must be finite and non-negative"}
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"PauseThreshold", c.PauseThreshold}, {"PauseTarget", c.PauseTarget},
		{"SoftDemote", c.SoftDemote}, {"Hysteresis", c.Hysteresis},
		{"ResumeBoost", c.ResumeBoost}, {"ActingWeight", c.ActingWeight},
		{"Buffer", float64(c.Buffer)}, {"ForcedResume", float64(c.ForcedResume)},
		{"Interval", float64(c.Interval)}, {"DecayHalfLife", float64(c.DecayHalfLife)},
		{"MaxPending", float64(c.MaxPending)}, {"Waits.MaxWait", float64(c.maxWait())},
		{"Moves.Margin", float64(c.margin())}, {"Door.ColdStartPrograms", float64(c.coldStart())},
		{"Door.ActingGrowth", c.doorActing()}, {"Door.ColdStartObserved", c.coldObserved()},
		{"Door.ColdStartFloor", float64(c.coldFloor())},
	} {
		if err := neg(f.name, f.v); err != nil {
			return c, err
		}
	}
	if c.SoftDemotePriority > 0 || math.IsNaN(c.SoftDemotePriority) || math.IsInf(c.SoftDemotePriority, 0) {
		return c, &ConfigError{"SoftDemotePriority", "must be finite and ≤ 0"}
	}
	def := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	def(&c.PauseThreshold, DefaultPauseThreshold)
	def(&c.PauseTarget, DefaultPauseTarget)
	def(&c.SoftDemote, DefaultSoftDemote)
	def(&c.Hysteresis, DefaultHysteresis)
	def(&c.SoftDemotePriority, DefaultSoftDemotePriority)
	def(&c.ResumeBoost, DefaultResumeBoost)
	def(&c.ActingWeight, DefaultActingWeight)
	if c.Buffer == 0 {
		c.Buffer = DefaultBuffer
	}
	if c.ForcedResume == 0 {
		c.ForcedResume = DefaultForcedResume
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.Placement == nil {
		c.Placement = WorstFit
	}
	if c.Buffer > MaxTokens {
		return c, &ConfigError{"Buffer", "must be ≤ MaxTokens"}
	}
	if c.doorActing() > 1 {
		return c, &ConfigError{"Door.ActingGrowth", "must be ≤ 1"}
	}
	if p := c.probe(); p != nil {
		switch {
		case p.After <= 0:
			return c, &ConfigError{"Door.Probe.After", "must be positive"}
		case p.Burst < 1:
			return c, &ConfigError{"Door.Probe.Burst", "must be ≥ 1"}
		case !(p.Share > 0 && p.Share <= 1):
			return c, &ConfigError{"Door.Probe.Share", "must be in (0, 1]"}
		case p.Tail < 0 || p.Tail > MaxTokens:
			return c, &ConfigError{"Door.Probe.Tail", "must be in [0, MaxTokens]"}
		case p.Queue < 0:
			return c, &ConfigError{"Door.Probe.Queue", "must be ≥ 0"}
		case p.Siblings < 0:
			return c, &ConfigError{"Door.Probe.Siblings", "must be ≥ 0"}
		}
	}
	if c.PauseTarget > c.PauseThreshold {
		return c, &ConfigError{"PauseTarget", "must be ≤ PauseThreshold"}
	}
	if c.SoftDemote > c.PauseThreshold {
		return c, &ConfigError{"SoftDemote", "must be ≤ PauseThreshold"}
	}
	if c.Hysteresis >= c.PauseThreshold {
		return c, &ConfigError{"Hysteresis", "must be < PauseThreshold"}
	}
	return c, nil
}

// Agentic returns the configuration that agentkv runs by default and that
// the README's admission study measures (agentkv simulate's
// "kv+admission"; the proxy's --admission): an Acting program's weight
// decays with a one-minute half-life; programs are sized by what programs
// grow to: until eight have ended, by 1.5 times the largest a program has
// grown to so far, no fewer than eight and no more than sixteen per
// worker (a rollout batch is not held to eight per worker while its
// programs are small); then by what ended programs grew to; and the door
// keeps 60 % of the Acting programs' growth free; a held turn waits at
// most 3 minutes, resumes go home first, and a program's end lets the
// next in at once; a program between turns moves only to escape 128 K
// tokens of queued prefill; and the programs of a batch offered at once
// (16 or more, an RL rollout step) that wait at the door half a minute run
// their first turn, and their later ones while their unique tail is at
// most 12 K tokens, in a fifth of a worker's room, counted as their unique
// tail while more than 32 programs a worker wait (Door.Probe).
func Agentic() Config {
	return Config{
		DecayHalfLife: time.Minute,
		Door: &Door{ColdStartPrograms: 8, ColdStartObserved: 1.5, ColdStartFloor: 16, ActingGrowth: 0.6,
			Probe: &Probe{After: 30 * time.Second, Burst: 16, Share: 0.2, Tail: 12_000, Queue: 32, Siblings: 90 * time.Second}},
		Waits: &Waits{MaxWait: 3 * time.Minute, HomeFirst: true, ResumeOnEnd: true},
		Moves: &Moves{Margin: 128_000},
	}
}

// ResumeCeiling is PauseThreshold − Hysteresis after defaults.
func (c Config) ResumeCeiling() float64 {
	d, err := c.withDefaults()
	if err != nil {
		return 0
	}
	return d.PauseThreshold - d.Hysteresis
}
