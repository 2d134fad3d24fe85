package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentkv/agentkv/internal/loadgen"
	"github.com/agentkv/agentkv/trace"
)

// batchTimeline records a replay --batch run's own timeline: when each
// program's requests were sent and ended, from the run's start, so the
// batch's makespan and program completion come from what the run did
// (scaled by --speed into trace time), comparable with simulate --batch.
// It is safe for concurrent use.
type batchTimeline struct {
	prefix string
	root   map[string]string // trace session id → its program's root

	mu sync.Mutex // guards the fields below
	// end and firstSent per program root: its last reply's end and its
	// first turn's send, both from the start of the run.
	end       map[string]time.Duration
	firstSent map[string]time.Duration
	failed    int
}

func newBatchTimeline(w *trace.Workload, prefix string) *batchTimeline {
	bt := &batchTimeline{prefix: prefix, root: map[string]string{}, end: map[string]time.Duration{},
		firstSent: map[string]time.Duration{}}
	parent := map[string]string{}
	for _, s := range w.Sessions {
		parent[s.ID] = s.Parent
	}
	for _, s := range w.Sessions {
		r := s.ID
		for hops := 0; parent[r] != "" && hops <= len(w.Sessions); hops++ {
			r = parent[r]
		}
		bt.root[s.ID] = r
	}
	return bt
}

// wrap returns an OnResult that records r and then calls next (if set).
func (bt *batchTimeline) wrap(next func(*loadgen.Result)) func(*loadgen.Result) {
	return func(r *loadgen.Result) {
		bt.add(r)
		if next != nil {
			next(r)
		}
	}
}

func (bt *batchTimeline) add(r *loadgen.Result) {
	root, ok := bt.root[strings.TrimPrefix(r.Session, bt.prefix)]
	if !ok {
		return
	}
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if !r.OK() {
		bt.failed++
	}
	bt.end[root] = max(bt.end[root], r.Offset+r.E2E)
	if r.Turn == 0 && r.Parent == "" {
		bt.firstSent[root] = r.Offset
	}
}

// batchStats is a batch's timeline in trace time (wall × speed).
type batchStats struct {
	Programs       int
	Makespan       time.Duration // the run's start to the last reply's end
	LastFirstSent  time.Duration // the latest first-turn send
	CompletionP50  time.Duration
	CompletionP99  time.Duration
	FailedRequests int
}

func (bt *batchTimeline) stats(speed float64) batchStats {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * speed) }
	st := batchStats{Programs: len(bt.end), FailedRequests: bt.failed}
	var compl []time.Duration
	for _, e := range bt.end {
		st.Makespan = max(st.Makespan, scale(e))
		compl = append(compl, scale(e))
	}
	for _, f := range bt.firstSent {
		st.LastFirstSent = max(st.LastFirstSent, scale(f))
	}
	if len(compl) > 0 {
		slices.Sort(compl)
		rank := func(p int) time.Duration { return compl[max((p*len(compl)+99)/100, 1)-1] }
		st.CompletionP50, st.CompletionP99 = rank(50), rank(99)
	}
	return st
}

func (bt *batchTimeline) writeText(w io.Writer, speed float64) {
	st := bt.stats(speed)
	fmt.Fprintf(w, "batch       %d programs offered at once (the last first turn sent at %s): makespan %s, completion p50 %s, p99 %s (trace time: wall × %g)\n",
		st.Programs, dur(st.LastFirstSent), dur(st.Makespan), dur(st.CompletionP50), dur(st.CompletionP99), speed)
}
