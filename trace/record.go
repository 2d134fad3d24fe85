package trace

import (
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"strconv"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// SchemaV1 is the schema tag of every record, the same as NVIDIA Dynamo's
// request traces, so Dynamo's replay and Perfetto tools read our files.
const SchemaV1 = "dynamo.request.trace.v1"

// Event types of a Record.
const (
	EventRequestEnd     = "request_end"
	EventToolStart      = "tool_start"
	EventToolEnd        = "tool_end"
	EventToolError      = "tool_error"
	EventRequestPayload = "request_payload"
)

// Event sources of a Record.
const (
	SourceDynamo  = "dynamo"
	SourceHarness = "harness"
)

// Record is one line of a request trace: a request_end record for every
// finished model request, or a tool event. Field names and JSON names match
// Dynamo's dynamo.request.trace.v1 (see the package documentation for the
// exact mapping); the admission block is an agentkv extension that Dynamo's
// readers ignore.
//
// Optional numbers are plain values: zero means absent and is not written.
// A Record is plain data and not safe for concurrent mutation; Writer.Write
// encodes it before returning, so the caller may reuse it and its slices.
type Record struct {
	Schema          string       `json:"schema"`
	EventType       string       `json:"event_type"`
	EventTimeUnixMs uint64       `json:"event_time_unix_ms"`
	EventSource     string       `json:"event_source,omitempty"`
	AgentContext    AgentContext `json:"agent_context"`
	Request         Request      `json:"request"`
	Tool            ToolEvent    `json:"tool"`
	// Payload holds prompt and response content. It is written only when
	// the Writer was configured with IncludeContent; otherwise the writer
	// drops it (and skips request_payload records entirely).
	Payload *Payload `json:"payload,omitempty"`
}

// AgentContext identifies the agent program a request belongs to (Dynamo's
// agent_context; absent when SessionID is "").
type AgentContext struct {
	SessionID       string `json:"session_id"`
	ParentSessionID string `json:"parent_session_id,omitempty"`
	SessionFinal    bool   `json:"session_final,omitempty"`
	// SessionInferred marks a session the router inferred from the prompt
	// (no header or body field named one); agentkv's extension.
	SessionInferred bool `json:"session_inferred,omitempty"`
}

// Request holds the metrics of one finished model request (Dynamo's
// RequestTraceMetrics; absent when RequestID is "").
type Request struct {
	RequestID                    string         `json:"request_id"`
	XRequestID                   string         `json:"x_request_id,omitempty"`
	Model                        string         `json:"model,omitempty"`
	InputTokens                  uint64         `json:"input_tokens,omitempty"`
	OutputTokens                 uint64         `json:"output_tokens"`
	CachedTokens                 uint64         `json:"cached_tokens,omitempty"`
	RequestReceivedMs            uint64         `json:"request_received_ms,omitempty"`
	PrefillWaitTimeMs            float64        `json:"prefill_wait_time_ms,omitempty"`
	PrefillTimeMs                float64        `json:"prefill_time_ms,omitempty"`
	TTFTMs                       float64        `json:"ttft_ms,omitempty"`
	TotalTimeMs                  float64        `json:"total_time_ms,omitempty"`
	AvgITLMs                     float64        `json:"avg_itl_ms,omitempty"`
	KVHitRate                    float64        `json:"kv_hit_rate,omitempty"`
	KVTransferEstimatedLatencyMs float64        `json:"kv_transfer_estimated_latency_ms,omitempty"`
	QueueDepth                   uint64         `json:"queue_depth,omitempty"`
	Worker                       WorkerInfo     `json:"worker"`
	Replay                       Replay         `json:"replay"`
	FinishReasonMetadata         FinishMetadata `json:"finish_reason_metadata"`
	// Admission is the agentkv extension: what admission control did to
	// this request. Absent when all zero.
	Admission Admission `json:"admission"`
	// API is the agentkv extension naming the front-door API the request
	// came in on (gateway.API names: chat, completions, responses,
	// messages); "" when unknown.
	API string `json:"api,omitempty"`
	// ErrorKind is the agentkv extension saying how a failed request
	// failed (the gateway's kinds: connect, status, cut, client_gone,
	// ...); "" for a success.
	ErrorKind string `json:"error_kind,omitempty"`
}

// WorkerInfo says which workers served a request (absent when all zero).
type WorkerInfo struct {
	PrefillWorkerID uint64 `json:"prefill_worker_id,omitempty"`
	PrefillDPRank   uint32 `json:"prefill_dp_rank,omitempty"`
	DecodeWorkerID  uint64 `json:"decode_worker_id,omitempty"`
	DecodeDPRank    uint32 `json:"decode_dp_rank,omitempty"`
}

// Replay is what a replayer needs to rebuild the request's KV shape:
// Dynamo's sequence hashes of the prompt's blocks, the partial last block
// included (len == ceil(InputLength/TraceBlockSize)). Absent when
// TraceBlockSize is 0.
type Replay struct {
	TraceBlockSize      int      `json:"trace_block_size"`
	InputLength         int      `json:"input_length"`
	InputSequenceHashes []uint64 `json:"input_sequence_hashes"`
}

// FinishMetadata is Dynamo's finish_reason_metadata: the final finish
// reason and the names and ids of the tool calls, never their arguments.
type FinishMetadata struct {
	FinishReason        string         `json:"finish_reason,omitempty"`
	BackendFinishReason string         `json:"backend_finish_reason,omitempty"`
	StopReason          StopReason     `json:"stop_reason,omitempty"`
	ToolCalls           []ToolCallMeta `json:"tool_calls,omitempty"`
}

// StopReason is the backend's stop condition: a stop string, or a stop token
// id, which is kept as its decimal text.
type StopReason string

// UnmarshalJSON accepts a JSON string or number.
func (s *StopReason) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var v string
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*s = StopReason(v)
		return nil
	}
	if string(b) == "null" {
		*s = ""
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("stop_reason: want a string or a number, got %s", truncate(b, 40))
	}
	*s = StopReason(n.String())
	return nil
}

// ToolCallMeta names one tool call of a response.
type ToolCallMeta struct {
	ChoiceIndex   uint32 `json:"choice_index"`
	ToolCallIndex uint32 `json:"tool_call_index"`
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
}

// Admission records the admission-control decisions that touched a request
// (agentkv extension; absent when all zero).
type Admission struct {
	// QueuedMs is how long the request waited for admission.
	QueuedMs float64 `json:"queued_ms,omitempty"`
	// Pauses counts how often the request's program was paused since its
	// previous request; PausedMs is the total time paused.
	Pauses   int     `json:"pauses,omitempty"`
	PausedMs float64 `json:"paused_ms,omitempty"`
	// Resumed is true when the request was the first after a resume.
	Resumed bool `json:"resumed,omitempty"`
}

// ToolEvent is a harness tool event (Dynamo's tool object; absent when
// ToolCallID is "").
type ToolEvent struct {
	ToolCallID      string  `json:"tool_call_id"`
	ToolClass       string  `json:"tool_class"`
	StartedAtUnixMs uint64  `json:"started_at_unix_ms,omitempty"`
	EndedAtUnixMs   uint64  `json:"ended_at_unix_ms,omitempty"`
	Status          string  `json:"status,omitempty"`
	DurationMs      float64 `json:"duration_ms,omitempty"`
	OutputTokens    uint64  `json:"output_tokens,omitempty"`
	OutputBytes     uint64  `json:"output_bytes,omitempty"`
	ErrorType       string  `json:"error_type,omitempty"`
}

// Payload is opt-in content: the raw request and response bodies.
type Payload struct {
	RequestID       string          `json:"request_id"`
	Endpoint        string          `json:"endpoint,omitempty"`
	Model           string          `json:"model,omitempty"`
	Request         json.RawMessage `json:"request,omitempty"`
	Response        json.RawMessage `json:"response,omitempty"`
	PayloadComplete bool            `json:"payload_complete"`
}

// UnmarshalJSON decodes a record, also accepting Dynamo's wrapped form
// {"timestamp": ..., "event": {record}}.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	var w struct {
		plain
		Event *plain `json:"event"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Schema == "" && w.Event != nil {
		*r = Record(*w.Event)
		return nil
	}
	*r = Record(w.plain)
	return nil
}

// AppendJSON appends the record as one line of JSON (without the newline)
// and returns the extended buffer. Payload is written only when content is
// true. It allocates nothing beyond growing dst.
func (r *Record) AppendJSON(dst []byte, content bool) []byte {
	schema := r.Schema
	if schema == "" {
		schema = SchemaV1
	}
	ev := r.EventType
	if ev == "" {
		ev = EventRequestEnd
	}
	dst = append(dst, `{"schema":`...)
	dst = jsonenc.AppendString(dst, schema)
	dst = append(dst, `,"event_type":`...)
	dst = jsonenc.AppendString(dst, ev)
	dst = append(dst, `,"event_time_unix_ms":`...)
	dst = strconv.AppendUint(dst, r.EventTimeUnixMs, 10)
	if r.EventSource != "" {
		dst = append(dst, `,"event_source":`...)
		dst = jsonenc.AppendString(dst, r.EventSource)
	}
	if a := &r.AgentContext; a.SessionID != "" {
		dst = append(dst, `,"agent_context":{"session_id":`...)
		dst = jsonenc.AppendString(dst, a.SessionID)
		if a.ParentSessionID != "" {
			dst = append(dst, `,"parent_session_id":`...)
			dst = jsonenc.AppendString(dst, a.ParentSessionID)
		}
		if a.SessionFinal {
			dst = append(dst, `,"session_final":true`...)
		}
		if a.SessionInferred {
			dst = append(dst, `,"session_inferred":true`...)
		}
		dst = append(dst, '}')
	}
	if r.Request.RequestID != "" {
		dst = append(dst, `,"request":`...)
		dst = r.Request.appendJSON(dst)
	}
	if t := &r.Tool; t.ToolCallID != "" {
		dst = append(dst, `,"tool":{"tool_call_id":`...)
		dst = jsonenc.AppendString(dst, t.ToolCallID)
		dst = append(dst, `,"tool_class":`...)
		dst = jsonenc.AppendString(dst, t.ToolClass)
		dst = appendUintField(dst, "started_at_unix_ms", t.StartedAtUnixMs)
		dst = appendUintField(dst, "ended_at_unix_ms", t.EndedAtUnixMs)
		dst = appendStringField(dst, "status", t.Status)
		dst = appendFloatField(dst, "duration_ms", t.DurationMs)
		dst = appendUintField(dst, "output_tokens", t.OutputTokens)
		dst = appendUintField(dst, "output_bytes", t.OutputBytes)
		dst = appendStringField(dst, "error_type", t.ErrorType)
		dst = append(dst, '}')
	}
	if content && r.Payload != nil {
		p := r.Payload
		dst = append(dst, `,"payload":{"request_id":`...)
		dst = jsonenc.AppendString(dst, p.RequestID)
		dst = appendStringField(dst, "endpoint", p.Endpoint)
		dst = appendStringField(dst, "model", p.Model)
		dst = appendRawField(dst, "request", p.Request)
		dst = appendRawField(dst, "response", p.Response)
		if p.PayloadComplete {
			dst = append(dst, `,"payload_complete":true`...)
		} else {
			dst = append(dst, `,"payload_complete":false`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

func (q *Request) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"request_id":`...)
	dst = jsonenc.AppendString(dst, q.RequestID)
	dst = appendStringField(dst, "x_request_id", q.XRequestID)
	dst = appendStringField(dst, "model", q.Model)
	dst = appendUintField(dst, "input_tokens", q.InputTokens)
	dst = append(dst, `,"output_tokens":`...)
	dst = strconv.AppendUint(dst, q.OutputTokens, 10)
	dst = appendUintField(dst, "cached_tokens", q.CachedTokens)
	dst = appendUintField(dst, "request_received_ms", q.RequestReceivedMs)
	dst = appendFloatField(dst, "prefill_wait_time_ms", q.PrefillWaitTimeMs)
	dst = appendFloatField(dst, "prefill_time_ms", q.PrefillTimeMs)
	dst = appendFloatField(dst, "ttft_ms", q.TTFTMs)
	dst = appendFloatField(dst, "total_time_ms", q.TotalTimeMs)
	dst = appendFloatField(dst, "avg_itl_ms", q.AvgITLMs)
	dst = appendFloatField(dst, "kv_hit_rate", q.KVHitRate)
	dst = appendFloatField(dst, "kv_transfer_estimated_latency_ms", q.KVTransferEstimatedLatencyMs)
	dst = appendUintField(dst, "queue_depth", q.QueueDepth)
	dst = appendStringField(dst, "api", q.API)
	dst = appendStringField(dst, "error_kind", q.ErrorKind)
	if w := &q.Worker; *w != (WorkerInfo{}) {
		dst = append(dst, `,"worker":{`...)
		n := len(dst)
		dst = appendUintField(dst, "prefill_worker_id", w.PrefillWorkerID)
		dst = appendUintField(dst, "prefill_dp_rank", uint64(w.PrefillDPRank))
		dst = appendUintField(dst, "decode_worker_id", w.DecodeWorkerID)
		dst = appendUintField(dst, "decode_dp_rank", uint64(w.DecodeDPRank))
		dst = append(dst[:n], dst[n+1:]...) // drop the first field's comma
		dst = append(dst, '}')
	}
	if p := &q.Replay; p.TraceBlockSize != 0 {
		dst = append(dst, `,"replay":{"trace_block_size":`...)
		dst = strconv.AppendInt(dst, int64(p.TraceBlockSize), 10)
		dst = append(dst, `,"input_length":`...)
		dst = strconv.AppendInt(dst, int64(p.InputLength), 10)
		dst = append(dst, `,"input_sequence_hashes":[`...)
		for i, h := range p.InputSequenceHashes {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendUint(dst, h)
		}
		dst = append(dst, "]}"...)
	}
	if f := &q.FinishReasonMetadata; f.FinishReason != "" || f.BackendFinishReason != "" || f.StopReason != "" || len(f.ToolCalls) > 0 {
		dst = append(dst, `,"finish_reason_metadata":{`...)
		n := len(dst)
		dst = appendStringField(dst, "finish_reason", f.FinishReason)
		dst = appendStringField(dst, "backend_finish_reason", f.BackendFinishReason)
		dst = appendStringField(dst, "stop_reason", string(f.StopReason))
		if len(f.ToolCalls) > 0 {
			dst = append(dst, `,"tool_calls":[`...)
			for i := range f.ToolCalls {
				c := &f.ToolCalls[i]
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"choice_index":`...)
				dst = strconv.AppendUint(dst, uint64(c.ChoiceIndex), 10)
				dst = append(dst, `,"tool_call_index":`...)
				dst = strconv.AppendUint(dst, uint64(c.ToolCallIndex), 10)
				dst = appendStringField(dst, "id", c.ID)
				dst = appendStringField(dst, "name", c.Name)
				dst = append(dst, '}')
			}
			dst = append(dst, ']')
		}
		dst = append(dst[:n], dst[n+1:]...)
		dst = append(dst, '}')
	}
	if a := &q.Admission; *a != (Admission{}) {
		mark := len(dst)
		dst = append(dst, `,"admission":{`...)
		n := len(dst)
		dst = appendFloatField(dst, "queued_ms", a.QueuedMs)
		dst = appendUintField(dst, "pauses", uint64(max(a.Pauses, 0)))
		dst = appendFloatField(dst, "paused_ms", a.PausedMs)
		if a.Resumed {
			dst = append(dst, `,"resumed":true`...)
		}
		if len(dst) == n { // only NaN, infinite or negative values: nothing to say
			dst = dst[:mark]
		} else {
			dst = append(dst[:n], dst[n+1:]...)
			dst = append(dst, '}')
		}
	}
	return append(dst, '}')
}

func appendStringField(dst []byte, name, v string) []byte {
	if v == "" {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return jsonenc.AppendString(dst, v)
}

func appendUintField(dst []byte, name string, v uint64) []byte {
	if v == 0 {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	return appendUint(dst, v)
}

// appendFloatField writes v in the shortest form that parses back to the
// same float64. Zero, NaN and infinities are not written (JSON has no NaN).
func appendFloatField(dst []byte, name string, v float64) []byte {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.AppendInt(dst, int64(v), 10) // integral: no float formatting
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

func appendRawField(dst []byte, name string, v json.RawMessage) []byte {
	if len(v) == 0 {
		return dst
	}
	dst = append(dst, ',', '"')
	dst = append(dst, name...)
	dst = append(dst, '"', ':')
	if !json.Valid(v) {
		// Never write invalid JSON: keep the bytes as a string instead.
		return jsonenc.AppendString(dst, string(v))
	}
	return append(dst, v...)
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// MarshalJSON encodes the record exactly as AppendJSON does, payload
// included, so encoding/json users get the same bytes as the Writer.
func (r Record) MarshalJSON() ([]byte, error) {
	return r.AppendJSON(nil, true), nil
}

var pow10 = [...]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14,
	1e15, 1e16, 1e17, 1e18, 1e19}

const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"40414243444546474849505152535455565758596061626364656667686970717273747576777879" +
	"8081828384858687888990919293949596979899"

// appendUint appends v in decimal, writing the digits in place (strconv
// formats into a scratch array and copies).
func appendUint(dst []byte, v uint64) []byte {
	// Digits: log10 from the bit length, corrected by one comparison.
	t := (bits.Len64(v) * 1233) >> 12 // about log10(2^bitlen), at most 19
	n := t + 1
	if v < pow10[t] {
		n--
	}
	n = max(n, 1)
	l := len(dst)
	if cap(dst)-l < n {
		dst = append(dst, make([]byte, n)...)
	} else {
		dst = dst[:l+n]
	}
	i := l + n
	for v >= 100 {
		q := v / 100
		r := (v - q*100) * 2
		i -= 2
		dst[i], dst[i+1] = digitPairs[r], digitPairs[r+1]
		v = q
	}
	if v >= 10 {
		r := v * 2
		dst[i-2], dst[i-1] = digitPairs[r], digitPairs[r+1]
	} else {
		dst[i-1] = byte('0' + v)
	}
	return dst
}
