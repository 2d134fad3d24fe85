package flashindex

import (
	"container/heap"
	"time"
)

// approxEntry is one speculative (worker, block) device residency.
type approxEntry struct {
	ws     *workerState
	seq    uint64
	expiry int64  // unix nanoseconds
	order  uint64 // insertion or refresh sequence number, breaks expiry ties
	idx    int    // position in approxHeap
}

// approxHeap orders entries by (expiry, order): the root is the entry to
// expire or prune first.
type approxHeap []*approxEntry

func (h approxHeap) Len() int { return len(h) }
func (h approxHeap) Less(i, j int) bool {
	if h[i].expiry != h[j].expiry {
		return h[i].expiry < h[j].expiry
	}
	return h[i].order < h[j].order
}
func (h approxHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *approxHeap) Push(x any) {
	e := x.(*approxEntry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *approxHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

func (h *approxHeap) remove(e *approxEntry) {
	if e.idx >= 0 {
		heap.Remove(h, e.idx)
	}
}

// Record inserts what a routing decision implies when the engine publishes
// no events: the request's blocks (own sequence hashes, from position 0)
// are about to be on w's device. Each becomes an approximate entry that
// expires after ttl (DefaultApproxTTL when ttl <= 0); recording a block
// again refreshes its expiry. Blocks w already holds on device from events
// are skipped: an event confirms a speculative entry (a Stored on device
// replaces it; a Removed on device leaves none behind). When the entries
// exceed Config.ApproxMaxEntries, those closest to expiry are pruned first.
//
// Approximate entries count as device residency in queries. Expired
// entries are dropped by the next Record, Apply or Expire call, so an index
// that sees no writes should have Expire called periodically. seq is not
// retained.
//
// seq must be a chain, as a request's sequence hashes are; for another
// list, later answers about these entries are unspecified (never a panic,
// and residency from events is unaffected). Once Record has indexed a new
// block, Apply checks stored blocks against the block map rather than
// trusting chain structure (see Index.head), which makes stores somewhat
// slower for the index's lifetime.
func (ix *Index) Record(w Worker, seq []uint64, ttl time.Duration) {
	if len(seq) == 0 {
		return
	}
	if ttl <= 0 {
		ttl = DefaultApproxTTL
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	now := ix.now()
	ix.expireLocked(now)
	ws := ix.worker(w)
	exp := now.Add(ttl).UnixNano()
	ix.dupS.reset(len(seq))
	refs := ix.refs[:0]
	var pn *node
	poff := 0
	for _, s := range seq {
		if !ix.dupS.add(s) {
			continue
		}
		r := blockRef{seq: s}
		if n, off, ok := ix.locate(s, pn, poff); ok {
			r.node, r.off = n, off
			r.had = slotMask(n.data.Load().bitsAt(off), ws.slot)
		}
		pn, poff = r.node, r.off
		if r.had&(1<<planeDevice) != 0 {
			refs = append(refs, r) // confirmed by an event: keep as a chain link only
			continue
		}
		r.order = ix.approxSeq
		ix.approxSeq++
		if e := ws.approx[s]; e != nil {
			e.expiry, e.order = exp, r.order
			heap.Fix(&ix.approx, e.idx)
		} else {
			r.need = true
			r.mapped = true // marks "new entry" for the loop below
		}
		refs = append(refs, r)
	}
	ix.refs = refs
	ix.materialize(refs, nil, 0, setOp{slot: ws.slot, set: 1 << planeApprox})
	for i := range refs {
		r := &refs[i]
		if !r.mapped {
			continue
		}
		if ws.approx == nil {
			ws.approx = make(map[uint64]*approxEntry)
		}
		e := &approxEntry{ws: ws, seq: r.seq, expiry: exp, order: r.order}
		ws.approx[r.seq] = e
		heap.Push(&ix.approx, e)
		ws.counts.add(planeApprox, 1)
	}
	if len(ix.approx) > ix.approxMax {
		ix.st.approxPruned += uint64(ix.dropApproxWhile(func() bool { return len(ix.approx) > ix.approxMax }))
	}
}

// Expire drops the approximate entries whose TTL has passed.
func (ix *Index) Expire() {
	ix.mu.Lock()
	ix.expireLocked(ix.now())
	ix.mu.Unlock()
}

func (ix *Index) expireLocked(now time.Time) {
	if len(ix.approx) == 0 {
		return
	}
	t := now.UnixNano()
	ix.st.approxExpired += uint64(ix.dropApproxWhile(func() bool { return ix.approx[0].expiry <= t }))
}

// dropApproxWhile pops entries off the heap while more (called with the
// heap non-empty) holds, and clears their residencies; it returns how many
// it dropped.
func (ix *Index) dropApproxWhile(more func() bool) int {
	return ix.dropApprox(func() *approxEntry {
		if len(ix.approx) == 0 || !more() {
			return nil
		}
		return heap.Pop(&ix.approx).(*approxEntry)
	})
}

// Unrecord drops w's approximate entries for the blocks of seq (what a
// Record for a request that then failed had added); residencies from events
// are untouched, and blocks without an approximate entry are skipped. A
// router calls it when the request never reached the engine's cache, so
// the worker is not credited with blocks it does not hold.
func (ix *Index) Unrecord(w Worker, seq []uint64) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ws := ix.workers[w]
	if ws == nil || len(ws.approx) == 0 {
		return
	}
	i := 0
	ix.dropApprox(func() *approxEntry {
		for ; i < len(seq); i++ {
			if e := ws.approx[seq[i]]; e != nil {
				i++
				ix.approx.remove(e)
				return e
			}
		}
		return nil
	})
}

// dropApprox clears the residencies of the entries next yields (each
// already off the heap) until it yields nil, and returns how many it
// cleared. Entries leave the heap in (expiry, order) order, which for a
// recorded request is its chain's order, so consecutive entries of one
// worker are mostly adjacent blocks of one node: each such run is cleared
// with one node update, not one per block (a session flood prunes every
// request's blocks, issue #22).
func (ix *Index) dropApprox(next func() *approxEntry) int {
	var run struct {
		ws   *workerState
		n    *node
		a, b int // the run's blocks are n's [a, b)
	}
	flush := func() {
		if run.n != nil {
			ix.updateRange(run.n, run.a, run.b, setOp{slot: run.ws.slot, clear: 1 << planeApprox})
			run.n = nil
		}
	}
	dropped := 0
	for e := next(); e != nil; e = next() {
		dropped++
		ws := e.ws
		delete(ws.approx, e.seq)
		ws.counts.add(planeApprox, -1)
		n, off, ok := ix.locate(e.seq, run.n, run.b-1)
		if ok && n == run.n && ws == run.ws && off == run.b {
			run.b++
			continue
		}
		if run.n != nil {
			flush() // may rewrite n: locate e again
			n, off, ok = ix.locate(e.seq, nil, 0)
		}
		if ok {
			run.ws, run.n, run.a, run.b = ws, n, off, off+1
		}
	}
	flush()
	return dropped
}
