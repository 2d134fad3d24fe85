package trace

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// ErrInvalid reports a Workload that breaks the model's invariants (see
// Workload.Validate).
var ErrInvalid = errors.New("trace: invalid workload")

// Validate checks the invariants every consumer may rely on: session IDs
// are unique and non-empty; a Parent names another session and ParentTurn
// is -1 or one of the parent's turns; WaitFor names other sessions; token
// counts, delays, starts and arrivals are non-negative; HashIDs come with a
// positive BlockTokens; and the dependency graph (spawns and waits) has no
// cycle. The ParentTurn of a root session is ignored. Errors wrap
// ErrInvalid.
func (w *Workload) Validate() error {
	_, err := Schedule(w, TimingModel{})
	return err
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func (w *Workload) index() (map[string]int, error) {
	if w.BlockTokens < 0 || w.BlockTokens > MaxTokens {
		return nil, invalidf("BlockTokens %d out of range", w.BlockTokens)
	}
	idx := make(map[string]int, len(w.Sessions))
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.ID == "" {
			return nil, invalidf("session %d has an empty ID", i)
		}
		if _, dup := idx[s.ID]; dup {
			return nil, invalidf("duplicate session ID %q", s.ID)
		}
		idx[s.ID] = i
	}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.Start < 0 {
			return nil, invalidf("session %q: negative Start", s.ID)
		}
		if s.Parent != "" {
			p, ok := idx[s.Parent]
			if !ok || p == i {
				return nil, invalidf("session %q: parent %q is not another session", s.ID, s.Parent)
			}
			if s.ParentTurn < -1 || s.ParentTurn >= len(w.Sessions[p].Turns) {
				return nil, invalidf("session %q: ParentTurn %d out of range for parent %q with %d turns",
					s.ID, s.ParentTurn, s.Parent, len(w.Sessions[p].Turns))
			}
		}
		for j := range s.Turns {
			t := &s.Turns[j]
			if t.InputTokens < 0 || t.OutputTokens < 0 || t.InputTokens > MaxTokens || t.OutputTokens > MaxTokens {
				return nil, invalidf("session %q turn %d: token counts out of range", s.ID, j)
			}
			if t.Delay < 0 || t.Arrival < 0 {
				return nil, invalidf("session %q turn %d: negative Delay or Arrival", s.ID, j)
			}
			if len(t.HashIDs) > 0 && w.BlockTokens == 0 {
				return nil, invalidf("session %q turn %d: HashIDs without BlockTokens", s.ID, j)
			}
			for _, c := range t.WaitFor {
				if k, ok := idx[c]; !ok || k == i {
					return nil, invalidf("session %q turn %d: waits for %q, which is not another session", s.ID, j, c)
				}
			}
		}
	}
	// Parent chains must end at a root.
	state := make([]int8, len(w.Sessions)) // 0 new, 1 on the current walk, 2 reaches a root
	var chain []int
	for i := range w.Sessions {
		chain = chain[:0]
		j := i
		for state[j] == 0 {
			state[j] = 1
			chain = append(chain, j)
			parent := w.Sessions[j].Parent
			if parent == "" {
				break
			}
			j = idx[parent]
		}
		if state[j] == 1 && w.Sessions[j].Parent != "" {
			return nil, invalidf("session %q: its parent chain is a cycle", w.Sessions[j].ID)
		}
		for _, k := range chain {
			state[k] = 2
		}
	}
	return idx, nil
}

// TimingModel is the uncontended engine Schedule assumes: every turn is
// served alone, at fixed prefill and decode rates. Zero fields mean the
// defaults.
type TimingModel struct {
	// PrefillTokensPerSec is the prefill rate of the tokens not cached from
	// the session's previous turn. Default 20,000.
	PrefillTokensPerSec float64
	// DecodeTokensPerSec is the per-request decode rate. Default 50.
	DecodeTokensPerSec float64
}

func (m TimingModel) withDefaults() TimingModel {
	if !(m.PrefillTokensPerSec > 0) || math.IsInf(m.PrefillTokensPerSec, 0) {
		m.PrefillTokensPerSec = 20000
	}
	if !(m.DecodeTokensPerSec > 0) || math.IsInf(m.DecodeTokensPerSec, 0) {
		m.DecodeTokensPerSec = 50
	}
	return m
}

// TurnTiming is one turn in a Plan.
type TurnTiming struct {
	Arrival    time.Duration // when the request is sent
	FirstToken time.Duration // end of prefill
	End        time.Duration // end of decode
	// CachedTokens is the prefix reused from the session's previous turn
	// (whole blocks of equal HashIDs).
	CachedTokens int
}

// Plan is the nominal timeline of a workload: when every session starts
// and every turn arrives and ends on an uncontended engine. Indices follow
// Workload.Sessions and Session.Turns.
type Plan struct {
	Start    []time.Duration
	Turns    [][]TurnTiming
	Makespan time.Duration // the last turn's end
}

// Schedule computes the nominal timeline of w under m: turns of a
// closed-loop session arrive Delay after the previous turn ends (and after
// every session in WaitFor ends); a subagent starts Start after its
// parent's ParentTurn ends; open-loop turns arrive at Arrival. It validates
// w (see Validate) and reports dependency cycles.
func Schedule(w *Workload, m TimingModel) (*Plan, error) {
	idx, err := w.index()
	if err != nil {
		return nil, err
	}
	m = m.withDefaults()
	n := len(w.Sessions)
	p := &Plan{Start: make([]time.Duration, n), Turns: make([][]TurnTiming, n)}
	st := scheduler{w: w, m: m, idx: idx, p: p,
		done: make([]int, n), busy: make([]bool, n), started: make([]int8, n)}
	for i := range w.Sessions {
		p.Turns[i] = make([]TurnTiming, len(w.Sessions[i].Turns))
	}
	for i := range w.Sessions {
		if _, err := st.sessionEnd(i, 0); err != nil {
			return nil, err
		}
	}
	for i := range p.Turns {
		for _, t := range p.Turns[i] {
			p.Makespan = max(p.Makespan, t.End)
		}
	}
	return p, nil
}

type scheduler struct {
	w       *Workload
	m       TimingModel
	idx     map[string]int
	p       *Plan
	done    []int  // turns computed per session
	busy    []bool // session being computed
	started []int8 // 0 unknown, 1 computing, 2 known
}

const maxDepth = 10000

func (s *scheduler) start(i, depth int) (time.Duration, error) {
	if depth > maxDepth {
		return 0, invalidf("session nesting deeper than %d", maxDepth)
	}
	switch s.started[i] {
	case 2:
		return s.p.Start[i], nil
	case 1:
		return 0, invalidf("session %q: its parent chain is a cycle", s.w.Sessions[i].ID)
	}
	s.started[i] = 1
	ses := &s.w.Sessions[i]
	at := ses.Start
	if ses.Parent != "" && !s.w.OpenLoop {
		pi := s.idx[ses.Parent]
		var base time.Duration
		var err error
		if ses.ParentTurn < 0 {
			base, err = s.start(pi, depth+1)
		} else {
			base, err = s.turnEnd(pi, ses.ParentTurn, depth+1)
		}
		if err != nil {
			return 0, err
		}
		at = base + ses.Start
	}
	s.p.Start[i] = at
	s.started[i] = 2
	return at, nil
}

func (s *scheduler) sessionEnd(i, depth int) (time.Duration, error) {
	nt := len(s.w.Sessions[i].Turns)
	if nt == 0 {
		return s.start(i, depth)
	}
	return s.turnEnd(i, nt-1, depth)
}

func (s *scheduler) turnEnd(i, j, depth int) (time.Duration, error) {
	if depth > maxDepth {
		return 0, invalidf("session dependencies deeper than %d", maxDepth)
	}
	if j < s.done[i] {
		return s.p.Turns[i][j].End, nil
	}
	ses := &s.w.Sessions[i]
	if s.busy[i] {
		return 0, invalidf("session %q: dependency cycle through turn %d", ses.ID, j)
	}
	s.busy[i] = true
	defer func() { s.busy[i] = false }()
	for k := s.done[i]; k <= j; k++ {
		t := &ses.Turns[k]
		var at time.Duration
		if s.w.OpenLoop {
			at = t.Arrival
		} else {
			if k == 0 {
				st, err := s.start(i, depth+1)
				if err != nil {
					return 0, err
				}
				at = st
			} else {
				at = s.p.Turns[i][k-1].End
			}
			for _, c := range t.WaitFor {
				e, err := s.sessionEnd(s.idx[c], depth+1)
				if err != nil {
					return 0, err
				}
				at = max(at, e)
			}
			at += t.Delay
		}
		cached := 0
		if k > 0 && s.w.BlockTokens > 0 {
			cached = min(commonPrefix(ses.Turns[k-1].HashIDs, t.HashIDs)*s.w.BlockTokens, t.InputTokens)
		}
		prefill := secs(float64(t.InputTokens-cached) / s.m.PrefillTokensPerSec)
		decode := secs(float64(t.OutputTokens) / s.m.DecodeTokensPerSec)
		s.p.Turns[i][k] = TurnTiming{Arrival: at, FirstToken: at + prefill, End: at + prefill + decode, CachedTokens: cached}
		s.done[i] = k + 1
	}
	return s.p.Turns[i][j].End, nil
}

func secs(v float64) time.Duration { return time.Duration(math.Round(v * 1e9)) }

func commonPrefix(a, b []uint64) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// Ceiling is the prefix-cache hit ceiling of a workload: the hits an
// infinite cache shared by every request would get, counting a block as a
// hit only when it and every block before it in the prompt were seen
// before (prefix caching). Tokens count whole blocks, capped at the prompt.
type Ceiling struct {
	HitBlocks, TotalBlocks int64
	HitTokens, TotalTokens int64
}

// BlockRatio is HitBlocks / TotalBlocks (0 for an empty workload).
func (c Ceiling) BlockRatio() float64 { return ratio(c.HitBlocks, c.TotalBlocks) }

// TokenRatio is HitTokens / TotalTokens.
func (c Ceiling) TokenRatio() float64 { return ratio(c.HitTokens, c.TotalTokens) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// InfiniteCacheCeiling replays the turns of w in order of arrival in the
// plan (open-loop: Turn.Arrival) through a prefix tree of every block
// sequence seen so far. Hash ids are compared by position in a tree, so ids
// need not be prefix-chained.
func InfiniteCacheCeiling(w *Workload, p *Plan) Ceiling {
	type ref struct {
		s, t int
		at   time.Duration
	}
	var refs []ref
	for s := range w.Sessions {
		for t := range w.Sessions[s].Turns {
			refs = append(refs, ref{s, t, p.Turns[s][t].Arrival})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].at < refs[j].at })
	type edge struct{ parent, id uint64 }
	tree := make(map[edge]uint64)
	var c Ceiling
	for _, r := range refs {
		t := &w.Sessions[r.s].Turns[r.t]
		node := uint64(0)
		hit := 0
		matching := true
		for _, id := range t.HashIDs {
			e := edge{node, id}
			next, ok := tree[e]
			if !ok {
				next = uint64(len(tree) + 1)
				tree[e] = next
				matching = false
			} else if matching {
				hit++
			}
			node = next
		}
		c.HitBlocks += int64(hit)
		c.TotalBlocks += int64(len(t.HashIDs))
		c.HitTokens += int64(min(hit*w.BlockTokens, t.InputTokens))
		c.TotalTokens += int64(t.InputTokens)
	}
	return c
}
