package admission

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// pauseOver pauses, on every worker at or over PauseThreshold, Acting
// programs smallest first until U is at most PauseTarget, and marks
// Reasoning ones to pause at their tool boundaries where that is not
// enough; under the target it withdraws marks.
func (c *RawAdmitter) pauseOver(now time.Time, r *TickResult) {
	c.markOverShare()
	for _, w := range c.workers {
		capf := float64(w.cap)
		u := c.used(w)
		if w.marked > 0 && u <= c.cfg.PauseTarget*capf {
			c.unmarkAll(now, w, r)
		}
		if u < c.cfg.PauseThreshold*capf {
			continue
		}
		// A worker's only program is never paused or marked: no other
		// program could use the room, and it would only be resumed on an
		// empty worker again.
		if len(w.progs) == 1 {
			continue
		}
		target := c.cfg.PauseTarget * capf
		eff := u - float64(w.marked)
		if eff <= target {
			continue
		}
		// Acting programs, smallest first.
		cand := c.candidates(c.sProgs, w, Acting)
		for _, p := range cand {
			if eff <= target {
				break
			}
			eff -= c.weight(p)
			c.pause(now, p, ReasonOverThreshold)
			r.Paused++
		}
		if eff > target {
			cand = c.candidates(cand, w, Reasoning)
			for _, p := range cand {
				if eff <= target {
					break
				}
				eff -= c.weight(p)
				c.setMarked(p, true)
				c.stats.Marked++
				r.Marked++
				c.emit(Decision{At: now, Kind: KindMark, Reason: ReasonOverThreshold, Program: p.id, Worker: w.id, HasWorker: true,
					Tokens: p.tokens, Util: c.util(w)})
			}
		}
		c.sProgs = cand[:0]
	}
}

// candidates collects into dst[:0] w's programs in phase that this tick
// may pause or mark, smallest first, those of groups over their share
// (Groups, markOverShare) before the others: not marked yet (only
// Reasoning programs are ever marked), not resumed in this tick.
func (c *RawAdmitter) candidates(dst []*program, w *worker, phase Phase) []*program {
	dst = dst[:0]
	for _, p := range w.progs {
		if p.phase == phase && !p.marked && p.resumedAt != c.tickNo {
			dst = append(dst, p)
		}
	}
	if len(c.groups) > 1 {
		slices.SortFunc(dst, overShareFirst)
	} else {
		slices.SortFunc(dst, smallerFirst)
	}
	return dst
}

// overShareFirst orders programs of groups over their share first, then
// smallest first.
func overShareFirst(a, b *program) int {
	if oa, ob := a.grp.over, b.grp.over; oa != ob {
		if oa {
			return -1
		}
		return 1
	}
	return smallerFirst(a, b)
}

func smallerFirst(a, b *program) int {
	if c := cmp.Compare(a.tokens, b.tokens); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

func (c *RawAdmitter) unmarkAll(now time.Time, w *worker, r *TickResult) {
	cand := c.sProgs[:0]
	for _, p := range w.progs {
		if p.marked && !p.swapMark {
			cand = append(cand, p)
		}
	}
	slices.SortFunc(cand, smallerFirst)
	for _, p := range cand {
		c.setMarked(p, false)
		c.stats.Unmarked++
		r.Unmarked++
		c.emit(Decision{At: now, Kind: KindUnmark, Reason: ReasonBelowTarget, Program: p.id, Worker: w.id, HasWorker: true,
			Tokens: p.tokens, Util: c.util(w)})
	}
	c.sProgs = cand[:0]
}

func (c *RawAdmitter) softDemote(now time.Time) {
	for _, w := range c.workers {
		u := c.util(w)
		in := u >= c.cfg.SoftDemote && u < c.cfg.PauseThreshold
		if in {
			w.demUntil = now.Add(c.cfg.Interval * 3 / 2)
		}
		if in != w.demoted {
			w.demoted = in
			k := KindDemote
			if !in {
				k = KindUndemote
			}
			c.emit(Decision{At: now, Kind: k, Reason: ReasonBand, Worker: w.id, HasWorker: true, Util: u})
		}
	}
}
