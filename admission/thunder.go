package admission

import (
	"slices"
	"time"
)

// Thunder is ThunderAgent's policy, a RawAdmitter, behind the Policy
// surface: a request's Program is the controller's program, Admit starts
// its turn (Ready, or Defer while the program is paused or queued at the
// door), Completed ends it, Aborted withdraws it, Reconcile ticks, and the
// turns the controller releases wake the program's deferred requests in
// arrival order. The host's worker list is the controller's (synced on
// Admit and Reconcile); a turn dispatched to another worker than the
// controller chose moves its program there when it has room (Relocate).
// Requests without a Program bypass it. A program runs one turn at a
// time (per-session serialization, as Dynamo's ThunderAgent policy does):
// a request of a program with a turn in flight is deferred, and the
// program's later requests start in arrival order as each turn ends. Not
// safe for concurrent use, as every Policy.
type Thunder struct {
	ctl      *RawAdmitter
	program  map[string]string   // tracked request id → program
	deferred map[string][]string // program → its requests the controller holds, in order
	// inflight is each program's request started in the controller (running
	// or held there); serial its requests waiting behind it, in order.
	inflight map[string]string
	serial   map[string][]Request
	known    map[WorkerID]int64 // the workers synced into ctl, by capacity
	dec      []Decision
}

// NewThunder returns ThunderAgent's policy with cfg (see NewRawAdmitter).
// cfg.OnDecision must be nil: Thunder drains the decisions itself.
func NewThunder(cfg Config) (*Thunder, error) {
	if cfg.OnDecision != nil {
		return nil, &ConfigError{"OnDecision", "must be nil for Thunder"}
	}
	c, err := NewRawAdmitter(cfg)
	if err != nil {
		return nil, err
	}
	return &Thunder{
		ctl: c, program: map[string]string{}, deferred: map[string][]string{},
		inflight: map[string]string{}, serial: map[string][]Request{}, known: map[WorkerID]int64{},
	}, nil
}

// Controller returns the RawAdmitter behind the policy, for inspection
// (Programs, Workers, Stats); calling its event methods bypasses Thunder.
func (t *Thunder) Controller() *RawAdmitter { return t.ctl }

// Admit implements Policy.
func (t *Thunder) Admit(req Request) Verdict {
	if req.Program == "" {
		return Bypass
	}
	t.sync(req)
	if req.ContextTokens < 0 || req.ContextTokens > MaxTokens {
		return Bypass // bad input: not tracked
	}
	t.program[req.ID] = req.Program
	if _, busy := t.inflight[req.Program]; busy {
		req.Workers = nil
		t.serial[req.Program] = append(t.serial[req.Program], req)
		return Defer
	}
	return t.start(req)
}

// start starts req's turn in the controller: Ready, or Defer until the
// controller releases the program.
func (t *Thunder) start(req Request) Verdict {
	t.inflight[req.Program] = req.ID
	a, err := t.ctl.StartRequest(req.At, req.Program, req.ContextTokens)
	if err == nil && !a.Run {
		t.deferred[req.Program] = append(t.deferred[req.Program], req.ID)
		return Defer
	}
	return Ready
}

// next starts the program's next serialized request, if any, after its
// turn in flight ended at now; a Ready one is woken at once.
func (t *Thunder) next(prog string, now time.Time, wake []string) []string {
	delete(t.inflight, prog)
	q := t.serial[prog]
	if len(q) == 0 {
		return wake
	}
	req := q[0]
	if len(q) == 1 {
		delete(t.serial, prog)
	} else {
		t.serial[prog] = q[1:]
	}
	req.At = now
	if t.start(req) == Ready {
		wake = append(wake, req.ID)
	}
	return wake
}

// OnEvent implements Policy.
func (t *Thunder) OnEvent(ev Event, wake []string) []string {
	switch ev.Kind {
	case Reconcile:
		t.sync(Request{At: ev.At, Workers: ev.Workers})
		t.ctl.Tick(ev.At)
		return t.wake(wake)
	}
	prog, ok := t.program[ev.ID]
	if !ok {
		return wake
	}
	switch ev.Kind {
	case Dispatched:
		if p, ok := t.ctl.Program(ev.At, prog); ok && p.HasWorker && p.Worker != ev.Worker {
			t.ctl.Relocate(ev.At, prog, []WorkerID{ev.Worker})
		}
	case Completed:
		delete(t.program, ev.ID)
		_ = t.ctl.EndRequest(ev.At, prog, ev.ContextTokens, 0)
		if ev.Final {
			_ = t.ctl.EndSession(ev.At, prog)
		}
		wake = t.next(prog, ev.At, wake)
	case Aborted:
		delete(t.program, ev.ID)
		switch {
		case t.inflight[prog] != ev.ID: // waiting behind the turn in flight
			t.serial[prog] = slices.DeleteFunc(t.serial[prog], func(r Request) bool { return r.ID == ev.ID })
			if len(t.serial[prog]) == 0 {
				delete(t.serial, prog)
			}
		case slices.Contains(t.deferred[prog], ev.ID):
			t.unlink(prog, ev.ID)
			_ = t.ctl.Cancel(ev.At, prog)
			wake = t.next(prog, ev.At, wake)
		default:
			_ = t.ctl.EndRequest(ev.At, prog, 0, 0)
			wake = t.next(prog, ev.At, wake)
		}
	}
	return t.wake(wake)
}

// wake appends the deferred requests of the programs whose turns the
// controller released (or terminated: the host then finds them refused
// by nothing and runs them, which is the forced resume's outcome).
func (t *Thunder) wake(dst []string) []string {
	t.dec = t.ctl.Drain(t.dec[:0])
	for _, d := range t.dec {
		if !d.Released || d.Kind == KindCancel {
			continue
		}
		ids := t.deferred[d.Program]
		if len(ids) == 0 {
			continue
		}
		delete(t.deferred, d.Program)
		dst = append(dst, ids...)
	}
	return dst
}

func (t *Thunder) unlink(prog, id string) {
	ids := slices.DeleteFunc(t.deferred[prog], func(s string) bool { return s == id })
	if len(ids) == 0 {
		delete(t.deferred, prog)
	} else {
		t.deferred[prog] = ids
	}
}

// sync makes the controller's workers the host's: new ones added, changed
// capacities set, missing ones removed (their programs paused).
func (t *Thunder) sync(req Request) {
	if len(req.Workers) == 0 && len(t.known) == 0 {
		return
	}
	capOf := func(w PolicyWorker) int64 { return min(max(w.Capacity, 1), MaxTokens) }
	same := len(req.Workers) == len(t.known)
	for _, w := range req.Workers {
		if c, ok := t.known[w.ID]; !ok || c != capOf(w) {
			same = false
			break
		}
	}
	if same {
		return
	}
	seen := make(map[WorkerID]bool, len(req.Workers))
	for _, w := range req.Workers {
		c := capOf(w)
		seen[w.ID] = true
		if old, ok := t.known[w.ID]; !ok {
			if t.ctl.AddWorker(w.ID, c) == nil {
				t.known[w.ID] = c
			}
		} else if old != c && t.ctl.SetCapacity(w.ID, c) == nil {
			t.known[w.ID] = c
		}
	}
	var gone []WorkerID
	for id := range t.known {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone) // a reproducible order of decisions
	for _, id := range gone {
		_ = t.ctl.RemoveWorker(req.At, id)
		delete(t.known, id)
	}
}
