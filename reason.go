package agentkv

import (
	"strconv"

	"github.com/agentkv/agentkv/session"
)

// This file holds the Infer stage of the request path and the route
// reason every Decision carries.

// RouteReason says why a request went to its worker.
type RouteReason uint8

const (
	// RouteLoad: the cost function chose with no cached prefix anywhere
	// it could use (or the policy is round robin or random).
	RouteLoad RouteReason = iota
	// RoutePrefix: the cost function chose a worker holding part of the
	// prompt (any tier, or the shared pool).
	RoutePrefix
	// RouteSession: the request's named session chose: its affinity
	// binding, or admission keeping its running program's worker.
	RouteSession
	// RouteInferred: as RouteSession, for a session inferred from the
	// prompt.
	RouteInferred
	// RouteHeld: admission held the turn and then placed it.
	RouteHeld
)

var routeReasonNames = [...]string{"load", "prefix", "session", "inferred", "held"}

// String returns the reason as the X-Agentkv-Route header and the
// routing metric's reason label spell it.
func (r RouteReason) String() string {
	if int(r) < len(routeReasonNames) {
		return routeReasonNames[r]
	}
	return "reason(" + strconv.Itoa(int(r)) + ")"
}

// reason is the RouteReason of the routed request.
func (rt *routing) reason(ac session.AgentContext) RouteReason {
	switch {
	case rt.wasHeld:
		return RouteHeld
	case rt.viaAffinity || (rt.admitted && rt.continuing):
		if ac.Inferred {
			return RouteInferred
		}
		return RouteSession
	case rt.pick.match.Device+rt.pick.match.Host+rt.pick.match.Disk > 0 || rt.pick.shared > 0:
		return RoutePrefix
	}
	return RouteLoad
}

// inferSession is the Infer stage, after hashing: a request that names
// no session gets the one its prompt's blocks place it in (or none), and
// identify's lookups are redone for it.
func (r *Router) inferSession(rt *routing, req *Request) {
	if r.infer == nil || req.Agent.Valid() || len(rt.seq) == 0 {
		return
	}
	r.mu.Lock()
	var held session.AgentContext
	if h := r.held[req.ID]; h != nil && req.ID != "" {
		held = h.inferred
	}
	r.mu.Unlock()
	if held.Valid() { // a held request's retry keeps its session
		req.Agent = held
		rt.inferred = true
		r.identify(rt, req)
		return
	}
	inf := r.infer.Infer(rt.seq, req.Client)
	if inf.Kind == InferNone {
		return
	}
	program := req.Agent.ProgramID
	req.Agent = inf.Agent
	req.Agent.ProgramID = program
	rt.inferred = true
	r.identify(rt, req)
}

// compacted restarts a session's lineage after a compaction: the
// rewritten context shares no prefix with the old one, which the router
// stops tracking (its blocks age out of the engines' caches); the
// session, its binding and its admission program continue.
func (r *Router) compacted(id string) {
	r.tree.RemoveSession(id)
	r.hashes.forget(id)
}
