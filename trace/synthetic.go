package trace

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"
)

// LogNormal is a log-normal distribution given by its median and the
// standard deviation of its logarithm; Sigma 0 is the constant Median.
type LogNormal struct {
	Median float64
	Sigma  float64
}

// Sample draws one value.
func (d LogNormal) Sample(r *rand.Rand) float64 {
	return d.Median * math.Exp(d.Sigma*r.NormFloat64())
}

// Mean is the distribution's mean, Median·exp(σ²/2).
func (d LogNormal) Mean() float64 { return d.Median * math.Exp(d.Sigma*d.Sigma/2) }

func (d LogNormal) valid() bool {
	return d.Median > 0 && d.Sigma >= 0 && !math.IsInf(d.Median, 0) && !math.IsInf(d.Sigma, 0)
}

// FitLogNormal fits a log-normal to positive samples by the mean and the
// (population) standard deviation of their logarithms. Non-positive
// samples are ignored; fewer than one sample gives the zero LogNormal.
func FitLogNormal(xs []float64) LogNormal {
	var sum, sq float64
	n := 0
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) {
			l := math.Log(x)
			sum += l
			sq += l * l
			n++
		}
	}
	if n == 0 {
		return LogNormal{}
	}
	mu := sum / float64(n)
	v := max(sq/float64(n)-mu*mu, 0)
	return LogNormal{Median: math.Exp(mu), Sigma: math.Sqrt(v)}
}

// SyntheticConfig shapes Synthetic's agentic workload. Zero fields take the
// defaults of DefaultSyntheticConfig, which were fitted to the 23 public
// Claude Code sessions (see FitClaudeCode and the package documentation);
// negative or otherwise invalid fields are rejected by Validate.
type SyntheticConfig struct {
	// Sessions is the number of root agent programs. Default 256.
	Sessions int
	// Seed makes the workload reproducible; session i's draws depend only
	// on Seed and i, so a larger Sessions only adds sessions.
	Seed uint64
	// BlockTokens is the hash id block size. Default 64.
	BlockTokens int
	// RampUp spreads the root sessions' starts uniformly over [0, RampUp).
	// Default 60 s.
	RampUp time.Duration
	// SystemTokens is the system prompt and tool definitions every root
	// session shares (its full blocks have the same ids in every session).
	SystemTokens int
	// FirstPrompt is the first user message, in tokens beyond the system
	// prompt.
	FirstPrompt LogNormal
	// Turns is the number of model calls per root session, rounded and
	// clamped to [1, MaxTurns].
	Turns    LogNormal
	MaxTurns int
	// Append is what each later turn adds to the context beyond the
	// previous turn's output (tool results, a user message), in tokens.
	Append LogNormal
	// Output is the completion length in tokens, clamped to [1, MaxOutput].
	Output    LogNormal
	MaxOutput int
	// ToolGap is the tool-execution time after a turn that called tools,
	// in seconds (heavy-tailed); UserGap the time a user takes after a turn
	// that handed control back. Both are capped at MaxGap.
	ToolGap, UserGap LogNormal
	MaxGap           time.Duration
	// StopProb is the chance a non-final root turn ends the agent's turn
	// (FinishStop, then UserGap) instead of calling tools.
	StopProb float64
	// SpawnProb is the chance a non-final root turn launches subagents;
	// FanOut how many (rounded, clamped to [1, MaxFanOut]). The next root
	// turn waits for all of them.
	SpawnProb float64
	FanOut    LogNormal
	MaxFanOut int
	// SubagentLaunch is the gap from the spawning turn's end to the
	// subagents' start.
	SubagentLaunch time.Duration
	// SubagentSystemTokens is the system prompt every subagent shares;
	// SubagentPrompt its task prompt beyond that; SubagentTurns its number
	// of model calls (clamped to [1, MaxTurns]).
	SubagentSystemTokens int
	SubagentPrompt       LogNormal
	SubagentTurns        LogNormal
	// MaxContextTokens ends a session before its context would exceed it.
	// Default 200,000.
	MaxContextTokens int
}

// DefaultSyntheticConfig returns the defaults: parameters fitted to the
// public Claude Code traces (FitClaudeCode over
// ../shared/data/claude_code_traces, rounded; TestFitMatchesDefaults keeps
// them honest), with a size chosen so a default simulation stays small:
// 256 root sessions of at most 24 turns.
func DefaultSyntheticConfig() SyntheticConfig {
	return SyntheticConfig{
		Sessions:             256,
		BlockTokens:          64,
		RampUp:               60 * time.Second,
		SystemTokens:         15_040,
		FirstPrompt:          LogNormal{Median: 3_100, Sigma: 1.69},
		Turns:                LogNormal{Median: 4.86, Sigma: 0.39},
		MaxTurns:             24,
		Append:               LogNormal{Median: 808, Sigma: 1.96},
		Output:               LogNormal{Median: 269, Sigma: 1.01},
		MaxOutput:            8_192,
		ToolGap:              LogNormal{Median: 9.15, Sigma: 1.57},
		UserGap:              LogNormal{Median: 92.3, Sigma: 1.31},
		MaxGap:               10 * time.Minute,
		StopProb:             0.092,
		SpawnProb:            0.0204,
		FanOut:               LogNormal{Median: 1.73, Sigma: 0.55},
		MaxFanOut:            4,
		SubagentLaunch:       700 * time.Millisecond,
		SubagentSystemTokens: 8_423,
		SubagentPrompt:       LogNormal{Median: 3_381, Sigma: 0.06},
		SubagentTurns:        LogNormal{Median: 9.73, Sigma: 0.54},
		MaxContextTokens:     200_000,
	}
}

// SWEBenchSyntheticConfig is a workload shaped after SWE-bench coding
// agents (SWE-agent, OpenHands on SWE-bench Verified): autonomous programs
// of 20–60 model calls (median 36) with no user in the loop, a shared
// 7,000-token system prompt and demonstrations, an issue statement of a few
// thousand tokens, observations truncated to a couple of thousand tokens a
// turn, and long tool gaps (test suites, builds: median 20 s, heavy-tailed
// to 10 minutes). Rarely a subagent. Sessions and Seed are as in
// DefaultSyntheticConfig.
func SWEBenchSyntheticConfig() SyntheticConfig {
	c := DefaultSyntheticConfig()
	c.SystemTokens = 7_000
	c.FirstPrompt = LogNormal{Median: 2_500, Sigma: 0.6}
	c.Turns = LogNormal{Median: 36, Sigma: 0.3}
	c.MaxTurns = 60
	c.Append = LogNormal{Median: 1_200, Sigma: 0.8}
	c.Output = LogNormal{Median: 250, Sigma: 0.7}
	c.ToolGap = LogNormal{Median: 20, Sigma: 1.2}
	c.StopProb = 1e-9 // autonomous: no user turns (0 would mean the default)
	c.SpawnProb = 1e-9
	return c
}

// withDefaults fills zero fields.
func (c SyntheticConfig) withDefaults() SyntheticConfig {
	d := DefaultSyntheticConfig()
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setLN := func(v *LogNormal, def LogNormal) {
		if *v == (LogNormal{}) {
			*v = def
		}
	}
	setF := func(v *float64, def float64) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&c.Sessions, d.Sessions)
	setInt(&c.BlockTokens, d.BlockTokens)
	setDur(&c.RampUp, d.RampUp)
	setInt(&c.SystemTokens, d.SystemTokens)
	setLN(&c.FirstPrompt, d.FirstPrompt)
	setLN(&c.Turns, d.Turns)
	setInt(&c.MaxTurns, d.MaxTurns)
	setLN(&c.Append, d.Append)
	setLN(&c.Output, d.Output)
	setInt(&c.MaxOutput, d.MaxOutput)
	setLN(&c.ToolGap, d.ToolGap)
	setLN(&c.UserGap, d.UserGap)
	setDur(&c.MaxGap, d.MaxGap)
	setF(&c.StopProb, d.StopProb)
	setF(&c.SpawnProb, d.SpawnProb)
	setLN(&c.FanOut, d.FanOut)
	setInt(&c.MaxFanOut, d.MaxFanOut)
	setDur(&c.SubagentLaunch, d.SubagentLaunch)
	setInt(&c.SubagentSystemTokens, d.SubagentSystemTokens)
	setLN(&c.SubagentPrompt, d.SubagentPrompt)
	setLN(&c.SubagentTurns, d.SubagentTurns)
	setInt(&c.MaxContextTokens, d.MaxContextTokens)
	return c
}

// Validate reports out-of-range fields (after defaults are applied).
func (c SyntheticConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	pos := func(name string, v int, hi int) {
		if v < 1 || v > hi {
			errs = append(errs, fmt.Errorf("%s %d out of range [1, %d]", name, v, hi))
		}
	}
	pos("Sessions", c.Sessions, 1<<20)
	pos("BlockTokens", c.BlockTokens, 1<<20)
	pos("SystemTokens", c.SystemTokens, MaxTokens)
	pos("MaxTurns", c.MaxTurns, 1<<16)
	pos("MaxOutput", c.MaxOutput, MaxTokens)
	pos("MaxFanOut", c.MaxFanOut, 1<<10)
	pos("SubagentSystemTokens", c.SubagentSystemTokens, MaxTokens)
	pos("MaxContextTokens", c.MaxContextTokens, MaxTokens)
	for name, d := range map[string]LogNormal{"FirstPrompt": c.FirstPrompt, "Turns": c.Turns, "Append": c.Append,
		"Output": c.Output, "ToolGap": c.ToolGap, "UserGap": c.UserGap, "FanOut": c.FanOut,
		"SubagentPrompt": c.SubagentPrompt, "SubagentTurns": c.SubagentTurns} {
		if !d.valid() || d.Sigma > 5 {
			errs = append(errs, fmt.Errorf("%s %+v: want Median > 0 and 0 <= Sigma <= 5", name, d))
		}
	}
	for name, p := range map[string]float64{"StopProb": c.StopProb, "SpawnProb": c.SpawnProb} {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, fmt.Errorf("%s %v out of range [0, 1]", name, p))
		}
	}
	if c.RampUp < 0 || c.MaxGap < 0 || c.SubagentLaunch < 0 {
		errs = append(errs, errors.New("RampUp, MaxGap and SubagentLaunch must not be negative"))
	}
	if c.SystemTokens >= c.MaxContextTokens || c.SubagentSystemTokens >= c.MaxContextTokens {
		errs = append(errs, errors.New("system prompts must be shorter than MaxContextTokens"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("trace: synthetic: %w", errors.Join(errs...))
	}
	return nil
}

// Synthetic generates a seeded agentic workload shaped after real Claude
// Code sessions: every root session starts with the shared system prompt
// and a first prompt, then each turn appends the previous output and new
// tool results; tool gaps are log-normal (heavy-tailed) and capped;
// occasionally a turn fans out to subagents (with their own shared system
// prompt) that the next turn waits for. Zero config fields take the fitted
// defaults. An invalid config (see Validate) is replaced field by field by
// the defaults; call Validate first to reject it instead. The result is
// closed-loop, passes Validate, and is identical for identical configs.
func Synthetic(cfg SyntheticConfig) Workload {
	c := cfg.withDefaults()
	if c.Validate() != nil {
		c = repair(c)
	}
	bs := c.BlockTokens
	g := synth{c: c, bs: bs, rootSys: uint64(c.SystemTokens / bs), subSys: uint64(c.SubagentSystemTokens / bs)}
	// Ids below rootSys are the root system prompt's blocks, the next
	// subSys the subagents'; every session draws fresh ids from a range
	// of its own above them.
	g.next = g.rootSys + g.subSys
	w := Workload{Name: "synthetic", BlockTokens: bs}
	for i := range c.Sessions {
		rng := rand.New(rand.NewPCG(c.Seed, uint64(i)+1))
		w.Sessions = append(w.Sessions, g.root(rng, i)...)
	}
	// Sessions in order of first arrival in the nominal plan.
	if p, err := Schedule(&w, TimingModel{}); err == nil {
		order := make([]int, len(w.Sessions))
		for i := range order {
			order[i] = i
		}
		first := func(i int) time.Duration {
			if len(p.Turns[i]) > 0 {
				return p.Turns[i][0].Arrival
			}
			return p.Start[i]
		}
		sort.SliceStable(order, func(a, b int) bool { return first(order[a]) < first(order[b]) })
		sorted := make([]Session, len(order))
		for i, k := range order {
			sorted[i] = w.Sessions[k]
		}
		w.Sessions = sorted
	}
	return w
}

// repair replaces each invalid field of c with its default.
func repair(c SyntheticConfig) SyntheticConfig {
	d := DefaultSyntheticConfig()
	fixInt := func(v *int, def, hi int) {
		if *v < 1 || *v > hi {
			*v = def
		}
	}
	fixInt(&c.Sessions, d.Sessions, 1<<20)
	fixInt(&c.BlockTokens, d.BlockTokens, 1<<20)
	fixInt(&c.MaxTurns, d.MaxTurns, 1<<16)
	fixInt(&c.MaxOutput, d.MaxOutput, MaxTokens)
	fixInt(&c.MaxFanOut, d.MaxFanOut, 1<<10)
	fixInt(&c.MaxContextTokens, d.MaxContextTokens, MaxTokens)
	fixInt(&c.SystemTokens, d.SystemTokens, c.MaxContextTokens-1)
	fixInt(&c.SubagentSystemTokens, d.SubagentSystemTokens, c.MaxContextTokens-1)
	if c.SystemTokens >= c.MaxContextTokens || c.SubagentSystemTokens >= c.MaxContextTokens {
		c.SystemTokens, c.SubagentSystemTokens, c.MaxContextTokens = d.SystemTokens, d.SubagentSystemTokens, d.MaxContextTokens
	}
	for _, p := range []struct {
		v   *LogNormal
		def LogNormal
	}{{&c.FirstPrompt, d.FirstPrompt}, {&c.Turns, d.Turns}, {&c.Append, d.Append}, {&c.Output, d.Output},
		{&c.ToolGap, d.ToolGap}, {&c.UserGap, d.UserGap}, {&c.FanOut, d.FanOut},
		{&c.SubagentPrompt, d.SubagentPrompt}, {&c.SubagentTurns, d.SubagentTurns}} {
		if !p.v.valid() || p.v.Sigma > 5 {
			*p.v = p.def
		}
	}
	if !(c.StopProb >= 0 && c.StopProb <= 1) {
		c.StopProb = d.StopProb
	}
	if !(c.SpawnProb >= 0 && c.SpawnProb <= 1) {
		c.SpawnProb = d.SpawnProb
	}
	if c.RampUp < 0 {
		c.RampUp = d.RampUp
	}
	if c.MaxGap < 0 {
		c.MaxGap = d.MaxGap
	}
	if c.SubagentLaunch < 0 {
		c.SubagentLaunch = d.SubagentLaunch
	}
	return c
}

type synth struct {
	c       SyntheticConfig
	bs      int
	rootSys uint64 // shared root system prompt blocks: ids [0, rootSys)
	subSys  uint64 // shared subagent prompt blocks: ids [rootSys, rootSys+subSys)
	next    uint64 // next fresh id
}

// promptState is one session's growing prompt.
type promptState struct {
	g       *synth
	shared  uint64 // first id of the shared system prompt
	nshared uint64 // its full blocks
	ids     []uint64
	tokens  int
}

func (x *promptState) extend(n int) {
	x.tokens += n
	for full := x.tokens / x.g.bs; len(x.ids) < full; {
		b := uint64(len(x.ids))
		if b < x.nshared {
			x.ids = append(x.ids, x.shared+b)
		} else {
			x.ids = append(x.ids, x.g.next)
			x.g.next++
		}
	}
}

// hashIDs returns the prompt's ids: the full blocks plus a fresh id for a
// partial tail.
func (x *promptState) hashIDs() []uint64 {
	n := len(x.ids)
	tail := x.tokens%x.g.bs != 0
	out := make([]uint64, n, n+1)
	copy(out, x.ids)
	if tail {
		out = append(out, x.g.next)
		x.g.next++
	}
	return out
}

func clampRound(v float64, lo, hi int) int {
	if math.IsNaN(v) {
		return lo
	}
	r := math.Round(v)
	if r < float64(lo) {
		return lo
	}
	if r > float64(hi) {
		return hi
	}
	return int(r)
}

func (g *synth) gap(r *rand.Rand, d LogNormal) time.Duration {
	s := d.Sample(r)
	dur := time.Duration(math.Round(min(s, g.c.MaxGap.Seconds()) * 1e9))
	return min(max(dur, 0), g.c.MaxGap)
}

// root generates root session i and its subagents.
func (g *synth) root(r *rand.Rand, i int) []Session {
	c := &g.c
	id := "s" + strconv.Itoa(i)
	start := time.Duration(0)
	if c.RampUp > 0 {
		start = time.Duration(r.Int64N(int64(c.RampUp)))
	}
	nturns := clampRound(c.Turns.Sample(r), 1, c.MaxTurns)
	ctx := &promptState{g: g, shared: 0, nshared: g.rootSys}
	ctx.extend(c.SystemTokens + clampRound(c.FirstPrompt.Sample(r), 1, c.MaxContextTokens-c.SystemTokens))
	ses := Session{ID: id, ParentTurn: -1, Start: start, SystemTokens: c.SystemTokens, Agent: "synthetic"}
	var children []Session
	var waitFor []string
	delay := time.Duration(0)
	for k := 0; k < nturns; k++ {
		out := clampRound(c.Output.Sample(r), 1, c.MaxOutput)
		t := Turn{Delay: delay, InputTokens: ctx.tokens, OutputTokens: out, HashIDs: ctx.hashIDs(), WaitFor: waitFor}
		waitFor = nil
		grow := out + clampRound(c.Append.Sample(r), 1, MaxTokens)
		last := k == nturns-1 || ctx.tokens+grow > c.MaxContextTokens
		switch {
		case last:
			t.FinishReason = FinishStop
		case r.Float64() < c.StopProb:
			t.FinishReason = FinishStop
			delay = g.gap(r, c.UserGap)
		default:
			t.FinishReason = FinishToolCalls
			delay = g.gap(r, c.ToolGap)
			if r.Float64() < c.SpawnProb {
				n := clampRound(c.FanOut.Sample(r), 1, c.MaxFanOut)
				for j := range n {
					sub := g.subagent(r, id+"/sub"+strconv.Itoa(k)+"."+strconv.Itoa(j), id, k)
					children = append(children, sub)
					waitFor = append(waitFor, sub.ID)
				}
			}
		}
		ses.Turns = append(ses.Turns, t)
		if last {
			break
		}
		ctx.extend(grow)
	}
	return append([]Session{ses}, children...)
}

func (g *synth) subagent(r *rand.Rand, id, parent string, parentTurn int) Session {
	c := &g.c
	ctx := &promptState{g: g, shared: g.rootSys, nshared: g.subSys}
	ctx.extend(c.SubagentSystemTokens + clampRound(c.SubagentPrompt.Sample(r), 1, c.MaxContextTokens-c.SubagentSystemTokens))
	nturns := clampRound(c.SubagentTurns.Sample(r), 1, c.MaxTurns)
	s := Session{ID: id, Parent: parent, ParentTurn: parentTurn, Start: c.SubagentLaunch,
		SystemTokens: c.SubagentSystemTokens, Agent: "synthetic-subagent"}
	delay := time.Duration(0)
	for k := 0; k < nturns; k++ {
		out := clampRound(c.Output.Sample(r), 1, c.MaxOutput)
		t := Turn{Delay: delay, InputTokens: ctx.tokens, OutputTokens: out, HashIDs: ctx.hashIDs()}
		grow := out + clampRound(c.Append.Sample(r), 1, MaxTokens)
		last := k == nturns-1 || ctx.tokens+grow > c.MaxContextTokens
		if last {
			t.FinishReason = FinishStop
			s.Turns = append(s.Turns, t)
			break
		}
		t.FinishReason = FinishToolCalls
		delay = g.gap(r, c.ToolGap)
		s.Turns = append(s.Turns, t)
		ctx.extend(grow)
	}
	return s
}

// FitClaudeCode measures Claude Code workloads (as ReadClaudeCode returns
// them) and returns the SyntheticConfig that reproduces them: log-normal
// fits of the first prompt beyond the system prompt, turns per session,
// per-turn appends (input growth beyond the previous output; shrinking
// prompts, i.e. compactions, are skipped), outputs, tool gaps (delays
// after tool calls, not after subagent joins), user gaps; the medians of
// the system prompt sizes; the stop and spawn probabilities per non-final
// root turn; fan-out per spawning turn; subagent turns and prompts. Size
// fields (Sessions, RampUp, caps) are left zero, i.e. default.
func FitClaudeCode(ws ...Workload) SyntheticConfig {
	var (
		first, turns, appends, outs, tool, user []float64
		subFirst, subTurns, fan                 []float64
		sys, subSys                             []float64
		nonFinal, stops, spawns                 int
	)
	for _, w := range ws {
		spawnedBy := map[string]map[int]int{}
		for _, s := range w.Sessions {
			if s.Parent != "" {
				if spawnedBy[s.Parent] == nil {
					spawnedBy[s.Parent] = map[int]int{}
				}
				spawnedBy[s.Parent][s.ParentTurn]++
			}
		}
		for _, s := range w.Sessions {
			if len(s.Turns) == 0 {
				continue
			}
			in0 := float64(s.Turns[0].InputTokens - s.SystemTokens)
			if s.Parent == "" {
				sys = append(sys, float64(s.SystemTokens))
				first = append(first, in0)
				turns = append(turns, float64(len(s.Turns)))
				for k := 0; k < len(s.Turns)-1; k++ {
					nonFinal++
					if s.Turns[k].FinishReason == FinishStop {
						stops++
					}
					if n := spawnedBy[s.ID][k]; n > 0 {
						spawns++
						fan = append(fan, float64(n))
					}
				}
			} else {
				subSys = append(subSys, float64(s.SystemTokens))
				subFirst = append(subFirst, in0)
				subTurns = append(subTurns, float64(len(s.Turns)))
			}
			for k, t := range s.Turns {
				outs = append(outs, float64(t.OutputTokens))
				if k == 0 {
					continue
				}
				prev := s.Turns[k-1]
				if a := t.InputTokens - prev.InputTokens - prev.OutputTokens; a > 0 {
					appends = append(appends, float64(a))
				}
				if len(t.WaitFor) > 0 {
					continue
				}
				g := max(t.Delay.Seconds(), 0.1) // think_time is rounded to whole seconds
				switch prev.FinishReason {
				case FinishToolCalls:
					tool = append(tool, g)
				case FinishStop:
					user = append(user, g)
				}
			}
		}
	}
	return SyntheticConfig{
		SystemTokens:         int(math.Round(median(sys))),
		FirstPrompt:          FitLogNormal(first),
		Turns:                FitLogNormal(turns),
		Append:               FitLogNormal(appends),
		Output:               FitLogNormal(outs),
		ToolGap:              FitLogNormal(tool),
		UserGap:              FitLogNormal(user),
		StopProb:             ratio(int64(stops), int64(nonFinal)),
		SpawnProb:            ratio(int64(spawns), int64(nonFinal)),
		FanOut:               FitLogNormal(fan),
		SubagentSystemTokens: int(math.Round(median(subSys))),
		SubagentPrompt:       FitLogNormal(subFirst),
		SubagentTurns:        FitLogNormal(subTurns),
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
