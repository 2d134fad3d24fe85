package agentkv

import (
	"github.com/agentkv/agentkv/session"
	"slices"
	"strings"
	"time"

	"github.com/agentkv/agentkv/admission"
)

// This file holds the requests admission control holds: how they are
// released or dropped (drainAdmissionLocked, notify), withdrawn (Cancel)
// and expired when their caller abandoned them.

type heldRequest struct {
	program    string
	since      time.Time
	waiter     bool // a Route call is blocked on ready (it never expires)
	released   bool
	releasedAt time.Time
	adm        admission.Admission
	ready      chan struct{} // closed on release or drop
	dropped    bool
	// inferred is the session the Infer stage gave the request, which
	// its retry keeps (it names none itself).
	inferred session.AgentContext
}

// Cancel withdraws a held request; a request not held is ignored. A
// request already released but not yet retried has its turn ended.
func (r *Router) Cancel(requestID string) {
	r.mu.Lock()
	h := r.held[requestID]
	if h == nil {
		r.mu.Unlock()
		return
	}
	delete(r.held, requestID)
	r.unlinkHeld(h.program, requestID)
	now := r.cfg.Now()
	if r.pol != nil {
		r.policyEventLocked(admission.Event{Kind: admission.Aborted, ID: requestID, At: now})
	} else if h.released {
		// The turn was released and counted as running: end it.
		_ = r.adm.EndRequest(now, h.program, 0, 0)
	} else {
		_ = r.adm.Cancel(now, h.program)
	}
	rel := r.drainAdmissionLocked()
	r.mu.Unlock()
	r.notify(rel)
}

func (r *Router) unlinkHeld(program, id string) {
	ids := r.heldByPg[program]
	if i := slices.Index(ids, id); i >= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(r.heldByPg, program)
	} else {
		r.heldByPg[program] = ids
	}
}

// release is a held request whose fate admission decided.
type release struct {
	id      string
	h       *heldRequest
	dropped bool
	woken   bool // h.ready is closed already (an expired release)
}

// drainAdmissionLocked consumes admission decisions and marks released or
// dropped held requests. Callers hold r.mu and pass the result to notify
// after unlocking.
func (r *Router) drainAdmissionLocked() []release {
	if r.adm == nil {
		return r.drainPolicyLocked()
	}
	r.decBuf = r.adm.Drain(r.decBuf[:0])
	var out []release
	for _, d := range r.decBuf {
		if r.metrics != nil {
			r.metrics.observeAdmission(d)
		}
		if !d.Released || d.Kind == admission.KindCancel {
			// A cancel is the router withdrawing one turn itself (Cancel,
			// MaxHeld): that request is gone already, its siblings wait on.
			continue
		}
		ids := r.heldByPg[d.Program]
		delete(r.heldByPg, d.Program)
		for _, id := range ids {
			h := r.held[id]
			if h == nil {
				continue
			}
			if a, ok := d.Grant(); ok {
				h.released, h.releasedAt, h.adm = true, d.At, a
			} else { // terminated: the turn will never run
				h.dropped = true
				delete(r.held, id)
			}
			out = append(out, release{id: id, h: h, dropped: h.dropped})
		}
	}
	return out
}

// notify wakes waiters and calls OnRelease, outside the router's lock.
func (r *Router) notify(rel []release) {
	for _, x := range rel {
		if !x.woken {
			close(x.h.ready)
		}
		if r.cfg.OnRelease != nil {
			var err error
			if x.dropped {
				err = ErrDropped
			}
			r.cfg.OnRelease(x.id, err)
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
			if r.pol != nil {
				r.policyEventLocked(admission.Event{Kind: admission.Aborted, ID: id, At: now})
			} else {
				_ = r.adm.EndRequest(now, h.program, 0, 0)
			}
			h.dropped = true
			out = append(out, release{id: id, h: h, dropped: true, woken: true})
		}
	}
	// In ID order, so OnRelease calls are reproducible.
	slices.SortFunc(out, func(a, b release) int { return strings.Compare(a.id, b.id) })
	return out
}
