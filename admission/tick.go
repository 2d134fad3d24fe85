package admission

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// TickResult summarises one Tick.
type TickResult struct {
	Forced, Resumed, Paused, Marked, Unmarked int
	// Released counts resumed programs whose held turn may now run.
	Released int
}

// Tick runs one control-loop round at now, in this order:
//
//  1. forced resume: every held turn that has waited ≥ ForcedResume is
//     resumed on the least-utilised worker, regardless of room;
//  2. resume: on workers with U ≤ the resume ceiling, paused programs are
//     bin-packed (size = tokens + Buffer) under the ceiling by the
//     Placement, offered in resume priority order;
//  3. pause: on each worker with U ≥ PauseThreshold, the smallest Acting
//     programs are paused until U − marked ≤ PauseTarget; with no Acting
//     program left, the smallest unmarked Reasoning program is marked, and
//     its weight counted as a future free, until the same bound holds.
//     Programs resumed in this tick are not paused in it. Marks on a worker
//     whose U has fallen to PauseTarget are withdrawn;
//  4. soft demote: workers with SoftDemote ≤ U < PauseThreshold are in the
//     band until 1.5 Interval after now.
func (c *RawAdmitter) Tick(now time.Time) TickResult {
	c.tickNo++
	var r TickResult
	c.forceResume(now, &r)
	c.swapIn(now, &r)
	c.resume(now, &r)
	c.probe(now)
	c.pauseOver(now, &r)
	c.softDemote(now)
	return r
}

// NextForcedResume returns the earliest time at which a held turn reaches
// the forced-resume cap, so an event-driven simulator can schedule a Tick
// exactly then.
func (c *RawAdmitter) NextForcedResume() (time.Time, bool) {
	var t time.Time
	found := false
	for _, p := range c.paused {
		if p.held == 0 {
			continue
		}
		d := p.waitSince.Add(c.cfg.ForcedResume)
		if !found || d.Before(t) {
			t, found = d, true
		}
	}
	return t, found
}

func (c *RawAdmitter) forceResume(now time.Time, r *TickResult) {
	if len(c.workers) == 0 || c.nWaiting == 0 {
		return
	}
	due := c.sProgs[:0]
	for _, p := range c.paused {
		// With MaxWait, placed programs are swapped in long before the
		// cap, and new ones wait at the door in order: no forced resume
		// overcommits a worker for them.
		if p.held > 0 && now.Sub(p.waitSince) >= c.cfg.ForcedResume && (c.cfg.maxWait() <= 0 || p.placed && now.Sub(p.waitSince) >= 2*c.cfg.ForcedResume) {
			due = append(due, p)
		}
	}
	slices.SortFunc(due, func(a, b *program) int {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	})
	for _, p := range due {
		if !p.placed && p.grp.full() {
			continue // its group holds Groups' MaxAdmitted
		}
		var best *worker
		var bestU float64
		for _, w := range c.workers {
			u := c.resumeUsed(now, w) / float64(w.cap)
			if best == nil || u < bestU {
				best, bestU = w, u
			}
		}
		c.resumeOn(now, p, best, ReasonForced, r)
		r.Forced++
	}
	c.sProgs = due[:0]
}

// resumeUsed is a worker's load as the resume side sees it: with
// DecayHalfLife set, Acting programs' weights decay with time acting.
func (c *RawAdmitter) resumeUsed(now time.Time, w *worker) float64 {
	if c.cfg.DecayHalfLife <= 0 || w.nAct == 0 {
		return c.used(w)
	}
	u := float64(w.reasoning) + float64(w.sharedSum) + float64(w.probing)
	hl := c.cfg.DecayHalfLife.Seconds()
	for _, p := range w.progs {
		if p.phase != Acting {
			continue
		}
		t := now.Sub(p.actingSince).Seconds()
		if t < 0 {
			t = 0
		}
		u += c.cfg.ActingWeight * float64(tail(p)) * math.Exp2(-t/hl)
	}
	return u
}

// resumeGroup: 0 = held turn of a placed program, 1 = queued new program,
// 2 = paused with no turn held.
func resumeGroup(p *program) int {
	switch {
	case !p.placed:
		return 1
	case p.held == 0:
		return 2
	default:
		return 0
	}
}

// resumeOrder is the resume priority order (the fair order of the package
// documentation): group, then fewer tokens, then paused earlier.
func resumeOrder(a, b *program) int {
	if c := cmp.Compare(resumeGroup(a), resumeGroup(b)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.tokens, b.tokens); c != 0 {
		return c
	}
	return cmp.Compare(a.pauseSeq, b.pauseSeq)
}

// agedOrder is the resume order with Waits.MaxWait: group, then held
// turns and queued programs by how long they have waited (oldest first),
// paused programs with no turn held smallest first.
func agedOrder(a, b *program) int {
	ga, gb := resumeGroup(a), resumeGroup(b)
	if c := cmp.Compare(ga, gb); c != 0 {
		return c
	}
	if ga == 1 {
		// The door: programs that have started (run a probe, Door.Probe)
		// before those that have not, then by first offer.
		if a.probed != b.probed {
			if a.probed {
				return -1
			}
			return 1
		}
		if c := a.arrival.Compare(b.arrival); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	}
	if ga < 2 {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	}
	return resumeOrder(a, b)
}

// resume resumes paused programs into the room under the resume ceiling:
// home first (Waits.HomeFirst), then, with Waits.MaxWait, held turns of
// placed programs before the door, then the Placement.
func (c *RawAdmitter) resume(now time.Time, r *TickResult) {
	if len(c.paused) == 0 {
		return
	}
	bins, binW := c.resumeBins(now)
	if len(bins) == 0 {
		return
	}
	cand := c.sProgs[:0]
	for _, p := range c.paused {
		if p.placed || p.held > 0 { // a probed newcomer with no turn held needs no room yet
			cand = append(cand, p)
		}
	}
	if c.cfg.maxWait() > 0 {
		slices.SortFunc(cand, agedOrder)
	} else {
		slices.SortFunc(cand, resumeOrder)
	}
	cand = c.doorOrder(cand)
	if c.cfg.homeFirst() {
		cand = c.resumeHome(now, cand, bins, binW, r)
	}
	if c.cfg.maxWait() > 0 {
		var ok bool
		if cand, bins, binW, ok = c.resumeDoor(now, cand, bins, binW, r); !ok {
			c.sProgs = c.sProgs[:0]
			return
		}
	}
	c.place(now, cand, bins, binW, r)
	c.sProgs = c.sProgs[:0]
}

// resumeBins lists the workers with room under the resume ceiling, and
// that room, as the Placement's bins (kept in c.sBins, c.sBinW).
func (c *RawAdmitter) resumeBins(now time.Time) ([]Bin, []*worker) {
	bins, binW := c.sBins[:0], c.sBinW[:0]
	for _, w := range c.workers {
		if roomUsed(w, c.used(w)) > c.ceiling*float64(w.cap) || w.reserved == c.tickNo && c.cfg.maxWait() > 0 {
			continue
		}
		// Reasoning weight is a lower bound on the (decayed) load: skip the
		// decay pass where even that leaves no more than the buffer.
		if c.ceiling*float64(w.cap)-float64(w.reasoning) <= float64(c.cfg.Buffer) {
			continue
		}
		free := int64(math.Floor(c.ceiling*float64(w.cap) - roomUsed(w, c.resumeUsed(now, w)) - c.reserved(w)))
		if free > c.cfg.Buffer {
			bins = append(bins, Bin{Worker: w.id, Free: free, Capacity: w.cap})
			binW = append(binW, w)
		}
	}
	if c.cfg.rebalance() {
		bins, binW = c.skipBacklogged(bins, binW)
	}
	c.sBins, c.sBinW = bins, binW
	return bins, binW
}

// resumeDoor places, with Waits.MaxWait, the held turns of placed programs
// (first in cand, oldest first), then the door's newcomers first come,
// first served. It returns what is left to place and the bins left for
// it, ok false when nothing more is placed in this pass.
func (c *RawAdmitter) resumeDoor(now time.Time, cand []*program, bins []Bin, binW []*worker, r *TickResult) ([]*program, []Bin, []*worker, bool) {
	// Held turns of placed programs are placed first, and a queued new
	// program or a paused one with nothing held only once all of them
	// are: the Placement skips what does not fit, and a smaller new
	// program would otherwise take the room a waiting turn needs,
	// leaving that turn to the swap, which pauses others.
	k := 0
	for k < len(cand) && resumeGroup(cand[k]) == 0 {
		k++
	}
	if !c.place(now, cand[:k], bins, binW, r) {
		return nil, nil, nil, false
	}
	cand = cand[k:]
	if share := c.cfg.doorActing(); share > 0 {
		// What the Acting programs' growth keeps from the door.
		k := 0
		for j := range bins {
			bins[j].Free -= int64(math.Ceil(c.doorIf(binW[j], true)))
			if bins[j].Free > c.cfg.Buffer {
				bins[k], binW[k] = bins[j], binW[j]
				k++
			}
		}
		bins, binW = bins[:k], binW[:k]
		if k == 0 {
			return nil, nil, nil, false
		}
	}
	// The door, first come, first served: a newcomer that does not fit
	// keeps the worker with the most room for itself, and later ones may
	// only take the others (backfill).
	reserved := false
	for len(cand) > 0 && resumeGroup(cand[0]) == 1 {
		if !c.place(now, cand[:1], bins, binW, r) {
			best := 0
			for j := range bins {
				if bins[j].Free > bins[best].Free {
					best = j
				}
			}
			bins = append(bins[:best:best], bins[best+1:]...)
			binW = append(binW[:best:best], binW[best+1:]...)
			reserved = true
			if len(bins) == 0 {
				break
			}
		}
		cand = cand[1:]
	}
	// No paused program with nothing held resumes (a speculative resume)
	// while a newcomer waits.
	return cand, bins, binW, !reserved
}

// skipBacklogged drops, from the bins, the workers with a prefill backlog
// of Moves.Margin or more, unless that would leave none.
func (c *RawAdmitter) skipBacklogged(bins []Bin, binW []*worker) ([]Bin, []*worker) {
	k := 0
	for j := range bins {
		if binW[j].backlog < c.cfg.margin() {
			bins[k], binW[k] = bins[j], binW[j]
			k++
		}
	}
	if k == 0 {
		return bins, binW
	}
	return bins[:k], binW[:k]
}

// place offers cand, in order, to the Placement over bins (charging the
// room it gives to bins) and resumes those it places; it reports whether
// every candidate was resumed.
func (c *RawAdmitter) place(now time.Time, cand []*program, bins []Bin, binW []*worker, r *TickResult) bool {
	if len(cand) == 0 {
		return true
	}
	items := c.sItems[:0]
	for _, p := range cand {
		// The tail: its shared prefix is most likely on every worker
		// already (the system prompt); home and swap placements, which
		// know the worker, count what the worker lacks of it.
		items = append(items, Item{Size: c.grownSize(tail(p)) + c.cfg.Buffer})
	}
	dst := c.sDst[:0]
	for range items {
		dst = append(dst, -1)
	}
	c.sItems, c.sDst = items, dst
	free := make([]int64, len(bins)) // the controller's own view, for validation
	for i, b := range bins {
		free[i] = b.Free
	}
	scratch := make([]Bin, len(bins))
	copy(scratch, bins)
	c.cfg.Placement.Place(items, scratch, dst)
	for i, j := range dst {
		if j < 0 {
			continue
		}
		if j >= len(bins) || items[i].Size > free[j] {
			c.stats.PlacementRejects++
			continue
		}
		free[j] -= items[i].Size
		c.resumeOn(now, cand[i], binW[j], ReasonBinPacked, r)
		dst[i] = -2 // placed
	}
	for j := range bins {
		bins[j].Free = free[j]
	}
	// A program larger than every worker's room under the ceiling would
	// otherwise wait for the forced-resume cap: give it an empty worker.
	for i, p := range cand {
		if dst[i] == -2 || p.life != Paused || p.held == 0 && p.placed {
			continue
		}
		if items[i].Size <= int64(c.ceiling*float64(c.maxCap())) {
			continue // it fits somewhere once room frees up
		}
		w := c.emptyWorker()
		if w == nil {
			break
		}
		c.resumeOn(now, p, w, ReasonEmptyWorker, r)
		dst[i] = -2
	}
	for i := range cand {
		if dst[i] != -2 {
			return false
		}
	}
	return true
}

// maxCap returns the largest worker capacity.
func (c *RawAdmitter) maxCap() int64 {
	var m int64
	for _, w := range c.workers {
		m = max(m, w.cap)
	}
	return m
}

// resumeHome resumes, in order, the candidates whose home worker is one
// of bins and still has room for them, charging the room to the bin; it
// returns the others, in order.
func (c *RawAdmitter) resumeHome(now time.Time, cand []*program, bins []Bin, binW []*worker, r *TickResult) []*program {
	keep := cand[:0]
	for _, p := range cand {
		placed := false
		if p.home != nil && (p.held > 0 || !p.placed) {
			for j, w := range binW {
				if need := c.need(p, w); w == p.home && need <= bins[j].Free {
					bins[j].Free -= need
					c.resumeOn(now, p, w, ReasonHome, r)
					placed = true
					break
				}
			}
		}
		if !placed {
			keep = append(keep, p)
		}
	}
	return keep
}
