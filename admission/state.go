package admission

import (
	"time"
)

// pause detaches Active p from its worker and queues it Paused.
func (c *RawAdmitter) pause(now time.Time, p *program, reason Reason) {
	w := p.w
	p.home = w
	c.detach(p)
	p.life = Paused
	c.addPaused(now, p)
	c.stats.Paused++
	c.emit(Decision{At: now, Kind: KindPause, Reason: reason, Program: p.id, Worker: w.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(w)})
}

func (c *RawAdmitter) addPaused(now time.Time, p *program) {
	c.pauseSeq++
	p.pauseSeq = c.pauseSeq
	p.pausedAt = now
	p.pslot = len(c.paused)
	c.paused = append(c.paused, p)
}

func (c *RawAdmitter) removePaused(p *program) {
	i := p.pslot
	if i < 0 || i >= len(c.paused) || c.paused[i] != p {
		return
	}
	last := len(c.paused) - 1
	c.paused[i] = c.paused[last]
	c.paused[i].pslot = i
	c.paused[last] = nil
	c.paused = c.paused[:last]
	p.pslot = -1
}

func (c *RawAdmitter) updateWaiting(p *program) {
	want := p.life == Paused && p.held > 0
	if want != p.waiting {
		p.waiting = want
		if want {
			c.nWaiting++
		} else {
			c.nWaiting--
		}
	}
}

// attach places an Active program on w and adds its weight.
func (c *RawAdmitter) attach(p *program, w *worker) {
	p.w = w
	p.slot = len(w.progs)
	w.progs = append(w.progs, p)
	t := tail(p)
	if p.phase == Acting {
		w.acting += t
		w.nAct++
	} else {
		w.reasoning += t
	}
	if p.marked {
		w.marked += t
	}
	w.growth += c.growthOf(p)
	w.actGrowth += c.actGrowthOf(p)
	w.addShared(sharedOf(p))
}

// detach removes p from its worker's sums and list (p.w becomes nil).
func (c *RawAdmitter) detach(p *program) {
	w := p.w
	if w == nil {
		return
	}
	t := tail(p)
	if p.phase == Acting {
		w.acting -= t
		w.nAct--
	} else {
		w.reasoning -= t
	}
	if p.marked {
		w.marked -= t
	}
	w.growth -= c.growthOf(p)
	w.actGrowth -= c.actGrowthOf(p)
	w.dropShared(sharedOf(p))
	last := len(w.progs) - 1
	w.progs[p.slot] = w.progs[last]
	w.progs[p.slot].slot = p.slot
	w.progs[last] = nil
	w.progs = w.progs[:last]
	p.w = nil
	p.slot = -1
}

func (c *RawAdmitter) setMarked(p *program, m bool) {
	if !m {
		p.swapMark = false
	}
	if p.marked == m {
		return
	}
	w := p.w
	if w != nil {
		c.detach(p)
	}
	p.marked = m
	if w != nil {
		c.attach(p, w)
	}
}

func (c *RawAdmitter) emit(d Decision) {
	c.seq++
	d.Seq = c.seq
	if c.cfg.OnDecision != nil {
		c.cfg.OnDecision(d)
		return
	}
	if len(c.pending) >= c.cfg.MaxPending {
		c.stats.DroppedDecisions++
		return
	}
	c.pending = append(c.pending, d)
}

// Drain appends the buffered decisions to dst, in order, and empties the
// buffer. It returns nothing new when Config.OnDecision is set.
func (c *RawAdmitter) Drain(dst []Decision) []Decision {
	dst = append(dst, c.pending...)
	clear(c.pending)
	c.pending = c.pending[:0]
	return dst
}
