package agentkv

import (
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// Load is a worker's active load as the router tracks it from the requests
// it routed.
type Load struct {
	// PrefillTokens is the sum of uncached prompt tokens of requests that
	// have not produced their first token yet.
	PrefillTokens int
	// DecodeBlocks is the sum, over requests in flight, of the KV blocks
	// each holds (prompt plus expected output).
	DecodeBlocks int
	// Requests is the number of requests in flight.
	Requests int
}

// activeRequest is one routed request the tracker has not seen finish.
type activeRequest struct {
	worker        flashindex.Worker
	prefillTokens int // uncached tokens still to prefill; 0 once prefilled
	blocks        int
	lastSeen      time.Time // last sign of life: routed, first token, progress
}

// loadTracker is the synchronous active-load bookkeeping. It is not safe for
// concurrent use; the Router guards it with its own mutex.
type loadTracker struct {
	workers  map[flashindex.Worker]*Load
	requests map[uint64]*activeRequest
	remote   map[flashindex.Worker]Load // other replicas' load (SetRemoteLoad)
}

func newLoadTracker() *loadTracker {
	return &loadTracker{workers: map[flashindex.Worker]*Load{}, requests: map[uint64]*activeRequest{},
		remote: map[flashindex.Worker]Load{}}
}

func (t *loadTracker) addWorker(w flashindex.Worker) {
	if _, ok := t.workers[w]; !ok {
		t.workers[w] = &Load{}
	}
}

// removeWorker forgets a worker and every request routed to it.
func (t *loadTracker) removeWorker(w flashindex.Worker) {
	delete(t.workers, w)
	for id, r := range t.requests {
		if r.worker == w {
			delete(t.requests, id)
		}
	}
}

// load is the rank's own load plus what other replicas report.
func (t *loadTracker) load(w flashindex.Worker) Load {
	l := t.own(w)
	if o, ok := t.remote[w]; ok {
		l.PrefillTokens += o.PrefillTokens
		l.DecodeBlocks += o.DecodeBlocks
		l.Requests += o.Requests
	}
	return l
}

// own is the load of the requests this router routed to the rank.
func (t *loadTracker) own(w flashindex.Worker) Load {
	if l := t.workers[w]; l != nil {
		return *l
	}
	return Load{}
}

func (t *loadTracker) setRemote(w flashindex.Worker, l Load) {
	if l == (Load{}) {
		delete(t.remote, w)
		return
	}
	t.remote[w] = l
}

// start records a routed request. A duplicate id is ignored.
func (t *loadTracker) start(id uint64, w flashindex.Worker, prefillTokens, blocks int, now time.Time) {
	l := t.workers[w]
	if l == nil {
		return
	}
	if _, dup := t.requests[id]; dup {
		return
	}
	t.requests[id] = &activeRequest{worker: w, prefillTokens: prefillTokens, blocks: blocks, lastSeen: now}
	l.PrefillTokens += prefillTokens
	l.DecodeBlocks += blocks
	l.Requests++
}

// prefilled marks the request's prefill done (first token seen).
func (t *loadTracker) prefilled(id uint64, now time.Time) {
	r := t.requests[id]
	if r == nil {
		return
	}
	r.lastSeen = now
	if l := t.workers[r.worker]; l != nil {
		l.PrefillTokens -= r.prefillTokens
	}
	r.prefillTokens = 0
}

// touch records progress on a streaming request so the sweep keeps it.
func (t *loadTracker) touch(id uint64, now time.Time) {
	if r := t.requests[id]; r != nil {
		r.lastSeen = now
	}
}

// finish removes a request. It reports whether the request was tracked.
func (t *loadTracker) finish(id uint64) bool {
	r := t.requests[id]
	if r == nil {
		return false
	}
	delete(t.requests, id)
	if l := t.workers[r.worker]; l != nil {
		l.PrefillTokens -= r.prefillTokens
		l.DecodeBlocks -= r.blocks
		l.Requests--
	}
	return true
}

// sweep forgets requests with no sign of life since before cutoff: their
// completion was lost (a crashed client, a dropped callback). A request that
// keeps streaming keeps touching its lastSeen and is never swept.
func (t *loadTracker) sweep(cutoff time.Time) int {
	n := 0
	for id, r := range t.requests {
		if r.lastSeen.Before(cutoff) {
			t.finish(id)
			n++
		}
	}
	return n
}
