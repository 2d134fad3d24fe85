package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ccEntry is one element of a kv-cache-tester "requests" array: a model
// request (type "n" or "s") or a subagent (type "subagent").
type ccEntry struct {
	T            *float64  `json:"t"`
	Type         string    `json:"type"`
	Model        string    `json:"model"`
	In           *int64    `json:"in"`
	Out          *int64    `json:"out"`
	HashIDs      []uint64  `json:"hash_ids"`
	Stop         string    `json:"stop"`
	APITime      *float64  `json:"api_time"`
	ThinkTime    *float64  `json:"think_time"`
	AgentID      string    `json:"agent_id"`
	SubagentType string    `json:"subagent_type"`
	DurationMs   *float64  `json:"duration_ms"`
	Requests     []ccEntry `json:"requests"`
	SystemTokens int64     `json:"system_tokens"`
	ToolTokens   int64     `json:"tool_tokens"`
}

type ccFile struct {
	ID           string
	BlockSize    int64
	SystemTokens int64
	ToolTokens   int64
	Requests     []ccEntry
	Lines        []int // line of each top-level request
}

// maxSeconds bounds the times in a Claude Code trace (about 100 days).
const maxSeconds = 1e7

// MaxSubagentDepth bounds how deeply subagent entries of a Claude Code
// trace may nest (Claude Code's own subagents nest one or two levels). A
// deeper file is a *ParseError: each level lengthens every session ID
// below it, so unbounded nesting costs time and memory quadratic in the
// file size.
const MaxSubagentDepth = 32

// ReadClaudeCode reads one Claude Code session in kv-cache-tester's format
// (one JSON object: id, block_size, system_tokens, tool_tokens,
// requests[]). Model requests become the turns of the root session, whose
// ID is the file's "id"; each subagent entry becomes a child session
// "ID/agent_id" with its own nested requests.
//
// Times: a request's t is seconds from its session's start; think_time is
// the client gap before it (Delay; when absent, the gap since the previous
// request's end, or since its arrival when api_time is absent too). A
// subagent entry's t is when it returned, so it started t - duration_ms;
// it is attached to the parent's last turn that ended before that start
// (ParentTurn, with Start the gap after that turn) and joined by the
// parent's first later turn that arrives after it ended (WaitFor), whose
// Delay is then the residual after the last joined child.
//
// Hash ids are local to the file (BlockTokens = block_size) and cover full
// blocks only; the reader appends a fresh id for a partial last block so
// len(HashIDs) == ceil(InputTokens/BlockTokens), as everywhere in this
// package. stop tool_use / end_turn / max_tokens map to FinishToolCalls /
// FinishStop / FinishLength.
func ReadClaudeCode(r io.Reader, name string) (Workload, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxLineBytes+1))
	if err != nil {
		return Workload{}, &ParseError{File: name, Err: err}
	}
	if len(data) > MaxLineBytes {
		return Workload{}, &ParseError{File: name, Err: fmt.Errorf("%w: file larger than %d bytes", ErrLineTooLong, MaxLineBytes)}
	}
	f, err := decodeClaudeFile(data, name)
	if err != nil {
		return Workload{}, err
	}
	if f.BlockSize <= 0 || f.BlockSize > MaxTokens {
		return Workload{}, &ParseError{File: name, Line: 1, Path: "block_size", Err: fmt.Errorf("%w: %d", ErrBlockSize, f.BlockSize)}
	}
	id := f.ID
	if id == "" {
		id = name
	}
	b := ccBuilder{name: name, bs: int(f.BlockSize)}
	sys, err := tokens("system_tokens", f.SystemTokens+max(f.ToolTokens, 0))
	if err != nil || f.SystemTokens < 0 || f.ToolTokens < 0 {
		return Workload{}, &ParseError{File: name, Line: 1, Path: "system_tokens", Err: errors.New("system_tokens and tool_tokens must be in [0, 2^32]")}
	}
	if _, err := b.session(id, "", -1, 0, 0, "", sys, f.Requests, "requests", f.Lines, 0, 0); err != nil {
		return Workload{}, err
	}
	b.finish()
	return Workload{Name: name, BlockTokens: b.bs, Sessions: b.sessions}, nil
}

func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return 1 + bytes.Count(data[:off], []byte{'\n'})
}

// push appends v to s, doubling the capacity when s is full: append grows
// large slices by 1.25, which allocates about five times the final size on
// the way, and these slices hold one large struct per input record.
func push[T any](s []T, v T) []T {
	if len(s) == cap(s) {
		ns := make([]T, len(s), max(2*cap(s), 8))
		copy(ns, s)
		s = ns
	}
	return append(s, v)
}

// lineCounter gives the lines of increasing offsets, counting each byte
// once (lineAt from the start for every request was quadratic).
type lineCounter struct {
	data []byte
	off  int64
	line int
}

func (c *lineCounter) at(off int64) int {
	off = min(max(off, 0), int64(len(c.data)))
	if off < c.off {
		return lineAt(c.data, off)
	}
	c.line += bytes.Count(c.data[c.off:off], []byte{'\n'})
	c.off = off
	return 1 + c.line
}

// decodeClaudeFile decodes the top-level object, remembering the line of
// every top-level request so errors can point at it.
func decodeClaudeFile(data []byte, name string) (*ccFile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	fail := func(off int64, path string, err error) error {
		return &ParseError{File: name, Line: lineAt(data, off), Path: path, Err: jsonErr(err)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, fail(dec.InputOffset(), "", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fail(0, "", errors.New("want a JSON object"))
	}
	f := &ccFile{}
	lines := lineCounter{data: data}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fail(dec.InputOffset(), "", err)
		}
		key, _ := kt.(string)
		off := dec.InputOffset()
		switch key {
		case "requests":
			tok, err := dec.Token()
			if err != nil {
				return nil, fail(dec.InputOffset(), key, err)
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return nil, fail(off, key, errors.New("want an array"))
			}
			for i := 0; dec.More(); i++ {
				eoff := dec.InputOffset()
				var e ccEntry
				if err := dec.Decode(&e); err != nil {
					return nil, fail(eoff, "requests["+strconv.Itoa(i)+"]", err)
				}
				f.Requests = push(f.Requests, e)
				start := eoff
				for start < int64(len(data)) && strings.IndexByte(", \t\r\n", data[start]) >= 0 {
					start++
				}
				f.Lines = append(f.Lines, lines.at(start))
			}
			if _, err := dec.Token(); err != nil {
				return nil, fail(dec.InputOffset(), key, err)
			}
		case "id":
			err = dec.Decode(&f.ID)
		case "block_size":
			err = dec.Decode(&f.BlockSize)
		case "system_tokens":
			err = dec.Decode(&f.SystemTokens)
		case "tool_tokens":
			err = dec.Decode(&f.ToolTokens)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, fail(off, key, err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fail(dec.InputOffset(), "", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fail(dec.InputOffset(), "", errors.New("trailing data after the JSON object"))
	}
	return f, nil
}

type ccBuilder struct {
	name     string
	bs       int
	sessions []Session
	absStart []float64 // absolute start (s) of each session, for ordering
	maxID    uint64
	hasID    bool
}

type ccChild struct {
	id  string
	end float64
}

// session adds a session built from entries and returns its index. start
// is its absolute start in seconds.
func (b *ccBuilder) session(id, parent string, parentTurn int, startRel time.Duration, start float64,
	agent string, sys int, entries []ccEntry, path string, lines []int, line, depth int) (int, error) {
	if len(b.sessions) > 1<<20 {
		return 0, &ParseError{File: b.name, Line: line, Path: path, Err: errors.New("more than 2^20 sessions")}
	}
	if depth > MaxSubagentDepth {
		return 0, &ParseError{File: b.name, Line: line, Path: path, Err: fmt.Errorf("subagents nested deeper than %d", MaxSubagentDepth)}
	}
	si := len(b.sessions)
	b.sessions = append(b.sessions, Session{ID: id, Parent: parent, ParentTurn: parentTurn, Start: startRel, SystemTokens: sys, Agent: agent})
	b.absStart = append(b.absStart, start)
	var (
		turns   []Turn
		ends    []float64 // absolute end of each turn
		pending []ccChild // children not joined yet
		prevEnd = start
		seen    = map[string]bool{}
	)
	for i := range entries {
		e := &entries[i]
		p := path + "[" + strconv.Itoa(i) + "]"
		if lines != nil {
			line = lines[i]
		}
		bad := func(field string, err error) error {
			return &ParseError{File: b.name, Line: line, Path: p + field, Err: err}
		}
		if e.T == nil {
			return 0, bad(".t", errors.New("missing"))
		}
		t, err := seconds(*e.T)
		if err != nil {
			return 0, bad(".t", err)
		}
		abs := start + t
		switch e.Type {
		case "subagent":
			dur := 0.0
			if e.DurationMs != nil {
				if dur, err = seconds(*e.DurationMs / 1000); err != nil {
					return 0, bad(".duration_ms", err)
				}
			}
			cstart := max(abs-dur, start)
			pt, base := -1, start
			for k := len(ends) - 1; k >= 0; k-- {
				if ends[k] <= cstart+0.5 {
					pt, base = k, ends[k]
					break
				}
			}
			cid := e.AgentID
			if cid == "" {
				cid = "subagent_" + strconv.Itoa(i)
			}
			cid = id + "/" + cid
			if seen[cid] {
				return 0, bad(".agent_id", fmt.Errorf("duplicate subagent %q", e.AgentID))
			}
			seen[cid] = true
			csys, err := tokens("system_tokens", e.SystemTokens+max(e.ToolTokens, 0))
			if err != nil || e.SystemTokens < 0 || e.ToolTokens < 0 {
				return 0, bad(".system_tokens", errors.New("system_tokens and tool_tokens must be in [0, 2^32]"))
			}
			rel := secs(max(cstart-base, 0))
			ci, err := b.session(cid, id, pt, rel, cstart, e.SubagentType, csys, e.Requests, p+".requests", nil, line, depth+1)
			if err != nil {
				return 0, err
			}
			end := cstart + dur
			if cs := b.sessions[ci].Turns; len(cs) > 0 && dur == 0 {
				// No duration: the child ran at least until its last request.
				end = max(end, cs[len(cs)-1].Arrival.Seconds())
			}
			pending = append(pending, ccChild{cid, end})
		case "n", "s", "":
			if e.In == nil {
				return 0, bad(".in", errors.New("missing"))
			}
			in, err := tokens("in", *e.In)
			if err != nil {
				return 0, bad(".in", err)
			}
			out := 0
			if e.Out != nil {
				if out, err = tokens("out", *e.Out); err != nil {
					return 0, bad(".out", err)
				}
			}
			if len(e.HashIDs) > (in+b.bs-1)/b.bs {
				return 0, bad(".hash_ids", fmt.Errorf("%d hash ids for %d tokens of %d-token blocks", len(e.HashIDs), in, b.bs))
			}
			api := 0.0
			if e.APITime != nil {
				if api, err = seconds(*e.APITime); err != nil {
					return 0, bad(".api_time", err)
				}
			}
			var think float64 = -1
			if e.ThinkTime != nil {
				if think, err = seconds(*e.ThinkTime); err != nil {
					return 0, bad(".think_time", err)
				}
			}
			for _, h := range e.HashIDs {
				if !b.hasID || h > b.maxID {
					b.maxID, b.hasID = h, true
				}
			}
			turn := Turn{
				Arrival:      secs(abs),
				InputTokens:  in,
				OutputTokens: out,
				HashIDs:      e.HashIDs,
				FinishReason: finishFromStop(e.Stop),
			}
			// Join every child that ended by the time this turn arrived.
			var joined []ccChild
			rest := pending[:0]
			for _, c := range pending {
				if c.end <= abs+1 {
					joined = append(joined, c)
				} else {
					rest = append(rest, c)
				}
			}
			pending = rest
			switch {
			case len(turns) == 0 && len(joined) == 0:
				turn.Delay = secs(t)
			case len(joined) > 0:
				dep := prevEnd
				for _, c := range joined {
					turn.WaitFor = append(turn.WaitFor, c.id)
					dep = max(dep, c.end)
				}
				turn.Delay = secs(max(abs-dep, 0))
			case think >= 0:
				turn.Delay = secs(think)
			default:
				turn.Delay = secs(max(abs-prevEnd, 0))
			}
			turns = push(turns, turn)
			prevEnd = abs + api
			ends = push(ends, prevEnd)
		default:
			return 0, bad(".type", fmt.Errorf("unknown request type %q", e.Type))
		}
	}
	b.sessions[si].Turns = turns
	return si, nil
}

func seconds(v float64) (float64, error) {
	if math.IsNaN(v) || v < 0 || v > maxSeconds {
		return 0, fmt.Errorf("%v s out of range [0, %g]", v, float64(maxSeconds))
	}
	return v, nil
}

func finishFromStop(stop string) string {
	switch stop {
	case "tool_use":
		return FinishToolCalls
	case "end_turn", "stop_sequence":
		return FinishStop
	case "max_tokens":
		return FinishLength
	}
	return ""
}

// finish orders sessions by start and gives partial tail blocks fresh ids.
func (b *ccBuilder) finish() {
	next := uint64(0)
	if b.hasID {
		next = b.maxID + 1
	}
	for i := range b.sessions {
		for j := range b.sessions[i].Turns {
			t := &b.sessions[i].Turns[j]
			full := t.InputTokens / b.bs
			if t.InputTokens%b.bs != 0 && len(t.HashIDs) == full {
				ids := make([]uint64, full+1)
				copy(ids, t.HashIDs)
				ids[full] = next
				next++
				t.HashIDs = ids
			}
		}
	}
	order := make([]int, len(b.sessions))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool { return b.absStart[order[x]] < b.absStart[order[y]] })
	out := make([]Session, len(b.sessions))
	for i, k := range order {
		out[i] = b.sessions[k]
	}
	b.sessions = out
}
