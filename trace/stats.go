package trace

import (
	"slices"
	"time"
)

// Dist summarises a sample of durations (nearest-rank percentiles).
type Dist struct {
	N                  int
	Mean               time.Duration
	P50, P90, P99, Max time.Duration
}

// NewDist summarises xs; it sorts xs in place.
func NewDist(xs []time.Duration) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	var sum float64
	for _, x := range xs {
		sum += float64(x)
	}
	return Dist{
		N:    len(xs),
		Mean: time.Duration(sum / float64(len(xs))),
		P50:  quantile(xs, 0.50),
		P90:  quantile(xs, 0.90),
		P99:  quantile(xs, 0.99),
		Max:  xs[len(xs)-1],
	}
}

// quantile returns the nearest-rank q-quantile of sorted xs.
func quantile(xs []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(xs))+0.999999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// Summary is what `agentkv trace inspect` prints about a workload.
type Summary struct {
	Name         string
	BlockTokens  int
	OpenLoop     bool
	Sessions     int // root sessions
	Subagents    int // child sessions
	Requests     int
	InputTokens  int64
	OutputTokens int64
	// Ceiling is the infinite-cache prefix hit ceiling (InfiniteCacheCeiling).
	Ceiling Ceiling
	// ToolGaps are the delays after a turn that finished with tool calls;
	// UserGaps after a turn that handed control back (FinishStop); OtherGaps
	// after turns whose finish reason is unknown. A turn waiting for
	// subagents counts its residual delay.
	ToolGaps, UserGaps, OtherGaps Dist
	// SubagentsMax is the most subagents under one root session (all
	// depths); FanOutMax the most spawned by one turn.
	SubagentsMax, FanOutMax int
	// RootsWithSubagents counts root sessions that spawned any.
	RootsWithSubagents int
	// Span is the time from the first arrival to the last turn's end in the
	// nominal plan (open-loop: to the last arrival's end).
	Span time.Duration
}

// AvgInput is the mean prompt length in tokens.
func (s Summary) AvgInput() float64 { return avg(s.InputTokens, s.Requests) }

// AvgOutput is the mean completion length in tokens.
func (s Summary) AvgOutput() float64 { return avg(s.OutputTokens, s.Requests) }

func avg(a int64, n int) float64 {
	if n == 0 {
		return 0
	}
	return float64(a) / float64(n)
}

// Summarize computes w's Summary under the default TimingModel.
func Summarize(w *Workload) (Summary, error) {
	p, err := Schedule(w, TimingModel{})
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Name: w.Name, BlockTokens: w.BlockTokens, OpenLoop: w.OpenLoop}
	var tool, user, other []time.Duration
	parentOf := make(map[string]string, len(w.Sessions))
	for i := range w.Sessions {
		parentOf[w.Sessions[i].ID] = w.Sessions[i].Parent
	}
	// rootOf walks up to the root once per chain and remembers it for every
	// session on the way, so deep parent chains cost linear time (Schedule
	// rejected cycles).
	roots := make(map[string]string, len(w.Sessions))
	var walk []string
	rootOf := func(id string) string {
		walk = walk[:0]
		for parentOf[id] != "" {
			if r, ok := roots[id]; ok {
				id = r
				break
			}
			walk = append(walk, id)
			id = parentOf[id]
		}
		for _, k := range walk {
			roots[k] = id
		}
		return id
	}
	subs := map[string]int{}
	spawned := map[[2]any]int{}
	first := time.Duration(-1)
	for i := range w.Sessions {
		ses := &w.Sessions[i]
		if ses.Parent == "" {
			s.Sessions++
		} else {
			s.Subagents++
			subs[rootOf(ses.Parent)]++
			k := [2]any{ses.Parent, ses.ParentTurn}
			spawned[k]++
			s.FanOutMax = max(s.FanOutMax, spawned[k])
		}
		for j := range ses.Turns {
			t := &ses.Turns[j]
			s.Requests++
			s.InputTokens += int64(t.InputTokens)
			s.OutputTokens += int64(t.OutputTokens)
			if at := p.Turns[i][j].Arrival; first < 0 || at < first {
				first = at
			}
			if j == 0 || w.OpenLoop {
				continue
			}
			switch ses.Turns[j-1].FinishReason {
			case FinishToolCalls:
				tool = append(tool, t.Delay)
			case FinishStop:
				user = append(user, t.Delay)
			default:
				other = append(other, t.Delay)
			}
		}
	}
	for _, n := range subs {
		s.SubagentsMax = max(s.SubagentsMax, n)
	}
	s.RootsWithSubagents = len(subs)
	s.ToolGaps, s.UserGaps, s.OtherGaps = NewDist(tool), NewDist(user), NewDist(other)
	s.Ceiling = InfiniteCacheCeiling(w, p)
	if first >= 0 {
		s.Span = p.Makespan - first
	}
	return s, nil
}
