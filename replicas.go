package agentkv

import (
	"github.com/agentkv/agentkv/flashindex"
)

// Hooks for router replicas. Several routers in front of the same workers
// (package eventplane runs them over NATS JetStream) each track the load of
// the requests they routed; to keep them from all sending new work to a
// worker each believes idle, every replica publishes its own load and adds
// the others' to it. The load hooks below, Config.IndexSnapshot (a replica
// starts warm from the newest stored snapshot) and Override.AllowedRanks (a
// session binding another replica made pins the exact worker rank) are all
// the root package knows of replicas: it never imports a transport.

// SetLoadObserver installs f, called after this router's own tracked load
// on a worker rank changed (a request routed, its prefill done, finished,
// failed or swept). f receives only the rank; it reads the new value with
// OwnLoad, so a slow reader sees the latest value rather than a queue of
// stale ones. f is called outside the router's locks, on the goroutine that
// changed the load (the request path): it must return promptly and must
// not block. nil removes the observer.
func (r *Router) SetLoadObserver(f func(w flashindex.Worker)) {
	if f == nil {
		r.loadObs.Store(nil)
		return
	}
	r.loadObs.Store(&f)
}

// SetRemoteLoad sets the load other replicas report on worker rank w (the
// sum over them). Scoring and the busy filter use this router's own load
// plus it; WorkerLoad reports the sum too. A zero Load clears it. The value
// is kept for a rank the router does not know yet, so the order in which
// workers and remote reports arrive does not matter.
func (r *Router) SetRemoteLoad(w flashindex.Worker, l Load) {
	r.mu.Lock()
	r.loads.setRemote(w, l)
	r.mu.Unlock()
}

// OwnLoad returns the load of the requests this router routed to worker
// rank w, without what other replicas report.
func (r *Router) OwnLoad(w flashindex.Worker) Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads.own(w)
}

// observeLoad calls the load observer for w. Callers must not hold r.mu.
func (r *Router) observeLoad(w flashindex.Worker) {
	if f := r.loadObs.Load(); f != nil {
		(*f)(w)
	}
}
