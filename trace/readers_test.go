package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/shareddata"
)

// randWorkload makes a small valid workload without subagents.
func randWorkload(r *rand.Rand, openLoop bool) Workload {
	w := Workload{Name: "rand", BlockTokens: 1 + r.IntN(64), OpenLoop: openLoop}
	next := uint64(0)
	for i := range 1 + r.IntN(6) {
		s := Session{ID: fmt.Sprintf("s%d", i), ParentTurn: -1, Start: time.Duration(r.IntN(100000)) * time.Millisecond}
		var prefix []uint64
		at := s.Start
		for k := range 1 + r.IntN(5) {
			in := r.IntN(2000)
			nb := (in + w.BlockTokens - 1) / w.BlockTokens
			ids := append([]uint64(nil), prefix[:min(len(prefix), nb)]...)
			for len(ids) < nb {
				ids = append(ids, next)
				next++
			}
			prefix = ids
			t := Turn{InputTokens: in, OutputTokens: r.IntN(500), HashIDs: ids}
			if openLoop {
				at += time.Duration(r.IntN(5000)) * time.Microsecond
				t.Arrival = at
				if k == 0 {
					s.Start = at
				}
			} else if k > 0 {
				t.Delay = time.Duration(r.IntN(20000)) * time.Microsecond
			}
			s.Turns = append(s.Turns, t)
		}
		w.Sessions = append(w.Sessions, s)
	}
	return w
}

// sortSessions orders sessions by Start then ID (Mooncake orders by first
// timestamp; equal starts keep file order).
func canonical(w Workload) Workload {
	out := w
	out.Name = ""
	out.Sessions = append([]Session(nil), w.Sessions...)
	for i := range out.Sessions {
		s := &out.Sessions[i]
		s.Turns = append([]Turn(nil), s.Turns...)
		for j := range s.Turns {
			if len(s.Turns[j].HashIDs) == 0 {
				s.Turns[j].HashIDs = nil
			}
		}
	}
	sortByStartID(out.Sessions)
	return out
}

func sortByStartID(ss []Session) {
	for i := 1; i < len(ss); i++ {
		for j := i; j > 0 && (ss[j].Start < ss[j-1].Start || ss[j].Start == ss[j-1].Start && ss[j].ID < ss[j-1].ID); j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
}

func TestMooncakeRoundTrip(t *testing.T) {
	seeds := uint64(200)
	if raceEnabled {
		seeds = 30
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 7))
		open := seed%2 == 0
		w := randWorkload(r, open)
		var buf bytes.Buffer
		require.NoError(t, WriteMooncake(&buf, &w))
		got, err := ReadMooncake(&buf, "rt", w.BlockTokens)
		require.NoError(t, err, "seed %d", seed)
		want := canonical(w)
		single := true
		for _, s := range w.Sessions {
			single = single && len(s.Turns) == 1
		}
		if single {
			// Without a multi-turn session no line has a delay: the file
			// reads back as open-loop, arrivals at the session starts.
			want.OpenLoop = true
		}
		if !open {
			// A session's first timestamp is its start; delays follow.
			for i := range want.Sessions {
				s := &want.Sessions[i]
				s.Turns[0].Arrival = s.Start
			}
		} else {
			for i := range want.Sessions {
				want.Sessions[i].Start = want.Sessions[i].Turns[0].Arrival
			}
		}
		require.Equal(t, want, canonical(got), "seed %d:\n%s", seed, buf.String())
	}
}

func TestMooncakeRealRoundTrip(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine 12k-request round trip; too slow under -race")
	}
	path := filepath.Join(shareddata.Dir(t), "mooncake_conversation_trace.jsonl")
	w, err := ReadFile(path, ReadOptions{})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteMooncake(&buf, &w))
	back, err := ReadMooncake(&buf, w.Name, 0)
	require.NoError(t, err)
	require.Equal(t, w, back)
}

func TestMooncakeSessionsAndDelays(t *testing.T) {
	in := `{"session_id":"a","timestamp":1000,"input_length":600,"output_length":5,"hash_ids":[1,2]}
{"session_id":"b","timestamp":500,"input_length":10,"output_length":1,"hash_ids":[9]}
{"session_id":"a","delay":2.5,"input_length":700,"output_length":5,"hash_ids":[1,2]}

{"input_length":1,"hash_ids":[3],"priority":4}
`
	w, err := ReadMooncake(strings.NewReader(in), "x", 512)
	require.NoError(t, err)
	require.False(t, w.OpenLoop)
	require.Len(t, w.Sessions, 3)
	require.Equal(t, "#5", w.Sessions[0].ID) // no timestamp: start 0
	require.Equal(t, "b", w.Sessions[1].ID)
	a := w.Sessions[2]
	require.Equal(t, time.Second, a.Start)
	require.Len(t, a.Turns, 2)
	require.Equal(t, 2500*time.Microsecond, a.Turns[1].Delay)
	require.NoError(t, w.Validate())
}

func TestReaderErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		format      Format
		line        int
		want        string
	}{
		{"truncated", "{\"input_length\":1}\n{\"input_len", FormatMooncake, 2, "invalid JSON"},
		{"wrong type", "{\"input_length\":\"12\"}", FormatMooncake, 1, "input_length"},
		{"huge", "\n{\"input_length\":1e400}", FormatMooncake, 2, "input_length"},
		{"too many tokens", `{"input_length":99999999999}`, FormatMooncake, 1, "out of range"},
		{"negative", `{"input_length":-1}`, FormatMooncake, 1, "out of range"},
		{"negative hash", `{"input_length":1,"hash_ids":[-1]}`, FormatMooncake, 1, "hash_ids"},
		{"float hash", `{"input_length":1,"hash_ids":[1.5]}`, FormatMooncake, 1, "hash_ids"},
		{"hash too big", `{"input_length":1,"hash_ids":[18446744073709551616]}`, FormatMooncake, 1, "hash_ids"},
		{"timestamp", `{"input_length":1,"timestamp":1e300}`, FormatMooncake, 1, "timestamp"},
		{"missing", `{"output_length":1}`, FormatMooncake, 1, "missing input_length"},
		{"text input", `{"text_input":"hi"}`, FormatMooncake, 1, "text_input"},
		{"session type", `{"input_length":1,"session_id":5}`, FormatMooncake, 1, "session_id"},
		{"claude truncated", "{\"block_size\":64,\n\"requests\":[{\"t\":0,", FormatClaudeCode, 2, ""},
		{"claude negative in", "{\"block_size\":64,\"requests\":[\n{\"t\":0,\"type\":\"n\",\"in\":5,\"out\":1},\n{\"t\":1,\"type\":\"n\",\"in\":-5}]}", FormatClaudeCode, 3, "requests[1].in"},
		{"claude bad type", "{\"block_size\":64,\"requests\":[\n{\"t\":0,\"type\":\"x\",\"in\":5}]}", FormatClaudeCode, 2, "unknown request type"},
		{"claude nested", "{\"block_size\":64,\"requests\":[\n{\"t\":0,\"type\":\"subagent\",\"requests\":[{\"t\":0,\"type\":\"n\",\"in\":1,\"think_time\":-1}]}]}", FormatClaudeCode, 2, "requests[0].requests[0].think_time"},
		{"claude block size", `{"block_size":0,"requests":[]}`, FormatClaudeCode, 1, "block size"},
		{"claude hash count", `{"block_size":64,"requests":[{"t":0,"type":"n","in":64,"hash_ids":[1,2]}]}`, FormatClaudeCode, 1, "hash ids"},
		{"claude string t", "{\"block_size\":64,\"requests\":[\n\n{\"t\":\"0\",\"type\":\"n\",\"in\":64}]}", FormatClaudeCode, 3, "requests[0]"},
		{"dynamo schema", "{\"schema\":\"other\",\"event_type\":\"request_end\"}", FormatDynamo, 1, "schema"},
		{"dynamo no id", "{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"request_end\",\"event_time_unix_ms\":5,\"request\":{\"output_tokens\":1}}", FormatDynamo, 1, "request id"},
		{"dynamo block sizes", "{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"request_end\",\"event_time_unix_ms\":5,\"request\":{\"request_id\":\"a\",\"replay\":{\"trace_block_size\":16,\"input_length\":1,\"input_sequence_hashes\":[1]}}}\n{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"request_end\",\"event_time_unix_ms\":5,\"request\":{\"request_id\":\"b\",\"replay\":{\"trace_block_size\":32,\"input_length\":1,\"input_sequence_hashes\":[1]}}}", FormatDynamo, 2, "32 here, 16 at in.jsonl:1"},
		{"dynamo huge", "{\"schema\":\"dynamo.request.trace.v1\",\"event_type\":\"request_end\",\"event_time_unix_ms\":5,\"request\":{\"request_id\":\"a\",\"output_tokens\":1e30}}", FormatDynamo, 1, "output_tokens"},
		{"unknown", "hello", FormatAuto, 1, "unrecognised"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tc.input), "in.jsonl", ReadOptions{Format: tc.format})
			require.Error(t, err)
			var pe *ParseError
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
			require.Equal(t, "in.jsonl", pe.File)
			require.Equal(t, tc.line, pe.Line, err.Error())
			require.Contains(t, err.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("trace: in.jsonl:%d: ", tc.line)), err.Error())
		})
	}
}

func TestDetectFormat(t *testing.T) {
	for _, tc := range []struct {
		head string
		want Format
	}{
		{`{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[0]}`, FormatMooncake},
		{`{"schema":"dynamo.request.trace.v1","event_type":"request_end"}`, FormatDynamo},
		{`{"id":"trace_1","models":[],"block_size":64,"requests":[]}`, FormatClaudeCode},
		{"\n  {\"session_id\":\"a\",\"input_length\":5}", FormatMooncake},
	} {
		got, err := DetectFormat([]byte(tc.head))
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc.head)
	}
	for _, bad := range []string{"", "[1,2]", `{"x":1}`} {
		_, err := DetectFormat([]byte(bad))
		require.ErrorIs(t, err, ErrFormat)
	}
}

const claudeSample = `{"id":"sess","block_size":4,"system_tokens":3,"tool_tokens":1,"requests":[
{"t":0.0,"type":"n","in":10,"out":2,"hash_ids":[1,2],"stop":"tool_use","api_time":1.0,"think_time":0.0},
{"t":9.0,"type":"subagent","agent_id":"a1","subagent_type":"Explore","duration_ms":6000,"system_tokens":2,"requests":[
  {"t":0.0,"type":"n","in":8,"out":1,"hash_ids":[7,8],"stop":"tool_use","api_time":0.5},
  {"t":3.0,"type":"n","in":9,"out":1,"hash_ids":[7,8],"stop":"end_turn","think_time":2.0}]},
{"t":12.0,"type":"s","in":16,"out":3,"hash_ids":[1,2,3,4],"stop":"end_turn","api_time":2.0,"think_time":11.0},
{"t":40.0,"type":"n","in":17,"out":3,"hash_ids":[1,2,3,4],"stop":"","think_time":26.0}]}`

func TestClaudeCodeMapping(t *testing.T) {
	w, err := ReadClaudeCode(strings.NewReader(claudeSample), "f.json")
	require.NoError(t, err)
	require.NoError(t, w.Validate())
	require.Equal(t, 4, w.BlockTokens)
	require.Len(t, w.Sessions, 2)
	root, sub := w.Sessions[0], w.Sessions[1]
	require.Equal(t, "sess", root.ID)
	require.Equal(t, 4, root.SystemTokens)
	require.Equal(t, "sess/a1", sub.ID)
	require.Equal(t, "sess", sub.Parent)
	require.Equal(t, "Explore", sub.Agent)
	require.Equal(t, 0, sub.ParentTurn)
	require.Equal(t, 2*time.Second, sub.Start) // returned at 9 s after 6 s: started at 3 s; turn 0 ended at 1 s
	require.Equal(t, []uint64{1, 2, 9}, root.Turns[0].HashIDs, "fresh id for the partial tail, above the file's max id")
	require.Equal(t, []uint64{7, 8, 11}, sub.Turns[1].HashIDs)
	require.Equal(t, []uint64{1, 2, 3, 4, 10}, root.Turns[2].HashIDs)
	require.Equal(t, []uint64{1, 2, 3, 4}, root.Turns[1].HashIDs)
	require.Equal(t, FinishToolCalls, root.Turns[0].FinishReason)
	require.Equal(t, FinishStop, root.Turns[1].FinishReason)
	require.Equal(t, "", root.Turns[2].FinishReason)
	require.Equal(t, []string{"sess/a1"}, root.Turns[1].WaitFor)
	require.Equal(t, 3*time.Second, root.Turns[1].Delay, "residual after the subagent ended at 9 s")
	require.Equal(t, 26*time.Second, root.Turns[2].Delay)
	require.Equal(t, 2*time.Second, sub.Turns[1].Delay)
	require.Equal(t, 6*time.Second, sub.Turns[1].Arrival)
	s, err := Summarize(&w)
	require.NoError(t, err)
	require.Equal(t, 1, s.Subagents)
	require.Equal(t, 1, s.UserGaps.N) // 26 s after end_turn; the join is not a tool gap
	require.Equal(t, 2, s.ToolGaps.N) // the subagent's 2 s gap and the root's 3 s residual after the join
}

func TestClaudeToMooncakeRoundTrip(t *testing.T) {
	for _, f := range claudeFiles(t) {
		w, err := ReadFile(f, ReadOptions{})
		require.NoError(t, err)
		var buf bytes.Buffer
		require.NoError(t, WriteMooncake(&buf, &w))
		back, err := ReadMooncake(&buf, w.Name, w.BlockTokens)
		require.NoError(t, err)
		require.Len(t, back.Sessions, len(w.Sessions))
		byID := map[string]Session{}
		for _, s := range back.Sessions {
			byID[s.ID] = s
		}
		for _, s := range w.Sessions {
			b := byID[s.ID]
			require.Len(t, b.Turns, len(s.Turns))
			for k := range s.Turns {
				require.Equal(t, s.Turns[k].HashIDs, b.Turns[k].HashIDs)
				require.Equal(t, s.Turns[k].InputTokens, b.Turns[k].InputTokens)
				require.Equal(t, s.Turns[k].OutputTokens, b.Turns[k].OutputTokens)
				if k > 0 {
					require.Equal(t, s.Turns[k].Delay, b.Turns[k].Delay)
				}
			}
		}
	}
}

func TestDynamoWorkloadRoundTrip(t *testing.T) {
	seeds := uint64(8)
	if raceEnabled {
		seeds = 2
	}
	for seed := range seeds {
		w := Synthetic(SyntheticConfig{Sessions: 12, Seed: seed, SpawnProb: 0.3})
		p, err := Schedule(&w, TimingModel{})
		require.NoError(t, err)
		recs := PlanRecords(&w, p, 1_700_000_000_000)
		// Through the writer and back.
		var buf bytes.Buffer
		wr, err := NewWriter(WriterConfig{Sink: &buf, Compression: Compression(seed % 3)})
		require.NoError(t, err)
		for i := range recs {
			require.NoError(t, wr.Write(&recs[i]))
		}
		require.NoError(t, wr.Close())
		got, err := Read(&buf, "rt", ReadOptions{})
		require.NoError(t, err)
		require.NoError(t, got.Validate())
		require.False(t, got.OpenLoop)
		require.Equal(t, w.BlockTokens, got.BlockTokens)
		byID := map[string]Session{}
		for _, s := range got.Sessions {
			byID[s.ID] = s
		}
		require.Len(t, byID, len(w.Sessions))
		for _, s := range w.Sessions {
			g := byID[s.ID]
			require.Equal(t, s.Parent, g.Parent, "seed %d %s", seed, s.ID)
			if s.Parent != "" {
				require.Equal(t, s.ParentTurn, g.ParentTurn, "seed %d %s", seed, s.ID)
				require.InDelta(t, s.Start.Seconds(), g.Start.Seconds(), 0.002)
			}
			require.Len(t, g.Turns, len(s.Turns))
			for k := range s.Turns {
				a, b := s.Turns[k], g.Turns[k]
				require.Equal(t, a.HashIDs, b.HashIDs)
				require.Equal(t, a.InputTokens, b.InputTokens)
				require.Equal(t, a.OutputTokens, b.OutputTokens)
				require.Equal(t, a.FinishReason, b.FinishReason)
				require.ElementsMatch(t, a.WaitFor, b.WaitFor, "seed %d %s turn %d", seed, s.ID, k)
				if k > 0 {
					require.InDelta(t, a.Delay.Seconds(), b.Delay.Seconds(), 0.002, "seed %d %s turn %d", seed, s.ID, k)
				}
			}
		}
	}
}

func TestDynamoContextFreeIsOpenLoop(t *testing.T) {
	in := `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1777312801000,"request":{"request_id":"b","request_received_ms":1777312800500,"output_tokens":16,"replay":{"trace_block_size":64,"input_length":128,"input_sequence_hashes":[1,2]}}}
{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1777312801000,"request":{"request_id":"a","request_received_ms":1777312800000,"output_tokens":16,"replay":{"trace_block_size":64,"input_length":100,"input_sequence_hashes":[1,3]}}}
{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":1,"agent_context":{"session_id":"x"},"tool":{"tool_call_id":"c","tool_class":"t"}}`
	w, err := Read(strings.NewReader(in), "d", ReadOptions{})
	require.NoError(t, err)
	require.True(t, w.OpenLoop)
	require.Len(t, w.Sessions, 2)
	require.Equal(t, "request:a", w.Sessions[0].ID)
	require.Equal(t, 500*time.Millisecond, w.Sessions[1].Turns[0].Arrival)
	require.Equal(t, 100, w.Sessions[0].Turns[0].InputTokens)
}

func fuzzRead(f *testing.F, format Format, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Read(bytes.NewReader(data), "fuzz", ReadOptions{Format: format})
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.File != "fuzz" || pe.Line < 0 {
				t.Fatalf("error without file and line: %T %v", err, err)
			}
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("reader produced an invalid workload: %v", err)
		}
		if _, err := Summarize(&w); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzReadMooncake(f *testing.F) {
	fuzzRead(f, FormatMooncake,
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2]}`,
		"{\"session_id\":\"a\",\"input_length\":1}\n{\"session_id\":\"a\",\"delay\":5,\"input_length\":2}",
		`{"input_length":1e400}`, `{"input_length":"5"}`, `{"input_len`)
}

func FuzzReadClaudeCode(f *testing.F) {
	fuzzRead(f, FormatClaudeCode, claudeSample, `{"block_size":64,"requests":[{"t":0,"type":"subagent","requests":[]}]}`,
		`{"block_size":64,"requests":[{"t":1e300}]}`)
}

func FuzzReadDynamo(f *testing.F) {
	fuzzRead(f, FormatDynamo,
		`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":2000,"agent_context":{"session_id":"c","parent_session_id":"p"},"request":{"request_id":"1","request_received_ms":1000,"output_tokens":1}}`+"\n"+
			`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":900,"agent_context":{"session_id":"p","parent_session_id":"c"},"request":{"request_id":"2","request_received_ms":100,"output_tokens":1}}`,
		`{"event":{"schema":"dynamo.request.trace.v1","request":{"request_id":"x","event_time_unix_ms":1}}}`)
}

func FuzzReadAuto(f *testing.F) {
	fuzzRead(f, FormatAuto, claudeSample, `{"input_length":5}`, "\x1f\x8b\x08\x00", "\x28\xb5\x2f\xfd\x00")
}

// FuzzMooncakeFastParser checks the fast line parser against the
// encoding/json reference: whatever the fast path accepts, encoding/json
// accepts with the same values.
func FuzzMooncakeFastParser(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}`,
		`{"session_id":"a","delay":2.5,"input_length":0,"hash_ids":[]}`, `{}`, `{"input_length":01}`,
		`{"hash_ids":[18446744073709551615],"input_length":1}`, `{"timestamp":1e3,"input_length":1} x`,
		`{"input_length":1,"input_length":2}`, `{"delay":-0,"input_length":3}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		fr, ids, ok := parseMooncakeFast([]byte(line), nil)
		if !ok {
			return
		}
		var row mooncakeRow
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("fast path accepted what encoding/json rejects: %v", err)
		}
		eq := func(name string, has bool, v float64, p *float64) {
			if has != (p != nil) || (p != nil && *p != v) {
				t.Fatalf("%s differs: fast %v %v, json %v", name, has, v, p)
			}
		}
		eq("timestamp", fr.hasTS, fr.ts, row.Timestamp)
		eq("delay", fr.hasDelay, fr.delay, row.Delay)
		if fr.hasIn != (row.InputLength != nil) || (fr.hasIn && fr.in != *row.InputLength) {
			t.Fatalf("input_length differs")
		}
		if fr.hasOut != (row.OutputLength != nil) || (fr.hasOut && fr.out != *row.OutputLength) {
			t.Fatalf("output_length differs")
		}
		if fr.hasSession != (row.SessionID != nil) || (fr.hasSession && string(fr.session) != *row.SessionID) {
			t.Fatalf("session_id differs")
		}
		if len(ids) != len(row.HashIDs) {
			t.Fatalf("hash_ids differ: %v vs %v", ids, row.HashIDs)
		}
		for i := range ids {
			if ids[i] != row.HashIDs[i] {
				t.Fatalf("hash_ids differ: %v vs %v", ids, row.HashIDs)
			}
		}
	})
}

func TestMooncakeFastParserRejectsNonJSONNumbers(t *testing.T) {
	for _, n := range []string{"1.", "01.5", "1.e5", "1e", "00", ".5", "1e+", "-1"} {
		_, _, ok := parseMooncakeFast([]byte(`{"timestamp":`+n+`,"input_length":1}`), nil)
		require.False(t, ok, n)
	}
	for _, n := range []string{"0", "0.5", "10e-3", "1E+2", "27482"} {
		_, _, ok := parseMooncakeFast([]byte(`{"timestamp":`+n+`,"input_length":1}`), nil)
		require.True(t, ok, n)
	}
}
