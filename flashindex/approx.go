package flashindex

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// approxEntry is one speculative (worker, block) device residency. Entries
// live by value in approxSet's slab and refer to one another (and to their
// worker) by number, never by pointer: a million of them are one object the
// garbage collector does not scan (issue #22: a session flood keeps the
// approximate entries at their bound, and a pointer per entry made every GC
// cycle walk them all).
type approxEntry struct {
	seq    uint64
	expiry int64  // unix nanoseconds
	order  uint64 // insertion or refresh sequence number, breaks expiry ties
	// prev and next link the entry into the in-order queue (none at the
	// ends); next also links free slab slots.
	prev, next int32
	slot       int32 // the worker's bitset slot
	pos        int32 // place in the out-of-order heap; inQueue when queued
}

const (
	none    = -1 // no entry
	inQueue = -1 // approxEntry.pos of an entry in the queue, not the heap
)

// approxSet holds the approximate entries in (expiry, order) order, the
// order they expire and are pruned in. Record gives every entry it adds or
// refreshes the next order number and, with one TTL and a clock that does
// not step back, an expiry no earlier than any before it: such an entry
// goes to the tail of a queue (a doubly linked list), and adding, removing,
// refreshing and taking the first entry are O(1). An entry that would
// sort before the queue's tail (a shorter TTL, a clock stepped back) goes
// to a binary heap instead; the first entry is the earlier of the queue's
// head and the heap's root.
type approxSet struct {
	ents       []approxEntry
	free       int32 // first free slab slot, linked through next
	head, tail int32 // the queue
	heap       []int32
	live       int
}

func (s *approxSet) init() {
	*s = approxSet{free: none, head: none, tail: none}
}

// before reports whether entry i sorts before entry j.
func (s *approxSet) before(i, j int32) bool {
	a, b := &s.ents[i], &s.ents[j]
	if a.expiry != b.expiry {
		return a.expiry < b.expiry
	}
	return a.order < b.order
}

// add stores a new entry and returns its number.
func (s *approxSet) add(slot int, seq uint64, expiry int64, order uint64) int32 {
	i := s.free
	if i != none {
		s.free = s.ents[i].next
	} else {
		i = int32(len(s.ents))
		s.ents = append(s.ents, approxEntry{})
	}
	s.ents[i] = approxEntry{seq: seq, expiry: expiry, order: order, prev: none, next: none, slot: int32(slot)}
	s.live++
	s.place(i)
	return i
}

// refresh gives entry i a new expiry and order and moves it to its place.
func (s *approxSet) refresh(i int32, expiry int64, order uint64) {
	s.unlink(i)
	e := &s.ents[i]
	e.expiry, e.order = expiry, order
	s.place(i)
}

// place puts the unplaced entry i at the queue's tail when it sorts after
// the tail, else into the heap.
func (s *approxSet) place(i int32) {
	if s.tail == none || s.before(s.tail, i) {
		e := &s.ents[i]
		e.pos, e.prev, e.next = inQueue, s.tail, none
		if s.tail == none {
			s.head = i
		} else {
			s.ents[s.tail].next = i
		}
		s.tail = i
		return
	}
	s.ents[i].pos = int32(len(s.heap))
	s.heap = append(s.heap, i)
	s.up(len(s.heap) - 1)
}

// unlink takes entry i out of the queue or the heap (it stays allocated).
func (s *approxSet) unlink(i int32) {
	e := &s.ents[i]
	if e.pos == inQueue {
		if e.prev == none {
			s.head = e.next
		} else {
			s.ents[e.prev].next = e.next
		}
		if e.next == none {
			s.tail = e.prev
		} else {
			s.ents[e.next].prev = e.prev
		}
		e.prev, e.next = none, none
		return
	}
	k := int(e.pos)
	last := len(s.heap) - 1
	if k != last {
		s.heap[k] = s.heap[last]
		s.ents[s.heap[k]].pos = int32(k)
	}
	s.heap = s.heap[:last]
	if k != last {
		s.down(k)
		s.up(k)
	}
}

// release frees entry i, which must be unlinked.
func (s *approxSet) release(i int32) {
	s.ents[i] = approxEntry{next: s.free}
	s.free = i
	s.live--
	if s.live == 0 { // give the slab back after a burst
		s.init()
	}
}

// first returns the entry that sorts first, or none.
func (s *approxSet) first() int32 {
	if len(s.heap) == 0 {
		return s.head
	}
	if s.head == none || s.before(s.heap[0], s.head) {
		return s.heap[0]
	}
	return s.head
}

func (s *approxSet) up(k int) {
	for k > 0 {
		p := (k - 1) / 2
		if !s.before(s.heap[k], s.heap[p]) {
			return
		}
		s.swap(k, p)
		k = p
	}
}

func (s *approxSet) down(k int) {
	n := len(s.heap)
	for {
		c := 2*k + 1
		if c >= n {
			return
		}
		if c+1 < n && s.before(s.heap[c+1], s.heap[c]) {
			c++
		}
		if !s.before(s.heap[c], s.heap[k]) {
			return
		}
		s.swap(k, c)
		k = c
	}
}

func (s *approxSet) swap(a, b int) {
	h := s.heap
	h[a], h[b] = h[b], h[a]
	s.ents[h[a]].pos, s.ents[h[b]].pos = int32(a), int32(b)
}

// sorted returns copies of the live entries in (expiry, order) order.
func (s *approxSet) sorted() []approxEntry {
	out := make([]approxEntry, 0, s.live)
	for i := s.head; i != none; i = s.ents[i].next {
		out = append(out, s.ents[i])
	}
	q := len(out)
	for _, i := range s.heap {
		out = append(out, s.ents[i])
	}
	if len(out) > q { // the queue alone is in order already
		slices.SortFunc(out, func(a, b approxEntry) int {
			if c := cmp.Compare(a.expiry, b.expiry); c != 0 {
				return c
			}
			return cmp.Compare(a.order, b.order)
		})
	}
	return out
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
	ix.RecordTail(w, seq, 0, ttl)
}

// RecordTail is Record for a chain whose first from blocks w's entries
// already cover and need no refresh (an agent session's next turn on the
// same worker, its context recorded by a recent turn): only seq[from:] is
// recorded, after seq[from-1], so the cost grows with the new blocks, not
// the context. The first from blocks keep the expiry they have. When
// seq[from-1] is no longer indexed (it expired, or was never recorded), or
// from is out of range, the whole chain is recorded as Record does.
func (ix *Index) RecordTail(w Worker, seq []uint64, from int, ttl time.Duration) {
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
	if from > 0 && from <= len(seq) {
		if _, _, ok := ix.locateMap(seq[from-1]); ok {
			// The link block starts the list: found in the block map, it
			// is a chain link (or an entry of w's, refreshed: one), and
			// the new blocks are chained after it.
			seq = seq[from-1:]
		}
	}
	ws := ix.worker(w)
	exp := now.Add(ttl).UnixNano()
	ix.dupS.reset(len(seq))
	refs := ix.refs[:0]
	var pn *node
	poff := 0
	touched := 0
	var acc uint64
	for k, s := range seq {
		if !ix.dupS.add(s) {
			continue
		}
		r := blockRef{seq: s}
		n, off, ok := nextTo(s, pn, poff)
		if !ok {
			// Load the block map's slots a batch ahead: the loads overlap
			// their cache misses (new blocks all miss).
			if k >= touched {
				touched = min(k+touchBatch, len(seq))
				ix.blocks.touch(seq[k:touched])
			}
			n, off, ok = ix.locateMap(s)
		}
		if ok {
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
		// An entry exists only where its bit is set: a new block costs no
		// lookup.
		if r.had&(1<<planeApprox) == 0 {
			r.need = true
			r.mapped = true           // marks "new entry" for the loop below
			acc += ws.approx.touch(s) // its slot, loaded ahead of the insert
		} else if i, ok := ws.approx.get(s); ok {
			ix.approx.refresh(int32(i), exp, r.order)
		} else {
			r.need = true
			r.mapped = true // marks "new entry" for the loop below
		}
		refs = append(refs, r)
	}
	ix.refs = refs
	ix.blocks.sink += acc
	ix.materialize(refs, nil, 0, setOp{slot: ws.slot, set: 1 << planeApprox})
	for i := range refs {
		r := &refs[i]
		if !r.mapped {
			continue
		}
		ws.approx.put(r.seq, uint64(ix.approx.add(ws.slot, r.seq, exp, r.order)))
		ws.counts.add(planeApprox, 1)
	}
	if ix.approx.live > ix.approxMax {
		ix.prefetchApprox(ix.approx.live-ix.approxMax, math.MaxInt64)
		ix.st.approxPruned += uint64(ix.dropApproxWhile(func(int32) bool { return ix.approx.live > ix.approxMax }))
	}
}

// Expire drops the approximate entries whose TTL has passed.
func (ix *Index) Expire() {
	ix.mu.Lock()
	ix.expireLocked(ix.now())
	ix.mu.Unlock()
}

func (ix *Index) expireLocked(now time.Time) {
	if ix.approx.live == 0 {
		return
	}
	t := now.UnixNano()
	ix.prefetchApprox(touchAhead, t)
	ix.st.approxExpired += uint64(ix.dropApproxWhile(func(i int32) bool { return ix.approx.ents[i].expiry <= t }))
}

// touchAhead is how many approximate entries prefetchApprox loads ahead
// at most.
const touchAhead = 64

// prefetchApprox loads, for up to n (at most touchAhead) queued entries
// from the queue's head that expire by t, the slots that dropping them
// reads: their worker map's and the block map's. The loads do not depend
// on one another, so their cache misses overlap (see blockMap.touch);
// dropped one by one, each entry would wait for its own.
func (ix *Index) prefetchApprox(n int, t int64) {
	var acc uint64
	for i, k := ix.approx.head, min(n, touchAhead); i != none && k > 0; k-- {
		e := &ix.approx.ents[i]
		if e.expiry > t {
			break
		}
		if ws := ix.bySlot[e.slot]; ws != nil {
			acc += ws.approx.touch(e.seq)
		}
		acc += ix.blocks.firstSlot(mix(e.seq))
		i = e.next
	}
	ix.blocks.sink += acc
}

// dropApproxWhile takes the first entries while more (called with the
// first one) holds, and clears their residencies; it returns how many it
// dropped.
func (ix *Index) dropApproxWhile(more func(first int32) bool) int {
	return ix.dropApprox(func() int32 {
		i := ix.approx.first()
		if i == none || !more(i) {
			return none
		}
		ix.approx.unlink(i)
		return i
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
	if ws == nil || ws.approx.Len() == 0 {
		return
	}
	k := 0
	ix.dropApprox(func() int32 {
		for ; k < len(seq); k++ {
			if i, ok := ws.approx.get(seq[k]); ok {
				k++
				ix.approx.unlink(int32(i))
				return int32(i)
			}
		}
		return none
	})
}

// dropApprox clears the residencies of the entries next yields (each
// already unlinked; dropApprox releases it) until it yields none, and
// returns how many it cleared. Entries leave the heap in (expiry, order) order, which for a
// recorded request is its chain's order, so consecutive entries of one
// worker are mostly adjacent blocks of one node: each such run is cleared
// with one node update, not one per block (a session flood prunes every
// request's blocks, issue #22).
func (ix *Index) dropApprox(next func() int32) int {
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
	for i := next(); i != none; i = next() {
		dropped++
		seq, ws := ix.approx.ents[i].seq, ix.bySlot[ix.approx.ents[i].slot]
		ix.approx.release(i)
		if ws == nil {
			continue // cannot happen: RemoveWorker drops the worker's entries
		}
		if j, ok := ws.approx.get(seq); !ok || j != uint64(i) {
			continue // cannot happen: an entry is in its worker's map
		}
		ws.approx.del(seq)
		ws.counts.add(planeApprox, -1)
		n, off, ok := ix.locate(seq, run.n, run.b-1)
		if ok && n == run.n && ws == run.ws && off == run.b {
			run.b++
			continue
		}
		if run.n != nil {
			flush() // may rewrite n: locate the block again
			n, off, ok = ix.locate(seq, nil, 0)
		}
		if ok {
			run.ws, run.n, run.a, run.b = ws, n, off, off+1
		}
	}
	flush()
	return dropped
}
