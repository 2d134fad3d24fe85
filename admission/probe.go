package admission

import (
	"slices"
	"time"
)

// probeable reports whether p, Paused at the door with a turn held, may
// run that turn as a probe (Door.Probe): it was offered in a burst, and it
// either has not run yet and has waited After, or has run a probe and its
// unique tail is at most Tail.
func (c *RawAdmitter) probeable(now time.Time, p *program) bool {
	pr := c.cfg.probe()
	if pr == nil || p.placed || p.held == 0 || p.probe != nil || p.burst == nil || p.burst.n < pr.Burst || p.grp.full() {
		return false
	}
	if p.probed {
		return tail(p) <= pr.Tail
	}
	return now.Sub(p.waitSince) >= pr.After
}

// probe runs, with Door.Probe, the held turns the door may probe, in the
// door's order, while a worker has room for them and no held turn of a
// placed program is due to be swapped in.
func (c *RawAdmitter) probe(now time.Time) {
	if c.cfg.probe() == nil || c.nWaiting == 0 || c.swapDue(now) {
		return
	}
	due := c.sProgs[:0]
	for _, p := range c.paused {
		if c.probeable(now, p) {
			due = append(due, p)
		}
	}
	slices.SortFunc(due, agedOrder)
	c.siblingsFirst(now, due)
	due = c.doorOrder(due)
	for _, p := range due {
		if w := c.probeWorker(p); w != nil {
			c.emit(c.runProbe(now, p, w))
		}
	}
	clear(c.sibLong)
	c.sProgs = due[:0]
}

// swapDue reports whether a held turn of a placed program is due to be
// swapped in (Waits.MaxWait): it needs room by MaxWait, and a swap can
// pause programs to make it, but not a probe. Without MaxWait every such
// held turn counts as due: the room goes to it first.
func (c *RawAdmitter) swapDue(now time.Time) bool {
	due := c.swapDueAfter()
	for _, p := range c.paused {
		if p.placed && p.held > 0 && now.Sub(p.waitSince) >= due {
			return true
		}
	}
	return false
}

// probeWorker is the worker for p's probe: of those with room for it
// (probeFits), the one with the fewest probes running, then the lowest
// utilisation; nil when none has room.
func (c *RawAdmitter) probeWorker(p *program) *worker {
	var best *worker
	for _, w := range c.workers {
		if !c.probeFits(p, w) {
			continue
		}
		if best == nil || w.probes < best.probes || w.probes == best.probes && c.util(w) < c.util(best) {
			best = w
		}
	}
	return best
}

// probeFits reports whether w has room for p's probe.
func (c *RawAdmitter) probeFits(p *program, w *worker) bool {
	if w.probes > 0 && float64(w.probing+c.probeCharge(p)) > c.cfg.probe().Share*c.ceiling*float64(w.cap) {
		return false
	}
	// Never past PauseThreshold: a probe pauses none of w's programs.
	return roomUsed(w, c.used(w))+float64(p.tokens) <= c.cfg.PauseThreshold*float64(w.cap)
}

// probeCharge is what p's probe counts against Door.Probe.Share: its
// unique tail while more than Queue programs a worker wait at the door,
// else its whole context; the first turn of a program whose siblings run
// long (Door.Probe.Siblings), its prompt past the prefix it shares.
func (c *RawAdmitter) probeCharge(p *program) int64 {
	if c.siblingFirst(p) {
		return p.tokens - min(p.first, p.tokens)
	}
	if q := c.cfg.probe().Queue; q > 0 && c.nWaiting > q*len(c.workers) {
		return tail(p)
	}
	return p.tokens
}

// runProbe runs p's held turn on w as a probe and returns the decision
// (KindResume, Released; p stays Paused and unplaced). The turn's tokens
// count on w until it ends (endProbe).
func (c *RawAdmitter) runProbe(now time.Time, p *program, w *worker) Decision {
	waited := now.Sub(p.waitSince)
	p.held--
	if p.held == 0 {
		p.waitSince = time.Time{}
	}
	if c.siblingFirst(p) {
		c.stats.SiblingsFirst++
	}
	p.probed, p.probe, p.probeN = true, w, c.probeCharge(p)
	c.updateWaiting(p)
	w.probes++
	w.probing += p.probeN
	c.stats.Probed++
	return Decision{At: now, Kind: KindResume, Reason: ReasonProbe, Program: p.id, Worker: w.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(w), Released: true, Waited: waited}
}

// endProbe ends p's probe: its tokens stop counting on the worker.
func (c *RawAdmitter) endProbe(p *program) {
	if w := p.probe; w != nil {
		w.probes--
		w.probing -= p.probeN
		p.probe = nil
	}
}

// probeSub gives the subagent p of a probed parent pp, which itself waits
// at the door, the parent's place in line (its first offer) and its
// probes, and runs its first turn at once as a probe where a worker has
// room for it, whatever its tail: the parent waits for it, and as a new
// program it would queue behind every program offered before it started.
// a is its admission as a new program, returned when it cannot run.
func (c *RawAdmitter) probeSub(now time.Time, p, pp *program, a Admission) Admission {
	if p.life != Paused {
		return a
	}
	p.arrival, p.burst, p.probed = pp.arrival, pp.burst, true
	if pa, ok := c.probeNow(now, p); ok {
		return pa
	}
	return a
}

// probeNow runs p's turn, held as it arrived, at once as a probe where a
// worker has room and no placed program's swap is due (KindAdmit).
func (c *RawAdmitter) probeNow(now time.Time, p *program) (Admission, bool) {
	if c.swapDue(now) {
		return Admission{}, false
	}
	w := c.probeWorker(p)
	if w == nil {
		return Admission{}, false
	}
	d := c.runProbe(now, p, w)
	d.Kind, d.Released, d.Waited = KindAdmit, false, 0
	c.emit(d)
	return Admission{Run: true, Worker: w.id, Status: StatusRunnable, Reason: ReasonProbe}, true
}
