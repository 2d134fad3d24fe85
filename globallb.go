package agentkv

import (
	"container/list"

	"github.com/agentkv/agentkv/flashindex"
)

// This file holds the GlobalLB policy: VERL's default rollout balancer
// ("global load balancer", verl/experimental/agent_loop), a baseline for
// RL rollouts. A request with a session id goes to the worker that served
// the session before, remembered in an LRU of GlobalLBSessions sessions
// (VERL's trajectory-id cache); any other request, and a session whose
// worker is gone or not a candidate, goes to the candidate with the fewest
// requests in flight (ties: the worker added first), and the session is
// remembered there. It reads neither the KV index nor the cost function.

// GlobalLBSessions is how many sessions the GlobalLB policy remembers
// (VERL's DEFAULT_ROUTING_CACHE_SIZE).
const GlobalLBSessions = 10_000

// stickyLB is GlobalLB's session → worker LRU. It is not safe for
// concurrent use; the Router guards it with its mutex.
type stickyLB struct {
	max int
	ll  *list.List // of *stickyEntry, most recently used first
	m   map[string]*list.Element
}

type stickyEntry struct {
	session string
	worker  flashindex.Worker
}

func newStickyLB(max int) *stickyLB {
	return &stickyLB{max: max, ll: list.New(), m: map[string]*list.Element{}}
}

// get returns the session's worker and marks the session used.
func (s *stickyLB) get(session string) (flashindex.Worker, bool) {
	e, ok := s.m[session]
	if !ok {
		return flashindex.Worker{}, false
	}
	s.ll.MoveToFront(e)
	return e.Value.(*stickyEntry).worker, true
}

// put remembers the session on w, evicting the least recently used
// session beyond max.
func (s *stickyLB) put(session string, w flashindex.Worker) {
	if e, ok := s.m[session]; ok {
		e.Value.(*stickyEntry).worker = w
		s.ll.MoveToFront(e)
		return
	}
	s.m[session] = s.ll.PushFront(&stickyEntry{session: session, worker: w})
	for s.ll.Len() > s.max {
		last := s.ll.Back()
		s.ll.Remove(last)
		delete(s.m, last.Value.(*stickyEntry).session)
	}
}

// len is how many sessions are remembered.
func (s *stickyLB) len() int { return s.ll.Len() }

// pick returns the index in workers of the worker for a request of session
// ("" for none), given each worker's requests in flight, and remembers the
// session there. workers must not be empty.
func (s *stickyLB) pick(session string, workers []flashindex.Worker, inflight []int) int {
	if session != "" {
		if w, ok := s.get(session); ok {
			for i, c := range workers {
				if c == w {
					return i
				}
			}
		}
	}
	best := 0
	for i := 1; i < len(workers); i++ {
		if inflight[i] < inflight[best] {
			best = i
		}
	}
	if session != "" {
		s.put(session, workers[best])
	}
	return best
}

// pickGlobalLBLocked is the GlobalLB select stage over the candidates.
func (r *Router) pickGlobalLBLocked(session string, sc *scratch) int {
	sc.keys, sc.inflight = sc.keys[:0], sc.inflight[:0]
	for _, c := range sc.cands {
		sc.keys = append(sc.keys, c.ws.key)
		sc.inflight = append(sc.inflight, r.loads.load(c.ws.key).Requests)
	}
	return r.sticky.pick(session, sc.keys, sc.inflight)
}
