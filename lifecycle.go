package agentkv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file holds the router's lifecycle: the control loop (Run), the
// expiry of held requests their callers abandoned, and undoing what routing
// recorded for a request that failed.

// fillLifecycle fills the lifecycle defaults of c and checks them.
func (c *Config) fillLifecycle() error {
	switch {
	case c.TickInterval < 0:
		return fmt.Errorf("agentkv: Config.TickInterval must be ≥ 0, got %v", c.TickInterval)
	case c.HeldTTL < 0:
		return fmt.Errorf("agentkv: Config.HeldTTL must be ≥ 0, got %v", c.HeldTTL)
	case c.MaxHeld < 0:
		return fmt.Errorf("agentkv: Config.MaxHeld must be ≥ 0, got %d", c.MaxHeld)
	}
	if c.TickInterval == 0 {
		c.TickInterval = DefaultTickInterval
		if c.Admission != nil && c.Admission.Interval > 0 {
			c.TickInterval = c.Admission.Interval
		}
	}
	if c.Ticker == nil {
		c.Ticker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	if c.HeldTTL == 0 {
		c.HeldTTL = DefaultHeldTTL
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	return nil
}

// Run is the router's control loop: it calls Tick every
// Config.TickInterval (admission pause and resume, the expiry sweeps, tick
// hints) until ctx ends, then returns ctx.Err(). Swept requests and expired
// held requests are logged as warnings; each result goes to Config.OnTick.
// Run one loop per router.
func (r *Router) Run(ctx context.Context) error {
	ticks, stop := r.cfg.Ticker(r.cfg.TickInterval)
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticks:
		}
		res := r.Tick()
		if res.SweptRequests > 0 {
			r.log.Warn("agentkv: forgot requests that showed no sign of life", "count", res.SweptRequests, "ttl", r.cfg.RequestTTL)
		}
		if res.ExpiredHeld > 0 {
			r.log.Warn("agentkv: dropped released requests that were never retried", "count", res.ExpiredHeld, "ttl", r.cfg.HeldTTL)
		}
		if r.cfg.OnTick != nil {
			r.cfg.OnTick(res)
		}
	}
}

// expireHeldLocked drops the held requests that admission released more
// than Config.HeldTTL ago for a TryRoute caller that never retried: their
// turns, counted as running since the release, end. Callers hold r.mu and
// notify the result after unlocking.
func (r *Router) expireHeldLocked(now time.Time) []release {
	var out []release
	for id, h := range r.held {
		if h.released && !h.waiter && now.Sub(h.releasedAt) >= r.cfg.HeldTTL {
			delete(r.held, id)
			_ = r.adm.EndRequest(now, h.program, 0, 0)
			h.dropped = true
			out = append(out, release{id: id, h: h, dropped: true, woken: true})
		}
	}
	// In ID order, so OnRelease calls are reproducible.
	slices.SortFunc(out, func(a, b release) int { return strings.Compare(a.id, b.id) })
	return out
}

// undoRoute takes back what routing recorded for a request that failed
// (Usage.Failed): the approximate index entries it added on its worker
// (the engine never cached that prompt, or it is gone) and the session
// binding it created, so the next route of the session is not drawn to a
// worker for a cache it lacks. Its load is released by done as for every
// request. The lineage tree and the hash cache describe the session's
// prompt, not its placement, and stay.
func (r *Router) undoRoute(d *Decision) {
	if d.recorded != nil {
		r.index.Unrecord(d.Worker, d.recorded)
	}
	if d.boundHere {
		if b, ok := r.table.Affinity(d.agent.SessionID); ok && b.Worker.ID == d.Worker.ID && b.Worker.DPRank == d.Worker.DPRank {
			r.table.Unbind(d.agent.SessionID)
		}
	}
}
