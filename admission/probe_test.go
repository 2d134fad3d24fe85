package admission

import (
	"fmt"
	"testing"
	"time"
)

// probeConfig is one 100 K-token worker's admission with Door.Probe.
func probeConfig() Config {
	return Config{
		Waits: &Waits{MaxWait: 3 * time.Minute},
		Door:  &Door{Probe: &Probe{After: 30 * time.Second, Burst: 4, Share: 0.2, Tail: 3000}},
	}
}

// probeDecisions returns the probe decisions among ds.
func probeDecisions(ds []Decision) []Decision {
	var out []Decision
	for _, d := range ds {
		if d.Reason == ReasonProbe {
			out = append(out, d)
		}
	}
	return out
}

// probeBatch is a controller with probeConfig and one 100 K-token worker,
// offered programs p0, p1, ... of the given sizes, gap apart.
func probeBatch(t *testing.T, gap time.Duration, tokens ...int64) *RawAdmitter {
	t.Helper()
	c, err := NewRawAdmitter(probeConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddWorker(0, 100_000); err != nil {
		t.Fatal(err)
	}
	for i, n := range tokens {
		if _, err := c.StartRequest(epoch.Add(time.Duration(i)*gap), fmt.Sprint("p", i), n); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// letIn lists the programs ds let in at the door (resumed, not probed).
func letIn(ds []Decision) []string {
	var in []string
	for _, d := range ds {
		if d.Kind == KindResume && d.Reason != ReasonProbe {
			in = append(in, d.Program)
		}
	}
	return in
}

// sizes is n programs of tokens each.
func sizes(n int, tokens int64) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = tokens
	}
	return s
}

// TestProbeBatch follows a batch of eight programs offered at once to a
// worker with room for four: the door probes the first one waiting once
// it has waited After, one probe at a time since one fills Share of the
// room; the probed program stays in line, runs its later turn at once
// while its tail is under Tail and waits at the door once it is not,
// where it is first in line: the door lets it in before the programs
// offered with it after it.
func TestProbeBatch(t *testing.T) {
	c, err := NewRawAdmitter(probeConfig())
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string) {
		t.Helper()
		if err := checkInvariants(c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	if err := c.AddWorker(0, 100_000); err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for i := range 8 {
		a, err := c.StartRequest(at(0), fmt.Sprint("p", i), 15_000)
		if err != nil {
			t.Fatal(err)
		}
		if a.Run != (i < 5) {
			t.Fatalf("p%d: run %v, want the first five to run", i, a.Run)
		}
	}
	check("offer")
	c.Drain(nil)

	c.Tick(at(10 * time.Second))
	if p := probeDecisions(c.Drain(nil)); len(p) != 0 {
		t.Fatalf("probes before After: %+v", p)
	}
	c.Tick(at(30 * time.Second))
	p := probeDecisions(c.Drain(nil))
	if len(p) != 1 || p[0].Program != "p5" || p[0].Kind != KindResume || !p[0].Released || !p[0].HasWorker {
		t.Fatalf("probes at After: %+v, want p5's turn released alone (two probes are over 0.2 of the room)", p)
	}
	if st := c.Status("p5"); st != StatusQueued {
		t.Fatalf("probed p5: %v, want it still queued at the door", st)
	}
	if w, _ := c.Worker(0); w.Used != 5*15_000+15_000 {
		t.Fatalf("worker used %v, want the five programs and the probe's 15 K", w.Used)
	}
	check("probe")

	// The probe ends with a small tail: its next turn runs at once.
	if err := c.EndRequest(at(40*time.Second), "p5", 2000, 500); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartRequest(at(50*time.Second), "p5", 2600)
	if err != nil || !a.Run || a.Reason != ReasonProbe {
		t.Fatalf("p5's second turn (tail 2.6 K ≤ 3 K): %+v %v, want it to run as a probe", a, err)
	}
	check("lane")
	// The next Tick probes no more: p6's 15 K with p5's 2.6 K is over the
	// share.
	c.Tick(at(55 * time.Second))
	if p := probeDecisions(c.Drain(nil)); len(p) != 1 || p[0].Program != "p5" || p[0].Kind != KindAdmit {
		t.Fatalf("probes while p5's turn runs: %+v, want only p5's own", p)
	}
	if err := c.EndRequest(at(60*time.Second), "p5", 2600, 900); err != nil {
		t.Fatal(err)
	}
	// Its tail is over Tail now: the turn waits at the door.
	if a, err := c.StartRequest(at(65*time.Second), "p5", 3600); err != nil || a.Run {
		t.Fatalf("p5's third turn (tail 3.6 K > 3 K): %+v %v, want it held", a, err)
	}
	// The next Tick lets p5 in at the door (its held turn is first in
	// line, by first offer, and fits), and probes p6, next in line.
	c.Tick(at(70 * time.Second))
	var in, probed []string
	for _, d := range c.Drain(nil) {
		switch {
		case d.Reason == ReasonProbe:
			probed = append(probed, d.Program)
		case d.Kind == KindResume && d.Released:
			in = append(in, d.Program)
		}
	}
	if fmt.Sprint(in, probed) != "[p5] [p6]" {
		t.Fatalf("let in %v, probed %v; want p5 let in and p6 probed", in, probed)
	}
	if st := c.Status("p5"); st != StatusRunnable {
		t.Fatalf("p5 after the door: %v", st)
	}
	check("door")
	// p6's probe ends: its tokens stop counting.
	if err := c.EndRequest(at(90*time.Second), "p6", 15_000, 100); err != nil {
		t.Fatal(err)
	}
	if w, _ := c.Worker(0); w.Used != 5*15_000+3600 {
		t.Fatalf("worker used %v after p6's probe, want p0..p4 and p5", w.Used)
	}
	check("p6's probe ended")
	if s := c.Stats(); s.Probed != 3 {
		t.Fatalf("Stats.Probed %d, want 3 (p5 twice, p6)", s.Probed)
	}
}

// TestProbeNeedsBurst: programs offered apart, as a closed loop refills,
// are never probed however long they wait; the same programs offered
// together are.
func TestProbeNeedsBurst(t *testing.T) {
	for _, gap := range []time.Duration{0, 2 * time.Second} {
		c := probeBatch(t, gap, sizes(8, 15_000)...)
		var probes int
		for k := 1; k <= 20; k++ {
			c.Tick(epoch.Add(time.Duration(k) * 10 * time.Second))
			probes += len(probeDecisions(c.Drain(nil)))
		}
		if want := gap == 0; (probes > 0) != want {
			t.Errorf("offered %v apart: %d probes, want probes %v", gap, probes, want)
		}
		if err := checkInvariants(c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProbeCancelKeepsProgram: withdrawing the held turn of a program
// that has run a probe keeps the program (and its place at the door); a
// queued program that never ran is forgotten, as before.
func TestProbeCancelKeepsProgram(t *testing.T) {
	c := probeBatch(t, 0, sizes(7, 15_000)...)
	c.Tick(epoch.Add(30 * time.Second)) // probes p5 (p6 would take over the share)
	if err := c.EndRequest(epoch.Add(40*time.Second), "p5", 15_000, 500); err != nil {
		t.Fatal(err)
	}
	if a, _ := c.StartRequest(epoch.Add(50*time.Second), "p5", 16_000); a.Run {
		t.Fatal("p5's second turn ran; its tail is over Tail")
	}
	if err := c.Cancel(epoch.Add(55*time.Second), "p5"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(epoch.Add(55*time.Second), "p6"); err != nil {
		t.Fatal(err)
	}
	if st := c.Status("p5"); st != StatusQueued {
		t.Errorf("p5 after its cancel: %v, want still at the door", st)
	}
	if st := c.Status("p6"); st != StatusUnknown {
		t.Errorf("p6 after its cancel: %v, want forgotten", st)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

func TestProbeConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		p     Probe
		field string
	}{
		{Probe{Burst: 1, Share: 0.2}, "Door.Probe.After"},
		{Probe{After: time.Second, Share: 0.2}, "Door.Probe.Burst"},
		{Probe{After: time.Second, Burst: 1}, "Door.Probe.Share"},
		{Probe{After: time.Second, Burst: 1, Share: 1.5}, "Door.Probe.Share"},
		{Probe{After: time.Second, Burst: 1, Share: 0.2, Tail: -1}, "Door.Probe.Tail"},
		{Probe{After: time.Second, Burst: 1, Share: 0.2, Queue: -1}, "Door.Probe.Queue"},
		{Probe{After: time.Second, Burst: 1, Share: 0.2, Siblings: -time.Second}, "Door.Probe.Siblings"},
	} {
		p := tc.p
		_, err := NewRawAdmitter(Config{Door: &Door{Probe: &p}})
		ce, ok := err.(*ConfigError)
		if !ok || ce.Field != tc.field {
			t.Errorf("%+v: %v, want a ConfigError on %s", tc.p, err, tc.field)
		}
	}
}

// TestProbeKeepsUnderThreshold: a probe that would take a worker past
// PauseThreshold does not run, so that no program is paused or marked
// for it; a smaller one behind it in line that fits does.
func TestProbeKeepsUnderThreshold(t *testing.T) {
	c := probeBatch(t, 0, append(sizes(6, 16_000), 10_000)...)
	c.Tick(epoch.Add(30 * time.Second)) // 80 K used: p5's 16 K is over 0.95, p6's 10 K is not
	var probed []string
	for _, d := range c.Drain(nil) {
		if d.Kind == KindPause || d.Kind == KindMark {
			t.Fatalf("%v %v %s", d.Kind, d.Reason, d.Program)
		}
		if d.Reason == ReasonProbe {
			probed = append(probed, d.Program)
		}
	}
	if fmt.Sprint(probed) != "[p6]" {
		t.Fatalf("probed %v, want [p6]", probed)
	}
	if st := c.Status("p5"); st != StatusQueued {
		t.Fatalf("p5: %v", st)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestProbeResumedWhileRunning: a probed program whose next turn arrives
// while its probe still runs, and which the door then lets in, counts
// its tokens once: the probe's stop counting when it is let in, and its
// end changes nothing more.
func TestProbeResumedWhileRunning(t *testing.T) {
	c := probeBatch(t, 0, sizes(6, 15_000)...)
	c.Tick(epoch.Add(30 * time.Second)) // probes p5
	if a, err := c.StartRequest(epoch.Add(35*time.Second), "p5", 15_000); err != nil || a.Run {
		t.Fatalf("p5's second turn while its probe runs: %+v %v, want it held", a, err)
	}
	for _, id := range []string{"p0", "p1"} { // room for p5 beside its running probe
		if err := c.EndSession(epoch.Add(40*time.Second), id); err != nil {
			t.Fatal(err)
		}
	}
	c.Tick(epoch.Add(45 * time.Second))
	if st := c.Status("p5"); st != StatusRunnable {
		t.Fatalf("p5: %v, want let in", st)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
	if w, _ := c.Worker(0); w.Used != 4*15_000 {
		t.Fatalf("used %v, want p2..p5, p5 once", w.Used)
	}
	if err := c.EndRequest(epoch.Add(50*time.Second), "p5", 15_000, 100); err != nil {
		t.Fatal(err)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestProbeYieldsToHeldTurns: once a held turn of a placed program is
// due to be swapped in (a Tick and a turn ahead of MaxWait), no probe
// starts (a swap can pause programs to make room for it, but not a
// probe); before that, probes run beside it.
func TestProbeYieldsToHeldTurns(t *testing.T) {
	c := probeBatch(t, 0, sizes(7, 15_000)...)
	// p0 and p1 grow past the pause threshold; the tick pauses Acting
	// programs, and p2's next turn, too large for the room, waits.
	for i := range 5 {
		total := int64(15_000)
		if i < 2 {
			total = 27_000
		}
		if err := c.EndRequest(epoch.Add(5*time.Second), fmt.Sprint("p", i), total, 0); err != nil {
			t.Fatal(err)
		}
	}
	c.Tick(epoch.Add(10 * time.Second))
	if st := c.Status("p2"); st != StatusPaused {
		t.Fatalf("p2 after the pause pass: %v, want paused", st)
	}
	if a, err := c.StartRequest(epoch.Add(15*time.Second), "p2", 60_000); err != nil || a.Run {
		t.Fatalf("p2's 60 K turn: %+v %v, want it held", a, err)
	}
	// The others run turns: a swap can only mark them.
	for _, id := range []string{"p0", "p1", "p4"} {
		if a, err := c.StartRequest(epoch.Add(20*time.Second), id, 0); err != nil || !a.Run {
			t.Fatalf("%s's turn: %+v %v", id, a, err)
		}
	}
	c.Drain(nil)
	c.Tick(epoch.Add(30 * time.Second))
	if p := probeDecisions(c.Drain(nil)); len(p) != 1 || p[0].Program != "p5" {
		t.Fatalf("probes 15 s into p2's wait: %+v, want p5's", p)
	}
	if err := c.EndRequest(epoch.Add(40*time.Second), "p5", 2000, 0); err != nil {
		t.Fatal(err)
	}
	if st := c.Status("p2"); st != StatusHeld {
		t.Fatalf("p2: %v, want still held", st)
	}
	// p2 has waited 3 minutes less a Tick: its swap is due. p5's small
	// next turn would run as a probe; it waits instead.
	due := 15*time.Second + c.swapDueAfter()
	if a, err := c.StartRequest(epoch.Add(due), "p5", 2500); err != nil || a.Run {
		t.Fatalf("p5's turn with p2's swap due: %+v %v, want it held", a, err)
	}
	// Nor does the Tick that finds the swap due probe p6, though it has
	// waited at the door all along and there is room for it.
	c.Tick(epoch.Add(due))
	if p := probeDecisions(c.Drain(nil)); len(p) != 0 {
		t.Fatalf("probes with p2's swap due: %+v", p)
	}
	if st := c.Status("p2"); st != StatusHeld {
		t.Fatalf("p2: %v, want still held (its swap marks the running programs)", st)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestProbeSubagent: a subagent started by a probed program that waits at
// the door runs at once as a probe, though its tail is over Tail (its
// parent waits for it); one that finds no probe room takes its parent's
// place in line, ahead of a program offered after the parent.
func TestProbeSubagent(t *testing.T) {
	// One burst, offered 0.1 s apart.
	c := probeBatch(t, 100*time.Millisecond, sizes(7, 15_000)...)
	c.Tick(epoch.Add(31 * time.Second)) // probes p5
	if err := c.EndRequest(epoch.Add(35*time.Second), "p5", 2000, 0); err != nil {
		t.Fatal(err)
	}
	a, err := c.StartSubRequest(epoch.Add(40*time.Second), "p5/a", "p5", 5000, nil)
	if err != nil || !a.Run || a.Reason != ReasonProbe {
		t.Fatalf("p5's subagent: %+v %v, want it run at once as a probe", a, err)
	}
	// 16 K more is over the probes' share while p5/a runs: it waits, in
	// p5's place.
	if a, err := c.StartSubRequest(epoch.Add(41*time.Second), "p5/b", "p5", 16_000, nil); err != nil || a.Run {
		t.Fatalf("p5's second subagent: %+v %v, want it queued", a, err)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
	c.Drain(nil)
	if err := c.EndSession(epoch.Add(50*time.Second), "p0"); err != nil {
		t.Fatal(err)
	}
	c.Tick(epoch.Add(55 * time.Second))
	in := letIn(c.Drain(nil))
	if fmt.Sprint(in) != "[p5/b]" {
		t.Fatalf("let in at the door: %v, want p5/b (offered as p5, before p6)", in)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestProbeStartedFirst: at the door a program that has started (run a
// probe) goes before one offered earlier that has not: p6, probed, is let
// in ahead of p5, which no probe could take.
func TestProbeStartedFirst(t *testing.T) {
	c := probeBatch(t, 100*time.Millisecond, append(sizes(5, 15_000), 25_000, 10_000)...)
	c.Tick(epoch.Add(31 * time.Second)) // p5's 25 K would pass the pause threshold; p6 probes
	if p := probeDecisions(c.Drain(nil)); len(p) != 1 || p[0].Program != "p6" {
		t.Fatalf("probes: %+v, want p6's", p)
	}
	if err := c.EndRequest(epoch.Add(35*time.Second), "p6", 5000, 0); err != nil {
		t.Fatal(err)
	}
	if a, err := c.StartRequest(epoch.Add(36*time.Second), "p6", 5500); err != nil || a.Run {
		t.Fatalf("p6's second turn (tail over Tail): %+v %v, want it held", a, err)
	}
	if err := c.EndSession(epoch.Add(40*time.Second), "p0"); err != nil {
		t.Fatal(err)
	}
	c.Tick(epoch.Add(45 * time.Second)) // room for p6, not for p5
	in := letIn(c.Drain(nil))
	if fmt.Sprint(in) != "[p6]" {
		t.Fatalf("let in at the door: %v, want p6 (started) ahead of p5", in)
	}
	if err := checkInvariants(c); err != nil {
		t.Fatal(err)
	}
}

// TestProbeQueueCharge: while more than Queue programs a worker wait at
// the door, a probe counts against Share as its unique tail; with a
// queue no deeper than that, or Queue 0, as its whole context. The probe's
// charge is what counts on the worker until it ends.
func TestProbeQueueCharge(t *testing.T) {
	for _, tc := range []struct {
		queue int
		want  int64
	}{{0, 15_000}, {3, 15_000}, {2, 3000}, {1, 3000}} {
		cfg := probeConfig()
		cfg.Door.Probe.Queue = tc.queue
		c, err := NewRawAdmitter(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AddWorker(0, 100_000); err != nil {
			t.Fatal(err)
		}
		for i := range 8 { // five run, three wait at the door
			if _, err := c.StartRequest(epoch, fmt.Sprint("p", i), 15_000); err != nil {
				t.Fatal(err)
			}
		}
		if c.nWaiting != 3 {
			t.Fatalf("%d programs wait at the door, want 3", c.nWaiting)
		}
		if err := c.SetShared("p5", 12_000, 7); err != nil { // a 12 K system prompt
			t.Fatal(err)
		}
		p := c.progs["p5"]
		if got := c.probeCharge(p); got != tc.want {
			t.Fatalf("Queue %d, 3 waiting: charge %d, want %d", tc.queue, got, tc.want)
		}
		w := c.workers[0]
		if !c.probeFits(p, w) && tc.want == 3000 {
			t.Fatalf("Queue %d: p5's probe does not fit at %d", tc.queue, tc.want)
		}
		c.emit(c.runProbe(epoch.Add(30*time.Second), p, w))
		if w.probing != tc.want || p.probeN != tc.want {
			t.Fatalf("Queue %d: probing %d, want p5 counted as %d", tc.queue, w.probing, tc.want)
		}
		c.endProbe(p)
		if w.probing != 0 || w.probes != 0 {
			t.Fatalf("Queue %d: after the probe's end probing %d in %d probes", tc.queue, w.probing, w.probes)
		}
		if err := checkInvariants(c); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProbeSiblings: once a program has been in one tool call for
// Door.Probe.Siblings, its siblings (programs whose first prompts share
// its first prefix's key) that have not started probe before the programs
// offered ahead of them, charged their prompt past the shared prefix; not
// before it has, not when the key is shared by more than a quarter of the
// programs with one (a prefix every program shares), not while it runs a
// turn, and not with Siblings 0.
func TestProbeSiblings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		siblings time.Duration
		at       time.Duration // the probe pass, p0's turn having ended at 1 s
		shared   bool          // q0..q2 share p0's key too
		running  bool          // p0 runs its next turn from 2 s
		want     string
		charge   int64
	}{
		{"long", 90 * time.Second, 91 * time.Second, false, false, "s0", 3000},
		{"not yet", 90 * time.Second, 60 * time.Second, false, false, "q0", 15_000},
		{"no group", 90 * time.Second, 91 * time.Second, true, false, "q0", 15_000},
		{"running", 90 * time.Second, 91 * time.Second, false, true, "q0", 15_000},
		{"off", 0, 91 * time.Second, false, false, "q0", 15_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := probeConfig()
			cfg.Door.Probe.Siblings = tc.siblings
			c, err := NewRawAdmitter(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.AddWorker(0, 100_000); err != nil {
				t.Fatal(err)
			}
			// p0..p4 run; q0, q1, q2 and s0 wait at the door, in that order.
			keys := map[string]uint64{"p0": 7, "p1": 1, "p2": 2, "p3": 3, "p4": 4, "q0": 5, "q1": 6, "q2": 8, "s0": 7}
			if tc.shared {
				keys["q0"], keys["q1"], keys["q2"] = 7, 7, 7
			}
			for i, id := range []string{"p0", "p1", "p2", "p3", "p4", "q0", "q1", "q2", "s0"} {
				at := epoch.Add(time.Duration(i) * time.Millisecond)
				if _, err := c.StartRequest(at, id, 15_000); err != nil {
					t.Fatal(err)
				}
				if err := c.SetFirstPrefix(id, 12_000, keys[id]); err != nil {
					t.Fatal(err)
				}
			}
			if c.nWaiting != 4 {
				t.Fatalf("%d programs wait at the door, want 4", c.nWaiting)
			}
			if err := c.EndRequest(epoch.Add(time.Second), "p0", 15_000, 200); err != nil {
				t.Fatal(err)
			}
			if tc.running {
				if a, err := c.StartRequest(epoch.Add(2*time.Second), "p0", 15_300); err != nil || !a.Run {
					t.Fatalf("p0's next turn: %+v %v", a, err)
				}
			}
			c.Drain(nil)
			c.Tick(epoch.Add(tc.at))
			p := probeDecisions(c.Drain(nil))
			if len(p) != 1 || p[0].Program != tc.want {
				t.Fatalf("probes %+v, want %s's alone", p, tc.want)
			}
			if got := c.progs[tc.want].probeN; got != tc.charge {
				t.Fatalf("%s's probe counts %d, want %d", tc.want, got, tc.charge)
			}
			if got, want := c.Stats().SiblingsFirst, uint64(map[bool]int{true: 1}[tc.want == "s0"]); got != want {
				t.Fatalf("Stats().SiblingsFirst = %d, want %d", got, want)
			}
			if err := checkInvariants(c); err != nil {
				t.Fatal(err)
			}
			if err := c.EndSession(epoch.Add(tc.at+time.Second), "p0"); err != nil {
				t.Fatal(err)
			}
			if err := checkInvariants(c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSetFirstPrefix: unknown programs and bad lengths are refused; a
// program's key moves it between groups, 0 takes it out, and its end drops
// it; a snapshot reports it.
func TestSetFirstPrefix(t *testing.T) {
	c, err := NewRawAdmitter(probeConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddWorker(0, 100_000); err != nil {
		t.Fatal(err)
	}
	if err := c.SetFirstPrefix("x", 10, 1); err != ErrUnknownProgram {
		t.Fatalf("unknown program: %v", err)
	}
	if _, err := c.StartRequest(epoch, "a", 1000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StartRequest(epoch, "b", 1000); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{-1, MaxTokens + 1} {
		if err := c.SetFirstPrefix("a", n, 1); err != ErrBadTokens {
			t.Fatalf("first prefix %d: %v", n, err)
		}
	}
	steps := []struct {
		id    string
		n     int64
		key   uint64
		sibs  map[uint64]int
		total int
	}{
		{"a", 500, 1, map[uint64]int{1: 1}, 1},
		{"b", 500, 1, map[uint64]int{1: 2}, 2},
		{"a", 600, 2, map[uint64]int{1: 1, 2: 1}, 2},
		{"b", 0, 9, map[uint64]int{2: 1}, 1},
	}
	for _, s := range steps {
		if err := c.SetFirstPrefix(s.id, s.n, s.key); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(c.sibs) != fmt.Sprint(s.sibs) || c.nSib != s.total {
			t.Fatalf("after %s %d/%d: groups %v (%d), want %v (%d)", s.id, s.n, s.key, c.sibs, c.nSib, s.sibs, s.total)
		}
		if err := checkInvariants(c); err != nil {
			t.Fatal(err)
		}
	}
	if p, _ := c.Program(epoch, "a"); p.FirstPrefix != 600 || p.SiblingKey != 2 {
		t.Fatalf("snapshot %+v, want first prefix 600, key 2", p)
	}
	if err := c.EndSession(epoch, "a"); err != nil {
		t.Fatal(err)
	}
	if len(c.sibs) != 0 || c.nSib != 0 {
		t.Fatalf("after a's end: groups %v (%d)", c.sibs, c.nSib)
	}
}
