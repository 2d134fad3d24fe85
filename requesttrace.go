package agentkv

import (
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/trace"
)

// This file writes a request_end trace record (package trace) for every
// finished request.

// TraceSink receives a request_end record for every finished request.
// trace.Writer implements it; Write must not block (the Writer drops and
// counts when its queue is full).
type TraceSink interface {
	Write(r *trace.Record) error
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
			API:               u.API,
			ErrorKind:         u.ErrorKind,
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
