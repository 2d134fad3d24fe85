package admission

import "fmt"

// invSums are a worker's sums as checkInvariants recomputes them.
type invSums struct {
	reasoning, acting, marked int64
	n, nAct                   int
	sharedSum                 int64
	keys                      map[sharedKey]bool
}

// checkInvariants recomputes every derived quantity of c from scratch (a
// naive reference model of the bookkeeping) and compares.
func checkInvariants(c *RawAdmitter) error {
	ref := map[WorkerID]*invSums{}
	for _, w := range c.workers {
		ref[w.id] = &invSums{}
	}
	waiting := 0
	pausedN := 0
	for id, p := range c.progs {
		if err := checkProgram(id, p); err != nil {
			return err
		}
		var err error
		switch p.life {
		case Active:
			err = checkActive(c, id, p, ref)
		case Paused:
			pausedN++
			if p.held > 0 {
				waiting++
			}
			err = checkPaused(c, id, p)
		default:
			err = fmt.Errorf("program %s: lifecycle %v in table", id, p.life)
		}
		if err != nil {
			return err
		}
	}
	if pausedN != len(c.paused) {
		return fmt.Errorf("paused list has %d, table has %d paused", len(c.paused), pausedN)
	}
	if waiting != c.nWaiting {
		return fmt.Errorf("nWaiting %d, recomputed %d", c.nWaiting, waiting)
	}
	if err := checkProbes(c); err != nil {
		return err
	}
	if err := checkGroups(c); err != nil {
		return err
	}
	if err := checkSiblings(c); err != nil {
		return err
	}
	return checkWorkers(c, ref)
}

// checkSiblings recounts the programs by first-prefix key
// (SetFirstPrefix): the map holds exactly the keys some program has, and
// the long groups of a probe pass are cleared after it.
func checkSiblings(c *RawAdmitter) error {
	count, n := map[uint64]int{}, 0
	for id, p := range c.progs {
		if p.first < 0 || p.first > MaxTokens || p.first == 0 && p.sib != 0 {
			return fmt.Errorf("program %s: first prefix %d key %#x", id, p.first, p.sib)
		}
		if p.first > 0 {
			count[p.sib]++
			n++
		}
	}
	if n != c.nSib || len(count) != len(c.sibs) {
		return fmt.Errorf("siblings: %d programs in %d groups, recounted %d in %d", c.nSib, len(c.sibs), n, len(count))
	}
	for k, m := range count {
		if c.sibs[k] != m {
			return fmt.Errorf("sibling group %#x: %d, recounted %d", k, c.sibs[k], m)
		}
	}
	if len(c.sibLong) != 0 {
		return fmt.Errorf("long sibling groups left after a probe pass: %v", c.sibLong)
	}
	return nil
}

// checkGroups recounts each group's programs and admitted (placed) ones
// (Config.Groups): the map holds exactly the groups with programs, and a
// group's door tally is clear between passes.
func checkGroups(c *RawAdmitter) error {
	members, admitted := map[*group]int{}, map[*group]int{}
	for id, p := range c.progs {
		if p.grp == nil {
			if c.cfg.Groups != nil {
				return fmt.Errorf("program %s: no group", id)
			}
			continue
		}
		if c.groups[p.grp.name] != p.grp {
			return fmt.Errorf("program %s: group %q not in the map", id, p.grp.name)
		}
		members[p.grp]++
		if p.placed {
			admitted[p.grp]++
		}
	}
	if len(c.groups) != len(members) {
		return fmt.Errorf("%d groups in the map, %d with programs", len(c.groups), len(members))
	}
	for name, g := range c.groups {
		if g.members != members[g] || g.admitted != admitted[g] || g.seen != 0 {
			return fmt.Errorf("group %q: %d members, %d admitted, seen %d; recounted %d and %d", name, g.members, g.admitted, g.seen, members[g], admitted[g])
		}
	}
	return nil
}

// checkProgram checks what holds for a program whatever its lifecycle:
// its key, its counters, its phase.
func checkProgram(id string, p *program) error {
	if p.id != id {
		return fmt.Errorf("program %q stored under %q", p.id, id)
	}
	if p.held > 0 && p.life != Paused {
		return fmt.Errorf("program %s: %d held but %v", id, p.held, p.life)
	}
	if p.held > p.inflight {
		return fmt.Errorf("program %s: held %d > inflight %d", id, p.held, p.inflight)
	}
	if p.inflight < 0 || p.held < 0 || p.steps < 0 || p.tokens < 0 {
		return fmt.Errorf("program %s: negative counters %+v", id, p)
	}
	if p.inflight > 0 && p.phase != Reasoning {
		return fmt.Errorf("program %s: %d in flight but %v", id, p.inflight, p.phase)
	}
	if p.inflight == 0 && p.phase != Acting {
		return fmt.Errorf("program %s: nothing in flight but %v", id, p.phase)
	}
	return nil
}

// checkActive checks an Active program's place on its worker and adds it
// to the worker's recomputed sums.
func checkActive(c *RawAdmitter, id string, p *program, ref map[WorkerID]*invSums) error {
	if p.w == nil {
		return fmt.Errorf("program %s: active without worker", id)
	}
	s := ref[p.w.id]
	if s == nil || c.byID[p.w.id] != p.w {
		return fmt.Errorf("program %s: on removed worker %v", id, p.w.id)
	}
	if p.w.progs[p.slot] != p {
		return fmt.Errorf("program %s: bad slot", id)
	}
	s.n++
	// Unique tail per program, the shared prefix once per worker.
	shared := min(p.shared, p.tokens)
	t := p.tokens - shared
	if k := (sharedKey{p.sharedID, shared}); shared > 0 && !s.keys[k] {
		if s.keys == nil {
			s.keys = map[sharedKey]bool{}
		}
		s.keys[k] = true
		s.sharedSum += shared
	}
	if p.phase == Acting {
		s.acting += t
		s.nAct++
	} else {
		s.reasoning += t
	}
	if p.marked {
		if p.phase != Reasoning {
			return fmt.Errorf("program %s: marked while %v", id, p.phase)
		}
		s.marked += t
	}
	if p.pslot != -1 {
		return fmt.Errorf("program %s: active but in paused list", id)
	}
	if !p.placed {
		return fmt.Errorf("program %s: active but never placed", id)
	}
	return nil
}

// checkPaused checks a Paused program's place in the paused list.
func checkPaused(c *RawAdmitter, id string, p *program) error {
	if p.w != nil || p.marked {
		return fmt.Errorf("program %s: paused with worker or mark", id)
	}
	if p.pslot < 0 || p.pslot >= len(c.paused) || c.paused[p.pslot] != p {
		return fmt.Errorf("program %s: not in paused list", id)
	}
	if p.held > 0 && p.waitSince.IsZero() {
		return fmt.Errorf("program %s: held without waitSince", id)
	}
	if !p.placed && p.held == 0 && !p.probed {
		return fmt.Errorf("program %s: queued with no held turn", id)
	}
	if p.probe != nil && (p.placed || p.inflight <= p.held) {
		return fmt.Errorf("program %s: probing but placed=%v, %d in flight, %d held", id, p.placed, p.inflight, p.held)
	}
	return nil
}

// checkProbes recomputes every worker's probes and their tokens from the
// programs probing there (Door.Probe).
func checkProbes(c *RawAdmitter) error {
	n := map[*worker]int{}
	tokens := map[*worker]int64{}
	for id, p := range c.progs {
		if p.probe == nil {
			continue
		}
		if p.life != Paused || c.byID[p.probe.id] != p.probe {
			return fmt.Errorf("program %s: probing on %v while %v", id, p.probe.id, p.life)
		}
		n[p.probe]++
		tokens[p.probe] += p.probeN
	}
	for _, w := range c.workers {
		if w.probes != n[w] || w.probing != tokens[w] {
			return fmt.Errorf("worker %v: %d probes of %d tokens, recomputed %d of %d", w.id, w.probes, w.probing, n[w], tokens[w])
		}
	}
	return nil
}

// checkWorkers compares every worker's sums and growth reserves with the
// recomputed ones (ref), and checks the workers are sorted.
func checkWorkers(c *RawAdmitter, ref map[WorkerID]*invSums) error {
	for _, w := range c.workers {
		var growth, actGrowth int64
		for _, p := range w.progs {
			if p.phase == Reasoning {
				growth += max(0, c.growthEst-tail(p))
			} else {
				actGrowth += max(0, c.growthEst-tail(p))
			}
		}
		if growth != w.growth || actGrowth != w.actGrowth {
			return fmt.Errorf("worker %v: growth reserve %d / acting %d, recomputed %d / %d", w.id, w.growth, w.actGrowth, growth, actGrowth)
		}
		s := ref[w.id]
		if s.reasoning != w.reasoning || s.acting != w.acting || s.marked != w.marked || s.n != len(w.progs) || s.nAct != w.nAct || s.sharedSum != w.sharedSum {
			return fmt.Errorf("worker %v: sums %+v, recomputed %+v", w.id,
				invSums{w.reasoning, w.acting, w.marked, len(w.progs), w.nAct, w.sharedSum, nil}, *s)
		}
	}
	for i := 1; i < len(c.workers); i++ {
		if c.workers[i-1].id >= c.workers[i].id {
			return fmt.Errorf("workers not sorted")
		}
	}
	return nil
}

// checkAfterTick checks the pause postcondition: every worker at or over
// the pause threshold has either reached the pause target counting marked
// programs as future frees, or has nothing left to pause or mark (programs
// resumed by this tick excepted).
func checkAfterTick(c *RawAdmitter) error {
	for _, w := range c.workers {
		capf := float64(w.cap)
		u := c.used(w)
		if u < c.cfg.PauseThreshold*capf {
			continue
		}
		if u-float64(w.marked) <= c.cfg.PauseTarget*capf+1e-9 {
			continue
		}
		if len(w.progs) == 1 {
			continue // a worker's only program is never paused
		}
		for _, p := range w.progs {
			if p.resumedAt == c.tickNo {
				continue
			}
			if p.phase == Acting || !p.marked {
				return fmt.Errorf("worker %v at U=%.3f (eff %.3f) still has pausable %s (%v, marked=%v, %d tokens)",
					w.id, u/capf, (u-float64(w.marked))/capf, p.id, p.phase, p.marked, p.tokens)
			}
		}
	}
	return nil
}
