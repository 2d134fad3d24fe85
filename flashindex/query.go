package flashindex

import (
	"math/bits"
	"slices"
	"sync"
)

// queryScratch is per-query working memory, pooled. The walk's steps are
// its methods, so that they share its slices through one pointer.
type queryScratch struct {
	words []wordState // per 64 slots of the query's slot table
	ends  []slotEnds  // per slot not dropped
	drops []drop
	hops  []hop
	sink  uint32 // see path
}

// wordState is the walk's state of 64 slots: the slots walking the
// request on each tier (a slot is in at most one), the slots that matched
// at all, and the slots recorded in drops.
type wordState struct {
	dev, host, disk, matched, dropped uint64
}

// slotEnds records where a slot's device prefix, host run and disk run
// ended (absolute request positions).
type slotEnds struct {
	dev, host, disk int32
}

// drop records slots whose walk ended in one step, straight from the
// device tier: their device prefix, and so their whole match, ends at pos.
// Most slots end that way (a request's first node is typically a system
// prompt every worker holds, and the next node drops nearly all of them),
// so recording them a word at a time saves three per-slot writes each.
type drop struct {
	pos  int32
	word int32
	x    uint64
}

// hop is one node a query's request passes through: the node's contents
// and hashes (one snapshot), where the request enters it (pos) and how many
// of its blocks the request follows (m). check >= 0 means m came from the
// node's kid list (m = check+1) and holds if the node's block check is the
// request's; -1 means m came from comparing the hashes.
type hop struct {
	d      *nodeData
	hashes []uint64
	bits0  []uint64 // d.bits0
	end0   int32    // d.runs[0].end
	pos, m int32
	check  int32
}

var scratchPool = sync.Pool{New: func() any { return new(queryScratch) }}

// FindMatches returns, for every worker with any overlap with the request
// seq (own sequence hashes from position 0, as AppendSequenceHashes makes
// them), its device, host and disk depths and resident count; see Match
// for the exact counting. Results are appended to dst[:0] and the extended
// slice returned, so a caller that passes the previous result back
// allocates nothing; the caller owns both. Workers come in no particular
// order. seq is not retained or modified.
//
// seq must be a chain (each hash the sequence hash of the previous one and
// a block), as every prompt's hashes are, and the walk relies on it: it
// enters index nodes only at their first block, which is where a chain's
// blocks can be found; and since equal sequence hashes at a position mean
// equal blocks at every position before it, one comparison tells how far
// the request follows a node up to any position (Dynamo's positional
// indexer jumps ahead on the same property). So the query finds where the
// request leaves each node from the node's kid list (the offsets at which
// other nodes continue it) and one comparison, or else from a few sampled
// comparisons, never comparing every block. For a chain the answer is
// exact. For a list of hashes that is not a chain it is unspecified (it
// may count blocks a worker does not hold) but well formed: each worker
// at most once, depths that sum to at most len(seq), and no panic.
//
// FindMatches takes no lock and may run concurrently with writers and other
// queries.
func (ix *Index) FindMatches(seq []uint64, dst []Match) []Match {
	return ix.find(seq, dst, false)
}

// FindMatchesEarlyExit is FindMatches that stops walking the request as
// soon as at most one worker still matches, at the end of the stretch of
// blocks being examined. Every other worker's depths are exact; the last
// one's are a prefix of its exact depths (enough to know it leads), as in
// Dynamo's early-exit lookup.
func (ix *Index) FindMatchesEarlyExit(seq []uint64, dst []Match) []Match {
	return ix.find(seq, dst, true)
}

// word returns word i of plane p of a residency set.
func word(b []uint64, i, p int) uint64 {
	if j := i*numPlanes + p; j < len(b) {
		return b[j]
	}
	return 0
}

// find answers FindMatches and FindMatchesEarlyExit. It walks a
// three-state walker per slot (device, host, disk) over the runs of the
// nodes on the request's path and records where each slot's tiers end: a
// word at a time in drops for slots that end all three at once, else per
// slot in ends. The matches are written at the end.
func (ix *Index) find(seq []uint64, dst []Match, early bool) []Match {
	dst = dst[:0]
	if len(seq) == 0 {
		return dst
	}
	st := ix.slots.Load()
	if st.words() == 0 {
		return dst
	}
	sc := scratchPool.Get().(*queryScratch)
	defer scratchPool.Put(sc)
	sc.reset(st)
	hops := ix.path(seq, sc)
	n := sc.closeWalkers(sc.walkPath(hops, st.mask, early))
	return sc.writeMatches(slices.Grow(dst, n)[:n], st)
}

// reset sizes the scratch for the slot table st: words cleared, ends (not
// cleared: a slot's ends are written before they are read) and no drops.
func (sc *queryScratch) reset(st *slotTable) {
	W := st.words()
	if cap(sc.words) < W {
		sc.words = make([]wordState, W)
	}
	sc.words = sc.words[:W]
	clear(sc.words)
	if ns := len(st.workers); cap(sc.ends) < ns {
		sc.ends = make([]slotEnds, ns)
	}
	sc.ends = sc.ends[:len(st.workers)]
	sc.drops = sc.drops[:0]
}

// walkPath walks the slots over the nodes of hops: each node's first run
// against the whole set (the first node's starts the walkers; mask holds
// the slots in use), its later runs through their change lists. It returns
// the position where the walk ended (the walkers still live are live
// there). With early it stops where at most one slot still walks, at the
// end of the run being examined.
func (sc *queryScratch) walkPath(hops []hop, mask []uint64, early bool) int {
	pos := 0
	for j := range hops {
		h := &hops[j]
		m := int(h.m)
		pos = int(h.pos)
		var walking int
		if j == 0 {
			walking = sc.startWalkers(h.bits0, mask)
		} else {
			walking = sc.enterNode(h.bits0, int32(pos))
		}
		if walking == 0 {
			return pos
		}
		o := min(int(h.end0), m)
		if early && walking <= 1 {
			return pos + o
		}
		if o < m {
			if end, stop := sc.walkRuns(h.d, pos, o, m, walking, early); stop {
				return end
			}
		}
		pos += m
	}
	return pos
}

// startWalkers starts every slot of the set b0 (a node's first run; mask
// holds the slots in use) on the first tier it holds the request's first
// block on, and returns how many started.
func (sc *queryScratch) startWalkers(b0, mask []uint64) int {
	ws, ends := sc.words, sc.ends
	walking := 0
	for i := range ws {
		w := &ws[i]
		dw := word(b0, i, planeDevice) | word(b0, i, planeApprox)
		hw := word(b0, i, planeHost)
		kw := word(b0, i, planeDisk)
		mk := mask[i]
		w.dev = dw & mk
		w.host = hw &^ dw & mk
		w.disk = kw &^ (dw | hw) & mk
		w.matched = w.dev | w.host | w.disk
		walking += bits.OnesCount64(w.matched)
		for x := w.host | w.disk; x != 0; x &= x - 1 {
			e := &ends[i<<6|bits.TrailingZeros64(x)]
			e.dev, e.host = 0, 0
		}
	}
	return walking
}

// enterNode moves the walkers into a node at request position pos, whose
// first run holds the set b0: a slot not on its tier there moves down a
// tier (device, host, disk, gone), recording where the tier it left ended.
// Slots whose walk ends here straight from the device tier go to drops a
// word at a time. It returns how many slots still walk.
func (sc *queryScratch) enterNode(b0 []uint64, pos int32) int {
	ws, ends, drops := sc.words, sc.ends, sc.drops
	walking := 0
	for i := range ws {
		w := &ws[i]
		if w.dev|w.host|w.disk == 0 {
			continue // no slot of this word is walking any more
		}
		dw := word(b0, i, planeDevice) | word(b0, i, planeApprox)
		hw := word(b0, i, planeHost)
		kw := word(b0, i, planeDisk)
		dd := w.dev &^ dw
		w.dev &= dw
		h2 := w.host | dd
		dh := h2 &^ hw
		w.host = h2 & hw
		k2 := w.disk | dh
		dk := k2 &^ kw
		w.disk = k2 & kw
		walking += bits.OnesCount64(w.dev | w.host | w.disk)
		if all := dd & dh & dk; all != 0 {
			drops = append(drops, drop{pos: pos, word: int32(i), x: all})
			w.dropped |= all
			dd &^= all
			dh &^= all
			dk &^= all
		}
		for x := dd; x != 0; x &= x - 1 {
			ends[i<<6|bits.TrailingZeros64(x)].dev = pos
		}
		for x := dh; x != 0; x &= x - 1 {
			ends[i<<6|bits.TrailingZeros64(x)].host = pos
		}
		for x := dk; x != 0; x &= x - 1 {
			ends[i<<6|bits.TrailingZeros64(x)].disk = pos
		}
	}
	sc.drops = drops
	return walking
}

// walkRuns walks the walking slots through the runs of node d after its
// first, which ends at offset o, up to offset m where the request leaves
// the node (the node starts at request position pos). Only slots whose
// planes changed since the previous run can change state, so it reads the
// runs' change lists, not their sets. It reports whether the walk is over
// (no slot walks, or at most one with early) and if so where it ended.
func (sc *queryScratch) walkRuns(d *nodeData, pos, o, m, walking int, early bool) (int, bool) {
	ws, ends := sc.words, sc.ends
	W := len(ws)
	cend := d.runs[0].cend
	for ri := 1; o < m; ri++ {
		r := &d.runs[ri]
		p := int32(pos + o)
		for _, c := range d.chg[cend:r.cend] {
			s := int(c >> 4)
			i := s >> 6
			if i >= W {
				continue // a slot newer than this query's table
			}
			w := &ws[i]
			bit := uint64(1) << (uint(s) & 63)
			switch {
			case w.dev&bit != 0:
				if c&(1<<planeDevice|1<<planeApprox) != 0 {
					continue
				}
				w.dev &^= bit
				ends[s].dev = p
				if c&(1<<planeHost) != 0 {
					w.host |= bit
					continue
				}
				ends[s].host = p
			case w.host&bit != 0:
				if c&(1<<planeHost) != 0 {
					continue
				}
				w.host &^= bit
				ends[s].host = p
			case w.disk&bit != 0:
			default:
				continue
			}
			// The slot leaves the host run (or is on disk already).
			if c&(1<<planeDisk) != 0 {
				w.disk |= bit
				continue
			}
			w.disk &^= bit
			ends[s].disk = p
			walking--
		}
		cend = r.cend
		if walking == 0 {
			return int(p), true
		}
		o = min(int(r.end), m)
		if early && walking <= 1 {
			return pos + o, true
		}
	}
	return 0, false
}

// closeWalkers ends the walkers still live at pos (device walkers go to
// drops a word at a time) and returns the number of slots that matched at
// all.
func (sc *queryScratch) closeWalkers(pos int) int {
	ws, ends, drops := sc.words, sc.ends, sc.drops
	n := 0
	for i := range ws {
		w := &ws[i]
		if w.dev != 0 {
			drops = append(drops, drop{pos: int32(pos), word: int32(i), x: w.dev})
			w.dropped |= w.dev
		}
		for x := w.host; x != 0; x &= x - 1 {
			e := &ends[i<<6|bits.TrailingZeros64(x)]
			e.host, e.disk = int32(pos), int32(pos)
		}
		for x := w.disk; x != 0; x &= x - 1 {
			ends[i<<6|bits.TrailingZeros64(x)].disk = int32(pos)
		}
		n += bits.OnesCount64(w.matched)
	}
	sc.drops = drops
	return n
}

// writeMatches fills dst, one match per slot that matched, from drops and
// then from ends, and returns it.
//
// The worker is copied as one struct and the depths field by field: a
// composite literal of the whole Match is built in a stack temporary and
// copied with wide loads that straddle its narrow stores (a
// store-forwarding stall per match).
func (sc *queryScratch) writeMatches(dst []Match, st *slotTable) []Match {
	ws, ends := sc.words, sc.ends
	k := 0
	for _, e := range sc.drops {
		totals := &st.counts[e.word].total // the word's 64 slots
		for x := e.x; x != 0; x &= x - 1 {
			b := bits.TrailingZeros64(x)
			m := &dst[k]
			w := &st.workers[int(e.word)<<6|b]
			m.Worker = *w
			m.Device, m.Host, m.Disk, m.Resident = int(e.pos), 0, 0, int(totals[b].Load())
			k++
		}
	}
	for i := range ws {
		totals := &st.counts[i].total
		for x := ws[i].matched &^ ws[i].dropped; x != 0; x &= x - 1 {
			b := bits.TrailingZeros64(x)
			s := i<<6 | b
			e := &ends[s]
			d, h := int(e.dev), int(e.host)
			m := &dst[k]
			w := &st.workers[s]
			m.Worker = *w
			m.Device, m.Host, m.Disk, m.Resident = d, h-d, int(e.disk)-h, int(totals[b].Load())
			k++
		}
	}
	return dst
}

// path returns the nodes the request seq passes through, in sc.hops. It
// finds them first, from the head map alone where the nodes'
// kid lists allow (see kids.go), so that its dependent cache misses are
// head-slot lookups; then it confirms every kid-list answer with one
// comparison each, issued together, and loads each node's first set and
// runs with them, so that the walk that follows finds them in cache. A
// wrong kid-list answer (a stale entry) is replaced by comparing hashes,
// and the path found again from there.
func (ix *Index) path(seq []uint64, sc *queryScratch) []hop {
	hops := ix.follow(seq, 0, sc.hops[:0])
	var acc uint32
	for j := 0; j < len(hops); j++ {
		h := &hops[j]
		if k := len(h.bits0); k > 0 {
			acc += uint32(h.bits0[0] + h.bits0[k-1]) // up to 2 lines for 256 slots
		}
		if h.m > h.end0 { // the walk reads later runs and their changes
			d := h.d
			for i := 1; i < len(d.runs) && i < 16; i += 2 { // their first lines
				acc += d.runs[i].end
			}
			for i := 0; i < len(d.chg) && i < 128; i += 16 {
				acc += d.chg[i]
			}
		}
		if c := int(h.check); c >= 0 && h.hashes[c] != seq[int(h.pos)+c] {
			m := chainMatchLen(seq[h.pos:], h.hashes)
			h.m, h.check = int32(m), -1
			hops = ix.follow(seq, int(h.pos)+m, hops[:j+1])
		}
	}
	sc.hops, sc.sink = hops, acc // the store keeps the loads above
	return hops
}

// follow appends the nodes seq passes through from pos on (see path) to
// hops. A node's m is its kid-list answer, unconfirmed, where one of its
// listed kids starts with the request's next block; otherwise it comes
// from comparing hashes.
func (ix *Index) follow(seq []uint64, pos int, hops []hop) []hop {
	if pos >= len(seq) {
		return hops
	}
	var va, vb view
	v, next := &va, &vb
	ix.nodes.heads.get(seq[pos], v)
	for v.d != nil && len(v.hashes) > 0 && v.hashes[0] == seq[pos] {
		h := hop{d: v.d, hashes: v.hashes, bits0: v.bits0, end0: int32(v.end0), pos: int32(pos), check: -1}
		// A kid at offset c continues the request if it starts with the
		// request's block after c (confirmed later: see path). The
		// lookups do not depend on one another, so they overlap.
		next.d = nil
		lim := min(len(v.hashes), len(seq)-pos-1)
		for i := uint32(0); i < v.kids.n; i++ {
			c := int(v.kids.off[i])
			if c >= lim {
				break
			}
			if ix.nodes.heads.get(seq[pos+c+1], next) {
				h.m, h.check = int32(c+1), int32(c)
				break
			}
		}
		if h.check < 0 {
			m := chainMatchLen(seq[pos:], v.hashes)
			h.m = int32(m)
			if pos+m < len(seq) {
				ix.nodes.heads.get(seq[pos+m], next)
			}
		}
		hops = append(hops, h)
		pos += int(h.m)
		v, next = next, v
	}
	return hops
}

// chainMatchLen returns how many leading hashes a and b share, given that
// a[0] == b[0] and both are chains: in a chain, equal sequence hashes at
// position k mean equal blocks at every position up to k (up to a 64-bit
// hash collision, the same odds every block lookup already takes), so the
// positions where a and b agree form a prefix. The search narrows the
// boundary 8 ways a round: each round compares the last position of the
// stretch (a request that runs through the node ends there) and seven
// evenly spaced ones, whose loads do not depend on one another, so their
// cache misses overlap; a short final stretch is compared directly. For
// 1,024 blocks that is three rounds of misses, where comparing every block
// streams 16 KB and a binary search waits for ten misses in a row.
func chainMatchLen(a, b []uint64) int {
	n := min(len(a), len(b))
	lo, hi := 0, n // a[lo] == b[lo]; a[hi] != b[hi], or hi == n
	for hi-lo > 16 {
		step := (hi - lo) / 8
		c := 0
		for j := 1; j < 8; j++ {
			if i := lo + j*step; a[i] == b[i] {
				c++ // the equal probes are a prefix of the probes
			}
		}
		if a[hi-1] == b[hi-1] {
			return hi
		}
		next := hi
		if c < 7 {
			next = lo + (c+1)*step
		}
		lo, hi = lo+c*step, next
	}
	if n == 0 {
		return 0
	}
	return lo + 1 + matchLen(a[lo+1:hi], b[lo+1:hi])
}
