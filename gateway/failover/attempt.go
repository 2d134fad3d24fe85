package failover

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// ErrEjected is the cancel cause Send's cancel function gets when the
// worker is ejected for timeouts while the attempt still waits for its
// first byte: a wedged worker will not answer it, so it is retried on
// another worker at once rather than at its own deadline.
var ErrEjected = errors.New("failover: worker ejected for timeouts while the attempt waited")

// suspectQuiet × ConfirmWait is how long after a check found progress a
// slow whole reply does not start another (a timeout always does).
const suspectQuiet = 5

// Request describes one attempt for Send.
type Request struct {
	// Prompt is the prompt's size in tokens, Uncached the part the worker
	// is expected to prefill (not in its prefix cache).
	Prompt, Uncached int
	// Stream: the reply is streamed, its first byte comes with the first
	// token. A whole reply's first byte comes at its end.
	Stream bool
	// MaxTokens is the reply's output budget as the request set it (0:
	// none; a whole reply may then run to OutlierConfig.ContextTokens −
	// Prompt).
	MaxTokens int
}

// Attempt is one request in flight on a worker, from Tracker.Send to End:
// it carries the attempt's first-byte deadline and teaches the tracker the
// worker's speed (FirstByte, Decoded). Until its first byte it counts in
// the work queued on its worker, which later attempts' deadlines allow for
// and which TTFT samples are divided by. Its methods are safe for
// concurrent use; each does something once.
type Attempt struct {
	t        *Tracker
	w        *tracked // nil: the worker is not tracked
	stream   bool
	work     float64 // its own prefill, in short-prompt tokens (uncached)
	ahead    float64 // the work queued on the worker when it was sent
	deadline time.Duration
	start    time.Time
	cancel   func(error)
	sent     atomic.Bool
	suspect  *time.Timer // a whole reply past its prefill deadline starts a wedge check
	// Guarded by Tracker.mu:
	first   time.Time // its first byte (zero: not yet)
	pending bool      // counted in w.pending and w.held
}

// Send starts an attempt of r on worker id. Its Deadline is the
// FirstByteDeadline of its prompt (and, for a whole reply, its output
// budget) plus the time it is expected to queue behind the worker's
// attempts still waiting for their first byte (their prefill at the
// worker's observed speed, times FirstByteFactor). cancel, if not nil, is
// called with ErrEjected if the worker is ejected for timeouts before the
// attempt's first byte. End must be called when the attempt is over.
func (t *Tracker) Send(id uint64, r Request, cancel func(error)) *Attempt {
	a := &Attempt{t: t, stream: r.Stream, work: t.promptWork(r.Uncached), start: time.Now(), cancel: cancel}
	out := 0
	if !r.Stream {
		out = r.MaxTokens
		if out <= 0 {
			out = max(t.cfg.Outlier.ContextTokens-r.Prompt, 1)
		}
	}
	own := t.promptWork(r.Prompt)
	t.mu.Lock()
	w := t.workers[id]
	if w != nil {
		a.w, a.ahead, a.pending = w, w.pending, true
		w.pending += a.work
		if w.held == nil {
			w.held = map[*Attempt]struct{}{}
		}
		w.held[a] = struct{}{}
	}
	a.deadline = t.deadlineLocked(w, own+a.ahead, out)
	if w != nil && !r.Stream && t.confirms() {
		// A whole reply's first byte comes at its end, but a worker that
		// is not wedged shows progress long before: past its prefill's
		// deadline, with nothing sent, check the worker's counters.
		a.suspect = time.AfterFunc(t.deadlineLocked(w, own+a.ahead, 0), func() { t.suspect(a) })
	}
	t.mu.Unlock()
	return a
}

// suspect starts a wedge check of a's worker if a is still held with
// nothing sent, no check runs, and none found progress lately.
func (t *Tracker) suspect(a *Attempt) {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	w := a.w
	if !a.pending || a.sent.Load() || w.confirming || t.workers[w.id] != w || w.br.State(now) != Closed ||
		time.Since(w.lastProgress) < suspectQuiet*t.cfg.Outlier.ConfirmWait {
		return
	}
	w.confirming = true
	t.goLocked(func(ctx context.Context) { t.confirmWedge(ctx, w) })
}

// Deadline is how long the attempt may wait for its first byte.
func (a *Attempt) Deadline() time.Duration { return a.deadline }

// Queued is the work (short-prompt tokens of prefill) queued on the worker
// ahead of the attempt when it was sent.
func (a *Attempt) Queued() float64 { return a.ahead }

// unhold takes the attempt out of its worker's queue; t.mu held.
func (a *Attempt) unholdLocked() {
	if a.suspect != nil {
		a.suspect.Stop()
	}
	if a.pending {
		a.pending = false
		a.w.pending = max(a.w.pending-a.work, 0)
		delete(a.w.held, a)
		if len(a.w.held) == 0 {
			a.w.pending = 0 // no drift from float sums
		}
	}
}

// FirstByte records the reply's first byte (once): it leaves the queue,
// and a stream's time to first token, divided by its own prefill and the
// prefill queued ahead of it (so a busy but healthy worker is not taken
// for a slow one), feeds the worker's speed and latency ejection.
func (a *Attempt) FirstByte() {
	if a == nil || a.w == nil {
		return
	}
	now := time.Now()
	t := a.t
	t.mu.Lock()
	if !a.first.IsZero() {
		t.mu.Unlock()
		return
	}
	a.first = now
	a.unholdLocked()
	t.mu.Unlock()
	if a.stream {
		t.observeFirst(a.w.id, a.work+a.ahead, now.Sub(a.start))
	}
}

// Decoded records that a stream generated tokens output tokens after its
// first byte (its time per output token feeds whole replies' deadlines).
func (a *Attempt) Decoded(tokens int) {
	if a == nil || a.w == nil || !a.stream || tokens < 1 {
		return
	}
	a.t.mu.Lock()
	first := a.first
	a.t.mu.Unlock()
	if !first.IsZero() {
		a.t.ObserveDecode(a.w.id, tokens, time.Since(first))
	}
}

// Received records that the worker sent bytes of its reply's body (the
// attempt's outcome is then Sent: a timeout after is slowness, not
// silence).
func (a *Attempt) Received() {
	if a != nil && !a.sent.Load() {
		a.sent.Store(true)
	}
}

// Sent reports whether Received was called.
func (a *Attempt) Sent() bool { return a != nil && a.sent.Load() }

// End ends the attempt: it leaves its worker's queue if it was still in
// it. Safe to call twice.
func (a *Attempt) End() {
	if a == nil || a.w == nil {
		return
	}
	a.t.mu.Lock()
	a.unholdLocked()
	a.t.mu.Unlock()
}

// heldCancelsLocked returns the cancel functions of the attempts on w that
// the worker sent nothing of yet (they leave the queue).
func (w *tracked) heldCancelsLocked() []func(error) {
	var out []func(error)
	for a := range w.held {
		if a.sent.Load() {
			continue // the worker is answering it
		}
		if a.cancel != nil {
			out = append(out, a.cancel)
		}
		a.unholdLocked()
	}
	return out
}

func cancelAll(fs []func(error)) {
	for _, f := range fs {
		f(ErrEjected)
	}
}
