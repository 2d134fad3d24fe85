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
	"time"

	"github.com/agentkv/agentkv"
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
)

// ErrorKind names the kind of a failed attempt's error ("" for nil):
// connect, status, cut, client_gone, bad_reply, unknown_worker, other.
func ErrorKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrConnect):
		return "connect"
	case errors.Is(err, ErrStatus):
		return "status"
	case errors.Is(err, ErrCut):
		return "cut"
	case errors.Is(err, ErrClientGone):
		return "client_gone"
	case errors.Is(err, ErrBadReply):
		return "bad_reply"
	case errors.Is(err, ErrUnknownWorker):
		return "unknown_worker"
	}
	return "other"
}

// AttemptResult is what one attempt did.
type AttemptResult struct {
	Outcome Outcome
	// Status is the HTTP status the client got (or, before the first byte,
	// the worker's error status; 0 when the worker did not answer).
	Status int
	// Err is nil for OK; it matches one of the Err* kinds above.
	Err error
	// ErrBody is the worker's error reply (first 64 KiB) for an error
	// status, held back from the client; Native says it is already in the
	// client's API shape.
	ErrBody []byte
	Native  bool
	// Usage is what the reply said about usage (partial for cut streams).
	Usage Usage
}

// maxErrBody bounds a worker's error reply kept for the client.
const maxErrBody = 64 << 10

// attempt sends the request to one worker and relays its reply to w,
// passing it through byte for byte when the worker serves the API
// natively, translating from chat completions otherwise. It sets the
// X-Agentkv-* headers, reports the first byte and progress to d, and
// classifies the outcome; it never calls d.Done. Until the first byte of
// the reply, w is untouched (headers aside, which a later attempt
// overwrites), so FailedBeforeFirstByte may be retried on another worker.
//
// This is the gateway's one forward step: failover wraps it (retry on
// FailedBeforeFirstByte, migrate on CutMidStream).
func (g *Gateway) attempt(ctx context.Context, w http.ResponseWriter, c *call, wk *worker, d *agentkv.Decision) AttemptResult {
	native := wk.Native.Has(c.api) || c.api == Chat || c.api == Completions
	path, body := c.api.Path(), c.body
	if !native {
		path, body = ChatPath, c.chatB
		g.m.translated.WithLabelValues(c.api.String()).Inc()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.client.URL(path), bytes.NewReader(body))
	if err != nil {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: %v", ErrConnect, err)}
	}
	req.Header.Set("Content-Type", "application/json")
	for _, k := range forwarded {
		if v := c.hdr.Get(k); v != "" {
			req.Header.Set(k, v)
		}
	}
	if wk.DPRanks > 1 {
		req.Header.Set(HeaderDPRank, strconv.FormatUint(uint64(d.Worker.DPRank), 10))
	}
	resp, err := g.cfg.HTTPClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return AttemptResult{Outcome: ClientGone, Status: 499, Err: fmt.Errorf("%w: %v", ErrClientGone, ctx.Err())}
		}
		return AttemptResult{Outcome: FailedBeforeFirstByte, Err: fmt.Errorf("%w: %v", ErrConnect, err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
		return AttemptResult{Outcome: FailedBeforeFirstByte, Status: resp.StatusCode, ErrBody: b, Native: native,
			Err: fmt.Errorf("%w %d: %s", ErrStatus, resp.StatusCode, upstreamMessage(b))}
	}
	h := w.Header()
	h.Set(HeaderWorker, wk.URL)
	h.Set(HeaderWorkerID, wk.idStr+"/"+strconv.FormatUint(uint64(d.Worker.DPRank), 10))
	h.Set(HeaderCachedTokens, strconv.Itoa(d.Cached.Device+d.Cached.Host+d.Cached.Disk))
	h.Set(HeaderWaited, strconv.FormatFloat(float64(d.Waited)/float64(time.Millisecond), 'f', 3, 64))
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	r := relay{g: g, ctx: ctx, w: w, d: d, body: resp.Body, upstreamCT: resp.Header.Get("Content-Type")}
	switch {
	case native:
		return r.passThrough(newSniffer(c.api, stream))
	case stream:
		var tr translator
		ew := newEventWriter(w)
		created := time.Now().Unix()
		if c.api == Responses {
			tr = newResponsesStream(ew, "resp_"+c.id, c.model, created, c.chat, c.custom)
		} else {
			tr = newMessagesStream(ew, "msg_"+c.id, c.model, len(c.tokens))
		}
		return r.translateStream(tr, ew)
	default:
		return r.translateWhole(c)
	}
}

// relay copies one worker reply to the client.
type relay struct {
	g          *Gateway
	ctx        context.Context
	w          http.ResponseWriter
	d          *agentkv.Decision
	body       io.Reader
	upstreamCT string
	started    bool // the first byte reached the client
	lastProg   time.Time
	wrote      int64
}

// progress reports the first byte and, every second after, progress.
func (r *relay) progress() {
	now := time.Now()
	if !r.started {
		r.started, r.lastProg = true, now
		r.d.FirstToken()
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
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %v", ErrClientGone, r.ctx.Err())}
	}
	if !r.started {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Usage: u, Err: fmt.Errorf("%w: %v", ErrCut, cause)}
	}
	return AttemptResult{Outcome: CutMidStream, Status: status, Usage: u, Err: fmt.Errorf("%w: %v", ErrCut, cause)}
}

var errNoEnd = errors.New("the stream ended without its final event")

func (r *relay) passThrough(sn *sniffer) AttemptResult {
	fl, _ := r.w.(http.Flusher)
	buf := make([]byte, 32<<10)
	var werr error
	for {
		n, rerr := r.body.Read(buf)
		if n > 0 {
			if !r.started {
				r.w.Header().Set("Content-Type", r.upstreamCT)
				if sn.stream {
					r.w.Header().Set("Cache-Control", "no-cache")
				}
				r.w.WriteHeader(http.StatusOK)
			}
			r.progress()
			sn.write(buf[:n])
			if werr == nil {
				if _, werr = r.w.Write(buf[:n]); werr == nil && fl != nil {
					fl.Flush()
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			u := sn.finish()
			if sn.stream && sn.done && werr == nil {
				// The stream said it finished; a client that closes once it
				// has read the end (cancelling the upstream read) is done,
				// not gone.
				return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
			}
			return r.broke(http.StatusOK, u, rerr)
		}
	}
	u := sn.finish()
	if !r.started {
		r.w.Header().Set("Content-Type", r.upstreamCT)
		r.w.WriteHeader(http.StatusOK)
		r.started = true
	}
	if werr != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %v", ErrClientGone, werr)}
	}
	if sn.stream && !sn.done {
		return r.broke(http.StatusOK, u, errNoEnd)
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}

func (r *relay) translateStream(tr translator, ew *eventWriter) AttemptResult {
	var u Usage
	finished := false
	var sse sseScanner
	sse.on = func(_ string, data []byte) {
		var ch chatChunk
		if json.Unmarshal(data, &ch) == nil {
			if ch.learn(&u) {
				finished = true
			}
			tr.chunk(&ch)
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.body.Read(buf)
		if n > 0 {
			if !r.started {
				h := r.w.Header()
				h.Set("Content-Type", "text/event-stream")
				h.Set("Cache-Control", "no-cache")
				r.w.WriteHeader(http.StatusOK)
				tr.start()
			}
			r.progress()
			sse.feed(buf[:n])
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if finished && r.started {
				tr.end(u, true, "") // the client may already have gone: it has what it needs
				return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
			}
			res := r.broke(http.StatusOK, u, rerr)
			if res.Outcome == CutMidStream {
				tr.end(u, false, "agentkv gateway: the worker's stream broke off: "+rerr.Error())
			}
			return res
		}
	}
	sse.flush()
	if !r.started {
		return r.broke(0, u, errNoEnd)
	}
	if !finished {
		tr.end(u, false, "agentkv gateway: the worker's stream ended before it finished")
		return r.broke(http.StatusOK, u, errNoEnd)
	}
	tr.end(u, true, "")
	if ew.err != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %v", ErrClientGone, ew.err)}
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}

func (r *relay) translateWhole(c *call) AttemptResult {
	b, err := io.ReadAll(io.LimitReader(r.body, maxSniff))
	if err != nil {
		return r.broke(0, Usage{}, err)
	}
	var out []byte
	var u Usage
	if c.api == Responses {
		out, u, err = chatToResponses(b, c.chat, c.custom, "resp_"+c.id)
	} else {
		out, u, err = chatToMessages(b, "msg_"+c.id)
	}
	if err != nil {
		return AttemptResult{Outcome: FailedBeforeFirstByte, Status: http.StatusBadGateway, Err: fmt.Errorf("%w: %v", ErrBadReply, err)}
	}
	r.w.Header().Set("Content-Type", "application/json")
	r.w.WriteHeader(http.StatusOK)
	r.progress()
	if _, err := r.w.Write(out); err != nil {
		return AttemptResult{Outcome: ClientGone, Status: 499, Usage: u, Err: fmt.Errorf("%w: %v", ErrClientGone, err)}
	}
	return AttemptResult{Outcome: OK, Status: http.StatusOK, Usage: u}
}
