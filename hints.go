package agentkv

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// This file evaluates the KV hint policies (kvhint) on route, tick and
// session end, and delivers their hints to workers that take them.

// actingSession is a session between turns, for tick-time hint policies,
// and what its last turn was routed with (previousSource).
type actingSession struct {
	worker flashindex.Worker
	since  time.Time
	// chainLen and chainLast are the last turn's prompt chain: how many
	// blocks, and the last one's sequence hash (0 blocks: unknown).
	chainLen  int
	chainLast uint64
	// wholeAt is when the approximate index last recorded the whole chain
	// on worker (zero: it did not).
	wholeAt time.Time
}

// hintScratch is a hint evaluation's reusable state: its Input (with the
// residencies' list and the shared blocks' reference counts) and
// evaluateHints' lists. What the sinks keep (the
// envelopes, their Actions and Sources) is the Batcher's (it copies the
// Sources policies build in srcs), and no hint aliases the Input's Cached
// list; everything is cleared before reuse so it retains nothing.
type hintScratch struct {
	in     kvhint.Input
	cached []kvhint.Residency
	refs   []int32 // in.Session.SharedRefs
	hints  []kvhint.Hint
	out    []kvhint.Outbound
	srcs   []kvhint.Source // in.SourceBuf
}

var hintScratchPool = sync.Pool{New: func() any { return new(hintScratch) }}

// getHintScratch returns a cleared hintScratch whose Input has event ev,
// worker w and the router's renewals.
func (r *Router) getHintScratch(ev kvhint.Event, w flashindex.Worker) *hintScratch {
	sc := hintScratchPool.Get().(*hintScratch)
	sc.in.Event, sc.in.Worker, sc.in.Renewals = ev, hintWorker(w), r.renewals
	sc.in.SourceBuf = &sc.srcs
	return sc
}

// refsIf is where sessionView keeps reference counts when they are
// needed, else nil.
func (sc *hintScratch) refsIf(need bool) *[]int32 {
	if !need {
		return nil
	}
	return &sc.refs
}

func (sc *hintScratch) put() {
	clear(sc.hints)
	clear(sc.out)
	clear(sc.cached)
	clear(sc.srcs)
	sc.in = kvhint.Input{}
	sc.hints, sc.out, sc.cached, sc.refs, sc.srcs = sc.hints[:0], sc.out[:0], sc.cached[:0], sc.refs[:0], sc.srcs[:0]
	hintScratchPool.Put(sc)
}

// evaluateHints runs the hint policies on sc.in and delivers the hints,
// outside the router's lock, then returns sc to its pool. Sinks must not
// block (see HintReceiver).
func (r *Router) evaluateHints(sc *hintScratch) int {
	defer sc.put()
	in := &sc.in
	if len(r.cfg.Hints) == 0 {
		return 0
	}
	hints := sc.hints[:0]
	for _, p := range r.cfg.Hints {
		hints = p.Evaluate(hints, in)
	}
	sc.hints = hints
	if len(hints) == 0 {
		return 0
	}
	out := r.batcher.Batch(sc.out[:0], hints)
	sc.out = out
	sent := 0
	for i := range out {
		key := indexWorkerOfHint(out[i].Worker)
		r.mu.Lock()
		var sink kvhint.Sink
		if idx, ok := r.byKey[key]; ok {
			sink = r.workers[idx].hints
		}
		r.mu.Unlock()
		if sink == nil {
			continue
		}
		env := out[i].Envelope
		n := len(env.Actions) // the sink may hand env on (and its reader recycle it)
		if err := sink.Send(context.Background(), env); err != nil {
			r.log.Debug("agentkv: hint not delivered", "worker", key.String(), "err", err)
			continue
		}
		sent += n
	}
	if r.metrics != nil {
		r.metrics.hints.Add(float64(sent))
	}
	return sent
}

// hintsOnRoute evaluates EventAdmit or EventResume for a routed request.
// It builds only the parts of the Input the policies read (kvhint.Needs);
// the session's chain is seq itself when the lineage tree took it
// (recorded), not a copy read back from the tree.
func (r *Router) hintsOnRoute(d *Decision, rt *routing, matches []flashindex.Match, recorded bool) {
	if len(r.cfg.Hints) == 0 || !d.agent.Valid() {
		return
	}
	start := time.Since(monoEpoch)
	seq := rt.seq
	ev := kvhint.EventAdmit
	if d.Waited > 0 {
		ev = kvhint.EventResume
	}
	sc := r.getHintScratch(ev, d.Worker)
	in := &sc.in
	in.Prefix, in.Now = seq, rt.start
	need := r.needs[ev]
	in.Session = kvhint.Session{ID: d.agent.SessionID, Parent: d.agent.ParentSessionID, Worker: in.Worker}
	if need&kvhint.NeedChain != 0 {
		var chain []uint64
		if recorded {
			chain = seq
		}
		in.Session, _ = r.sessionView(d.agent.SessionID, d.agent.ParentSessionID, d.Worker, chain, sc.refsIf(need&kvhint.NeedRefs != 0))
	}
	if need&kvhint.NeedCached != 0 {
		in.Cached = r.residencies(sc.cached[:0], matches)
		in.Cached = r.previousSource(in.Cached, rt.prev, d.Worker, seq, rt.start)
		sc.cached = in.Cached
	}
	d.Hints = r.evaluateHints(sc)
	d.HintsTook = time.Since(monoEpoch) - start
}

// hintSink is w's hint sink: nil when it takes no hints.
func hintSink(w Worker) kvhint.Sink {
	if hr, ok := w.(HintReceiver); ok {
		return hr.HintSink()
	}
	return nil
}

// monoEpoch is what hintsOnRoute times from: time.Since of it reads the
// monotonic clock once, where time.Now also reads the wall clock.
var monoEpoch = time.Now()

// previousSourceWindow is how long after a turn previousSource names its
// worker without the index's word: well beyond the KV events' lag.
const previousSourceWindow = time.Second

// previousSource adds to cached what the router knows without the index:
// the session's previous turn ran on prev.worker with the prompt chain
// prev describes, so that worker holds the blocks this turn shares with
// it (on device, unless evicted since), even when its KV events have not
// reached the index yet (they follow the turn by a few milliseconds, and
// an agent's quick next turn comes sooner). Nothing changes when this turn
// runs on the same worker, when its chain does not extend the previous
// one, when the index already shows as much, or when the previous turn
// ended more than previousSourceWindow ago (the index has heard its
// events by then, evictions included, and is trusted).
func (r *Router) previousSource(cached []kvhint.Residency, prev actingSession, to flashindex.Worker, seq []uint64, now time.Time) []kvhint.Residency {
	n := prev.chainLen
	if n == 0 || prev.worker == to || n > len(seq) || seq[n-1] != prev.chainLast || now.Sub(prev.since) > previousSourceWindow {
		return cached
	}
	w := hintWorker(prev.worker)
	for i := range cached {
		if c := &cached[i]; c.Worker == w {
			if c.Device+c.Host < n {
				c.Device = n - c.Host
			}
			return cached
		}
	}
	r.mu.Lock()
	i, ok := r.byKey[prev.worker]
	ep := ""
	if ok {
		ep = r.workers[i].info.Endpoint
	}
	r.mu.Unlock()
	if !ok || ep == "" {
		return cached
	}
	return append(cached, kvhint.Residency{Worker: w, Device: n, Endpoint: ep})
}

// hintsOnTick evaluates EventTick for every session between turns.
func (r *Router) hintsOnTick(now time.Time) {
	if len(r.cfg.Hints) == 0 {
		return
	}
	r.mu.Lock()
	type item struct {
		id string
		a  actingSession
	}
	items := make([]item, 0, len(r.acting))
	for id, a := range r.acting {
		items = append(items, item{id, a})
	}
	r.mu.Unlock()
	// Sessions in a fixed order, so the hints sent are reproducible.
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.id, b.id) })
	for _, it := range items {
		info, ok := r.table.Get(it.id)
		if !ok {
			continue
		}
		sc := r.getHintScratch(kvhint.EventTick, it.a.worker)
		in := &sc.in
		in.Session, in.Prefix = r.sessionView(it.id, info.Parent, it.a.worker, nil, &sc.refs)
		in.Session.Phase = kvhint.PhaseActing
		in.Session.Acting = now.Sub(it.a.since)
		in.Now = now
		in.Cached = r.residencies(sc.cached[:0], r.index.FindMatches(in.Prefix, nil))
		sc.cached = in.Cached
		r.evaluateHints(sc)
	}
}

// hintsOnFinish evaluates EventFinish for a session that left the table,
// before its lineage is released.
func (r *Router) hintsOnFinish(id, parent string) {
	if len(r.cfg.Hints) == 0 {
		return
	}
	r.mu.Lock()
	a := r.acting[id]
	r.mu.Unlock()
	sc := r.getHintScratch(kvhint.EventFinish, a.worker)
	in := &sc.in
	in.Session, in.Prefix = r.sessionView(id, parent, a.worker, nil, &sc.refs)
	in.Session.Finished = true
	in.Now = r.cfg.Now()
	in.Cached = r.residencies(sc.cached[:0], r.index.FindMatches(in.Prefix, nil))
	sc.cached = in.Cached
	r.evaluateHints(sc)
}

// residencies converts index matches to kvhint residencies, with each
// worker's control endpoint.
func (r *Router) residencies(dst []kvhint.Residency, matches []flashindex.Match) []kvhint.Residency {
	if len(matches) == 0 {
		return dst
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range matches {
		res := kvhint.Residency{Worker: hintWorker(m.Worker),
			Device: m.Device, Host: m.Host, Disk: m.Disk}
		if i, ok := r.byKey[m.Worker]; ok {
			res.Endpoint = r.workers[i].info.Endpoint
		}
		dst = append(dst, res)
	}
	return dst
}
