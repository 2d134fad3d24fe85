package admission

import (
	"time"
)

// Policy is a pluggable queue admission policy, in the shape of Dynamo's
// router (QueueAdmissionPolicy): the host (agentkv's Router) asks Admit for
// every request, keeps the deferred ones itself, and tells the policy what
// happens to the requests it tracks; each event returns the deferred
// requests to wake. The host calls a Policy from one goroutine at a time,
// under its own lock, so an implementation needs no locking of its own and
// must not call back into the host. A Policy holds only policy state:
// request ids are the host's, and wake lists may name ids the host no
// longer holds (it ignores them).
//
// Thunder is ThunderAgent's policy (a RawAdmitter) behind this surface; the
// Router runs its own placement-aware path for Config.Admission and this
// one for any Policy (agentkv.Config.AdmissionPolicy).
type Policy interface {
	// Admit decides what happens to a new request: Bypass (untracked),
	// Ready (run now, tracked), or Defer (held until an event wakes it).
	Admit(req Request) Verdict
	// OnEvent reports an event for a tracked request (or a reconcile),
	// appends the ids of deferred requests to wake to wake and returns it.
	OnEvent(ev Event, wake []string) []string
}

// Verdict is Admit's answer.
type Verdict uint8

const (
	// Bypass: run the request now and do not report its events.
	Bypass Verdict = iota
	// Ready: run the request now and report its events.
	Ready
	// Defer: hold the request until an event's wake list names it.
	Defer
)

func (v Verdict) String() string {
	switch v {
	case Bypass:
		return "bypass"
	case Ready:
		return "ready"
	case Defer:
		return "defer"
	}
	return "unknown"
}

// Request is what a Policy learns of a new request. Workers is the host's
// current worker list, valid only during the call.
type Request struct {
	ID string // the host's request id, unique among live requests
	// Program is the agent program (session) the request is a turn of;
	// empty when the request names none.
	Program       string
	ContextTokens int64 // prompt tokens
	At            time.Time
	Workers       []PolicyWorker
}

// PolicyWorker is one worker (DP rank) as the host sees it.
type PolicyWorker struct {
	ID       WorkerID
	Capacity int64 // KV capacity in tokens, 0 when unknown
}

// EventKind names an Event.
type EventKind uint8

const (
	// Dispatched: a Ready (or woken) request went to Worker.
	Dispatched EventKind = iota + 1
	// Completed: a dispatched request finished; ContextTokens is its
	// program's context after it (prompt plus output), Final whether it
	// ended its program.
	Completed
	// Aborted: a tracked request will not run or finish (withdrawn while
	// deferred, failed, or abandoned after its wake).
	Aborted
	// Reconcile: the host's periodic tick (every agentkv
	// Config.TickInterval, the reconcile interval), with its workers.
	Reconcile
)

// Event is one input to Policy.OnEvent. Workers (Reconcile) is valid only
// during the call.
type Event struct {
	Kind          EventKind
	ID            string // the request (not for Reconcile)
	Worker        WorkerID
	ContextTokens int64
	Final         bool
	At            time.Time
	Workers       []PolicyWorker
}
