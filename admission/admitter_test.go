package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a manually advanced clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

func newTestAdmitter(t *testing.T, cfg Config, caps ...int64) (*Admitter, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: epoch}
	a, err := New(cfg, clk)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range caps {
		if err := a.AddWorker(WorkerID(i+1), c); err != nil {
			t.Fatal(err)
		}
	}
	return a, clk
}

func TestAdmitBlocksUntilResume(t *testing.T) {
	a, clk := newTestAdmitter(t, Config{}, 1000)
	if adm, err := a.Admit(context.Background(), "hog", 700); err != nil || !adm.Run {
		t.Fatalf("hog: %+v %v", adm, err)
	}
	got := make(chan Admission, 1)
	errc := make(chan error, 1)
	go func() {
		adm, err := a.Admit(context.Background(), "late", 300)
		got <- adm
		errc <- err
	}()
	// Wait (without sleeping) until the turn is queued.
	for a.Status("late") != StatusQueued {
		runtimeGosched()
	}
	if err := a.EndSession("hog"); err != nil {
		t.Fatal(err)
	}
	a.Tick(clk.Advance(5 * time.Second))
	adm := <-got
	if err := <-errc; err != nil || !adm.Run || adm.Worker != 1 || adm.Priority != DefaultResumeBoost {
		t.Fatalf("released admission %+v %v", adm, err)
	}
}

func TestAdmitContextCancelRestoresState(t *testing.T) {
	a, clk := newTestAdmitter(t, Config{}, 1000)
	_, _ = a.Admit(context.Background(), "hog", 700)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Admit(ctx, "x", 100)
		done <- err
	}()
	for a.Status("x") != StatusQueued {
		runtimeGosched()
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if st := a.Status("x"); st != StatusUnknown {
		t.Fatalf("status after cancel %v, want unknown (state unchanged)", st)
	}
	if a.ctl.Waiting() != 0 {
		t.Fatalf("waiting %d", a.ctl.Waiting())
	}
	// Already-cancelled context: no state change at all.
	if _, err := a.Admit(ctx, "y", 1); !errors.Is(err, context.Canceled) || a.Status("y") != StatusUnknown {
		t.Fatalf("pre-cancelled Admit: %v %v", err, a.Status("y"))
	}
	// A paused program: the held turn is withdrawn, the program stays paused
	// with its step count unchanged. (A companion program keeps hog from
	// being its worker's only program, which is never paused.)
	if adm, err := a.TryAdmit("mate", 10); err != nil || !adm.Run {
		t.Fatalf("mate: %+v %v", adm, err)
	}
	_ = a.EndRequest("hog", 990, 0)
	a.Tick(clk.Advance(5 * time.Second))
	if a.Status("hog") != StatusPaused {
		t.Fatalf("hog %v", a.Status("hog"))
	}
	before, _ := a.Program("hog")
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() {
		_, err := a.Admit(ctx2, "hog", 0)
		done <- err
	}()
	for a.Status("hog") != StatusHeld {
		runtimeGosched()
	}
	cancel2()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	after, _ := a.Program("hog")
	if before != after {
		t.Fatalf("state changed by a cancelled Admit:\n%+v\n%+v", before, after)
	}
}

func TestAdmitTerminatedWhileHeld(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{}, 1000)
	if adm, err := a.Admit(context.Background(), "hog", 700); err != nil || !adm.Run {
		t.Fatalf("hog: %+v %v", adm, err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Admit(context.Background(), "x", 500)
		done <- err
	}()
	for a.Status("x") != StatusQueued {
		runtimeGosched()
	}
	_ = a.EndSession("x")
	if err := <-done; !errors.Is(err, ErrTerminated) {
		t.Fatalf("err %v, want ErrTerminated", err)
	}
}

func TestTryAdmit(t *testing.T) {
	a, _ := newTestAdmitter(t, Config{}, 1000)
	tests := []struct {
		id     string
		tokens int64
		run    bool
		status Status
	}{
		{"a", 600, true, StatusRunnable},
		{"b", 200, false, StatusQueued}, // 600+300 > 850: would queue; nothing changes
		{"a", 0, true, StatusRunnable},  // active program: runs
		{"c", 100, true, StatusRunnable},
	}
	for _, tc := range tests {
		adm, err := a.TryAdmit(tc.id, tc.tokens)
		if tc.run != (err == nil) || adm.Status != tc.status {
			t.Fatalf("TryAdmit(%s): %+v %v", tc.id, adm, err)
		}
		if !tc.run && !errors.Is(err, ErrWouldWait) {
			t.Fatalf("err %v", err)
		}
	}
	if a.Status("b") != StatusUnknown {
		t.Fatal("TryAdmit changed state for a turn that would wait")
	}
}

// TestAdmitterConcurrent runs many programs through the wrapper from many
// goroutines while another goroutine ticks; run with -race. Callbacks must
// arrive in Seq order, never concurrently, and may call back in.
func TestAdmitterConcurrent(t *testing.T) {
	var inCB atomic.Int32
	var lastSeq atomic.Uint64
	var cbErr atomic.Value
	var a *Admitter
	cfg := Config{OnDecision: func(d Decision) {
		if inCB.Add(1) != 1 {
			cbErr.Store("callbacks overlap")
		}
		if d.Seq != lastSeq.Load()+1 {
			cbErr.Store(fmt.Sprintf("seq %d after %d", d.Seq, lastSeq.Load()))
		}
		lastSeq.Store(d.Seq)
		_ = a.Status(d.Program) // re-entrant call must not deadlock
		inCB.Add(-1)
	}}
	a, clk := newTestAdmitter(t, cfg, 20000, 30000, 40000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ticks := make(chan time.Time)
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx, ticks) }()

	const programs, turns = 32, 12
	var wg sync.WaitGroup
	for i := 0; i < programs; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			concurrentProgram(ctx, t, a, fmt.Sprint("p", i), int64(500+300*i), turns)
		}(i)
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for loop := true; loop; {
		select {
		case <-finished:
			loop = false
		case ticks <- clk.Advance(5 * time.Second):
		}
	}
	close(ticks)
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	if v := cbErr.Load(); v != nil {
		t.Fatal(v)
	}
	if st := a.Stats(); st.Admitted == 0 {
		t.Fatalf("nothing admitted: %+v", st)
	}
	if a.ctl.Len() != 0 {
		t.Fatalf("%d programs left", a.ctl.Len())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := checkInvariants(a.ctl); err != nil {
		t.Fatal(err)
	}
}

// concurrentProgram runs one program of TestAdmitterConcurrent: turns
// turns of growing context, every fifth given up before it is admitted,
// then the session's end.
func concurrentProgram(ctx context.Context, t *testing.T, a *Admitter, id string, tokens int64, turns int) {
	for k := 0; k < turns; k++ {
		actx, acancel := context.WithCancel(ctx)
		if k%5 == 4 {
			acancel() // some turns give up immediately
		}
		_, err := a.Admit(actx, id, tokens)
		acancel()
		if err != nil {
			if errors.Is(err, context.Canceled) {
				continue
			}
			t.Errorf("%s: %v", id, err)
			return
		}
		tokens += 700
		if err := a.EndRequest(id, tokens, 50); err != nil {
			t.Errorf("%s end: %v", id, err)
			return
		}
	}
	if err := a.EndSession(id); err != nil {
		t.Errorf("%s close: %v", id, err)
	}
}

// TestDecisionGrant: the admission a releasing decision gives a held turn,
// as Admitter.Admit and the root Router both hand it out.
func TestDecisionGrant(t *testing.T) {
	resume := Decision{Kind: KindResume, Released: true, Worker: 3, HasWorker: true, Priority: 1.5, Reason: ReasonBinPacked}
	a, ok := resume.Grant()
	want := Admission{Run: true, Worker: 3, Priority: 1.5, Status: StatusRunnable, Reason: ReasonBinPacked}
	if !ok || a != want {
		t.Fatalf("Grant of %v = %+v, %v; want %+v, true", resume, a, ok, want)
	}
	for _, d := range []Decision{
		{Kind: KindResume, Worker: 3, HasWorker: true}, // nothing released
		{Kind: KindTerminate, Released: true},
		{Kind: KindCancel, Released: true},
		{Kind: KindAdmit, Worker: 1, HasWorker: true},
	} {
		if a, ok := d.Grant(); ok || a != (Admission{}) {
			t.Errorf("Grant of %v = %+v, %v; want zero, false", d, a, ok)
		}
	}
}
