package admission

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time. The Admitter reads it for every call that does not
// take an explicit time; tests inject a fake one.
type Clock interface {
	Now() time.Time
}

// ClockFunc adapts a function to Clock.
type ClockFunc func() time.Time

// Now calls f.
func (f ClockFunc) Now() time.Time { return f() }

// Admitter is the thread-safe wrapper around a RawAdmitter: every method may
// be called from any goroutine. It adds the blocking Admit and the
// non-blocking TryAdmit, and delivers decisions to Config.OnDecision outside
// its lock, one at a time and in Seq order (a callback may call back into
// the Admitter; decisions it causes are delivered after it returns).
type Admitter struct {
	clock Clock
	user  func(Decision)

	mu sync.Mutex // guards ctl, waiters, queue, delivering
	// ctl is the state machine; only touched with mu held.
	ctl *RawAdmitter
	// waiters maps a program to the channel closed when its held turn is
	// released (resumed), dropped (terminated) or cancelled.
	waiters map[string]*waiter
	// queue holds decisions not yet delivered to user, in Seq order.
	queue []Decision
	// delivering is set while some goroutine is delivering queue.
	delivering bool
}

type waiter struct {
	ch  chan struct{}
	d   Decision // the releasing decision
	n   int      // goroutines waiting on it
	set bool
}

// New returns an Admitter over a new RawAdmitter with cfg. clock may be nil
// (time.Now).
func New(cfg Config, clock Clock) (*Admitter, error) {
	a := &Admitter{clock: clock, user: cfg.OnDecision, waiters: make(map[string]*waiter)}
	if a.clock == nil {
		a.clock = ClockFunc(time.Now)
	}
	cfg.OnDecision = a.sink
	ctl, err := NewRawAdmitter(cfg)
	if err != nil {
		return nil, err
	}
	a.ctl = ctl
	return a, nil
}

// sink runs inside RawAdmitter calls, with mu held.
func (a *Admitter) sink(d Decision) {
	switch d.Kind {
	case KindResume, KindTerminate: // not KindCancel: the canceller has left
		if d.Released {
			if w, ok := a.waiters[d.Program]; ok && !w.set {
				w.set, w.d = true, d
				close(w.ch)
				delete(a.waiters, d.Program)
			}
		}
	}
	if a.user != nil {
		a.queue = append(a.queue, d)
	}
}

// unlockAndDeliver releases mu and delivers queued decisions unless another
// goroutine is already doing so (it will pick ours up).
func (a *Admitter) unlockAndDeliver() {
	if a.user == nil || a.delivering || len(a.queue) == 0 {
		a.mu.Unlock()
		return
	}
	a.delivering = true
	for len(a.queue) > 0 {
		batch := a.queue
		a.queue = nil
		a.mu.Unlock()
		for _, d := range batch {
			a.user(d)
		}
		a.mu.Lock()
	}
	a.delivering = false
	a.mu.Unlock()
}

// Admit starts a turn of session id and blocks until it may run: at once
// for an Active program, or when a Tick resumes it. It returns ctx.Err() if
// ctx ends first, with the held turn withdrawn and the program's state as
// it was (a queued new program that never ran is forgotten). It returns ErrTerminated if
// the session ends while the turn is held. If several goroutines hold turns
// of one program, all are released together.
func (a *Admitter) Admit(ctx context.Context, id string, promptTokens int64) (Admission, error) {
	if err := ctx.Err(); err != nil {
		return Admission{}, err
	}
	a.mu.Lock()
	adm, err := a.ctl.StartRequest(a.clock.Now(), id, promptTokens)
	if err != nil || adm.Run {
		a.unlockAndDeliver()
		return adm, err
	}
	w := a.waiters[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		a.waiters[id] = w
	}
	w.n++
	a.unlockAndDeliver()

	select {
	case <-w.ch:
		return released(w.d)
	case <-ctx.Done():
	}
	a.mu.Lock()
	if w.set { // released while we were giving up: take the turn
		a.mu.Unlock()
		return released(w.d)
	}
	w.n--
	if w.n == 0 {
		delete(a.waiters, id)
	}
	_ = a.ctl.Cancel(a.clock.Now(), id)
	a.unlockAndDeliver()
	return Admission{}, ctx.Err()
}

// released is the outcome of a held Admit that decision d (Released, set
// by sink) ended.
func released(d Decision) (Admission, error) {
	if a, ok := d.Grant(); ok {
		return a, nil
	}
	return Admission{}, ErrTerminated
}

// TryAdmit starts a turn of session id only if it may run now; otherwise it
// changes nothing and returns ErrWouldWait with the Status the turn would
// wait in.
func (a *Admitter) TryAdmit(id string, promptTokens int64) (Admission, error) {
	a.mu.Lock()
	st := a.ctl.Status(id)
	if st == StatusUnknown {
		need := a.ctl.grownSize(promptTokens) + a.ctl.cfg.Buffer // as StartRequest sizes it
		if a.ctl.nWaiting > 0 || a.ctl.leastUtilisedWithRoom(need, a.ctl.cfg.maxWait() > 0) == nil {
			a.mu.Unlock()
			return Admission{Status: StatusQueued}, ErrWouldWait
		}
	} else if st != StatusRunnable {
		a.mu.Unlock()
		return Admission{Status: st}, ErrWouldWait
	}
	adm, err := a.ctl.StartRequest(a.clock.Now(), id, promptTokens)
	a.unlockAndDeliver()
	return adm, err
}

// EndRequest records the end of a turn with the engine-reported usage.
func (a *Admitter) EndRequest(id string, promptTokens, completionTokens int64) error {
	a.mu.Lock()
	err := a.ctl.EndRequest(a.clock.Now(), id, promptTokens, completionTokens)
	a.unlockAndDeliver()
	return err
}

// EndSession terminates a session; a blocked Admit for it returns
// ErrTerminated.
func (a *Admitter) EndSession(id string) error {
	a.mu.Lock()
	err := a.ctl.EndSession(a.clock.Now(), id)
	a.unlockAndDeliver()
	return err
}

// Tick runs one control-loop round at now (see RawAdmitter.Tick).
func (a *Admitter) Tick(now time.Time) TickResult {
	a.mu.Lock()
	r := a.ctl.Tick(now)
	a.unlockAndDeliver()
	return r
}

// Run calls Tick with each time received from ticks (e.g. a time.Ticker's
// channel) until ctx ends or ticks is closed; it returns ctx.Err() or nil.
func (a *Admitter) Run(ctx context.Context, ticks <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case t, ok := <-ticks:
			if !ok {
				return nil
			}
			a.Tick(t)
		}
	}
}

// AddWorker adds a worker (see RawAdmitter.AddWorker).
func (a *Admitter) AddWorker(id WorkerID, capacity int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.AddWorker(id, capacity)
}

// SetCapacity updates a worker's capacity.
func (a *Admitter) SetCapacity(id WorkerID, capacity int64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.SetCapacity(id, capacity)
}

// SetEngineUsage records the KV a worker's engine reports in use (see
// RawAdmitter.SetEngineUsage).
func (a *Admitter) SetEngineUsage(id WorkerID, tokens int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctl.SetEngineUsage(id, tokens)
}

// RemoveWorker removes a worker, pausing its programs.
func (a *Admitter) RemoveWorker(id WorkerID) error {
	a.mu.Lock()
	err := a.ctl.RemoveWorker(a.clock.Now(), id)
	a.unlockAndDeliver()
	return err
}

// Status says whether a program's next turn may run now.
func (a *Admitter) Status(id string) Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.Status(id)
}

// Program returns a snapshot of one program.
func (a *Admitter) Program(id string) (Program, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.Program(a.clock.Now(), id)
}

// Workers appends a snapshot of every worker to dst.
func (a *Admitter) Workers(dst []WorkerInfo) []WorkerInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.Workers(dst)
}

// Stats returns the decision counters.
func (a *Admitter) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ctl.Stats()
}
