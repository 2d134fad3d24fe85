package trace

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// MaxTokens bounds the token counts a reader accepts (2^32 tokens, far
// beyond any context window), so arithmetic on them never overflows.
const MaxTokens = 1 << 32

// maxMillis bounds timestamps and delays (about 100 days), so they convert
// to time.Duration without overflow.
const maxMillis = 1e10

// DefaultMooncakeBlockTokens is the block size of Mooncake hash ids.
const DefaultMooncakeBlockTokens = 512

type mooncakeRow struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
	SessionID    *string  `json:"session_id"`
	Delay        *float64 `json:"delay"`
	TextInput    *string  `json:"text_input"`
}

// ReadMooncake reads Mooncake JSONL as AIPerf's mooncake_trace loader does:
// one request a line with input_length, optional output_length, hash_ids,
// timestamp (ms from the trace start) and, for multi-turn sessions,
// session_id and delay (ms to wait after the session's previous turn
// finished). Rows without session_id are single-turn sessions named
// "#LINE". The workload is open-loop (Turn.Arrival from timestamp) when
// every row has a timestamp and none has a delay; otherwise closed-loop,
// with a session's first timestamp as its Start. blockTokens is the hash
// id block size (0 means 512). Rows with text_input instead of
// input_length are rejected: they carry no token counts.
func ReadMooncake(r io.Reader, name string, blockTokens int) (Workload, error) {
	if blockTokens == 0 {
		blockTokens = DefaultMooncakeBlockTokens
	}
	if blockTokens < 0 || blockTokens > MaxTokens {
		return Workload{}, fmt.Errorf("%w: %d", ErrBlockSize, blockTokens)
	}
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 1<<20)
	}
	lr := lineReader{r: br}
	type pending struct {
		turn       Turn
		off, n     int
		hasTS      bool
		sessionIdx int
	}
	var (
		rows     []pending
		arena    []uint64
		sessions []Session
		byID     = map[string]int{}
		hasDelay bool
		allTS    = true
		row      mooncakeRow
	)
	perr := func(err error) error { return &ParseError{File: name, Line: lr.line, Err: err} }
	for {
		line, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Workload{}, perr(err)
		}
		if len(trimSpace(line)) == 0 {
			continue
		}
		off := len(arena)
		fr, grown, ok := parseMooncakeFast(line, arena)
		if ok {
			arena = grown
		} else {
			// The general path: encoding/json decides and words the error.
			row = mooncakeRow{HashIDs: row.HashIDs[:0]}
			if err := json.Unmarshal(line, &row); err != nil {
				return Workload{}, perr(jsonErr(err))
			}
			if row.InputLength == nil && row.TextInput != nil {
				return Workload{}, perr(errors.New("text_input rows carry no token counts; only input_length rows are supported"))
			}
			fr = fastRow{}
			if row.InputLength != nil {
				fr.in, fr.hasIn = *row.InputLength, true
			}
			if row.OutputLength != nil {
				fr.out, fr.hasOut = *row.OutputLength, true
			}
			if row.Timestamp != nil {
				fr.ts, fr.hasTS = *row.Timestamp, true
			}
			if row.Delay != nil {
				fr.delay, fr.hasDelay = *row.Delay, true
			}
			if row.SessionID != nil {
				fr.session, fr.hasSession = []byte(*row.SessionID), true
			}
			arena = append(arena, row.HashIDs...)
		}
		if !fr.hasIn {
			return Workload{}, perr(errors.New("missing input_length"))
		}
		var p pending
		if p.turn.InputTokens, err = tokens("input_length", fr.in); err != nil {
			return Workload{}, perr(err)
		}
		if fr.hasOut {
			if p.turn.OutputTokens, err = tokens("output_length", fr.out); err != nil {
				return Workload{}, perr(err)
			}
		}
		if fr.hasTS {
			if p.turn.Arrival, err = millis("timestamp", fr.ts); err != nil {
				return Workload{}, perr(err)
			}
			p.hasTS = true
		} else {
			allTS = false
		}
		if fr.hasDelay {
			if p.turn.Delay, err = millis("delay", fr.delay); err != nil {
				return Workload{}, perr(err)
			}
			hasDelay = true
		}
		p.off, p.n = off, len(arena)-off
		if fr.hasSession && len(fr.session) > 0 { // AIPerf: an empty id is no id
			idx, seen := byID[string(fr.session)]
			if !seen {
				id := string(fr.session)
				idx = len(sessions)
				byID[id] = idx
				sessions = push(sessions, Session{ID: id, ParentTurn: -1})
			}
			p.sessionIdx = idx
		} else {
			id := "#" + strconv.Itoa(lr.line)
			if _, dup := byID[id]; dup {
				return Workload{}, perr(fmt.Errorf("session_id %q collides with the generated id of a row without one", id))
			}
			byID[id] = len(sessions)
			p.sessionIdx = len(sessions)
			sessions = push(sessions, Session{ID: id, ParentTurn: -1})
		}
		rows = push(rows, p)
	}
	counts := make([]int, len(sessions))
	for i := range rows {
		counts[rows[i].sessionIdx]++
	}
	for i := range sessions {
		sessions[i].Turns = make([]Turn, 0, counts[i])
	}
	for i := range rows {
		p := &rows[i]
		p.turn.HashIDs = arena[p.off : p.off+p.n : p.off+p.n]
		s := &sessions[p.sessionIdx]
		if len(s.Turns) == 0 && p.hasTS {
			s.Start = p.turn.Arrival
		}
		s.Turns = append(s.Turns, p.turn)
	}
	sort.SliceStable(sessions, func(i, j int) bool { return sessions[i].Start < sessions[j].Start })
	return Workload{
		Name:        name,
		BlockTokens: blockTokens,
		OpenLoop:    len(rows) > 0 && !hasDelay && allTS,
		Sessions:    sessions,
	}, nil
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func tokens(field string, v int64) (int, error) {
	if v < 0 || v > MaxTokens {
		return 0, fmt.Errorf("%s %d out of range [0, %d]", field, v, int64(MaxTokens))
	}
	return int(v), nil
}

func millis(field string, ms float64) (time.Duration, error) {
	if math.IsNaN(ms) || ms < 0 || ms > maxMillis {
		return 0, fmt.Errorf("%s %v ms out of range [0, %g]", field, ms, float64(maxMillis))
	}
	return time.Duration(math.Round(ms * 1e6)), nil
}

// jsonErr rewrites encoding/json errors to say what was wrong without the
// Go type names' noise.
func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "value"
		}
		return fmt.Errorf("%s: JSON %s does not fit %s", field, te.Value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return err
}

func appendMillis(dst []byte, d time.Duration) []byte {
	if d%time.Millisecond == 0 {
		return strconv.AppendInt(dst, int64(d/time.Millisecond), 10)
	}
	return strconv.AppendFloat(dst, float64(d)/1e6, 'f', -1, 64)
}

// WriteMooncake writes w as Mooncake JSONL that AIPerf's mooncake_trace
// loader and Dynamo's replay read: one line per turn with session_id,
// input_length, output_length and hash_ids, in order of (nominal) arrival.
//
// An open-loop workload gets a timestamp (ms) on every line. A closed-loop
// workload gets a timestamp on each session's first turn and a delay (ms)
// on the others. Mooncake has no parent/child sessions: a subagent becomes
// its own session whose timestamp is its start in the uncontended nominal
// schedule (see Schedule), and WaitFor is lost. A closed-loop workload
// whose sessions all have one turn has no delays to write and reads back
// as open-loop.
func WriteMooncake(out io.Writer, w *Workload) error {
	sched, err := Schedule(w, TimingModel{})
	if err != nil {
		return err
	}
	type ref struct {
		s, t int
		at   time.Duration
	}
	var refs []ref
	for s := range w.Sessions {
		for t := range w.Sessions[s].Turns {
			refs = append(refs, ref{s, t, sched.Turns[s][t].Arrival})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].at < refs[j].at })
	bw := bufio.NewWriterSize(out, 1<<16)
	var line []byte
	for _, rf := range refs {
		s := &w.Sessions[rf.s]
		t := &s.Turns[rf.t]
		line = append(line[:0], `{"session_id":`...)
		line = jsonenc.AppendString(line, s.ID)
		switch {
		case w.OpenLoop:
			line = append(line, `,"timestamp":`...)
			line = appendMillis(line, t.Arrival)
		case rf.t == 0:
			line = append(line, `,"timestamp":`...)
			line = appendMillis(line, rf.at)
		default:
			line = append(line, `,"delay":`...)
			line = appendMillis(line, t.Delay)
		}
		line = append(line, `,"input_length":`...)
		line = strconv.AppendInt(line, int64(t.InputTokens), 10)
		line = append(line, `,"output_length":`...)
		line = strconv.AppendInt(line, int64(t.OutputTokens), 10)
		line = append(line, `,"hash_ids":[`...)
		for i, h := range t.HashIDs {
			if i > 0 {
				line = append(line, ',')
			}
			line = strconv.AppendUint(line, h, 10)
		}
		line = append(line, "]}\n"...)
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("trace: write mooncake: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trace: write mooncake: %w", err)
	}
	return nil
}
