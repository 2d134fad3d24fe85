package agentkv

import (
	"time"

	"github.com/agentkv/agentkv/admission"
)

// This file holds the router's side of Config.AdmissionPolicy: the admit
// stage for any admission.Policy, and the events it reports to it.

// admitPolicyLocked is the admit stage with Config.AdmissionPolicy: a
// request the policy deferred is held (ErrHeld) until an event wakes it;
// a woken or Ready one is tracked, and every worker stays a candidate.
func (r *Router) admitPolicyLocked(rt *routing, req *Request, sc *scratch, hold bool) (*heldRequest, error) {
	id := req.ID
	if h := r.held[id]; h != nil {
		if !h.released {
			return h, ErrHeld
		}
		rt.waited = rt.start.Sub(h.since)
		delete(r.held, id)
		rt.tracked = true
		r.filterBusy(sc)
		return nil, nil
	}
	switch r.pol.Admit(admission.Request{ID: id, Program: rt.program, ContextTokens: int64(rt.prompt), At: rt.start, Workers: r.policyWorkersLocked()}) {
	case admission.Defer:
		if len(r.held) >= r.cfg.MaxHeld {
			r.policyEventLocked(admission.Event{Kind: admission.Aborted, ID: id, At: rt.start})
			return nil, ErrTooManyHeld
		}
		h := &heldRequest{program: rt.program, since: rt.start, waiter: hold, ready: make(chan struct{})}
		r.held[id] = h
		rt.heldNow = true
		return h, ErrHeld
	case admission.Ready:
		rt.tracked = true
	}
	r.filterBusy(sc)
	return nil, nil
}

// policyWorkersLocked lists the workers for the policy (scratch: valid
// until the next call).
func (r *Router) policyWorkersLocked() []admission.PolicyWorker {
	ws := r.polWorkers[:0]
	for _, w := range r.workers {
		ws = append(ws, admission.PolicyWorker{ID: w.admID, Capacity: int64(w.info.KVCapacityTokens)})
	}
	r.polWorkers = ws
	return ws
}

// policyEventLocked reports ev to the policy; the requests it wakes are
// released by the next drainAdmissionLocked.
func (r *Router) policyEventLocked(ev admission.Event) {
	r.polWake = r.pol.OnEvent(ev, r.polWake)
}

// drainPolicyLocked releases the held requests the policy woke.
func (r *Router) drainPolicyLocked() []release {
	if len(r.polWake) == 0 {
		return nil
	}
	var out []release
	var now time.Time
	for _, id := range r.polWake {
		h := r.held[id]
		if h == nil || h.released {
			continue // gone already, or woken twice
		}
		if now.IsZero() {
			now = r.cfg.Now()
		}
		h.released, h.releasedAt = true, now
		out = append(out, release{id: id, h: h})
	}
	clear(r.polWake)
	r.polWake = r.polWake[:0]
	return out
}

// donePolicyLocked reports a tracked request's end: Completed, or Aborted
// when it failed.
func (r *Router) donePolicyLocked(d *Decision, u Usage, prompt int, now time.Time) {
	ev := admission.Event{Kind: admission.Completed, ID: d.RequestID, ContextTokens: int64(prompt + u.CompletionTokens), Final: d.agent.Final, At: now}
	if ws, ok := r.byKey[d.Worker]; ok {
		ev.Worker = r.workers[ws].admID
	}
	if u.Failed {
		ev.Kind = admission.Aborted
	}
	r.policyEventLocked(ev)
}
