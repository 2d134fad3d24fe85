package trace

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var strPool = []string{"", "a", "sess-1", "ünïcødé", "quote\"back\\slash", "ctl\x00\x01\x1f\n\t\r", "bad\xff\xfeutf8",
	"line\u2028sep", "<html>&", strings.Repeat("x", 300)}

func randStr(r *rand.Rand) string { return strPool[r.IntN(len(strPool))] }

// stdString is the reference: what encoding/json makes of s in a round trip.
func stdString(s string) string {
	b, _ := json.Marshal(s)
	var out string
	_ = json.Unmarshal(b, &out)
	return out
}

func randFloat(r *rand.Rand) float64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return math.NaN()
	case 2:
		return math.Inf(1)
	case 3:
		return float64(r.IntN(100000))
	case 4:
		return r.Float64() * 1e6
	}
	return r.NormFloat64() * 1e-3
}

func randRecord(r *rand.Rand) Record {
	rec := Record{
		EventType:       []string{EventRequestEnd, EventToolEnd, ""}[r.IntN(3)],
		EventTimeUnixMs: r.Uint64() >> uint(r.IntN(64)),
		EventSource:     []string{"", SourceDynamo, SourceHarness}[r.IntN(3)],
	}
	if r.IntN(3) > 0 {
		rec.AgentContext = AgentContext{SessionID: randStr(r) + "s", ParentSessionID: randStr(r), SessionFinal: r.IntN(2) == 0}
	}
	if r.IntN(4) > 0 {
		q := &rec.Request
		q.RequestID = "r" + randStr(r)
		q.XRequestID = randStr(r)
		q.Model = randStr(r)
		q.InputTokens = uint64(r.IntN(200000))
		q.OutputTokens = uint64(r.IntN(5000))
		q.CachedTokens = uint64(r.IntN(1000))
		q.RequestReceivedMs = r.Uint64() >> 12
		q.PrefillWaitTimeMs, q.PrefillTimeMs, q.TTFTMs = randFloat(r), randFloat(r), randFloat(r)
		q.TotalTimeMs, q.AvgITLMs, q.KVHitRate = randFloat(r), randFloat(r), randFloat(r)
		q.KVTransferEstimatedLatencyMs = randFloat(r)
		q.QueueDepth = uint64(r.IntN(3))
		if r.IntN(2) == 0 {
			q.Worker = WorkerInfo{PrefillWorkerID: r.Uint64(), PrefillDPRank: uint32(r.IntN(3)), DecodeWorkerID: uint64(r.IntN(2)), DecodeDPRank: uint32(r.IntN(2))}
		}
		if r.IntN(2) == 0 {
			n := r.IntN(20)
			q.Replay = Replay{TraceBlockSize: 1 + r.IntN(128), InputLength: r.IntN(5000)}
			for range n {
				q.Replay.InputSequenceHashes = append(q.Replay.InputSequenceHashes, r.Uint64())
			}
		}
		if r.IntN(2) == 0 {
			f := &q.FinishReasonMetadata
			f.FinishReason = []string{"", "stop", "tool_calls", "length"}[r.IntN(4)]
			f.BackendFinishReason = randStr(r)
			f.StopReason = StopReason(randStr(r))
			for k := range r.IntN(3) {
				f.ToolCalls = append(f.ToolCalls, ToolCallMeta{ChoiceIndex: uint32(r.IntN(2)), ToolCallIndex: uint32(k), ID: randStr(r), Name: randStr(r)})
			}
		}
		if r.IntN(2) == 0 {
			q.Admission = Admission{QueuedMs: randFloat(r), Pauses: r.IntN(3), PausedMs: randFloat(r), Resumed: r.IntN(2) == 0}
		}
	}
	if r.IntN(3) == 0 {
		rec.Tool = ToolEvent{ToolCallID: "c" + randStr(r), ToolClass: randStr(r), StartedAtUnixMs: uint64(r.IntN(1e9)),
			EndedAtUnixMs: uint64(r.IntN(1e9)), Status: randStr(r), DurationMs: randFloat(r), OutputTokens: uint64(r.IntN(10)),
			OutputBytes: uint64(r.IntN(10)), ErrorType: randStr(r)}
	}
	if r.IntN(4) == 0 {
		rec.Payload = &Payload{RequestID: "p", Endpoint: randStr(r), Model: randStr(r),
			Request: json.RawMessage(`{"messages":[{"role":"user","content":"hi"}]}`), PayloadComplete: r.IntN(2) == 0}
	}
	return rec
}

// normalize maps a record to what survives encoding: the reference model
// of AppendJSON's output as decoded by encoding/json.
func normalize(rec Record, content bool) Record {
	f := func(v float64) float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
		return v
	}
	s := stdString
	out := rec
	out.Schema = SchemaV1
	if out.EventType == "" {
		out.EventType = EventRequestEnd
	}
	out.EventSource = s(rec.EventSource)
	if rec.AgentContext.SessionID == "" {
		out.AgentContext = AgentContext{}
	} else {
		out.AgentContext = AgentContext{SessionID: s(rec.AgentContext.SessionID), ParentSessionID: s(rec.AgentContext.ParentSessionID), SessionFinal: rec.AgentContext.SessionFinal}
	}
	if rec.Request.RequestID == "" {
		out.Request = Request{}
	} else {
		q := &out.Request
		q.RequestID, q.XRequestID, q.Model = s(q.RequestID), s(q.XRequestID), s(q.Model)
		q.PrefillWaitTimeMs, q.PrefillTimeMs, q.TTFTMs = f(q.PrefillWaitTimeMs), f(q.PrefillTimeMs), f(q.TTFTMs)
		q.TotalTimeMs, q.AvgITLMs, q.KVHitRate = f(q.TotalTimeMs), f(q.AvgITLMs), f(q.KVHitRate)
		q.KVTransferEstimatedLatencyMs = f(q.KVTransferEstimatedLatencyMs)
		if q.Replay.TraceBlockSize == 0 {
			q.Replay = Replay{}
		} else if q.Replay.InputSequenceHashes == nil {
			q.Replay.InputSequenceHashes = []uint64{}
		}
		fm := &q.FinishReasonMetadata
		fm.BackendFinishReason, fm.StopReason = s(fm.BackendFinishReason), StopReason(s(string(fm.StopReason)))
		calls := append([]ToolCallMeta(nil), fm.ToolCalls...)
		for i := range calls {
			calls[i].ID, calls[i].Name = s(calls[i].ID), s(calls[i].Name)
		}
		fm.ToolCalls = calls
		a := &q.Admission
		a.QueuedMs, a.PausedMs = f(a.QueuedMs), f(a.PausedMs)
	}
	if rec.Tool.ToolCallID == "" {
		out.Tool = ToolEvent{}
	} else {
		t := &out.Tool
		t.ToolCallID, t.ToolClass, t.Status, t.ErrorType = s(t.ToolCallID), s(t.ToolClass), s(t.Status), s(t.ErrorType)
		t.DurationMs = f(t.DurationMs)
	}
	if !content || rec.Payload == nil {
		out.Payload = nil
	} else {
		p := *rec.Payload
		p.Endpoint, p.Model = s(p.Endpoint), s(p.Model)
		out.Payload = &p
	}
	return out
}

func TestRecordJSONMatchesEncodingJSON(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 1))
		rec := randRecord(r)
		for _, content := range []bool{false, true} {
			b := rec.AppendJSON(nil, content)
			require.True(t, json.Valid(b), "seed %d: invalid JSON %s", seed, b)
			var got Record
			require.NoError(t, json.Unmarshal(b, &got), "seed %d", seed)
			require.Equal(t, normalize(rec, content), got, "seed %d content %v: %s", seed, content, b)
			// Decoding and re-encoding is a fixed point.
			require.Equal(t, string(b), string(got.AppendJSON(nil, content)), "seed %d", seed)
		}
	}
}

func TestRecordDynamoShapes(t *testing.T) {
	// Records as Dynamo's docs and tests show them decode field by field.
	for _, tc := range []struct {
		name, line string
		check      func(t *testing.T, r Record)
	}{
		{"context-free", `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1777312801000,"request":{"request_id":"dynamo-request-id","request_received_ms":1777312800000,"output_tokens":16,"replay":{"trace_block_size":64,"input_length":128,"input_sequence_hashes":[14879255164371896291,274632075616497421]}}}`,
			func(t *testing.T, r Record) {
				require.Equal(t, uint64(14879255164371896291), r.Request.Replay.InputSequenceHashes[0])
				require.Equal(t, uint64(16), r.Request.OutputTokens)
				require.Empty(t, r.AgentContext.SessionID)
			}},
		{"agent", `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":2000,"event_source":"dynamo","agent_context":{"session_id":"session-1:researcher","parent_session_id":"p"},"request":{"request_id":"req-1","x_request_id":"caller-1","model":"test-model","input_tokens":100,"output_tokens":10,"cached_tokens":80,"request_received_ms":1000,"prefill_wait_time_ms":5,"prefill_time_ms":7,"ttft_ms":12,"total_time_ms":50,"avg_itl_ms":4.2,"kv_hit_rate":0.8,"queue_depth":2,"finish_reason_metadata":{"finish_reason":"tool_calls","backend_finish_reason":"stop","stop_reason":"END","tool_calls":[{"choice_index":0,"tool_call_index":0,"id":"call-1","name":"web_search"}],"choices":[{"choice_index":0,"finish_reason":"tool_calls"}]},"worker":{"prefill_worker_id":1,"prefill_dp_rank":0,"decode_worker_id":2,"decode_dp_rank":0}}}`,
			func(t *testing.T, r Record) {
				require.Equal(t, "p", r.AgentContext.ParentSessionID)
				require.Equal(t, "web_search", r.Request.FinishReasonMetadata.ToolCalls[0].Name)
				require.Equal(t, StopReason("END"), r.Request.FinishReasonMetadata.StopReason)
				require.Equal(t, 0.8, r.Request.KVHitRate)
				require.Equal(t, uint64(2), r.Request.Worker.DecodeWorkerID)
			}},
		{"wrapped", `{"timestamp":10,"event":{"schema":"dynamo.request.trace.v1","event_type":"tool_end","event_time_unix_ms":1300,"event_source":"harness","agent_context":{"session_id":"s"},"tool":{"tool_call_id":"call-1","tool_class":"web_search","status":"succeeded","started_at_unix_ms":1000,"ended_at_unix_ms":1250,"duration_ms":250,"output_bytes":2048}}}`,
			func(t *testing.T, r Record) {
				require.Equal(t, EventToolEnd, r.EventType)
				require.Equal(t, uint64(1250), r.Tool.EndedAtUnixMs)
			}},
		{"numeric stop reason", `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"r","output_tokens":1,"finish_reason_metadata":{"stop_reason":151645}}}`,
			func(t *testing.T, r Record) {
				require.Equal(t, StopReason("151645"), r.Request.FinishReasonMetadata.StopReason)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Record
			require.NoError(t, json.Unmarshal([]byte(tc.line), &r))
			require.Equal(t, SchemaV1, r.Schema)
			tc.check(t, r)
		})
	}
}

func TestRecordContentFreeByDefault(t *testing.T) {
	rec := Record{Request: Request{RequestID: "r"}, Payload: &Payload{RequestID: "r", Request: json.RawMessage(`{"secret":1}`)}}
	require.NotContains(t, string(rec.AppendJSON(nil, false)), "secret")
	require.Contains(t, string(rec.AppendJSON(nil, true)), `"request":{"secret":1}`)
	// Invalid raw JSON is never written raw.
	rec.Payload.Request = json.RawMessage(`{bad`)
	require.True(t, json.Valid(rec.AppendJSON(nil, true)))
}

func FuzzRecordJSON(f *testing.F) {
	f.Add(`{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"r","output_tokens":1}}`)
	f.Add(`{"event":{"schema":"dynamo.request.trace.v1"}}`)
	f.Add(`{"request":{"finish_reason_metadata":{"stop_reason":1e999}}}`)
	f.Fuzz(func(t *testing.T, s string) {
		var r Record
		if json.Unmarshal([]byte(s), &r) != nil {
			return
		}
		b := r.AppendJSON(nil, true)
		if !json.Valid(b) {
			t.Fatalf("invalid output %s", b)
		}
		var back Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("re-decode: %v: %s", err, b)
		}
		if got := back.AppendJSON(nil, true); string(got) != string(b) {
			t.Fatalf("not a fixed point:\n%s\n%s", b, got)
		}
	})
}

func TestAppendUint(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	vals := []uint64{0, 1, 9, 10, 99, 100, 999, 1000, 1<<64 - 1, 1e19, 1e19 - 1, 1 << 63}
	for i := range 19 {
		vals = append(vals, pow10[i]-1, pow10[i], pow10[i]+1)
	}
	for range 10000 {
		vals = append(vals, r.Uint64()>>uint(r.IntN(64)))
	}
	for _, v := range vals {
		require.Equal(t, strconv.FormatUint(v, 10), string(appendUint([]byte("x"), v))[1:], "%d", v)
	}
}
