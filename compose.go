package agentkv

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
	"github.com/agentkv/agentkv/trace"
)

// This file wires the optional packages into the request path: session
// lineage (radix), KV hints (kvhint), the shared pool (sharedpool) and
// request traces (trace).

// TraceSink receives a request_end record for every finished request.
// trace.Writer implements it; Write must not block (the Writer drops and
// counts when its queue is full).
type TraceSink interface {
	Write(r *trace.Record) error
}

// actingSession is a session between turns, for tick-time hint policies.
type actingSession struct {
	worker flashindex.Worker
	since  time.Time
}

// updateLineage records the session's context chain after routing.
func (r *Router) updateLineage(ac session.AgentContext, seq []uint64) {
	if !ac.Valid() || len(seq) == 0 {
		return
	}
	if err := r.tree.UpdateFromMatch(ac.SessionID, seq); err != nil {
		r.log.Debug("agentkv: lineage not updated", "session", ac.SessionID, "err", err)
	}
}

// sessionView builds the kvhint view of a session from the lineage tree.
// SharedRefs are filled per radix segment when hints need them.
// It also returns the session's whole chain (Shared then Unique, one slice).
func (r *Router) sessionView(id, parent string, w flashindex.Worker) (kvhint.Session, []uint64) {
	s := kvhint.Session{ID: id, Parent: parent, Worker: kvhint.WorkerID{ID: w.ID, DPRank: w.DPRank}}
	chain, err := r.tree.Lineage(id, nil)
	if err != nil || len(chain) == 0 {
		return s, nil
	}
	split, err := r.tree.Split(id)
	if err != nil {
		return s, nil
	}
	s.Shared, s.Unique = chain[:split.Shared], chain[split.Shared:]
	if split.Shared > 0 {
		segs, err := r.tree.Path(id, nil)
		if err == nil {
			s.SharedRefs = make([]int32, 0, split.Shared)
			var names []string
			for _, seg := range segs {
				if len(s.SharedRefs) >= split.Shared {
					break
				}
				names, _ = r.tree.Sessions(seg.First, names[:0])
				for i := 0; i < seg.Len && len(s.SharedRefs) < split.Shared; i++ {
					s.SharedRefs = append(s.SharedRefs, int32(len(names)))
				}
			}
		}
	}
	return s, chain
}

// evaluateHints runs the hint policies and delivers the hints, outside the
// router's lock. Sinks must not block (see HintReceiver).
func (r *Router) evaluateHints(in *kvhint.Input) int {
	if len(r.cfg.Hints) == 0 {
		return 0
	}
	var hints []kvhint.Hint
	for _, p := range r.cfg.Hints {
		hints = p.Evaluate(hints, in)
	}
	if len(hints) == 0 {
		return 0
	}
	out := r.batcher.Batch(nil, hints)
	sent := 0
	for i := range out {
		key := flashindex.Worker{ID: out[i].Worker.ID, DPRank: out[i].Worker.DPRank}
		r.mu.Lock()
		var sink kvhint.Sink
		if idx, ok := r.byKey[key]; ok {
			if hr, ok := r.workers[idx].adapter.(HintReceiver); ok {
				sink = hr.HintSink()
			}
		}
		r.mu.Unlock()
		if sink == nil {
			continue
		}
		env := out[i].Envelope
		if err := sink.Send(context.Background(), &env); err != nil {
			r.log.Debug("agentkv: hint not delivered", "worker", key.String(), "err", err)
			continue
		}
		sent += len(env.Actions)
	}
	if r.metrics != nil {
		r.metrics.hints.Add(float64(sent))
	}
	return sent
}

// hintsOnRoute evaluates EventAdmit or EventResume for a routed request.
func (r *Router) hintsOnRoute(d *Decision, seq []uint64, matches []flashindex.Match) {
	if len(r.cfg.Hints) == 0 || !d.agent.Valid() {
		return
	}
	in := kvhint.Input{Event: kvhint.EventAdmit, Worker: kvhint.WorkerID{ID: d.Worker.ID, DPRank: d.Worker.DPRank}, Prefix: seq}
	if d.Waited > 0 {
		in.Event = kvhint.EventResume
	}
	in.Session, _ = r.sessionView(d.agent.SessionID, d.agent.ParentSessionID, d.Worker)
	in.Cached = r.residencies(in.Cached, matches)
	d.Hints = r.evaluateHints(&in)
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
		in := kvhint.Input{Event: kvhint.EventTick, Worker: kvhint.WorkerID{ID: it.a.worker.ID, DPRank: it.a.worker.DPRank}}
		in.Session, in.Prefix = r.sessionView(it.id, info.Parent, it.a.worker)
		in.Session.Phase = kvhint.PhaseActing
		in.Session.Acting = now.Sub(it.a.since)
		in.Cached = r.residencies(in.Cached, r.index.FindMatches(in.Prefix, nil))
		r.evaluateHints(&in)
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
	in := kvhint.Input{Event: kvhint.EventFinish, Worker: kvhint.WorkerID{ID: a.worker.ID, DPRank: a.worker.DPRank}}
	in.Session, in.Prefix = r.sessionView(id, parent, a.worker)
	in.Session.Finished = true
	in.Cached = r.residencies(nil, r.index.FindMatches(in.Prefix, nil))
	r.evaluateHints(&in)
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
		res := kvhint.Residency{Worker: kvhint.WorkerID{ID: m.Worker.ID, DPRank: m.Worker.DPRank},
			Device: m.Device, Host: m.Host, Disk: m.Disk}
		if i, ok := r.byKey[m.Worker]; ok {
			res.Endpoint = r.workers[i].info.Endpoint
		}
		dst = append(dst, res)
	}
	return dst
}

// sharedHits queries the shared pool for the request's pages and returns
// the hits (nil when there is no pool, no tokens, no layout yet, or a
// layout whose page size is not the router's block size: its pages would
// never line up with the blocks, so that is logged rather than credited).
func (r *Router) sharedHits(tokens []uint32) *sharedpool.Hits {
	if r.cfg.SharedPool == nil || len(tokens) == 0 {
		return nil
	}
	l, err := r.cfg.SharedPool.Layout()
	if err == nil {
		err = l.CheckPageSize(r.cfg.BlockSize)
	}
	if err != nil {
		r.log.Debug("agentkv: no shared-pool credit", "err", err)
		return nil
	}
	h, err := r.cfg.SharedPool.Query(sharedpool.PageHashes(tokens, l.PageSize, l.Eagle, nil))
	if err != nil {
		r.log.Debug("agentkv: shared pool query failed", "err", err)
		return nil
	}
	return &h
}

// sharedBlocks is the shared-pool credit of a worker: pages (one per block)
// beyond everything the worker holds on device, host and disk.
func sharedBlocks(h *sharedpool.Hits, m flashindex.Match) int {
	if h == nil {
		return 0
	}
	return h.SharedBeyondTiers(m.Device, m.Host, m.Disk)
}

// traceRecord writes the request_end record of a finished request.
func (r *Router) traceRecord(d *Decision, u Usage, now time.Time) {
	if r.cfg.Trace == nil {
		return
	}
	rec := trace.Record{
		Schema:          "dynamo.request.trace.v1",
		EventType:       "request_end",
		EventTimeUnixMs: uint64(now.UnixMilli()),
		EventSource:     "agentkv",
		AgentContext: trace.AgentContext{SessionID: d.agent.SessionID, ParentSessionID: d.agent.ParentSessionID,
			SessionFinal: d.agent.Final},
		Request: trace.Request{
			RequestID:         d.RequestID,
			InputTokens:       uint64(d.prompt),
			OutputTokens:      uint64(u.CompletionTokens),
			CachedTokens:      uint64(u.CachedTokens),
			RequestReceivedMs: uint64(d.received.UnixMilli()),
			TotalTimeMs:       float64(now.Sub(d.received)) / float64(time.Millisecond),
			Worker: trace.WorkerInfo{PrefillWorkerID: d.Worker.ID, PrefillDPRank: d.Worker.DPRank,
				DecodeWorkerID: d.Worker.ID, DecodeDPRank: d.Worker.DPRank},
			FinishReasonMetadata: trace.FinishMetadata{FinishReason: u.FinishReason},
			Replay: trace.Replay{TraceBlockSize: r.cfg.BlockSize, InputLength: d.prompt,
				InputSequenceHashes: d.replayHashes},
		},
	}
	if !d.firstToken.IsZero() {
		rec.Request.TTFTMs = float64(d.firstToken.Sub(d.received)) / float64(time.Millisecond)
	}
	if d.prompt > 0 {
		rec.Request.KVHitRate = float64(u.CachedTokens) / float64(d.prompt)
	}
	for i, name := range u.ToolCalls {
		rec.Request.FinishReasonMetadata.ToolCalls = append(rec.Request.FinishReasonMetadata.ToolCalls,
			trace.ToolCallMeta{ToolCallIndex: uint32(i), Name: name})
	}
	if d.Waited > 0 {
		rec.Request.Admission = trace.Admission{QueuedMs: float64(d.Waited) / float64(time.Millisecond), Resumed: true}
	}
	if err := r.cfg.Trace.Write(&rec); err != nil {
		r.log.Debug("agentkv: trace record dropped", "err", err)
	}
}

// replayHashes returns the Dynamo replay hashes: the prompt's sequence
// hashes plus, when the prompt ends in a partial block and its tokens are
// known, the partial block's hash chained on.
func replayHashes(h *flashindex.Hasher, seq []uint64, tokens []uint32) []uint64 {
	out := append([]uint64(nil), seq...)
	if h == nil || len(tokens) == 0 {
		return out
	}
	bs := h.BlockSize()
	if tail := tokens[len(tokens)/bs*bs:]; len(tail) > 0 {
		l := h.LocalHash(tail)
		if len(out) > 0 {
			l = flashindex.NextSequenceHash(out[len(out)-1], l)
		}
		out = append(out, l)
	}
	return out
}
