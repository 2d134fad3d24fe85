package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/failover"
)

// This file is the gateway's failover: the loop that routes a request to
// a healthy worker, retries it elsewhere when the worker fails before the
// first byte, migrates a cut stream when that is on, and otherwise ends
// the client's stream with its API's error event.

// Defaults of Config's failover fields.
const (
	DefaultReadyWait         = 5 * time.Second
	DefaultFirstByteTimeout  = 120 * time.Second
	DefaultStreamIdleTimeout = 60 * time.Second
)

// errRetried and errMigrated mark an attempt the request moved on from,
// in the router's request record (the trace's error kind) and metrics.
var (
	errRetried  = errors.New("gateway: retried on another worker")
	errMigrated = errors.New("gateway: stream migrated to another worker")
)

// forward routes c to a healthy worker and serves it there, moving on to
// the next-best worker (bounded, with backoff and jitter) while attempts
// fail before the first byte with a retryable kind, and migrating a cut
// chat stream (Config.Failover.MigrationLimit). Each attempt is one router
// decision, ended (Done) before the next: a failed attempt's load and
// approximate-index record are undone, its worker's breaker told.
func (g *Gateway) forward(ctx context.Context, w http.ResponseWriter, c *call, start time.Time) {
	route := g.router.Route
	if g.cfg.Route != nil {
		route = g.cfg.Route
	}
	var (
		tried   []uint64
		allowed []uint64
		sv      streamSoFar
		last    *AttemptResult
		lastWk  *worker
	)
	retry := g.tracker.Retry()
	for try := 1; ; try++ {
		allowed = g.tracker.Allowed(allowed[:0], tried)
		if len(allowed) == 0 && try == 1 && !sv.started {
			g.awaitRoutable(ctx, c)
			allowed = g.tracker.Allowed(allowed[:0], tried)
		}
		if len(allowed) == 0 {
			g.giveUp(ctx, w, c, &sv, last, lastWk, start)
			return
		}
		reqID := c.id
		if try > 1 {
			reqID += "-" + strconv.Itoa(try)
		}
		d, err := route(ctx, &agentkv.Request{ID: reqID, Tokens: c.tokens, Agent: c.agent,
			Override: &agentkv.Override{AllowedWorkers: allowed}})
		switch {
		case err == nil:
		case ctx.Err() != nil:
			g.clientGone(c, start)
			return // the client left while admission held the request
		case errors.Is(err, agentkv.ErrNoWorkers) && last != nil:
			g.giveUp(ctx, w, c, &sv, last, lastWk, start)
			return
		case errors.Is(err, agentkv.ErrNoWorkers) && len(allowed) < len(g.order) && try < retry.MaxTries():
			// The routable workers are not the ones the router knows (at
			// start, workers probed up before they joined the router):
			// health and membership change within moments, so try again.
			// (A program admission placed on a worker that is not routable
			// is relocated by the router itself.)
			if !sleepCtx(ctx, retry.Backoff(try)) {
				g.clientGone(c, start)
				return
			}
			continue
		case errors.Is(err, agentkv.ErrNoWorkers), errors.Is(err, agentkv.ErrDropped), errors.Is(err, agentkv.ErrClosed):
			g.endWith(w, c, &sv, http.StatusServiceUnavailable, err.Error(), start)
			return
		default:
			g.endWith(w, c, &sv, http.StatusInternalServerError, err.Error(), start)
			return
		}
		wk := g.workers[d.Worker.ID]
		if wk == nil {
			g.finish(c, d, Usage{}, ErrUnknownWorker)
			g.endWith(w, c, &sv, http.StatusServiceUnavailable, "agentkv gateway: routed to an unknown worker", start)
			return
		}
		res := g.attempt(ctx, w, c, wk, d, &sv)
		g.tracker.Report(wk.ID, res.failoverOutcome())
		if try < retry.MaxTries() && res.retryable() && ctx.Err() == nil && g.another(tried, wk.ID) {
			g.finish(c, d, res.Usage, fmt.Errorf("%w: %w", errRetried, res.Err))
			g.tracker.Retried(wk.ID)
			tried = append(tried, wk.ID)
			last, lastWk = &res, wk
			if !sleepCtx(ctx, retry.Backoff(try)) {
				g.clientGone(c, start)
				return
			}
			continue
		}
		if res.Outcome == CutMidStream && ctx.Err() == nil && g.canMigrate(c, &sv, wk, res.Usage) {
			g.finish(c, d, res.Usage, fmt.Errorf("%w: %w", errMigrated, res.Err))
			g.tracker.Migrated(wk.ID)
			sv.migrations++
			tried = append(tried, wk.ID)
			last, lastWk = &res, wk
			try = 0 // a migration starts its own retries
			continue
		}
		abort := false
		switch res.Outcome {
		case FailedBeforeFirstByte:
			g.writeFailure(w, c, wk, &res)
		case CutMidStream:
			abort = !g.endStream(w, c, &sv, "agentkv gateway: the worker's stream broke off ("+ErrorKind(res.Err)+"): "+res.Err.Error())
		case ClientGone:
			g.log.Info("gateway: client went away", "status", 499, "api", c.api.String(), "request", c.id,
				"worker", wk.URL, "session", c.agent.SessionID)
		}
		g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(res.Status)).Inc()
		g.finish(c, d, res.Usage, res.Err)
		g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(start).Seconds())
		if abort {
			// A whole reply cut part-way: abort the connection so the
			// client sees the truncation, not a short body.
			panic(http.ErrAbortHandler)
		}
		return
	}
}

// another reports whether a worker other than failed and those tried is
// routable now.
func (g *Gateway) another(tried []uint64, failed uint64) bool {
	var buf [16]uint64
	for _, id := range g.tracker.Allowed(buf[:0], tried) {
		if id != failed {
			return true
		}
	}
	return false
}

// retryable reports whether the request may go to another worker with
// nothing lost: nothing reached the client, and the worker could not be
// reached, timed out, broke off before its first byte, or answered 408,
// 429 or 5xx (failover.RetryableStatus).
func (res *AttemptResult) retryable() bool {
	if res.Outcome != FailedBeforeFirstByte {
		return false
	}
	switch {
	case errors.Is(res.Err, ErrConnect), errors.Is(res.Err, ErrTimeout), errors.Is(res.Err, ErrCut):
		return true
	case errors.Is(res.Err, ErrStatus):
		return failover.RetryableStatus(res.Status)
	}
	return false
}

// failoverOutcome is what the attempt says about its worker, for the
// worker's circuit breaker.
func (res *AttemptResult) failoverOutcome() failover.Outcome {
	o := failover.Outcome{Status: res.Status, Started: res.Outcome == CutMidStream, Err: res.Err}
	switch {
	case res.Outcome == OK:
		o.Kind = failover.OK
	case res.Outcome == ClientGone:
		o.Kind = failover.ClientGone
	case res.Outcome == CutMidStream:
		o.Kind = failover.Cut
	case errors.Is(res.Err, ErrTimeout):
		o.Kind = failover.Timeout
	case errors.Is(res.Err, ErrConnect), errors.Is(res.Err, ErrCut):
		o.Kind = failover.Connect
	case errors.Is(res.Err, ErrStatus):
		o.Kind, o.Err = failover.Status, nil
		if !failover.RetryableStatus(res.Status) && !failover.CountsAsFailure(res.Status) {
			o.Kind = failover.OK // the client's fault (4xx): nothing against the worker
		}
	default:
		o.Kind = failover.Other
	}
	return o
}

// canMigrate reports whether a cut stream may continue on another worker,
// and prepares the continuation: migration is on and not used up, the
// stream is a chat completion the client saw as plain text so far (a tool
// call or reasoning cannot be continued), and its token budget is not
// spent. The continuation is the chat request with the text sent so far
// as the assistant's message to continue (vLLM's continue_final_message),
// its max_tokens reduced by the tokens sent; when no text was sent yet
// (the worker died in prefill, after the stream's first event), the chat
// request itself.
func (g *Gateway) canMigrate(c *call, sv *streamSoFar, wk *worker, u Usage) bool {
	if sv.migrations >= g.migrationLimit || sv.noResume || !c.stream {
		return false
	}
	if !(c.api == Chat || (c.api != Completions && sv.tr != nil)) {
		return false // native Responses and Messages streams cannot be continued
	}
	base := c.chatB
	if sv.text.Len() == 0 {
		sv.continuation = base
		return true
	}
	sent := max(sv.chunks, u.CompletionTokens)
	b, ok := continueChat(base, sv.text.String(), sent)
	if !ok {
		return false
	}
	sv.continuation = b
	return true
}

// continueChat returns body (a chat completions request) with an
// assistant message holding text appended, continue_final_message on,
// add_generation_prompt off, and max_tokens / max_completion_tokens less
// sent; false when the body cannot be read or the budget is spent.
func continueChat(body []byte, text string, sent int) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil, false
	}
	var msgs []json.RawMessage
	if json.Unmarshal(m["messages"], &msgs) != nil {
		return nil, false
	}
	am, err := json.Marshal(map[string]string{"role": "assistant", "content": text})
	if err != nil {
		return nil, false
	}
	msgs = append(msgs, am)
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		raw, ok := m[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var n int
		if json.Unmarshal(raw, &n) != nil {
			return nil, false
		}
		if n -= sent; n < 1 {
			return nil, false
		}
		m[k] = json.RawMessage(strconv.Itoa(n))
	}
	m["messages"], _ = json.Marshal(msgs)
	m["continue_final_message"] = json.RawMessage("true")
	m["add_generation_prompt"] = json.RawMessage("false")
	b, err := json.Marshal(m)
	return b, err == nil
}

// jobj is a JSON object written ad hoc.
type jobj = map[string]any

// endStream ends a client stream that broke off with its API's own error
// event: an OpenAI error chunk, Responses response.failed, Anthropic
// event: error. It returns false for a reply that was not a stream (the
// caller aborts the connection instead).
func (g *Gateway) endStream(w http.ResponseWriter, c *call, sv *streamSoFar, msg string) bool {
	if !c.stream {
		return false
	}
	if sv.tr != nil {
		sv.tr.end(Usage{}, false, msg)
		return true
	}
	ew := newEventWriter(w)
	switch c.api {
	case Responses:
		ew.event("response.failed", jobj{"type": "response.failed", "response": jobj{"id": "resp_" + c.id,
			"object": "response", "status": "failed", "model": c.model,
			"error": jobj{"code": "server_error", "message": msg}}})
	case Messages:
		ew.event("error", jobj{"type": "error", "error": jobj{"type": "api_error", "message": msg}})
	default:
		ew.data(jobj{"error": jobj{"message": msg, "type": "server_error", "code": "worker_stream_cut"}})
	}
	return true
}

// endWith answers a request the gateway could not serve: an error reply in
// the caller's API shape, or, when the client's stream already started (a
// migration found no worker), the stream's error event.
func (g *Gateway) endWith(w http.ResponseWriter, c *call, sv *streamSoFar, code int, msg string, start time.Time) {
	if sv.started {
		_ = g.endStream(w, c, sv, msg)
	} else {
		writeError(w, c.api.anthropic(), code, msg)
	}
	g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(code)).Inc()
	g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(start).Seconds())
}

// giveUp ends a request no (further) worker can take: with the last
// attempt's failure when there was one, else 503.
func (g *Gateway) giveUp(ctx context.Context, w http.ResponseWriter, c *call, sv *streamSoFar, last *AttemptResult, wk *worker, start time.Time) {
	switch {
	case ctx.Err() != nil:
		g.clientGone(c, start)
	case last == nil:
		g.m.failures.WithLabelValues(c.api.String(), ErrorKind(ErrNoHealthyWorker)).Inc()
		g.endWith(w, c, sv, http.StatusServiceUnavailable, ErrNoHealthyWorker.Error()+": every worker is down or ejected", start)
	case sv.started:
		g.endWith(w, c, sv, http.StatusBadGateway, "agentkv gateway: no worker could continue the stream: "+last.Err.Error(), start)
	default:
		g.writeFailure(w, c, wk, last)
		g.m.responses.WithLabelValues(c.api.String(), strconv.Itoa(last.Status)).Inc()
		g.m.duration.WithLabelValues(c.api.String()).Observe(time.Since(start).Seconds())
	}
}

// clientGone counts and logs a client that left before it was answered.
func (g *Gateway) clientGone(c *call, start time.Time) {
	g.m.responses.WithLabelValues(c.api.String(), "499").Inc()
	g.m.failures.WithLabelValues(c.api.String(), "client_gone").Inc()
	g.log.Info("gateway: client went away", "status", 499, "api", c.api.String(), "request", c.id,
		"session", c.agent.SessionID, "after", time.Since(start))
}

// sleepCtx waits d unless ctx ends first (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// awaitRoutable waits, at most once per request and up to ReadyWait, for a
// worker to be routable when none is (workers starting, or all ejected a
// moment ago), as a client would retry.
func (g *Gateway) awaitRoutable(ctx context.Context, c *call) {
	if c.waitedReady || g.cfg.ReadyWait <= 0 || g.tracker.Ready() {
		return
	}
	c.waitedReady = true
	wctx, cancel := context.WithTimeout(ctx, g.cfg.ReadyWait)
	_ = g.tracker.WaitReady(wctx)
	cancel()
}
