package trace

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// SpanKind is what a session is doing during a Span.
type SpanKind int

const (
	// SpanQueued: waiting for admission or a prefill slot.
	SpanQueued SpanKind = iota
	// SpanPrefill: the engine computes the prompt's KV (REASONING).
	SpanPrefill
	// SpanDecode: the engine generates the response (REASONING).
	SpanDecode
	// SpanTool: the harness runs tools or waits for subagents (ACTING).
	SpanTool
	// SpanPaused: admission control paused the program.
	SpanPaused
	// SpanThink: the user takes their turn (after a stop).
	SpanThink
)

var spanNames = [...]string{"queued", "prefill", "decode", "tool", "paused", "think"}

// String returns the kind's name, also the event category suffix.
func (k SpanKind) String() string {
	if k >= 0 && int(k) < len(spanNames) {
		return spanNames[k]
	}
	return "SpanKind(" + strconv.Itoa(int(k)) + ")"
}

// Span is one interval on a session's timeline.
type Span struct {
	// Track is the session (or subagent) ID; Parent its parent's, if any.
	Track, Parent string
	Kind          SpanKind
	// Name labels the slice; "" uses Kind's name.
	Name       string
	Start, End time.Duration
	// RequestID and Tokens are shown as the slice's arguments when set.
	RequestID string
	Tokens    int
}

// PlanSpans lays out w's nominal plan (see Schedule) as spans: prefill and
// decode of every turn, then the gap to the session's next turn as a tool
// span (after tool calls or while waiting for subagents; named after the
// tools when known) or a think span (after a stop).
func PlanSpans(w *Workload, p *Plan) []Span {
	var out []Span
	for i := range w.Sessions {
		s := &w.Sessions[i]
		for j := range s.Turns {
			t := &s.Turns[j]
			tt := p.Turns[i][j]
			rid := s.ID + "/" + strconv.Itoa(j)
			out = append(out,
				Span{Track: s.ID, Parent: s.Parent, Kind: SpanPrefill, Start: tt.Arrival, End: tt.FirstToken, RequestID: rid, Tokens: t.InputTokens - tt.CachedTokens},
				Span{Track: s.ID, Parent: s.Parent, Kind: SpanDecode, Start: tt.FirstToken, End: tt.End, RequestID: rid, Tokens: t.OutputTokens})
			if j+1 < len(s.Turns) && !w.OpenLoop {
				next := p.Turns[i][j+1].Arrival
				if next > tt.End {
					sp := Span{Track: s.ID, Parent: s.Parent, Kind: SpanTool, Start: tt.End, End: next}
					switch {
					case len(s.Turns[j+1].WaitFor) > 0:
						sp.Name = "subagents: " + strings.Join(s.Turns[j+1].WaitFor, ", ")
					case t.FinishReason == FinishStop:
						sp.Kind = SpanThink
					case len(t.ToolCalls) > 0:
						sp.Name = "tool: " + strings.Join(t.ToolCalls, ", ")
					}
					out = append(out, sp)
				}
			}
		}
	}
	return out
}

// RecordSpans lays out recorded request_end and tool_end records: for each
// request, queued (prefill_wait_time_ms), prefill (prefill_time_ms, or the
// rest of ttft_ms) and decode (to total_time_ms); a paused span of
// admission.paused_ms just before the request; and between a session's
// requests a tool span (named after the previous response's tool calls,
// as Dynamo's converter infers it) unless the session has explicit tool
// events, which are drawn instead. Times are relative to the earliest
// request.
func RecordSpans(recs []Record) []Span {
	var t0 uint64
	first := true
	for i := range recs {
		if r := &recs[i]; r.EventType == EventRequestEnd || r.EventType == "" {
			if rc := r.Request.RequestReceivedMs; rc > 0 && (first || rc < t0) {
				t0, first = rc, false
			}
		}
	}
	explicit := map[string]bool{}
	for i := range recs {
		if recs[i].Tool.ToolCallID != "" && recs[i].AgentContext.SessionID != "" {
			explicit[recs[i].AgentContext.SessionID] = true
		}
	}
	ms := func(v float64) time.Duration { return time.Duration(v * 1e6) }
	at := func(unixMs uint64) time.Duration { return time.Duration(int64(unixMs)-int64(t0)) * time.Millisecond }
	type last struct {
		end   time.Duration
		tools []string
	}
	prev := map[string]*last{}
	idx := make([]int, 0, len(recs))
	for i := range recs {
		idx = append(idx, i)
	}
	sort.SliceStable(idx, func(a, b int) bool {
		return recs[idx[a]].Request.RequestReceivedMs < recs[idx[b]].Request.RequestReceivedMs
	})
	var out []Span
	for _, i := range idx {
		r := &recs[i]
		track, parent := r.AgentContext.SessionID, r.AgentContext.ParentSessionID
		if track == "" {
			track = "request-only"
		}
		if r.Tool.ToolCallID != "" {
			tl := &r.Tool
			if tl.StartedAtUnixMs == 0 {
				continue
			}
			end := tl.EndedAtUnixMs
			if end == 0 {
				end = tl.StartedAtUnixMs + uint64(max(tl.DurationMs, 0))
			}
			out = append(out, Span{Track: track, Parent: parent, Kind: SpanTool, Name: "tool: " + tl.ToolClass,
				Start: at(tl.StartedAtUnixMs), End: at(end), RequestID: tl.ToolCallID})
			continue
		}
		if (r.EventType != EventRequestEnd && r.EventType != "") || r.Request.RequestID == "" {
			continue
		}
		q := &r.Request
		start := at(q.RequestReceivedMs)
		wait := ms(max(q.PrefillWaitTimeMs, 0))
		prefill := ms(max(q.PrefillTimeMs, 0))
		if prefill == 0 && q.TTFTMs > 0 {
			prefill = max(ms(q.TTFTMs)-wait, 0)
		}
		total := ms(max(q.TotalTimeMs, 0))
		if total == 0 && r.EventTimeUnixMs > q.RequestReceivedMs {
			total = at(r.EventTimeUnixMs) - start
		}
		paused := ms(max(q.Admission.PausedMs, 0))
		if p := prev[track]; p != nil {
			gapEnd := start - paused
			if !explicit[track] && gapEnd > p.end {
				sp := Span{Track: track, Parent: parent, Kind: SpanTool, Start: p.end, End: gapEnd}
				if len(p.tools) > 0 {
					sp.Name = "tool: " + strings.Join(p.tools, ", ")
				}
				out = append(out, sp)
			}
		}
		if paused > 0 {
			out = append(out, Span{Track: track, Parent: parent, Kind: SpanPaused, Start: start - paused, End: start, RequestID: q.RequestID})
		}
		cur := start
		if wait > 0 {
			out = append(out, Span{Track: track, Parent: parent, Kind: SpanQueued, Start: cur, End: cur + wait, RequestID: q.RequestID})
			cur += wait
		}
		pend := min(cur+prefill, start+max(total, wait+prefill))
		out = append(out, Span{Track: track, Parent: parent, Kind: SpanPrefill, Start: cur, End: pend, RequestID: q.RequestID, Tokens: int(q.InputTokens - min(q.CachedTokens, q.InputTokens))})
		end := max(start+total, pend)
		out = append(out, Span{Track: track, Parent: parent, Kind: SpanDecode, Start: pend, End: end, RequestID: q.RequestID, Tokens: int(q.OutputTokens)})
		l := &last{end: end}
		for _, c := range q.FinishReasonMetadata.ToolCalls {
			if c.Name != "" {
				l.tools = append(l.tools, c.Name)
			}
		}
		prev[track] = l
	}
	return out
}

// WriteChromeTrace writes spans as a Chrome Trace Event JSON file, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open: one process, one
// thread track per session or subagent (named after it, subagents after
// their parents), complete ("X") events with category "agentkv.KIND".
// Spans of one session that overlap go to extra lanes ("ID [lane 2]").
func WriteChromeTrace(w io.Writer, spans []Span) error {
	type lane struct {
		end time.Duration
		tid int
	}
	type track struct {
		name  string
		lanes []lane
	}
	tracks := map[string]*track{}
	var order []string
	sorted := make([]int, len(spans))
	for i := range sorted {
		sorted[i] = i
	}
	sort.SliceStable(sorted, func(a, b int) bool { return spans[sorted[a]].Start < spans[sorted[b]].Start })
	tid := 0
	tids := make([]int, len(spans))
	names := map[int]string{}
	for _, i := range sorted {
		sp := &spans[i]
		tr := tracks[sp.Track]
		if tr == nil {
			tr = &track{name: sp.Track}
			if sp.Parent != "" {
				tr.name = sp.Track + " (subagent of " + sp.Parent + ")"
			}
			tracks[sp.Track] = tr
			order = append(order, sp.Track)
		}
		placed := -1
		for k := range tr.lanes {
			if tr.lanes[k].end <= sp.Start {
				placed = k
				break
			}
		}
		if placed < 0 {
			tid++
			tr.lanes = append(tr.lanes, lane{tid: tid})
			placed = len(tr.lanes) - 1
			name := tr.name
			if placed > 0 {
				name += " [lane " + strconv.Itoa(placed+1) + "]"
			}
			names[tid] = name
		}
		tr.lanes[placed].end = max(tr.lanes[placed].end, sp.End)
		tids[i] = tr.lanes[placed].tid
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var b []byte
	b = append(b, `{"displayTimeUnit":"ms","traceEvents":[`...)
	b = append(b, `{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"agentkv"}}`...)
	for tid := 1; tid <= len(names); tid++ {
		b = append(b, `,{"name":"thread_name","ph":"M","pid":1,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `,"args":{"name":`...)
		b = jsonenc.AppendString(b, names[tid])
		b = append(b, `}},{"name":"thread_sort_index","ph":"M","pid":1,"tid":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `,"args":{"sort_index":`...)
		b = strconv.AppendInt(b, int64(tid), 10)
		b = append(b, `}}`...)
	}
	if _, err := bw.Write(b); err != nil {
		return fmt.Errorf("trace: chrome trace: %w", err)
	}
	for _, i := range sorted {
		sp := &spans[i]
		b = b[:0]
		name := sp.Name
		if name == "" {
			name = sp.Kind.String()
		}
		b = append(b, `,{"name":`...)
		b = jsonenc.AppendString(b, name)
		b = append(b, `,"cat":"agentkv.`...)
		b = append(b, sp.Kind.String()...)
		b = append(b, `","ph":"X","pid":1,"tid":`...)
		b = strconv.AppendInt(b, int64(tids[i]), 10)
		b = append(b, `,"ts":`...)
		b = appendMicros(b, sp.Start)
		b = append(b, `,"dur":`...)
		b = appendMicros(b, max(sp.End-sp.Start, 0))
		if sp.RequestID != "" || sp.Tokens != 0 {
			b = append(b, `,"args":{`...)
			n := len(b)
			if sp.RequestID != "" {
				b = append(b, `,"request_id":`...)
				b = jsonenc.AppendString(b, sp.RequestID)
			}
			if sp.Tokens != 0 {
				b = append(b, `,"tokens":`...)
				b = strconv.AppendInt(b, int64(sp.Tokens), 10)
			}
			b = append(b[:n], b[n+1:]...)
			b = append(b, '}')
		}
		b = append(b, '}')
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("trace: chrome trace: %w", err)
		}
	}
	if _, err := bw.WriteString("]}\n"); err != nil {
		return fmt.Errorf("trace: chrome trace: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trace: chrome trace: %w", err)
	}
	return nil
}

// appendMicros writes d in microseconds with nanosecond precision.
func appendMicros(b []byte, d time.Duration) []byte {
	if d%time.Microsecond == 0 {
		return strconv.AppendInt(b, int64(d/time.Microsecond), 10)
	}
	return strconv.AppendFloat(b, float64(d)/1e3, 'f', 3, 64)
}
