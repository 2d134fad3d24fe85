package agentkv

import (
	"context"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
)

// This file holds the router's control loop: Run, and the Tick it calls.

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

// TickResult summarises one control-loop round.
type TickResult struct {
	Admission admission.TickResult
	// Released lists the held request IDs that may now be retried.
	Released []string
	// SweptRequests counts requests forgotten for lack of any sign of life.
	SweptRequests int
	// ExpiredSessions counts sessions removed for idleness.
	ExpiredSessions int
	// ExpiredHeld counts released requests dropped because their TryRoute
	// caller did not retry within Config.HeldTTL.
	ExpiredHeld int
}

// syncBacklogLocked reports each worker's prefill backlog to admission
// before a resume pass (Tick, a program's end), where admission's Moves
// keep programs off a worker with a long prefill queued.
func (r *Router) syncBacklogLocked() {
	if r.moves == nil {
		return
	}
	for _, ws := range r.workers {
		r.adm.SetBacklog(ws.admID, int64(r.loads.load(ws.key).PrefillTokens))
	}
}

// SetEngineUsage reports the KV that worker rank w's engine has in use, in
// tokens (its blocks held by requests: vLLM's kv_cache_usage_perc times
// its capacity), to admission, which counts the worker as at least that
// full when it places programs (admission.RawAdmitter.SetEngineUsage): KV
// that its programs do not account for, such as requests outside
// admission, takes room all the same. A negative value clears the report;
// without admission, or for a rank the router does not know, it does
// nothing.
func (r *Router) SetEngineUsage(w flashindex.Worker, tokens int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.adm == nil {
		return
	}
	if i, ok := r.byKey[w]; ok {
		r.adm.SetEngineUsage(r.workers[i].admID, tokens)
		if r.metrics != nil {
			r.metrics.observeEngineUsage(w, tokens)
		}
	}
}

// Tick runs one control-loop round: admission pause/resume, the expiry
// sweeps of requests, sessions and approximate index entries. Call it
// periodically (every 5 s by default; see admission.Config.Interval).
func (r *Router) Tick() TickResult {
	now := r.cfg.Now()
	var res TickResult
	res.ExpiredSessions = r.table.Expire()
	r.index.Expire()
	r.mu.Lock()
	res.SweptRequests = r.loads.sweep(now.Add(-r.cfg.RequestTTL))
	var swept []flashindex.Worker
	if res.SweptRequests > 0 && r.loadObs.Load() != nil {
		for _, ws := range r.workers {
			swept = append(swept, ws.key)
		}
	}
	waiting := 0
	var rel []release
	if r.adm != nil {
		rel = r.expireHeldLocked(now)
		res.ExpiredHeld = len(rel)
		r.syncBacklogLocked()
		res.Admission = r.adm.Tick(now)
		waiting = r.adm.Waiting()
	}
	if r.pol != nil {
		rel = r.expireHeldLocked(now)
		res.ExpiredHeld = len(rel)
		r.policyEventLocked(admission.Event{Kind: admission.Reconcile, At: now, Workers: r.policyWorkersLocked()})
	}
	rel = append(rel, r.drainAdmissionLocked()...)
	r.mu.Unlock()
	for _, x := range rel {
		if x.id != "" && !x.dropped {
			res.Released = append(res.Released, x.id)
		}
	}
	r.notify(rel)
	for _, w := range swept {
		r.observeLoad(w)
	}
	r.hintsOnTick(now)
	if r.metrics != nil && r.adm != nil {
		r.metrics.observeTick(waiting)
	}
	return res
}
