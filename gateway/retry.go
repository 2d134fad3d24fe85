package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/failover"
)

// This file decides, after an attempt, whether the request moves on: to
// another worker when the attempt failed before the first byte with a
// retryable kind, or, for a cut chat stream with migration on, to a
// continuation on another worker. The loop itself is serve.go's forward.

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

// moveOn tells the worker's breaker how the attempt went and decides
// whether the request moves on: again (retried elsewhere after a backoff),
// migrated (a cut stream continues elsewhere), stop (the client left
// during the backoff) or proceed (the attempt is the request's answer).
func (g *Gateway) moveOn(ctx context.Context, c *call, fw *forwarding, d *agentkv.Decision, wk *worker, res *AttemptResult, try int) step {
	g.tracker.Report(wk.ID, res.failoverOutcome())
	if try < fw.retry.MaxTries() && res.retryable() && ctx.Err() == nil && g.another(fw.tried, wk.ID) {
		g.finish(c, d, res.Usage, fmt.Errorf("%w: %w", errRetried, res.Err))
		g.tracker.Retried(wk.ID)
		fw.tried = append(fw.tried, wk.ID)
		fw.last, fw.lastWk = res, wk
		if !sleepCtx(ctx, fw.retry.Backoff(try)) {
			g.clientGone(c)
			return stop
		}
		return again
	}
	if res.Outcome == CutMidStream && ctx.Err() == nil && g.canMigrate(c, &fw.sv, wk, res.Usage) {
		g.finish(c, d, res.Usage, fmt.Errorf("%w: %w", errMigrated, res.Err))
		g.tracker.Migrated(wk.ID)
		fw.sv.migrations++
		fw.sv.carried = fw.sv.chunks
		fw.tried = append(fw.tried, wk.ID)
		fw.last, fw.lastWk = res, wk
		return migrated
	}
	return proceed
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
	o := failover.Outcome{Status: res.Status, Started: res.Outcome == CutMidStream, Sent: res.sent, Err: res.Err}
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
