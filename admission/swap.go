package admission

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// swapIn resumes every held turn of a placed program that has waited
// MaxWait, oldest first, making room for it by pausing Acting programs on
// its home worker or the worker where that pauses least; where no worker
// can make room by pausing, it marks Reasoning programs on the home
// worker (or the least used) so the room comes at their tool boundaries.
func (c *RawAdmitter) swapIn(now time.Time, r *TickResult) {
	if c.cfg.maxWait() <= 0 || c.nWaiting == 0 || len(c.workers) == 0 {
		return
	}
	// Due a Tick and a turn (turnLead) ahead of MaxWait: where only
	// marking Reasoning programs can make room, they then reach their tool
	// boundaries by MaxWait.
	dueAt := c.swapDueAfter()
	due := c.sProgs[:0]
	for _, p := range c.paused {
		if p.held > 0 && p.placed && now.Sub(p.waitSince) >= dueAt {
			due = append(due, p)
		}
	}
	slices.SortFunc(due, func(a, b *program) int {
		if c := a.waitSince.Compare(b.waitSince); c != 0 {
			return c
		}
		return cmp.Compare(a.pauseSeq, b.pauseSeq)
	})
	due = slices.Clone(due) // pause below reuses the scratch slices
	for _, p := range due {
		best := c.swapTarget(p)
		if best == nil {
			c.markFor(now, p, r)
			continue
		}
		need := float64(c.need(p, best))
		room := c.ceiling*float64(best.cap) - c.used(best)
		if room < need {
			cand := make([]*program, 0, best.nAct)
			for _, q := range best.progs {
				if q.phase == Acting {
					cand = append(cand, q)
				}
			}
			slices.SortFunc(cand, func(a, b *program) int {
				if c := cmp.Compare(b.tokens, a.tokens); c != 0 {
					return c
				}
				return a.actingSince.Compare(b.actingSince)
			})
			for _, q := range cand {
				if room >= need {
					break
				}
				if q.marked {
					c.setMarked(q, false)
				}
				c.pause(now, q, ReasonSwap)
				c.stats.SwapPaused++
				r.Paused++
				need = float64(c.need(p, best))
				room = c.ceiling*float64(best.cap) - c.used(best)
			}
			if room < need {
				c.markFor(now, p, r) // shared prefixes stayed: room comes later
				continue
			}
		}
		c.resumeOn(now, p, best, ReasonSwap, r)
		c.stats.Swapped++
	}
	c.sProgs = c.sProgs[:0]
}

// swapTarget returns the worker where pausing Acting programs makes room
// for p at the least cost (p's home worker counting half its size
// cheaper: its cache is there), or nil where pausing every Acting program
// would not do on any.
func (c *RawAdmitter) swapTarget(p *program) *worker {
	var best *worker
	bestCost := math.Inf(1)
	for _, w := range c.workers {
		need := float64(c.need(p, w))
		room := c.ceiling*float64(w.cap) - c.used(w)
		short := need - room
		freed := float64(w.acting) * c.cfg.ActingWeight
		if w.nAct == len(w.progs) {
			freed = c.used(w) // their shared prefixes go too
		}
		if short > freed+1e-9 {
			continue // pausing every Acting program would not do
		}
		cost := max(short, 0)
		if w == p.home {
			cost -= need / 2 // its cache is there: prefer it unless another is clearly cheaper
		}
		if best == nil || cost < bestCost {
			best, bestCost = w, cost
		}
	}
	return best
}

// markFor marks Reasoning programs so that p fits once they pause at
// their tool boundaries: on p's home worker if p can fit there at all,
// else on the worker with the most weight to reclaim; enough of them
// (smallest first) that, with its Acting programs paused then, p fits under
// the resume ceiling. A program too large for every worker is left to the
// empty-worker placement of resume.
func (c *RawAdmitter) markFor(now time.Time, p *program, r *TickResult) {
	fits := func(w *worker) bool { return float64(p.tokens+c.cfg.Buffer) <= c.ceiling*float64(w.cap) }
	reclaim := func(w *worker) float64 { return c.cfg.ActingWeight*float64(w.acting) + float64(w.reasoning-w.marked) }
	w := p.home
	if w == nil || !fits(w) {
		w = nil
		for _, x := range c.workers {
			if fits(x) && (w == nil || reclaim(x) > reclaim(w)) {
				w = x
			}
		}
	}
	if w == nil {
		return
	}
	w.reserved = c.tickNo
	short := float64(c.need(p, w)) - (c.ceiling*float64(w.cap) - c.used(w)) - c.cfg.ActingWeight*float64(w.acting) - float64(w.marked)
	if short <= 0 {
		return
	}
	cand := make([]*program, 0, len(w.progs))
	for _, q := range w.progs {
		if q.phase == Reasoning && !q.marked && q.resumedAt != c.tickNo {
			cand = append(cand, q)
		}
	}
	slices.SortFunc(cand, smallerFirst)
	for _, q := range cand {
		if short <= 0 {
			break
		}
		short -= c.weight(q)
		c.setMarked(q, true)
		q.swapMark = true
		c.stats.Marked++
		r.Marked++
		c.emit(Decision{At: now, Kind: KindMark, Reason: ReasonSwap, Program: q.id, Worker: w.id, HasWorker: true,
			Tokens: q.tokens, Util: c.util(w)})
	}
}

// swapDueAfter is how long a held turn of a placed program waits before
// it is swapped in: a Tick and a turn (turnLead) ahead of MaxWait.
func (c *RawAdmitter) swapDueAfter() time.Duration {
	return max(c.cfg.maxWait()-c.cfg.Interval-c.turnLead(), 0)
}

func (c *RawAdmitter) resumeOn(now time.Time, p *program, w *worker, reason Reason, r *TickResult) {
	c.endProbe(p) // a probe still running now counts as the program's turn on w
	c.removePaused(p)
	p.life = Active
	c.markPlaced(p)
	p.resumedAt = c.tickNo
	c.attach(p, w)
	d := Decision{At: now, Kind: KindResume, Reason: reason, Program: p.id, Worker: w.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(w)}
	if p.held > 0 {
		p.held = 0
		p.runSince = now
		d.Released = true
		d.Waited = now.Sub(p.waitSince)
		d.Priority = c.cfg.ResumeBoost
		if w.demoted && now.Before(w.demUntil) {
			d.Priority += c.cfg.SoftDemotePriority
		}
		p.waitSince = time.Time{}
		r.Released++
	} else {
		p.boost = true
	}
	c.updateWaiting(p)
	c.stats.Resumed++
	if reason == ReasonForced {
		c.stats.Forced++
	}
	r.Resumed++
	c.emit(d)
}
