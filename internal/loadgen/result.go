package loadgen

import (
	"strconv"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// ErrorKind classifies a failed request; "" is success.
type ErrorKind string

// Error kinds. An HTTP error's kind is KindHTTP and its Result.Status says
// which; Summary.Errors keys it as "http_<status>".
const (
	KindNone        ErrorKind = ""
	KindHTTP        ErrorKind = "http"          // a non-2xx status
	KindTimeout     ErrorKind = "timeout"       // Config.Timeout passed before the reply ended
	KindConnect     ErrorKind = "connect"       // the connection could not be made
	KindTransport   ErrorKind = "transport"     // the request failed before a reply otherwise
	KindStream      ErrorKind = "stream"        // the reply broke off while it was read
	KindMalformed   ErrorKind = "malformed_sse" // the reply held data that is not a JSON event, or none at all
	KindStreamError ErrorKind = "stream_error"  // the server sent an {"error": ...} event
	KindCanceled    ErrorKind = "canceled"      // the run was cancelled (not counted as an error)
)

// Result is one request of a run. It is plain data; Results handed to
// Config.OnResult or returned in a Report belong to the caller, except
// HashIDs, which is shared with the workload and read-only.
type Result struct {
	// Session and Parent are the session ids as sent (SessionPrefix
	// applied); Turn indexes the trace session's turns; Final marks the
	// session's last turn.
	Session, Parent string
	Turn            int
	Final           bool
	// RequestID is the X-Request-Id sent: "SESSION/TURN".
	RequestID string
	Model     string
	// Sent is when the request was dispatched (Config.Now), the start of
	// its TTFT and E2E; Offset is Sent from the start of the run.
	Sent   time.Time
	Offset time.Duration
	// Lag is how late an open-loop request was sent after its scheduled
	// arrival (waiting for a concurrency slot or for the sender); zero in
	// closed-loop runs.
	Lag time.Duration
	// TTFT is the time to the first event carrying generated text (zero
	// when none came); E2E the time to the end of the reply.
	TTFT, E2E time.Duration
	// Status is the HTTP status (0 when no reply came).
	Status int
	// Error is "" for a successful request; Detail says more (the first
	// bytes of an error body, or the Go error).
	Error  ErrorKind
	Detail string
	// PromptTokens, CompletionTokens and CachedTokens are the server's
	// usage (HasUsage; without it CompletionTokens counts the events that
	// carried text, roughly one token each). CachedTokens is
	// usage.prompt_tokens_details.cached_tokens (HasCached when reported).
	PromptTokens, CompletionTokens, CachedTokens int
	HasUsage, HasCached                          bool
	// Events counts the well-formed stream events; Malformed the data
	// that were not JSON objects.
	Events, Malformed int
	FinishReason      string
	// InputTokens and OutputTokens are the trace turn's; Words is the
	// prompt length sent, in words (≈ tokens, see Prompter).
	InputTokens, OutputTokens, Words int
	// BlockTokens and HashIDs describe the prompt's blocks (the trace's).
	BlockTokens int
	HashIDs     []uint64

	seq int64 // the order of sending, which breaks ties of Sent
}

// OK reports whether the request succeeded.
func (r *Result) OK() bool { return r.Error == KindNone }

// errorKey is the key of a failed request in Summary.Errors.
func (r *Result) errorKey() string {
	if r.Error == KindHTTP {
		return "http_" + strconv.Itoa(r.Status)
	}
	return string(r.Error)
}

// Record renders the result as a dynamo.request.trace.v1 request_end record
// measured at the client (event_source "harness"): the server's token
// counts (the trace's input length when the server reported no usage),
// TTFT and total time, the KV hit rate as cached / prompt tokens, and the
// replay block of the trace turn (its hash ids and input length), so that
// the run can be replayed again. A failed request has finish reason "error"
// and its ErrorKind (or "http_STATUS") as backend_finish_reason.
func (r *Result) Record() trace.Record {
	rec := trace.Record{
		Schema:          trace.SchemaV1,
		EventType:       trace.EventRequestEnd,
		EventTimeUnixMs: unixMs(r.Sent.Add(r.E2E)),
		EventSource:     trace.SourceHarness,
		AgentContext:    trace.AgentContext{SessionID: r.Session, ParentSessionID: r.Parent, SessionFinal: r.Final},
	}
	q := &rec.Request
	q.RequestID = r.RequestID
	q.XRequestID = r.RequestID
	q.Model = r.Model
	q.InputTokens = uint64(r.InputTokens)
	if r.HasUsage {
		q.InputTokens = uint64(max(r.PromptTokens, 0))
	}
	q.OutputTokens = uint64(max(r.CompletionTokens, 0))
	q.CachedTokens = uint64(max(r.CachedTokens, 0))
	q.RequestReceivedMs = unixMs(r.Sent)
	q.TTFTMs = ms(r.TTFT)
	q.TotalTimeMs = ms(r.E2E)
	if r.CompletionTokens > 1 && r.TTFT > 0 {
		q.AvgITLMs = ms(r.E2E-r.TTFT) / float64(r.CompletionTokens-1)
	}
	if r.HasCached && r.PromptTokens > 0 {
		q.KVHitRate = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	if bt := r.BlockTokens; bt > 0 && len(r.HashIDs) > 0 && len(r.HashIDs) == (r.InputTokens+bt-1)/bt {
		q.Replay = trace.Replay{TraceBlockSize: bt, InputLength: r.InputTokens, InputSequenceHashes: r.HashIDs}
	}
	fr := &q.FinishReasonMetadata
	if r.OK() {
		fr.FinishReason = r.FinishReason
	} else {
		fr.FinishReason = "error"
		fr.BackendFinishReason = r.errorKey()
	}
	return rec
}

func unixMs(t time.Time) uint64 {
	if t.IsZero() || t.UnixMilli() < 0 {
		return 0
	}
	return uint64(t.UnixMilli())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
