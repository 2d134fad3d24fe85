package admission

import (
	"math"
	"time"
)

// StartRequest records that a request (a model turn) of session id starts
// at now. promptTokens, when positive, is the request's prompt length in
// tokens (exact, from the router's tokeniser) and replaces the program's
// token total; zero keeps the last reported total.
//
// An Active program's turn runs at once (Admission.Run). A Paused program's
// turn is held, and a new program is placed on the least-utilised worker
// with room under the resume ceiling, or queued when none has room or when
// other turns are already held (so new programs cannot overtake them). A
// program too large for any worker's room under the ceiling is placed on a
// worker with no programs, if there is one (ReasonEmptyWorker). A held turn
// is released by a KindResume decision with Released set.
func (c *RawAdmitter) StartRequest(now time.Time, id string, promptTokens int64) (Admission, error) {
	return c.StartRequestOn(now, id, promptTokens, nil)
}

// StartRequestOn is StartRequest with a placement preference for a new
// program: the first worker of prefer with room under the resume ceiling
// takes it (ReasonPreferred), else placement proceeds as in StartRequest.
// A router passes its workers ranked by KV-cache cost, so a new program
// lands where its prefix is cached. prefer is only read; it is ignored for
// programs the controller already knows, except with Config.Moves (an
// Acting program moves to the first worker of prefer with room, when no
// turn waits or it escapes a backlogged worker; see Config.Moves).
func (c *RawAdmitter) StartRequestOn(now time.Time, id string, promptTokens int64, prefer []WorkerID) (Admission, error) {
	if id == "" {
		return Admission{}, ErrEmptyID
	}
	if promptTokens < 0 || promptTokens > MaxTokens {
		return Admission{}, ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return c.startNew(now, id, promptTokens, prefer), nil
	}
	p.steps++
	if p.life == Active {
		w := p.w
		why := ReasonActive
		if c.cfg.rebalance() && (c.nWaiting == 0 || w.backlog >= c.cfg.margin()) && p.inflight == 0 {
			for _, id := range prefer {
				if to := c.workerByID(id); to != nil && to != w && (to.backlog < c.cfg.margin() || c.nWaiting == 0) && roomUsed(to, c.used(to))+float64(c.need(p, to)) <= c.cfg.PauseThreshold*float64(to.cap) {
					w, why = to, ReasonPreferred
					break
				}
			}
		}
		c.detach(p)
		if promptTokens > 0 {
			p.tokens = promptTokens
		}
		if p.inflight == 0 && p.phase == Acting && now.After(p.actingSince) {
			p.actingTotal += now.Sub(p.actingSince)
		}
		p.phase = Reasoning
		if p.inflight == 0 {
			p.runSince = now
		}
		p.inflight++
		c.attach(p, w)
		prio := 0.0
		if p.boost {
			prio += c.cfg.ResumeBoost
			p.boost = false
		}
		if w.demoted && now.Before(w.demUntil) {
			prio += c.cfg.SoftDemotePriority
		}
		c.stats.Admitted++
		c.emit(Decision{At: now, Kind: KindAdmit, Reason: why, Program: id, Worker: w.id, HasWorker: true,
			Tokens: p.tokens, Util: c.util(w), Priority: prio})
		return Admission{Run: true, Worker: w.id, Priority: prio, Status: StatusRunnable, Reason: why}, nil
	}
	// Paused: hold the turn.
	if p.held == 0 {
		p.undo.actingTotal = p.actingTotal
		if p.phase == Acting && now.After(p.actingSince) {
			p.actingTotal += now.Sub(p.actingSince)
		}
		p.waitSince = now
	}
	if promptTokens > 0 {
		p.tokens = promptTokens
	}
	p.phase = Reasoning
	p.inflight++
	p.held++
	if p.held == 1 && p.probed && c.probeable(now, p) {
		// A probed program's later turn, while it is small: run it now.
		if a, ok := c.probeNow(now, p); ok {
			return a, nil
		}
	}
	c.updateWaiting(p)
	c.stats.Held++
	c.emit(Decision{At: now, Kind: KindHold, Reason: ReasonPaused, Program: id, Tokens: p.tokens})
	return Admission{Status: status(p), Reason: ReasonPaused}, nil
}

// StartSubRequest is StartRequestOn for the first turn of a subagent
// whose parent program is parent: the parent waits for it, so it does not
// queue behind new programs at the door. A new subagent program is placed
// on the parent's worker when that has room under the resume ceiling,
// else as StartRequestOn places it but without waiting for held turns to
// go first; when no worker has room it is held as a turn of a running
// program (resumed before new programs, and swapped in at Waits.MaxWait
// with the parent's worker as its home). For a program the controller
// knows, or an unknown parent, it is StartRequestOn.
func (c *RawAdmitter) StartSubRequest(now time.Time, id, parent string, promptTokens int64, prefer []WorkerID) (Admission, error) {
	pp, ok := c.progs[parent]
	if _, known := c.progs[id]; known || !ok || id == "" || parent == id || promptTokens < 0 || promptTokens > MaxTokens {
		return c.StartRequestOn(now, id, promptTokens, prefer)
	}
	home := pp.w
	if home == nil {
		home = pp.home
	}
	if home != nil {
		prefer = append([]WorkerID{home.id}, prefer...)
	}
	a := c.startNewAs(now, id, promptTokens, prefer, home)
	if home == nil && !pp.placed && pp.probed {
		a = c.probeSub(now, c.progs[id], pp, a)
	}
	return a, nil
}

// startNew places or queues a new program offered by a client (not a
// subagent), counting it in the current burst (Door.Probe).
func (c *RawAdmitter) startNew(now time.Time, id string, tokens int64, prefer []WorkerID) Admission {
	if c.burst == nil || now.Sub(c.burst.start) >= burstSpan || now.Before(c.burst.start) {
		c.burst = &burst{start: now}
	}
	c.burst.n++
	a := c.startNewAs(now, id, tokens, prefer, nil)
	c.progs[id].burst = c.burst
	return a
}

// startNewAs places or queues a new program; with a non-nil home (a
// subagent's parent worker) it skips the fairness queue and, held, counts
// as a placed program's held turn.
func (c *RawAdmitter) startNewAs(now time.Time, id string, tokens int64, prefer []WorkerID, home *worker) Admission {
	p := &program{id: id, phase: Reasoning, steps: 1, inflight: 1, held: 1, tokens: tokens, slot: -1, pslot: -1, home: home, arrival: now}
	c.progs[id] = p
	c.join(p)
	reason := ReasonFairness
	if home != nil || c.nWaiting == 0 && !p.grp.full() {
		need := c.grownSize(tokens) + c.cfg.Buffer
		door := home == nil && c.cfg.maxWait() > 0 // a new program, not a subagent of a running one
		w, why := c.preferredWithRoom(need, prefer, door), ReasonPreferred
		if w == nil {
			w, why = c.leastUtilisedWithRoom(need, door), ReasonRoom
		}
		if w == nil {
			w, why = c.emptyWorker(), ReasonEmptyWorker
		}
		if w != nil {
			p.life = Active
			c.markPlaced(p)
			p.held = 0
			p.runSince = now
			c.attach(p, w)
			c.stats.Admitted++
			prio := 0.0
			if w.demoted && now.Before(w.demUntil) {
				prio = c.cfg.SoftDemotePriority
			}
			c.emit(Decision{At: now, Kind: KindAdmit, Reason: why, Program: id, Worker: w.id, HasWorker: true,
				Tokens: tokens, Util: c.util(w), Priority: prio})
			return Admission{Run: true, Worker: w.id, Priority: prio, Status: StatusRunnable, Reason: why}
		}
		reason = ReasonNoRoom
	}
	p.life = Paused
	p.waitSince = now
	if home != nil {
		c.markPlaced(p) // part of a running program: a held turn, not the door
	}
	c.addPaused(now, p)
	c.updateWaiting(p)
	c.stats.Queued++
	c.emit(Decision{At: now, Kind: KindQueue, Reason: reason, Program: id, Tokens: tokens})
	return Admission{Status: StatusQueued, Reason: reason}
}

func (c *RawAdmitter) workerByID(id WorkerID) *worker { return c.byID[id] }

// Relocate moves an Active program, with the turn it is running, off a
// worker the caller cannot use (it is failing, or has left routing while
// still known here) to the first worker of prefer that has room for it
// under the resume ceiling, or, where none has, to the one of them with
// the most room: losing the session would be worse than an overcommit,
// which the next Tick's pause pass corrects. prefer lists the workers the
// caller can use, best first; the program's own worker is skipped. It
// reports false, changing nothing, for a program that is not Active or
// when prefer names no other known worker.
func (c *RawAdmitter) Relocate(now time.Time, id string, prefer []WorkerID) (Admission, bool) {
	p, ok := c.progs[id]
	if !ok || p.life != Active {
		return Admission{}, false
	}
	var to, roomiest *worker
	best := math.Inf(-1)
	for _, wid := range prefer {
		w := c.workerByID(wid)
		if w == nil || w == p.w {
			continue
		}
		room := c.ceiling*float64(w.cap) - roomUsed(w, c.used(w)) - c.reserved(w) - float64(c.need(p, w))
		if room >= 0 {
			to = w
			break
		}
		if room > best {
			roomiest, best = w, room
		}
	}
	if to == nil {
		to = roomiest
	}
	if to == nil {
		return Admission{}, false
	}
	if p.marked {
		c.setMarked(p, false)
	}
	c.detach(p)
	c.attach(p, to)
	p.home = to
	c.stats.Relocated++
	prio := 0.0
	if to.demoted && now.Before(to.demUntil) {
		prio = c.cfg.SoftDemotePriority
	}
	c.emit(Decision{At: now, Kind: KindAdmit, Reason: ReasonRelocated, Program: id, Worker: to.id, HasWorker: true,
		Tokens: p.tokens, Util: c.util(to), Priority: prio})
	return Admission{Run: true, Worker: to.id, Priority: prio, Status: StatusRunnable, Reason: ReasonRelocated}, true
}

// preferredWithRoom returns the first worker of prefer that has room for
// need under the resume ceiling, or nil.
func (c *RawAdmitter) preferredWithRoom(need int64, prefer []WorkerID, door bool) *worker {
	for _, id := range prefer {
		w := c.workerByID(id)
		if w != nil && roomUsed(w, c.used(w))+c.reserved(w)+c.doorIf(w, door)+float64(need) <= c.ceiling*float64(w.cap) {
			return w
		}
	}
	return nil
}

// emptyWorker returns the worker with the largest capacity among those with
// no programs at all (ties: lowest id), or nil.
func (c *RawAdmitter) emptyWorker() *worker {
	var best *worker
	for _, w := range c.workers {
		if len(w.progs) == 0 && (best == nil || w.cap > best.cap) {
			best = w
		}
	}
	return best
}

// leastUtilisedWithRoom returns the worker with the lowest U among those
// where used + need ≤ ceiling·capacity (ties: lowest id), or nil.
func (c *RawAdmitter) leastUtilisedWithRoom(need int64, door bool) *worker {
	var best *worker
	var bestU float64
	for _, w := range c.workers {
		u := roomUsed(w, c.used(w)) + c.reserved(w) + c.doorIf(w, door)
		if u+float64(need) > c.ceiling*float64(w.cap) {
			continue
		}
		if uu := u / float64(w.cap); best == nil || uu < bestU {
			best, bestU = w, uu
		}
	}
	return best
}

// EndRequest records that a turn of session id ended at now, with the
// engine-reported usage; the program's token total becomes prompt +
// completion. With no other turn in flight the program turns Acting (a tool
// boundary): a program marked for pause is paused here.
func (c *RawAdmitter) EndRequest(now time.Time, id string, promptTokens, completionTokens int64) error {
	if promptTokens < 0 || completionTokens < 0 || promptTokens > MaxTokens || completionTokens > MaxTokens {
		return ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	if p.inflight-p.held == 0 {
		return ErrNoRequest
	}
	total := promptTokens + completionTokens
	if p.life == Active {
		w := p.w
		c.detach(p)
		p.inflight--
		if total > 0 {
			p.tokens = total
			c.observe(p)
		}
		if p.inflight == 0 {
			p.phase = Acting
			p.actingSince = now
			c.recordTurn(now, p)
			if p.marked {
				swap := p.swapMark
				p.marked, p.swapMark = false, false
				p.life = Active // pause expects an attached program
				c.attach(p, w)
				c.pause(now, p, ReasonToolBoundary)
				if swap {
					// The room a held turn waits for (swapIn): give it now,
					// not at the next Tick, which may be past MaxWait.
					w.reserved = 0
					var r TickResult
					c.resume(now, &r)
				}
				return nil
			}
		}
		c.attach(p, w)
		return nil
	}
	// A paused program's running turn ended: a probe (Door.Probe), or it
	// ran on a worker that was removed.
	c.endProbe(p)
	p.inflight--
	if total > 0 {
		p.tokens = total
	}
	if p.inflight == 0 {
		p.phase = Acting
		p.actingSince = now
		p.runSince = time.Time{}
	}
	return nil
}

// Cancel withdraws a held turn of session id (the caller gave up waiting).
// The program's state is restored to what it was before the turn started:
// a queued new program that never ran is forgotten, a paused one (or one
// that ran a probe, Door.Probe, keeping its place at the door) returns to
// its previous phase and step count.
func (c *RawAdmitter) Cancel(now time.Time, id string) error {
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	if p.life != Paused || p.held == 0 {
		return ErrNotHeld
	}
	waited := now.Sub(p.waitSince)
	p.inflight--
	p.held--
	p.steps--
	if p.held == 0 {
		p.waitSince = time.Time{}
	}
	if p.inflight == 0 {
		if !p.placed && !p.probed {
			c.removePaused(p)
			p.waiting = false
			c.nWaiting--
			c.leave(p)
			c.dropSibling(p)
			delete(c.progs, id)
			c.stats.Cancelled++
			c.emit(Decision{At: now, Kind: KindCancel, Reason: ReasonCancelled, Program: id, Tokens: p.tokens, Released: true, Waited: waited})
			return nil
		}
		// Nothing in flight any more: back to Acting, with the acting time
		// the hold had added taken off again.
		p.phase = Acting
		p.actingTotal = p.undo.actingTotal
	}
	c.updateWaiting(p)
	c.stats.Cancelled++
	c.emit(Decision{At: now, Kind: KindCancel, Reason: ReasonCancelled, Program: id, Tokens: p.tokens, Released: true, Waited: waited})
	return nil
}

// EndSession terminates session id and forgets it: its tokens stop
// counting, and any held turn is dropped (KindTerminate with Released).
func (c *RawAdmitter) EndSession(now time.Time, id string) error {
	p, ok := c.progs[id]
	if !ok {
		return ErrUnknownProgram
	}
	d := Decision{At: now, Kind: KindTerminate, Reason: ReasonSessionEnd, Program: id, Tokens: p.tokens}
	freed := p.life == Active
	if freed {
		w := p.w
		if p.marked {
			c.setMarked(p, false)
		}
		c.detach(p)
		d.Worker, d.HasWorker, d.Util = w.id, true, c.util(w)
	} else {
		if p.held > 0 {
			d.Released = true
			d.Waited = now.Sub(p.waitSince)
		}
		c.endProbe(p)
		c.removePaused(p)
		if p.waiting {
			p.waiting = false
			c.nWaiting--
		}
	}
	if c.cfg.reserveGrowth() {
		c.recordEnd(p)
	}
	p.life = Terminated
	c.leave(p)
	c.dropSibling(p)
	delete(c.progs, id)
	c.stats.Terminated++
	c.emit(d)
	if freed && c.cfg.resumeOnEnd() && len(c.paused) > 0 {
		var r TickResult
		c.resume(now, &r)
	}
	return nil
}
