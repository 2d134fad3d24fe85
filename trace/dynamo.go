package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// ReadRecords streams the records of a dynamo.request.trace.v1 JSONL file
// (ours or Dynamo's, plain or in Dynamo's {"event": ...} wrapper) to fn,
// with their 1-based line numbers. Blank lines are skipped. The Record is
// reused between calls: copy it to keep it (its slices are fresh per
// line). fn's error stops the read and is returned as is.
func ReadRecords(r io.Reader, name string, fn func(line int, rec *Record) error) error {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 1<<20)
	}
	lr := lineReader{r: br}
	var rec Record
	for {
		line, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &ParseError{File: name, Line: lr.line, Err: err}
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		rec = Record{}
		if err := json.Unmarshal(line, &rec); err != nil {
			return &ParseError{File: name, Line: lr.line, Err: jsonErr(err)}
		}
		if rec.Schema != SchemaV1 {
			return &ParseError{File: name, Line: lr.line, Path: "schema", Err: fmt.Errorf("%w: schema %q, want %q", ErrFormat, rec.Schema, SchemaV1)}
		}
		if err := fn(lr.line, &rec); err != nil {
			return err
		}
	}
}

// ReadDynamo reads one request trace into a Workload; see DynamoWorkload.
func ReadDynamo(r io.Reader, name string) (Workload, error) {
	var b dynBuilder
	err := ReadRecords(r, name, func(line int, rec *Record) error {
		return b.add(name, line, rec)
	})
	if err != nil {
		return Workload{}, err
	}
	return b.build(name)
}

// ReadDynamoFiles reads the shards of one capture (plain, gzip or zstd)
// into one Workload: sessions may span shards, and hashes are global.
func ReadDynamoFiles(paths ...string) (Workload, error) {
	var b dynBuilder
	for _, p := range paths {
		if err := b.readFile(p); err != nil {
			return Workload{}, err
		}
	}
	name := "dynamo"
	if len(paths) == 1 {
		name = filepath.Base(paths[0])
	}
	return b.build(name)
}

func (b *dynBuilder) readFile(path string) error {
	name := filepath.Base(path)
	return readRecordFile(path, func(line int, rec *Record) error { return b.add(name, line, rec) })
}

// DynamoWorkload turns request_end records into a Workload, following
// Dynamo's agentic lowering: requests sharing agent_context.session_id form
// a session in order of request_received_ms; a session with
// parent_session_id is a subagent spawned by the parent's last request that
// ended before the child's first arrived (ParentTurn; -1 if none) and
// joined by the parent's first request that arrived after the child's last
// ended (WaitFor). Delay is the gap from the latest dependency's end
// (event_time_unix_ms, or received + total_time_ms) to the arrival.
// Requests without agent_context become single-turn sessions
// "request:ID"; the workload is open-loop when no record has a context.
// Turn.Arrival is always the arrival from the earliest request. HashIDs are
// replay.input_sequence_hashes, BlockTokens replay.trace_block_size, which
// must agree across records (ErrBlockSize). Tool calls and finish reasons
// come from finish_reason_metadata. Tool and payload records are ignored.
// Errors name the record by its index + 1 as the line.
func DynamoWorkload(name string, recs []Record) (Workload, error) {
	var b dynBuilder
	for i := range recs {
		if recs[i].Schema != "" && recs[i].Schema != SchemaV1 {
			return Workload{}, &ParseError{File: name, Line: i + 1, Path: "schema", Err: fmt.Errorf("%w: schema %q", ErrFormat, recs[i].Schema)}
		}
		if err := b.add(name, i+1, &recs[i]); err != nil {
			return Workload{}, err
		}
	}
	return b.build(name)
}

type dynReq struct {
	session, parent string
	received, end   uint64 // unix ms
	turn            Turn
}

type dynBuilder struct {
	reqs       []dynReq
	bs         int
	bsFile     string
	bsLine     int
	hasContext bool
}

func (b *dynBuilder) add(file string, line int, r *Record) error {
	ev := r.EventType
	if ev == "" {
		ev = EventRequestEnd
	}
	if ev != EventRequestEnd {
		return nil
	}
	q := &r.Request
	bad := func(path string, err error) error { return &ParseError{File: file, Line: line, Path: path, Err: err} }
	if q.RequestID == "" {
		return bad("request.request_id", errors.New("request_end without a request id"))
	}
	received := q.RequestReceivedMs
	total := q.TotalTimeMs
	if total < 0 || total > maxMillis {
		return bad("request.total_time_ms", fmt.Errorf("%v out of range", total))
	}
	end := r.EventTimeUnixMs
	if end == 0 && received > 0 {
		end = received + uint64(total)
	}
	if received == 0 {
		if end == 0 {
			return bad("request.request_received_ms", errors.New("no arrival time (request_received_ms or event_time_unix_ms)"))
		}
		received = end - min(end, uint64(total))
	}
	if received > 1<<53 || end > 1<<53 {
		return bad("request.request_received_ms", errors.New("timestamp beyond 2^53 ms"))
	}
	end = max(end, received)
	var t Turn
	in := q.InputTokens
	if rp := &q.Replay; rp.TraceBlockSize != 0 || len(rp.InputSequenceHashes) > 0 {
		if rp.TraceBlockSize <= 0 || rp.TraceBlockSize > MaxTokens {
			return bad("request.replay.trace_block_size", fmt.Errorf("%w: %d", ErrBlockSize, rp.TraceBlockSize))
		}
		if b.bs == 0 {
			b.bs, b.bsFile, b.bsLine = rp.TraceBlockSize, file, line
		} else if b.bs != rp.TraceBlockSize {
			return bad("request.replay.trace_block_size", fmt.Errorf("%w: %d here, %d at %s:%d", ErrBlockSize, rp.TraceBlockSize, b.bs, b.bsFile, b.bsLine))
		}
		if rp.InputLength < 0 || rp.InputLength > MaxTokens {
			return bad("request.replay.input_length", fmt.Errorf("%d out of range", rp.InputLength))
		}
		if want := (rp.InputLength + rp.TraceBlockSize - 1) / rp.TraceBlockSize; len(rp.InputSequenceHashes) > want {
			return bad("request.replay.input_sequence_hashes", fmt.Errorf("%d hashes for %d tokens of %d-token blocks", len(rp.InputSequenceHashes), rp.InputLength, rp.TraceBlockSize))
		}
		in = uint64(rp.InputLength)
		t.HashIDs = rp.InputSequenceHashes
	}
	if in > MaxTokens || q.OutputTokens > MaxTokens {
		return bad("request", errors.New("token counts beyond 2^32"))
	}
	t.InputTokens, t.OutputTokens = int(in), int(q.OutputTokens)
	t.FinishReason = q.FinishReasonMetadata.FinishReason
	for _, c := range q.FinishReasonMetadata.ToolCalls {
		if c.Name != "" {
			t.ToolCalls = append(t.ToolCalls, c.Name)
		}
	}
	d := dynReq{received: received, end: end, turn: t}
	if ac := r.AgentContext; ac.SessionID != "" {
		b.hasContext = true
		d.session, d.parent = ac.SessionID, ac.ParentSessionID
		if d.parent == d.session {
			d.parent = ""
		}
	} else {
		d.session = "request:" + q.RequestID
	}
	b.reqs = append(b.reqs, d)
	return nil
}

func msDur(ms uint64) time.Duration { return time.Duration(ms) * time.Millisecond }

func (b *dynBuilder) build(name string) (Workload, error) {
	w := Workload{Name: name, BlockTokens: b.bs, OpenLoop: !b.hasContext}
	if len(b.reqs) == 0 {
		return w, nil
	}
	sort.SliceStable(b.reqs, func(i, j int) bool { return b.reqs[i].received < b.reqs[j].received })
	t0 := b.reqs[0].received
	idx := map[string]int{}
	var members [][]int // request indices per session
	for i := range b.reqs {
		r := &b.reqs[i]
		si, ok := idx[r.session]
		if !ok {
			si = len(w.Sessions)
			idx[r.session] = si
			w.Sessions = append(w.Sessions, Session{ID: r.session, ParentTurn: -1, Start: msDur(r.received - t0)})
			members = append(members, nil)
		}
		if w.Sessions[si].Parent == "" && r.parent != "" {
			w.Sessions[si].Parent = r.parent
		}
		members[si] = append(members[si], i)
		r.turn.Arrival = msDur(r.received - t0)
	}
	// Parents that never appear in the trace: the child becomes a root.
	for i := range w.Sessions {
		if p := w.Sessions[i].Parent; p != "" {
			if _, ok := idx[p]; !ok {
				w.Sessions[i].Parent = ""
			}
		}
	}
	// Break parent cycles (a malformed trace): the first session of a cycle
	// becomes a root.
	for i := range w.Sessions {
		seen := map[int]bool{i: true}
		for j := i; w.Sessions[j].Parent != ""; {
			j = idx[w.Sessions[j].Parent]
			if seen[j] {
				w.Sessions[i].Parent = ""
				break
			}
			seen[j] = true
		}
	}
	childEnd := make([]uint64, len(w.Sessions))
	for si, m := range members {
		childEnd[si] = b.reqs[m[len(m)-1]].end
		for _, k := range m {
			childEnd[si] = max(childEnd[si], b.reqs[k].end)
		}
	}
	// Spawn and join points.
	waits := make([]map[int][]int, len(w.Sessions)) // parent -> turn -> children
	for ci := range w.Sessions {
		c := &w.Sessions[ci]
		if c.Parent == "" || w.OpenLoop {
			continue
		}
		pi := idx[c.Parent]
		first := b.reqs[members[ci][0]].received
		c.ParentTurn = -1
		base := b.reqs[members[pi][0]].received
		for k, ri := range members[pi] {
			if b.reqs[ri].end <= first {
				c.ParentTurn, base = k, b.reqs[ri].end
			}
		}
		if c.ParentTurn == -1 {
			base = min(base, first)
		}
		c.Start = msDur(first - base)
		for k, ri := range members[pi] {
			if k > c.ParentTurn && b.reqs[ri].received >= childEnd[ci] {
				if waits[pi] == nil {
					waits[pi] = map[int][]int{}
				}
				waits[pi][k] = append(waits[pi][k], ci)
				break
			}
		}
	}
	for si := range w.Sessions {
		s := &w.Sessions[si]
		s.Turns = make([]Turn, len(members[si]))
		var prevEnd uint64
		for k, ri := range members[si] {
			r := &b.reqs[ri]
			t := r.turn
			if !w.OpenLoop && k > 0 {
				dep := prevEnd
				for _, ci := range waits[si][k] {
					t.WaitFor = append(t.WaitFor, w.Sessions[ci].ID)
					dep = max(dep, childEnd[ci])
				}
				sort.Strings(t.WaitFor)
				t.Delay = msDur(r.received - min(r.received, dep))
			}
			s.Turns[k] = t
			prevEnd = r.end
		}
	}
	return w, nil
}

// ReadRecordFiles reads every record of the given shards (plain, gzip or
// zstd), in file order.
func ReadRecordFiles(paths ...string) ([]Record, error) {
	var out []Record
	for _, p := range paths {
		if err := readRecordFile(p, func(_ int, r *Record) error {
			out = append(out, *r)
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readRecordFile(path string, fn func(int, *Record) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	name := filepath.Base(path)
	br, closeFn, err := Decompress(f)
	if err != nil {
		return &ParseError{File: name, Err: err}
	}
	defer closeFn()
	return ReadRecords(br, name, fn)
}

// PlanRecords renders a workload's plan (see Schedule) as request_end
// records: the Dynamo trace the workload would leave when served by the
// nominal engine, with arrivals from baseUnixMs. Each turn carries its
// session and parent, token counts, timings (ms, rounded), its hash ids as
// replay.input_sequence_hashes (BlockTokens as trace_block_size) and its
// finish reason and tool names. Request ids are "SESSION/TURN".
// DynamoWorkload of the result gives back w's sessions, spawn and join
// points and delays (to the millisecond).
func PlanRecords(w *Workload, p *Plan, baseUnixMs uint64) []Record {
	var out []Record
	ms := func(d time.Duration) uint64 { return baseUnixMs + uint64((d+time.Millisecond/2)/time.Millisecond) }
	for i := range w.Sessions {
		s := &w.Sessions[i]
		for j := range s.Turns {
			t := &s.Turns[j]
			tt := p.Turns[i][j]
			recv, end := ms(tt.Arrival), ms(tt.End)
			r := Record{
				Schema: SchemaV1, EventType: EventRequestEnd, EventTimeUnixMs: end, EventSource: SourceDynamo,
				Request: Request{
					RequestID:         s.ID + "/" + strconv.Itoa(j),
					InputTokens:       uint64(t.InputTokens),
					OutputTokens:      uint64(t.OutputTokens),
					CachedTokens:      uint64(tt.CachedTokens),
					RequestReceivedMs: recv,
					TTFTMs:            float64(ms(tt.FirstToken) - recv),
					TotalTimeMs:       float64(end - recv),
				},
			}
			if !w.OpenLoop {
				r.AgentContext = AgentContext{SessionID: s.ID, ParentSessionID: s.Parent, SessionFinal: j == len(s.Turns)-1}
			}
			if w.BlockTokens > 0 {
				r.Request.Replay = Replay{TraceBlockSize: w.BlockTokens, InputLength: t.InputTokens, InputSequenceHashes: t.HashIDs}
			}
			r.Request.FinishReasonMetadata.FinishReason = t.FinishReason
			for k, name := range t.ToolCalls {
				r.Request.FinishReasonMetadata.ToolCalls = append(r.Request.FinishReasonMetadata.ToolCalls,
					ToolCallMeta{ToolCallIndex: uint32(k), Name: name})
			}
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].EventTimeUnixMs < out[b].EventTimeUnixMs })
	return out
}
