package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// Outcome classifies one attempt to serve a request on one worker.
type Outcome uint8

const (
	// OK: the worker's reply reached the client whole.
	OK Outcome = iota
	// FailedBeforeFirstByte: nothing reached the client (the connection
	// failed, the worker answered an error status, or its reply broke off
	// before a byte of it was passed on). The client's response is
	// untouched, so another worker may be tried.
	FailedBeforeFirstByte
	// CutMidStream: part of the reply reached the client, then the
	// worker's reply broke off (a read error, or a stream that ended
	// without saying it finished). For translated streams the client has
	// already been sent the API's error event.
	CutMidStream
	// ClientGone: the client went away (its context ended, or writing to
	// it failed).
	ClientGone
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case FailedBeforeFirstByte:
		return "failed_before_first_byte"
	case CutMidStream:
		return "cut_mid_stream"
	case ClientGone:
		return "client_gone"
	}
	return "unknown"
}

// Error kinds of failed attempts; ErrorKind names them for metrics and
// traces.
var (
	ErrConnect       = errors.New("gateway: cannot reach the worker")
	ErrStatus        = errors.New("gateway: worker answered an error status")
	ErrCut           = errors.New("gateway: worker's reply broke off")
	ErrClientGone    = errors.New("gateway: client went away")
	ErrBadReply      = errors.New("gateway: worker's reply cannot be translated")
	ErrUnknownWorker = errors.New("gateway: routed to an unknown worker")
	// ErrNoHealthyWorker: every worker is down, ejected or already failed
	// this request.
	ErrNoHealthyWorker = errors.New("gateway: no healthy worker")
)

// AttemptResult is what one attempt did.
type AttemptResult struct {
	Outcome Outcome
	// Status is the HTTP status the client got (or, before the first byte,
	// the worker's error status; 0 when the worker did not answer).
	Status int
	// Err is nil for OK; it matches one of the Err* kinds above and wraps
	// the transport error, if any.
	Err error
	// ErrBody is the worker's error reply (first 64 KiB) for an error
	// status, held back from the client; Native says it is already in the
	// client's API shape.
	ErrBody []byte
	Native  bool
	// upstreamMsg is ErrBody's message (upstreamMessage).
	upstreamMsg string
	// Usage is what the reply said about usage (partial for cut streams).
	Usage Usage
	// sent: the worker sent body bytes (a timeout then is slowness, not
	// silence: failover.Outcome.Sent).
	sent bool
}

// maxErrBody bounds a worker's error reply kept for the client.
const maxErrBody = 64 << 10

// ErrTimeout is an attempt the worker did not answer in time: no first
// byte of a stream within Config.FirstByteTimeout, or a stream silent for
// Config.StreamIdleTimeout.
var ErrTimeout = errors.New("gateway: worker did not answer in time")

// attempt sends the request to one worker and relays its reply to w,
// passing it through byte for byte when the worker serves the API
// natively, translating from chat completions otherwise. It sets the
// X-Agentkv-* headers, reports the first byte and progress to d, and
// classifies the outcome; it never calls d.Done. Until the first byte of
// the reply, w is untouched (headers aside, which a later attempt
// overwrites), so FailedBeforeFirstByte may be retried on another worker.
// A cut stream is not ended here: forward ends it with the API's error
// event or migrates it (sv carries what the client was sent).
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, c *call, wk *worker, d *agentkv.Decision, sv *streamSoFar) (res AttemptResult) {
	native := wk.Native.Has(c.api) || c.api == Chat || c.api == Completions
	path, body := c.api.Path(), c.body
	if !native {
		path, body = ChatPath, c.chatB
		g.m.translated.WithLabelValues(c.api.String()).Inc()
	}
	if sv.migrations > 0 {
		// A continuation: the chat request with what the client has
		// already been sent as the assistant's message to continue.
		body = sv.continuation
	}
	defer c.ticket.Done()             // at the latest: an attempt's place in the yield gate ends with it
	payload := wk.Hints.Payload(body) // body, or body and its kv_hints
	defer payload.Release()
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	at := g.send(c, wk, d, cancel) // cancelled (failover.ErrEjected) if wk is ejected for timeouts
	defer func() { res.sent = at.Sent(); at.End() }()
	dog, fb := g.watch(c, at, cancel)
	defer dog.stop()
	req, err := payload.NewRequest(actx, wk.client.URL(path))
	if err != nil {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: %w", ErrConnect, err)}
	}
	g.upstreamHeaders(req.Header, c, wk, d)
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return AttemptResult{Outcome: ClientGone, Status: 499, Err: fmt.Errorf("%w: %w", ErrClientGone, ctx.Err())}
		case context.Cause(actx) == ErrTimeout:
			return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: no reply within %v: %w", ErrTimeout, fb, context.DeadlineExceeded)}
		case context.Cause(actx) == failover.ErrEjected:
			return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: %w", ErrTimeout, failover.ErrEjected)}
		}
		return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: %w", ErrConnect, err)}
	}
	defer resp.Body.Close()
	if !c.stream {
		dog.kick() // a whole reply answered: its body follows
	}
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
		msg := upstreamMessage(b)
		return AttemptResult{Outcome: FailedBeforeFirstByte, Status: resp.StatusCode, ErrBody: b, Native: native,
			upstreamMsg: msg, Err: fmt.Errorf("%w %d: %s", ErrStatus, resp.StatusCode, msg)}
	}
	if !sv.started {
		g.routedHeaders(w.Header(), wk, d)
	}
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	r := relay{g: g, ctx: ctx, actx: actx, w: w, d: d, body: receiving{resp.Body, at}, upstreamCT: resp.Header.Get("Content-Type"),
		sv: sv, dog: dog, track: g.migrationLimit > 0 && c.api == Chat && stream, at: at, ticket: &c.ticket}
	defer func() { decoded(at, &res) }()
	switch {
	case native:
		return r.passThrough(translate.NewSniffer(c.api, stream))
	case stream:
		if sv.tr == nil {
			sv.ew = translate.NewEventWriter(w)
			created := time.Now().Unix()
			if c.api == Responses {
				sv.tr = translate.NewResponsesStream(sv.ew, "resp_"+c.id, c.model, created, c.chat, c.custom)
			} else {
				sv.tr = translate.NewMessagesStream(sv.ew, "msg_"+c.id, c.model, len(c.tokens))
			}
		}
		return r.translateStream()
	default:
		return r.translateWhole(c)
	}
}

// upstreamHeaders sets the worker request's headers: its content type,
// those forwarded from the client, and the DP rank the router chose.
func (g *Gateway) upstreamHeaders(h http.Header, c *call, wk *worker, d *agentkv.Decision) {
	h.Set("Content-Type", "application/json")
	fwd := forwarded
	if g.cfg.Keys != nil {
		fwd = forwarded[2:] // the client's key is the gateway's, not the worker's
	}
	for _, k := range fwd {
		if v := c.hdr.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	if wk.DPRanks > 1 {
		h.Set(HeaderDPRank, strconv.FormatUint(uint64(d.Worker.DPRank), 10))
	}
}

// receiving tells the attempt when the worker sends body bytes (it is not
// silent).
type receiving struct {
	r  io.Reader
	at *failover.Attempt
}

func (b receiving) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.at.Received()
	}
	return n, err
}

// routedHeaders sets the X-Agentkv-* reply headers: the worker chosen,
// the tokens it was expected to hold, the admission wait.
func (g *Gateway) routedHeaders(h http.Header, wk *worker, d *agentkv.Decision) {
	h.Set(HeaderWorker, g.workerName(wk))
	h.Set(HeaderWorkerID, wk.idStr+"/"+strconv.FormatUint(uint64(d.Worker.DPRank), 10))
	h.Set(HeaderCachedTokens, strconv.Itoa(d.Cached.Device+d.Cached.Host+d.Cached.Disk))
	if d.SharedBlocks > 0 {
		h.Set(HeaderSharedTokens, strconv.Itoa(d.SharedBlocks*g.router.Index().BlockSize()))
	}
	h.Set(HeaderWaited, strconv.FormatFloat(float64(d.Waited)/float64(time.Millisecond), 'f', 3, 64))
	h.Set(HeaderRoute, d.Reason.String())
}

// watchdog cancels a stalled attempt: FirstByteTimeout until the first
// byte, then StreamIdleTimeout between reads (0: no idle bound).
type watchdog struct {
	t    *time.Timer
	idle time.Duration
}

// watch starts the attempt's watchdog (nil when it has no deadline): it
// cancels the attempt with ErrTimeout at its first-byte deadline (scaled
// by the prompt and the worker's queue, see outlier.go), which it returns,
// and for a stream after StreamIdleTimeout of silence.
func (g *Gateway) watch(c *call, at *failover.Attempt, cancel context.CancelCauseFunc) (*watchdog, time.Duration) {
	fb := g.firstByteDeadline(c, at)
	if fb <= 0 {
		return nil, 0
	}
	dog := &watchdog{}
	if c.stream {
		dog.idle = g.cfg.StreamIdleTimeout
	}
	dog.t = time.AfterFunc(fb, func() { cancel(ErrTimeout) })
	return dog, fb
}

func (d *watchdog) stop() {
	if d != nil {
		d.t.Stop()
	}
}

func (d *watchdog) kick() {
	if d == nil {
		return
	}
	if d.idle > 0 {
		d.t.Reset(d.idle)
	} else {
		d.t.Stop()
	}
}

// streamSoFar is what one request's stream has sent the client across
// its attempts: whether the response started, the assistant text (for a
// migration's continuation), whether a tool call began (which cannot be
// continued), and, for translated streams, the translator that keeps
// writing the client's stream after a migration.
type streamSoFar struct {
	started    bool
	text       strings.Builder
	chunks     int  // content deltas sent: an estimate of the tokens sent
	noResume   bool // a tool call or reasoning began: no continuation
	migrations int
	// carried is how many completion tokens the client had been sent when
	// the stream last migrated: the continuation's worker counts them as
	// prompt, so its usage is moved back by that many (carry).
	carried int
	// continuation is the chat body of the next attempt after a cut.
	continuation []byte
	tr           translate.Translator
	ew           *translate.EventWriter
}

// carry corrects a continuation's usage to the client's whole stream: the
// tokens sent before the cut are completion, not prompt.
func (sv *streamSoFar) carry(prompt, completion, cached *int) {
	if sv.carried == 0 {
		return
	}
	*prompt = max(0, *prompt-sv.carried)
	*completion += sv.carried
	*cached = min(*cached, *prompt)
}

// carryChunk applies carry to a chat chunk's usage.
func (sv *streamSoFar) carryChunk(ch *apiwire.ChatChunk) {
	if u := ch.Usage; u != nil && sv.carried > 0 {
		var cached, cachedWas int
		if u.PromptTokensDetails != nil {
			cached = u.PromptTokensDetails.CachedTokens
			cachedWas = cached
		}
		sv.carry(&u.PromptTokens, &u.CompletionTokens, &cached)
		if cached != cachedWas {
			u.PromptTokensDetails.CachedTokens = cached
		}
	}
}

// learn folds a chat chunk's content into what was sent.
func (sv *streamSoFar) learn(ch *apiwire.ChatChunk) {
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue
		}
		sv.learnContent(deref(c.Delta.Content))
		if len(c.Delta.ToolCalls) > 0 || deref(c.Delta.ReasoningContent) != "" {
			sv.noResume = true
		}
	}
}

// learnContent folds a content delta of choice 0 into what was sent.
func (sv *streamSoFar) learnContent(t string) {
	if t != "" {
		sv.text.WriteString(t)
		sv.chunks++
	}
}

// relay copies one worker reply to the client.
type relay struct {
	g          *Gateway
	ctx        context.Context // the client's
	actx       context.Context // the attempt's (cancelled by the watchdog)
	w          http.ResponseWriter
	d          *agentkv.Decision
	body       io.Reader
	upstreamCT string
	sv         *streamSoFar
	dog        *watchdog
	track      bool              // follow chat content in sv (migration is on)
	at         *failover.Attempt // the tracker's attempt (first byte, speed)
	ticket     *tenant.Ticket    // given back at the first byte (yield.go)
	started    bool              // this attempt's first byte reached the client
	lastProg   time.Time
}

// read reads the worker's reply, feeding the watchdog.
func (r *relay) read(buf []byte) (int, error) {
	n, err := r.body.Read(buf)
	if n > 0 {
		r.dog.kick()
	}
	return n, err
}

// progress reports the first byte and, every second after, progress.
func (r *relay) progress() {
	now := time.Now()
	if !r.started {
		r.started, r.lastProg = true, now
		r.sv.started = true
		r.d.FirstToken()
		r.ticket.Done()
		r.at.FirstByte()
		return
	}
	if now.Sub(r.lastProg) >= time.Second {
		r.lastProg = now
		r.d.Progress()
	}
}

// broke classifies a reply that ended early.
func (r *relay) broke(status int, u Usage, cause error) AttemptResult {
	if r.ctx.Err() != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %w", ErrClientGone, r.ctx.Err())}
	}
	kind := ErrCut
	switch context.Cause(r.actx) {
	case ErrTimeout:
		kind, cause = ErrTimeout, fmt.Errorf("stalled: %w", context.DeadlineExceeded)
	case failover.ErrEjected:
		kind, cause = ErrTimeout, failover.ErrEjected
	}
	if !r.started && !r.sv.started {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Usage: u, Err: fmt.Errorf("%w: %w", kind, cause)}
	}
	return AttemptResult{Outcome: CutMidStream, Status: status, Usage: u, Err: fmt.Errorf("%w: %w", kind, cause)}
}

var errNoEnd = errors.New("the stream ended without its final event")

// maxPendingEvent bounds the bytes of an unfinished server-sent event held
// back so the client only ever sees whole events (past it, they are
// passed on as they come).
const maxPendingEvent = 1 << 20

// passThrough relays a native reply byte for byte. A stream is passed on
// whole events at a time (up to the last blank line read), so a reply cut
// mid-event leaves the client at an event boundary, where forward can
// append the API's error event or a migration's continuation.
// relayBufs holds passThrough's read buffers: nothing keeps one past the
// call (writes and the sniffer copy what they keep).
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (r *relay) passThrough(sn *translate.Sniffer) AttemptResult {
	fl, _ := r.w.(http.Flusher)
	bp := relayBufs.Get().(*[]byte)
	defer relayBufs.Put(bp)
	buf := *bp
	var pend []byte // a stream's bytes after its last event boundary
	var werr error
	write := func(b []byte) {
		if werr == nil && len(b) > 0 {
			if _, werr = r.w.Write(b); werr == nil && fl != nil {
				fl.Flush()
			}
		}
	}
	for {
		n, rerr := r.read(buf)
		if n > 0 {
			if !r.started && !r.sv.started {
				r.w.Header().Set("Content-Type", r.upstreamCT)
				if sn.Stream() {
					r.w.Header().Set("Cache-Control", "no-cache")
				}
				r.w.WriteHeader(http.StatusOK)
			}
			r.progress()
			sn.Write(buf[:n])
			if !sn.Stream() {
				write(buf[:n])
			} else {
				pend = append(pend, buf[:n]...)
				if i := bytes.LastIndex(pend, []byte("\n\n")); i >= 0 {
					r.writeEvents(pend[:i+2], write)
					pend = append(pend[:0], pend[i+2:]...)
				} else if len(pend) > maxPendingEvent {
					write(pend)
					pend = pend[:0]
				}
			}
			if werr != nil {
				break
			}
		}
		if rerr == io.EOF {
			write(pend) // an unterminated last event, as the worker sent it
			break
		}
		if rerr != nil {
			u := sn.Finish()
			if sn.Stream() && sn.Done() && werr == nil {
				// The stream said it finished; a client that closes once it
				// has read the end (cancelling the upstream read) is done,
				// not gone.
				write(pend)
				return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
			}
			return r.broke(http.StatusOK, u, rerr)
		}
	}
	u := sn.Finish()
	if werr != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %w", ErrClientGone, werr)}
	}
	if !r.started && !r.sv.started {
		r.w.Header().Set("Content-Type", r.upstreamCT)
		r.w.WriteHeader(http.StatusOK)
		r.started, r.sv.started = true, true
	}
	if sn.Stream() && !sn.Done() {
		return r.broke(http.StatusOK, u, errNoEnd)
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}

// writeEvents passes whole events on. With migration on (track), chat
// chunks are followed, and a continuation's role-only first chunk (the
// client already had one) is dropped.
func (r *relay) writeEvents(b []byte, write func([]byte)) {
	if !r.track {
		write(b)
		return
	}
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		ev := b[:i+2]
		b = b[i+2:]
		data, ok := bytes.CutPrefix(bytes.TrimSpace(ev), []byte("data:"))
		if !ok {
			write(ev)
			continue
		}
		data = bytes.TrimSpace(data)
		if r.sv.migrations == 0 {
			if c, plain := plainDelta(data); plain { // most chunks: no decoding
				r.sv.learnContent(c)
				write(ev)
				continue
			}
		}
		var ch apiwire.ChatChunk
		if json.Unmarshal(data, &ch) == nil {
			if r.sv.migrations > 0 && roleOnly(&ch) {
				continue
			}
			r.sv.learn(&ch)
			if ch.Usage != nil && r.sv.carried > 0 {
				r.sv.carryChunk(&ch)
				if nb, err := json.Marshal(&ch); err == nil {
					ev = append(append([]byte("data: "), nb...), "\n\n"...)
				}
			}
		}
		write(ev)
	}
}

// roleOnly reports a chunk that carries nothing but the assistant role.
func roleOnly(ch *apiwire.ChatChunk) bool {
	if ch.Usage != nil || len(ch.Choices) == 0 {
		return false
	}
	for _, c := range ch.Choices {
		if deref(c.Delta.Content) != "" || len(c.Delta.ToolCalls) > 0 || deref(c.Delta.ReasoningContent) != "" || deref(c.FinishReason) != "" {
			return false
		}
	}
	return true
}

// translateStream translates a streamed chat completion into the
// client's API with sv's translator (kept across a migration: a
// continuation goes on writing the same client stream).
func (r *relay) translateStream() AttemptResult {
	var u Usage
	finished := false
	tr, ew := r.sv.tr, r.sv.ew
	var sse translate.SSEScanner
	sse.On = func(_ string, data []byte) {
		var ch apiwire.ChatChunk
		if json.Unmarshal(data, &ch) == nil {
			r.sv.carryChunk(&ch)
			if translate.Learn(&ch, &u) {
				finished = true
			}
			r.sv.learn(&ch)
			tr.Chunk(&ch)
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.read(buf)
		if n > 0 {
			if !r.sv.started {
				h := r.w.Header()
				h.Set("Content-Type", "text/event-stream")
				h.Set("Cache-Control", "no-cache")
				r.w.WriteHeader(http.StatusOK)
				tr.Start()
			}
			r.progress()
			sse.Feed(buf[:n])
			if ew.Err() != nil {
				return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %w", ErrClientGone, ew.Err())}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if finished && r.started {
				tr.End(u, true, "") // the client may already have gone: it has what it needs
				return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
			}
			return r.broke(http.StatusOK, u, rerr)
		}
	}
	sse.Flush()
	if !r.started && !r.sv.started {
		return r.broke(0, u, errNoEnd)
	}
	if !finished {
		return r.broke(http.StatusOK, u, errNoEnd)
	}
	tr.End(u, true, "")
	if ew.Err() != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %w", ErrClientGone, ew.Err())}
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}

func (r *relay) translateWhole(c *call) AttemptResult {
	b, err := io.ReadAll(io.LimitReader(r.body, translate.MaxSniff))
	if err != nil {
		return r.broke(0, Usage{}, err)
	}
	var out []byte
	var u Usage
	if c.api == Responses {
		out, u, err = translate.ChatToResponses(b, c.chat, c.custom, "resp_"+c.id)
	} else {
		out, u, err = translate.ChatToMessages(b, "msg_"+c.id)
	}
	if err != nil {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Status: http.StatusBadGateway, Err: fmt.Errorf("%w: %v", ErrBadReply, err)}
	}
	r.w.Header().Set("Content-Type", "application/json")
	r.w.WriteHeader(http.StatusOK)
	r.progress()
	if _, err := r.w.Write(out); err != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %w", ErrClientGone, err)}
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}

// upstreamMessage extracts the message of an OpenAI or Anthropic error
// body, or returns the body.
func upstreamMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}

// deref returns *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
