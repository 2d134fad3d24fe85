package admission

import (
	"slices"
	"time"
)

// tail is the program's unique tail: its tokens less the prefix it shares
// with other programs, which its worker counts once (sharedSum).
func tail(p *program) int64 {
	return p.tokens - min(p.shared, p.tokens)
}

// need is the room p takes on w: its tail, the buffer, and the part of its
// shared prefix longer than what w's programs already share. The growth
// reserve (Config.Door) never takes it past w's room under the resume
// ceiling: a program that would grow past a whole worker reserves the
// worker, and a swap can still make room for it.
func (c *RawAdmitter) need(p *program, w *worker) int64 {
	var shared int64
	if k := sharedOf(p); k.n > 0 && w.sharedN[k] == 0 {
		shared = k.n
	}
	n := c.grownSize(tail(p)) + c.cfg.Buffer + shared
	if lim := int64(c.ceiling * float64(w.cap)); n > lim {
		n = max(lim, tail(p)+c.cfg.Buffer+shared)
	}
	return n
}

// growthMin is how many programs must have ended before Config.Door
// sizes programs by their growth.
const growthMin = 8

// grownSize is the size a program of tail tokens is placed as: with
// Config.Door, at least the lower quartile of ended programs' final
// sizes.
func (c *RawAdmitter) grownSize(tail int64) int64 {
	return max(tail, c.growthEst)
}

// reserved is the room w keeps for its programs' growth (Config.Door):
// how far each Reasoning program is below the lower quartile of final
// sizes (an Acting one, in a tool call, reserves nothing).
func (c *RawAdmitter) reserved(w *worker) float64 { return float64(w.growth) }

// doorIf is, when door is set, the room w keeps from new programs at the
// door beyond reserved: Door.ActingGrowth of its Acting programs' growth.
func (c *RawAdmitter) doorIf(w *worker, door bool) float64 {
	if !door {
		return 0
	}
	return c.cfg.doorActing() * float64(w.actGrowth)
}

// growthOf is what p reserves on its worker (see reserved).
func (c *RawAdmitter) growthOf(p *program) int64 {
	if p.phase != Reasoning {
		return 0
	}
	return max(0, c.growthEst-tail(p))
}

// actGrowthOf is an Acting p's growth (see doorIf).
func (c *RawAdmitter) actGrowthOf(p *program) int64 {
	if p.phase != Acting {
		return 0
	}
	return max(0, c.growthEst-tail(p))
}

// recordTurn records how long p's turn ran, if it began to run here.
func (c *RawAdmitter) recordTurn(now time.Time, p *program) {
	if p.runSince.IsZero() {
		return
	}
	c.turnDur[c.nTurns%len(c.turnDur)] = max(now.Sub(p.runSince), 0)
	c.nTurns++
	p.runSince = time.Time{}
}

// turnLead is how long a turn runs at the 90th percentile of the last
// len(turnDur) recorded (0 before growthMin are): how far ahead of
// MaxWait a swap marks programs, so that the room they free at their tool
// boundaries comes by then.
func (c *RawAdmitter) turnLead() time.Duration {
	n := min(c.nTurns, len(c.turnDur))
	if n < growthMin {
		return 0
	}
	var buf [len(c.turnDur)]time.Duration
	d := buf[:n]
	copy(d, c.turnDur[:n])
	slices.Sort(d)
	return d[(n*9)/10]
}

// observe notes p's unique tail at the end of a turn: the largest so far
// bounds the cold-start prior (Door.ColdStartObserved).
func (c *RawAdmitter) observe(p *program) {
	if t := tail(p); t > c.maxTail {
		c.maxTail = t
		if c.nEnded < growthMin && c.cfg.coldObserved() > 0 {
			c.refreshGrowth()
		}
	}
}

// recordEnd counts an ended program and, when it ran two turns or more,
// adds its final tail to the window and re-learns the lower quartile once
// the window holds growthMin.
func (c *RawAdmitter) recordEnd(p *program) {
	c.nEnded++
	if p.steps >= 2 {
		c.grown[c.nGrown%len(c.grown)] = tail(p)
		c.nGrown++
		if n := min(c.nGrown, len(c.grown)); n >= growthMin {
			w := make([]int64, n)
			copy(w, c.grown[:n])
			slices.Sort(w)
			c.learned = w[n/4]
		}
	}
	c.refreshGrowth()
}

// refreshGrowth sets growthEst (Config.Door): the cold-start prior until
// growthMin programs have ended, an equal share of the largest worker's
// room for ColdStartPrograms programs (with ColdStartObserved, at most that
// multiple of the largest tail so far, and with ColdStartFloor at least
// the share for that many); then what was learned. The workers' growth
// sums follow.
func (c *RawAdmitter) refreshGrowth() {
	if !c.cfg.reserveGrowth() {
		return
	}
	est := c.learned
	if c.nEnded < growthMin && c.cfg.coldStart() > 0 {
		room := c.ceiling * float64(c.maxCap())
		est = int64(room / float64(c.cfg.coldStart()))
		if f := c.cfg.coldObserved(); f > 0 && (c.maxTail > 0 || c.cfg.coldFloor() > 0) {
			grown := int64(f * float64(c.maxTail))
			if n := c.cfg.coldFloor(); n > 0 {
				grown = max(grown, int64(room/float64(n)))
			}
			est = min(est, grown)
		}
	}
	if est == c.growthEst {
		return
	}
	c.growthEst = est
	for _, wk := range c.workers {
		wk.growth, wk.actGrowth = 0, 0
		for _, p := range wk.progs {
			wk.growth += c.growthOf(p)
			wk.actGrowth += c.actGrowthOf(p)
		}
	}
}
