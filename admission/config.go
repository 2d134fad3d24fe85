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

// Config holds every threshold of the controller. The zero value of each
// field means the documented default, so Config{} is the upstream
// configuration. Negative values are invalid (New returns a *ConfigError).
type Config struct {
	// PauseThreshold: a worker with U ≥ PauseThreshold pauses programs at
	// the next Tick. Default 0.95.
	PauseThreshold float64
	// PauseTarget: pausing (and marking) stops once U, less the weight of
	// marked programs, is ≤ PauseTarget. Default 0.80. Must be ≤
	// PauseThreshold.
	PauseTarget float64
	// SoftDemote: a worker with SoftDemote ≤ U < PauseThreshold after a
	// Tick is in the soft-demote band. Default 0.80.
	SoftDemote float64
	// Hysteresis: paused programs resume only on workers with U ≤
	// PauseThreshold − Hysteresis (the resume ceiling, default 0.85), and
	// are bin-packed under that ceiling. New programs are admitted under the
	// same ceiling. Default 0.10. Must be < PauseThreshold.
	Hysteresis float64
	// SoftDemotePriority is the priority added to new turns of programs on a
	// worker in the band. Default −2.0. A positive value is invalid.
	SoftDemotePriority float64
	// ResumeBoost is the priority added to the first turn after a resume
	// (the held turn, or the next one). Default +1.0.
	ResumeBoost float64
	// Buffer is the per-program token reserve used when fitting a program
	// onto a worker (admission and resume). Default 100.
	Buffer int64
	// ForcedResume caps how long a held turn waits: at the first Tick at or
	// after the cap its program is resumed on the least-utilised worker
	// regardless of room. Default 30 minutes.
	ForcedResume time.Duration
	// Interval is the expected time between ticks (default 5 s). A worker's
	// soft demotion expires 1.5 intervals after the last Tick that saw it in
	// the band, so a stalled control loop does not demote forever.
	Interval time.Duration
	// ActingWeight multiplies the token count of Acting programs in U.
	// Default 1.0.
	ActingWeight float64
	// DecayHalfLife, when positive, decays an Acting program's weight by
	// 2^(−t/DecayHalfLife), t the time since its last request ended, on the
	// resume side only (resume ceiling and forced-resume target), as
	// upstream does. Pausing always uses undecayed weights. Zero (default)
	// disables decay.
	DecayHalfLife time.Duration
	// Placement places resumed programs on workers. Nil means WorstFit, the
	// policy upstream actually runs.
	Placement Placement
	// OnDecision, when set, receives every decision synchronously, in order,
	// from inside the RawAdmitter call that took it. It must not call back
	// into the RawAdmitter. When nil, decisions are buffered for Drain (at
	// most MaxPending; older ones are kept, later ones counted as dropped).
	OnDecision func(Decision)
	// MaxPending bounds the Drain buffer. Default 65536.
	MaxPending int
	// MaxWait, when positive, bounds how long a held turn of a program
	// that has run before waits, without the overcommit of a forced
	// resume: held turns resume oldest first (aging) instead of smallest
	// first, and a Tick and a turn ahead of MaxWait (at the first Tick at
	// or after MaxWait − Interval − the 90th percentile of how long the
	// last 64 turns ran, from the first 8 on) the program is swapped in:
	// on its home worker (where it last ran, so its cache is there), or
	// else on the worker where it costs least, Acting programs are paused
	// (largest first, then the longest acting) until it fits under the
	// resume ceiling, and it resumes there (ReasonSwap). Where pausing
	// every Acting program would not make room, Reasoning programs are
	// marked to pause at their next tool boundary, and it resumes as soon
	// as they have: the turn's lead gets them there by MaxWait, unless one
	// runs a turn longer than that. While a held turn of a placed program waits, no queued
	// new program (nor a paused one with nothing held) is resumed ahead of
	// it by the Placement: the room it is waiting for stays its. New
	// programs wait at the door first come, first served: one that does
	// not fit yet keeps the worker with the most room for itself, and a
	// smaller newcomer may only take another (backfill).
	// Zero (default) keeps the upstream order and the forced resume only.
	MaxWait time.Duration
	// ReserveGrowth sizes programs at the door by what programs grow to:
	// the lower quartile of the final sizes (unique tails) of the last 64
	// programs that ended (EndSession after at least two turns), once 8
	// have. A program smaller than that needs room for it to be placed or
	// resumed, and each Reasoning program on a worker keeps room reserved
	// for its growth up to it (an Acting one, in a tool call, does not), so
	// the door does not place more programs than the cache holds once they
	// have grown: agents that start at 10 K tokens and end at 60 K
	// otherwise rotate through pauses and swaps, each losing its cache.
	// Pausing still follows the programs' actual sizes. The lower quartile,
	// not the median: on workloads of mixed sizes the median held the
	// engines 30-40 % idle. Off (default): programs are sized by their
	// current context.
	ReserveGrowth bool
	// ColdStartPrograms is, with ReserveGrowth, how many programs a
	// worker takes at most before growth is learned: until 8 programs (of
	// any length) have ended, every program is reserved at least the
	// largest worker's room under the resume ceiling divided by this. At a
	// cold start there is nothing to learn from, and agents that all
	// started at 5-10 K tokens were all placed at once and then grew
	// sixfold, which held their later turns for up to an hour. Eight on
	// 440 K-token workers is 47 K tokens each. Zero: no prior; programs
	// are sized by their current context until growth is learned.
	ColdStartPrograms int
	// DoorActingGrowth is the share of its Acting programs' growth
	// reserve (up to the ReserveGrowth estimate) that a worker keeps from
	// new programs at the door (with MaxWait): an Acting program reserves
	// nothing against held turns, since a swap can pause it, but it comes
	// back from its tool call and grows, and a door that fills the room
	// it left sent turns of running programs into swaps, each pausing
	// another program, whenever the programs came back together. Zero:
	// the door sees only the Reasoning programs' reserve. In [0, 1].
	DoorActingGrowth float64
	// ResumeOnEnd runs the resume pass as soon as a running program ends
	// (EndSession), so a program waiting at the door takes the room that
	// ending freed at once instead of at the next Tick (up to Interval
	// later: the engines idle meanwhile when every program is short).
	ResumeOnEnd bool
	// HomeFirst resumes a program on its home worker when it fits there
	// under the resume ceiling, before the Placement sees it: a resumed
	// program finds its prefix cached instead of landing elsewhere.
	HomeFirst bool
	// Rebalance lets a turn of an Active program between turns (Acting)
	// move to the first worker of StartRequestOn's prefer list that is not
	// its worker and has room for it under the resume ceiling
	// (ReasonPreferred), but only while no turn waits for room: the room a
	// move takes is the room a waiting turn needs, and the recompute it
	// costs takes engine time a saturated cluster does not have. The
	// router ranks workers by KV cost, cache and load together, and offers
	// a running program those at least RebalanceMargin cheaper than its own
	// worker. While turns wait, a program still escapes a worker whose
	// prefill backlog (SetBacklog) is RebalanceMargin or more, to one whose
	// backlog is not, with room under PauseThreshold; and the resume pass
	// places programs on such a worker only when no other has room. Off, a
	// placed program's turns always run on its worker.
	Rebalance bool
	// RebalanceMargin is that margin, in tokens of prefill (the router's
	// cost: tokens queued for prefill plus the prompt's uncached tokens).
	// A program leaves its cache only to escape a backlog, such as a long
	// prompt's prefill at the head of its worker's queue: a turn of a few
	// cached tokens otherwise waits a minute behind a 200 K-token prefill
	// while another worker idles. Zero moves it whenever another worker is
	// cheaper at all.
	RebalanceMargin int64
}

func (c Config) withDefaults() (Config, error) {
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
		{"MaxPending", float64(c.MaxPending)}, {"MaxWait", float64(c.MaxWait)},
		{"RebalanceMargin", float64(c.RebalanceMargin)}, {"ColdStartPrograms", float64(c.ColdStartPrograms)},
		{"DoorActingGrowth", c.DoorActingGrowth},
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
	if c.DoorActingGrowth > 1 {
		return c, &ConfigError{"DoorActingGrowth", "must be ≤ 1"}
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
// the README's admission study measures against KV-aware routing and the
// best fixed concurrency cap (agentkv simulate's "kv+admission"; the
// proxy's --admission): an Acting program's weight decays with a
// one-minute half-life while its tool runs (most tool calls return within
// seconds and need the cache back; a long one's KV is only cache); a held
// turn of a running program waits at most 3 minutes and is then swapped in
// (MaxWait); resumed programs go home first (HomeFirst); programs are
// sized by what programs grow to (ReserveGrowth), at most eight per
// worker until eight have ended (ColdStartPrograms), and the door keeps
// 60 % of the Acting programs' growth free (DoorActingGrowth), so that
// programs coming back from their tool calls find room within MaxWait; a
// program's end lets the next in at once (ResumeOnEnd); and a program
// between turns leaves its worker only to escape a backlog of 128 K
// tokens of prefill (Rebalance, RebalanceMargin). Config{} is
// ThunderAgent's configuration as upstream runs it.
func Agentic() Config {
	return Config{
		DecayHalfLife:     time.Minute,
		MaxWait:           3 * time.Minute,
		HomeFirst:         true,
		ReserveGrowth:     true,
		ColdStartPrograms: 8,
		DoorActingGrowth:  0.6,
		ResumeOnEnd:       true,
		Rebalance:         true,
		RebalanceMargin:   128_000,
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
