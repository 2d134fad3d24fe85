package admission

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A discrete-event workload driving a RawAdmitter the way the simulator and
// the router do: turns start (maybe held), end with usage, tools run, sessions
// end; Tick every Interval; workers change now and then. Every operation is
// logged as a script line so a failure prints a replayable prefix.

type simTurn struct {
	prompt, completion int64
	think, tool        time.Duration
}

type simProg struct {
	id      string
	turns   []simTurn
	next    int  // index of the turn to start next
	running bool // a turn is running
	held    bool
	heldGen int // generation of the current hold (for stale cancels)
	done    bool
	abandon int // turn after which the session is ended early (−1: never)
}

type simEvent struct {
	at   time.Duration
	seq  int
	kind int // 0 start turn, 1 end turn, 2 tick, 3 cancel held, 4 worker churn
	p    *simProg
	gen  int
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simResult struct {
	pauses, marks, forced, resumes uint64
	probes, laneProbes             uint64 // Door.Probe: from a Tick, and a later turn run at once
	maxWait, totalWait             time.Duration
	releases                       int
	makespan                       time.Duration
	maxMarksPerTick                int
}

type sim struct {
	t           testing.TB
	rng         *rand.Rand
	ctl         *RawAdmitter
	now         time.Duration
	q           simQueue
	seq         int
	log         []string
	dec         []Decision
	progs       map[string]*simProg
	nextW       WorkerID
	res         simResult
	churn       bool
	shared      int64 // when positive, SetShared(min(shared, prompt)) after every turn
	lastSwapped uint64
	failed      bool
	seed        uint64
	ticking     bool
}

func (s *sim) push(at time.Duration, kind int, p *simProg, gen int) {
	s.seq++
	heap.Push(&s.q, simEvent{at: at, seq: s.seq, kind: kind, p: p, gen: gen})
}

func (s *sim) fail(format string, args ...any) {
	if s.failed {
		return
	}
	s.failed = true
	prefix := s.log
	const keep = 60
	skipped := 0
	if len(prefix) > keep {
		skipped = len(prefix) - keep
		prefix = prefix[skipped:]
	}
	s.t.Errorf("seed %d: %s\nfailing prefix (%d ops, first %d omitted; replay as a testdata script):\n%s",
		s.seed, fmt.Sprintf(format, args...), len(s.log), skipped, strings.Join(prefix, "\n----\n\n"))
}

func (s *sim) op(line string) {
	s.log = append(s.log, fmt.Sprintf("%s at=%v", line, s.now))
}

func (s *sim) check(after string) {
	if err := checkInvariants(s.ctl); err != nil {
		s.fail("after %s: %v", after, err)
	}
}

func (s *sim) handleDecisions() {
	for len(s.dec) > 0 {
		d := s.dec[0]
		s.dec = s.dec[1:]
		if d.Reason == ReasonProbe {
			if d.Kind == KindAdmit {
				s.res.laneProbes++
			} else {
				s.res.probes++
			}
			// A probe leaves its program at the door.
			if st := s.ctl.Status(d.Program); st != StatusQueued && st != StatusHeld {
				s.fail("%s probed but %v", d.Program, st)
			}
		}
		switch d.Kind {
		case KindPause:
			s.res.pauses++
		case KindMark:
			s.res.marks++
		case KindResume:
			s.res.resumes++
			if d.Reason == ReasonForced {
				s.res.forced++
			}
			if d.Reason == ReasonSwap {
				// A swap makes room; it never overcommits the worker.
				if ceil := s.ctl.Config().ResumeCeiling(); d.Util > ceil+1e-9 {
					s.fail("%s swapped in on w=%v at U=%.4f over the resume ceiling %.2f", d.Program, d.Worker, d.Util, ceil)
				}
			}
			if d.Released {
				cfg := s.ctl.Config()
				if cfg.maxWait() > 0 && d.Reason == ReasonForced && float64(d.Tokens+cfg.Buffer) <= s.ctl.ceiling*float64(s.ctl.maxCap()) {
					// Only a program too large for every worker's room
					// may reach the safety net (2 × ForcedResume).
					s.fail("%s forced with MaxWait set (waited %v)", d.Program, d.Waited)
				}
				if p := s.ctl.progs[d.Program]; p != nil && p.grp != nil && p.grp.max > 0 {
					// A bounded group's programs wait for their group
					// (Groups.MaxAdmitted), past any cap.
				} else if cfg.maxWait() == 0 && d.Waited > cfg.ForcedResume+cfg.Interval {
					s.fail("%s waited %v > forced-resume cap %v + interval", d.Program, d.Waited, cfg.ForcedResume)
				}
				s.res.releases++
				s.res.totalWait += d.Waited
				if d.Waited > s.res.maxWait {
					s.res.maxWait = d.Waited
				}
				p := s.progs[d.Program]
				if p == nil || !p.held {
					s.fail("release of %s which holds no turn", d.Program)
					continue
				}
				p.held = false
				p.running = true
				s.push(s.now+p.turns[p.next].think, 1, p, 0)
			}
		}
	}
}

func (s *sim) startTurn(p *simProg) {
	tr := p.turns[p.next]
	s.op(fmt.Sprintf("start s=%s tokens=%d", p.id, tr.prompt))
	adm, err := s.ctl.StartRequest(epoch.Add(s.now), p.id, tr.prompt)
	if err != nil {
		s.fail("start %s: %v", p.id, err)
		return
	}
	s.check("start")
	if adm.Run {
		p.running = true
		s.push(s.now+tr.think, 1, p, 0)
	} else {
		p.held = true
		p.heldGen++
		if s.churn && s.rng.IntN(10) == 0 { // the client gives up for a while
			s.push(s.now+time.Duration(1+s.rng.IntN(120))*time.Second, 3, p, p.heldGen)
		}
	}
	s.handleDecisions()
}

func (s *sim) run(maxTime time.Duration) {
	interval := s.ctl.Config().Interval
	s.push(interval, 2, nil, 0)
	if s.churn {
		s.push(time.Duration(30+s.rng.IntN(300))*time.Second, 4, nil, 0)
	}
	for s.q.Len() > 0 && !s.failed {
		e := heap.Pop(&s.q).(simEvent)
		s.now = e.at
		if s.now > maxTime {
			s.fail("workload not finished after %v", maxTime)
			return
		}
		switch e.kind {
		case 0:
			if !e.p.done {
				s.startTurn(e.p)
			}
		case 1:
			if !e.p.done && e.p.running {
				s.endTurn(e.p)
			}
		case 2:
			s.tick(interval)
		case 3:
			if p := e.p; !p.done && p.held && p.heldGen == e.gen {
				s.cancelTurn(p)
			}
		case 4:
			s.workerChurn()
			if !s.allDone() {
				s.push(s.now+time.Duration(30+s.rng.IntN(300))*time.Second, 4, nil, 0)
			}
		}
	}
	if s.failed {
		return
	}
	for _, p := range s.progs {
		if !p.done {
			s.fail("program %s never finished (turn %d/%d, held=%v)", p.id, p.next, len(p.turns), p.held)
		}
	}
	if s.ctl.Len() != 0 {
		s.fail("%d programs left in the controller after every session ended", s.ctl.Len())
	}
}

// endTurn ends p's running turn, records its shared prefix, and closes the
// session after its last (or abandoned) turn, else schedules the next
// turn after the tool call.
func (s *sim) endTurn(p *simProg) {
	tr := p.turns[p.next]
	s.op(fmt.Sprintf("end s=%s prompt=%d completion=%d", p.id, tr.prompt, tr.completion))
	if err := s.ctl.EndRequest(epoch.Add(s.now), p.id, tr.prompt, tr.completion); err != nil {
		s.fail("end %s: %v", p.id, err)
	}
	s.check("end")
	if s.shared > 0 {
		n := min(s.shared, tr.prompt)
		s.op(fmt.Sprintf("share s=%s tokens=%d key=%d", p.id, n, len(p.id)%2))
		// Two prefixes (two agent kinds), by program parity.
		if err := s.ctl.SetShared(p.id, n, uint64(len(p.id)%2)); err != nil {
			s.fail("share %s: %v", p.id, err)
		}
		s.check("share")
	}
	p.running = false
	s.handleDecisions()
	finished := p.next == p.abandon
	p.next++
	if p.next == len(p.turns) || finished {
		s.op("close s=" + p.id)
		if err := s.ctl.EndSession(epoch.Add(s.now), p.id); err != nil {
			s.fail("close %s: %v", p.id, err)
		}
		p.done = true
		s.check("close")
		s.handleDecisions()
		return
	}
	s.push(s.now+tr.tool, 0, p, 0)
}

// cancelTurn gives up p's held turn, and retries it a second later.
func (s *sim) cancelTurn(p *simProg) {
	s.op("cancel s=" + p.id)
	if err := s.ctl.Cancel(epoch.Add(s.now), p.id); err != nil {
		s.fail("cancel %s: %v", p.id, err)
	}
	p.held = false
	s.check("cancel")
	s.handleDecisions()
	s.push(s.now+time.Second, 0, p, 0) // retry the same turn
}

// tick runs one control tick and checks what it decided: the MaxWait
// order, the door's order, the pause postcondition, and the waits after
// it; the next tick follows interval later until every program is done.
func (s *sim) tick(interval time.Duration) {
	s.op("tick")
	waiting := map[string]bool{}     // held turns of placed programs before the tick
	queued := map[string]time.Time{} // new programs at the door before the tick
	for _, p := range s.ctl.paused {
		if p.held > 0 && p.placed {
			waiting[p.id] = true
		}
		if !p.placed && p.held > 0 {
			queued[p.id] = p.arrival
		}
	}
	s.ctl.Tick(epoch.Add(s.now))
	s.check("tick")
	s.checkTickOrder(waiting, queued)
	if err := checkAfterTick(s.ctl); err != nil {
		s.fail("after tick: %v", err)
	}
	marks := 0
	for _, d := range s.dec {
		if d.Kind == KindMark {
			marks++
		}
	}
	if marks > s.res.maxMarksPerTick {
		s.res.maxMarksPerTick = marks
	}
	swapped := s.ctl.Stats().Swapped
	s.handleDecisions()
	swappedNow := s.ctl.Stats().Swapped > s.lastSwapped
	s.lastSwapped = swapped
	s.checkWaits(swappedNow)
	if s.allDone() {
		s.res.makespan = s.now
		return // stop ticking
	}
	s.push(s.now+interval, 2, nil, 0)
}

// checkTickOrder checks, with MaxWait, the order of the tick's resumes:
// no program takes room while a held turn of a placed program (waiting,
// before the tick) still waits, and with one worker no new program is let
// in at the door ahead of one queued earlier (queued, before the tick).
func (s *sim) checkTickOrder(waiting map[string]bool, queued map[string]time.Time) {
	if s.ctl.cfg.maxWait() > 0 && slices.ContainsFunc(s.ctl.paused, func(p *program) bool { return p.held > 0 && p.placed }) {
		// A held turn of a placed program is still waiting: no
		// other program took room by the Placement in this tick.
		for _, d := range s.dec {
			if d.Kind == KindResume && (d.Reason == ReasonBinPacked || d.Reason == ReasonEmptyWorker) && !waiting[d.Program] {
				s.fail("%s resumed (%v) while a held turn of a placed program still waits", d.Program, d.Reason)
			}
		}
	}
	if s.ctl.cfg.maxWait() > 0 && len(s.ctl.workers) == 1 {
		// The door is first come, first served (programs that have
		// started first): a newcomer that does not fit reserves the
		// worker with the most room, and only others are backfilled;
		// with one worker, no new program is let in while an older one
		// stays queued (door.txt has the backfill).
		for _, d := range s.dec {
			at, ok := queued[d.Program]
			if d.Kind != KindResume || d.Reason == ReasonProbe || !ok {
				continue // a probe runs a turn, the program stays in line
			}
			in := s.ctl.progs[d.Program]
			for _, p := range s.ctl.paused {
				// A program that has started (run a probe) goes before
				// one that has not (Door.Probe).
				if q, was := queued[p.id]; was && !p.placed && p.held > 0 && q.Before(at) && (p.probed || in == nil || !in.probed) {
					s.fail("%s let in at the door ahead of %s, queued earlier", d.Program, p.id)
				}
			}
		}
	}
}

// checkWaits checks that no held turn has waited its cap after a tick
// (swappedNow: the tick swapped a program in).
func (s *sim) checkWaits(swappedNow bool) {
	cfg := s.ctl.Config()
	if len(s.ctl.workers) == 0 {
		return
	}
	for _, p := range s.ctl.paused {
		if cfg.maxWait() > 0 {
			// A held turn of a placed program past MaxWait is
			// swapped in, or waits for marked programs to make
			// room at their tool boundaries (programs resumed in
			// a tick are not marked in it: two ticks of grace),
			// or behind an older one that was swapped in this
			// tick; a new program waits at the door.
			tooBig := float64(p.tokens+cfg.Buffer) > s.ctl.ceiling*float64(s.ctl.maxCap())
			if p.held > 0 && p.placed && !tooBig && epoch.Add(s.now).Sub(p.waitSince) >= cfg.maxWait()+2*cfg.Interval && !s.marksPending() && !swappedNow {
				s.fail("%s (tail %d, shared %d) held since %v, past MaxWait, and no marked program will make room; workers %+v", p.id, tail(p), p.shared, p.waitSince.Sub(epoch), s.ctl.Workers(nil))
			}
			continue
		}
		if !p.placed && p.grp != nil && p.grp.max > 0 {
			continue // a bounded group's newcomer waits for its group (Groups), never forced
		}
		if p.held > 0 && epoch.Add(s.now).Sub(p.waitSince) >= cfg.ForcedResume {
			s.fail("%s held since %v, past the cap", p.id, p.waitSince.Sub(epoch))
		}
	}
}

func (s *sim) allDone() bool {
	for _, p := range s.progs {
		if !p.done {
			return false
		}
	}
	return true
}

func (s *sim) addWorker() {
	s.nextW++
	c := int64(4000 + s.rng.IntN(36000))
	s.op(fmt.Sprintf("worker add id=%d cap=%d", s.nextW, c))
	if err := s.ctl.AddWorker(s.nextW, c); err != nil {
		s.fail("add worker: %v", err)
	}
}

func (s *sim) workerChurn() {
	ws := s.ctl.workers
	switch r := s.rng.IntN(3); {
	case r == 0 || len(ws) == 1:
		s.addWorker()
	case r == 1:
		id := ws[s.rng.IntN(len(ws))].id
		s.op(fmt.Sprintf("worker remove id=%d", id))
		if err := s.ctl.RemoveWorker(epoch.Add(s.now), id); err != nil {
			s.fail("remove worker: %v", err)
		}
	default:
		id := ws[s.rng.IntN(len(ws))].id
		c := int64(4000 + s.rng.IntN(36000))
		s.op(fmt.Sprintf("worker cap id=%d cap=%d", id, c))
		if err := s.ctl.SetCapacity(id, c); err != nil {
			s.fail("set capacity: %v", err)
		}
	}
	s.check("worker churn")
	s.handleDecisions()
}

// newSim builds a random workload for seed.
func newSim(t testing.TB, seed uint64, cfg Config, churn bool) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, 0x5eed)), progs: map[string]*simProg{}, churn: churn, seed: seed}
	cfg.OnDecision = func(d Decision) { s.dec = append(s.dec, d) }
	c, err := NewRawAdmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.ctl = c
	nw := 1 + s.rng.IntN(4)
	for i := 0; i < nw; i++ {
		s.addWorker()
	}
	np := 5 + s.rng.IntN(40)
	for i := 0; i < np; i++ {
		p := &simProg{id: fmt.Sprintf("p%d", i), abandon: -1}
		nt := 1 + s.rng.IntN(8)
		var ctx int64 = int64(200 + s.rng.IntN(3000))
		for k := 0; k < nt; k++ {
			tr := simTurn{
				prompt:     ctx,
				completion: int64(20 + s.rng.IntN(800)),
				think:      time.Duration(1+s.rng.IntN(20)) * time.Second,
				tool:       time.Duration(1+s.rng.IntN(90)) * time.Second,
			}
			p.turns = append(p.turns, tr)
			ctx += tr.completion + int64(50+s.rng.IntN(4000))
		}
		if s.rng.IntN(8) == 0 {
			p.abandon = s.rng.IntN(nt)
		}
		s.progs[p.id] = p
		s.push(time.Duration(s.rng.IntN(60_000))*time.Millisecond, 0, p, 0)
	}
	return s
}

func TestPropertyRandomWorkloads(t *testing.T) {
	seeds := 150
	if testing.Short() || raceEnabled { // the race detector slows this ~10x
		seeds = 25
	}
	for _, pol := range []struct {
		name string
		p    Placement
	}{{"worst", WorstFit}, {"bfd", BestFitDecreasing}, {"least", LeastLoaded}} {
		var probes, laneProbes uint64
		for _, churn := range []bool{false, true} {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				cfg := Config{Placement: pol.p}
				if seed%5 == 0 {
					cfg.DecayHalfLife = 30 * time.Second
				}
				if seed%7 == 0 {
					cfg.ForcedResume = 2 * time.Minute
				}
				shared := int64(0)
				if seed%3 == 0 && seed%7 != 0 {
					// The improved admission (with the default 30-minute
					// ForcedResume, whose double is its safety net): aging and swap-in, home
					// placement, shared prefixes counted once.
					cfg.Waits = &Waits{MaxWait: time.Duration(1+seed%4) * time.Minute, HomeFirst: true}
					cfg.ActingWeight = 0.5
					if seed%2 == 0 {
						cfg.Door = &Door{ColdStartPrograms: 8, ActingGrowth: 0.6}
						if seed%4 == 0 {
							// Programs offered about a second apart
							// make bursts of three and more.
							cfg.Door.Probe = &Probe{After: 20 * time.Second, Burst: 3, Share: 0.3, Tail: 3000}
						}
					}
					shared = int64(500 + 100*(seed%10))
				}
				if seed%4 == 1 {
					// Three groups by program number, weights 1 to 3,
					// one bounded to 2 admitted programs on some seeds.
					bounded := seed%8 == 1
					cfg.Groups = &Groups{Of: func(id string) Group {
						n, _ := strconv.Atoi(strings.TrimPrefix(id, "p"))
						g := Group{Name: strconv.Itoa(n % 3), Weight: 1 + n%3}
						if bounded && n%3 == 0 {
							g.MaxAdmitted = 2
						}
						return g
					}}
				}
				s := newSim(t, seed, cfg, churn)
				s.shared = shared
				s.run(72 * time.Hour)
				if t.Failed() {
					t.Fatalf("policy %s churn=%v seed %d failed", pol.name, churn, seed)
				}
				probes += s.res.probes
				laneProbes += s.res.laneProbes
			}
		}
		if probes == 0 || laneProbes == 0 {
			t.Errorf("policy %s: %d probes from ticks, %d of later turns: the probe seeds did not exercise Door.Probe", pol.name, probes, laneProbes)
		}
	}
}

// TestPlacementComparison runs the same heavy workloads under each policy
// and logs what they do (go test -run PlacementComparison -v). It asserts
// only the properties, not which policy wins.
func TestPlacementComparison(t *testing.T) {
	for _, pol := range []struct {
		name string
		p    Placement
	}{{"worst-fit", WorstFit}, {"best-fit-decreasing", BestFitDecreasing}, {"least-loaded", LeastLoaded}} {
		var tot simResult
		var makespan time.Duration
		const seeds = 40
		for seed := uint64(1000); seed < 1000+seeds; seed++ {
			s := newSim(t, seed, Config{Placement: pol.p}, false)
			s.run(72 * time.Hour)
			tot.pauses += s.res.pauses
			tot.marks += s.res.marks
			tot.forced += s.res.forced
			tot.releases += s.res.releases
			tot.totalWait += s.res.totalWait
			makespan += s.res.makespan
			if s.res.maxWait > tot.maxWait {
				tot.maxWait = s.res.maxWait
			}
		}
		mean := time.Duration(0)
		if tot.releases > 0 {
			mean = tot.totalWait / time.Duration(tot.releases)
		}
		t.Logf("%-20s pauses=%d marks=%d forced=%d held-releases=%d mean-wait=%v max-wait=%v mean-makespan=%v",
			pol.name, tot.pauses, tot.marks, tot.forced, tot.releases, mean.Round(time.Millisecond), tot.maxWait,
			(makespan / seeds).Round(time.Second))
	}
}

// TestMarkingCountsFutureFrees is the regression test for the upstream flaw:
// with n equal REASONING programs and nothing ACTING, only as many are marked
// as the excess needs, and a second tick marks none.
func TestMarkingCountsFutureFrees(t *testing.T) {
	for _, n := range []int{2, 5, 10, 50} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			c, _ := NewRawAdmitter(Config{})
			_ = c.AddWorker(1, int64(n)*1000)
			for i := 0; i < n; i++ {
				if _, err := c.StartRequest(epoch, fmt.Sprint("p", i), 100); err != nil {
					t.Fatal(err)
				}
			}
			// Each program grows to 1000 tokens: U = 1.0.
			for i := 0; i < n; i++ {
				_ = c.EndRequest(epoch, fmt.Sprint("p", i), 1000, 0)
				_, _ = c.StartRequest(epoch, fmt.Sprint("p", i), 1000)
			}
			r := c.Tick(epoch.Add(5 * time.Second))
			// Need (n − 0.8n) programs' worth freed: ceil(0.2n).
			want := (2*n + 9) / 10
			if r.Marked != want || r.Paused != 0 {
				t.Fatalf("marked %d paused %d, want %d marked (upstream marks all %d)", r.Marked, r.Paused, want, n)
			}
			if r2 := c.Tick(epoch.Add(10 * time.Second)); r2.Marked != 0 {
				t.Fatalf("second tick marked %d more", r2.Marked)
			}
		})
	}
}

// marksPending reports whether some worker has programs marked to pause.
func (s *sim) marksPending() bool {
	for _, w := range s.ctl.workers {
		if w.marked > 0 {
			return true
		}
	}
	return false
}
