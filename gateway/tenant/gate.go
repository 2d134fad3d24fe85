package tenant

import (
	"context"
	"sync"
	"time"
)

// DefaultYieldHold is the longest GateConfig.MaxHold lets a yielding
// request wait for its worker.
const DefaultYieldHold = 250 * time.Millisecond

// GateConfig configures NewGate. Zero fields mean the defaults.
type GateConfig struct {
	// MaxHold is the longest a yielding request waits before it is sent
	// anyway (0: DefaultYieldHold), so that a tenant over its share is
	// slowed, never starved.
	MaxHold time.Duration
	// Slots is how many yielding requests a worker may have awaiting their
	// first token at once (0: 1): a tenant over its share has its
	// prefills computed a few at a time, so each engine step carries a
	// bounded amount of its prompt tokens.
	Slots int
}

// Gate keeps the prefills of tenants over their share (Standing Over) out
// of the engine steps that compute the other tenants' prefills, worker by
// worker. A request of a tenant that is not over its share is sent at
// once and marked protected on its worker until its first token (Protect);
// a yielding request waits (Yield) until its worker has no protected
// request awaiting its first token and fewer than Slots yielding ones,
// waiters in arrival order, at most MaxHold.
//
// Why: an engine computes every prompt it has been sent in the next step
// or two (vLLM's token budget is thousands of tokens), so a request whose
// prefill shares a step with another tenant's waits for those tokens too,
// and a request that arrives during a step waits for it to end. The gate
// bounds both from outside the engine: while an under-share tenant's
// request waits for its first token, the over-share tenant's new prompts
// stay in the gateway, and between them they reach each worker Slots at a
// time, so its steps stay short.
//
// Safe for concurrent use; Protect and Done are O(1), Yield O(waiters on
// its worker) when it gives up.
type Gate struct {
	cfg GateConfig

	mu    sync.Mutex
	lanes map[uint64]*lane // by worker; deleted when idle
}

// lane is one worker's state (under Gate.mu).
type lane struct {
	protected int // protected requests awaiting their first token
	yielding  int // yielding requests sent, awaiting their first token
	waiters   []*waiter
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// clear reports whether a yielding request may be sent.
func (l *lane) clear(slots int) bool { return l.protected == 0 && l.yielding < slots }

// NewGate returns a Gate with cfg's defaults filled.
func NewGate(cfg GateConfig) *Gate {
	if cfg.MaxHold <= 0 {
		cfg.MaxHold = DefaultYieldHold
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 1
	}
	return &Gate{cfg: cfg, lanes: map[uint64]*lane{}}
}

// Ticket is a request's place in the Gate; Done gives it back (at the
// request's first token, or its end: whichever comes first; later calls do
// nothing). The zero Ticket holds nothing.
type Ticket struct {
	g        *Gate
	worker   uint64
	yielding bool
}

// Protect marks a request sent to worker as protected until t.Done.
func (g *Gate) Protect(worker uint64) Ticket {
	g.mu.Lock()
	g.lane(worker).protected++
	g.mu.Unlock()
	return Ticket{g: g, worker: worker}
}

// Yield waits until worker is clear (no protected request awaiting its
// first token, fewer than Slots yielding ones, no earlier waiter), then
// counts the request as yielding there. After MaxHold it stops waiting and
// is counted anyway (forced). It returns ctx.Err() if ctx ends first (the
// request holds nothing then).
func (g *Gate) Yield(ctx context.Context, worker uint64) (t Ticket, waited time.Duration, forced bool, err error) {
	g.mu.Lock()
	l := g.lane(worker)
	if len(l.waiters) == 0 && l.clear(g.cfg.Slots) {
		l.yielding++
		g.mu.Unlock()
		return Ticket{g: g, worker: worker, yielding: true}, 0, false, nil
	}
	wt := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, wt)
	g.mu.Unlock()

	start := time.Now()
	timer := time.NewTimer(g.cfg.MaxHold)
	defer timer.Stop()
	t = Ticket{g: g, worker: worker, yielding: true}
	select {
	case <-wt.ready:
		return t, time.Since(start), false, nil
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if wt.granted { // granted as it gave up: take it (or hand it on)
		if err != nil {
			l.yielding--
			g.wakeLocked(worker, l)
			return Ticket{}, time.Since(start), false, err
		}
		return t, time.Since(start), false, nil
	}
	for i, o := range l.waiters {
		if o == wt {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			break
		}
	}
	if err != nil {
		g.wakeLocked(worker, l) // it may have been the head
		return Ticket{}, time.Since(start), false, err
	}
	l.yielding++ // forced
	return t, time.Since(start), true, nil
}

// Done gives the ticket's place back; it is idempotent (and a nil t
// holds nothing).
func (t *Ticket) Done() {
	if t == nil || t.g == nil {
		return
	}
	g := t.g
	t.g = nil
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lanes[t.worker]
	if l == nil {
		return
	}
	if t.yielding {
		l.yielding--
	} else {
		l.protected--
	}
	g.wakeLocked(t.worker, l)
}

// Waiting returns the yielding requests waiting for worker, and those of
// it sent and awaiting their first token, and the protected ones (tests,
// metrics).
func (g *Gate) Waiting(worker uint64) (waiting, yielding, protected int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.lanes[worker]; l != nil {
		return len(l.waiters), l.yielding, l.protected
	}
	return 0, 0, 0
}

func (g *Gate) lane(worker uint64) *lane {
	l := g.lanes[worker]
	if l == nil {
		l = &lane{}
		g.lanes[worker] = l
	}
	return l
}

// wakeLocked grants waiters in order while the lane is clear, and drops
// an idle lane.
func (g *Gate) wakeLocked(worker uint64, l *lane) {
	for len(l.waiters) > 0 && l.clear(g.cfg.Slots) {
		wt := l.waiters[0]
		l.waiters[0] = nil
		l.waiters = l.waiters[1:]
		wt.granted = true
		l.yielding++
		close(wt.ready)
	}
	if l.protected == 0 && l.yielding == 0 && len(l.waiters) == 0 {
		delete(g.lanes, worker)
	}
}
