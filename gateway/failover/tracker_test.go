package failover

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newTracker(t *testing.T, clk *stepClock, cfg Config) (*Tracker, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Now, cfg.After, cfg.Registerer = clk.Now, clk.After, reg
	if cfg.Outlier.ConfirmWait == 0 {
		cfg.Outlier.ConfirmWait = -1 // these workers serve no /metrics (TestWedgeConfirmed confirms)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr, reg
}

// healthServer serves /health with the status in code (200 by default).
func healthServer(t *testing.T, code *atomic.Int32) string {
	t.Helper()
	s := statusServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(int(code.Load()))
	})
	return s
}

func statusServerFunc(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

func TestTrackerProbesUpAndDown(t *testing.T) {
	clk := newStepClock()
	tr, reg := newTracker(t, clk, Config{})
	var code atomic.Int32
	code.Store(200)
	// The first probe starts at Add: its reply waits for the gate, so the
	// worker is seen before it (not racing the probe).
	gate := make(chan struct{})
	var first atomic.Bool
	url := statusServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		if first.CompareAndSwap(false, true) {
			<-gate
		}
		w.WriteHeader(int(code.Load()))
	})
	if err := tr.Add(0, url); err != nil {
		t.Fatal(err)
	}
	if tr.Routable(0) {
		t.Fatal("routable before its first probe")
	}
	close(gate)
	a := clk.next(t) // the first probe ran
	if a.d != DefaultProbeInterval || !tr.Routable(0) || !tr.Ready() {
		t.Fatalf("after a good probe: wait %v routable %v", a.d, tr.Routable(0))
	}
	code.Store(503)
	clk.fire(a)
	a = clk.next(t)
	if !tr.Routable(0) || a.d != DefaultProbeMinWait {
		t.Fatalf("one failed probe of an up worker: routable %v, next wait %v", tr.Routable(0), a.d)
	}
	clk.fire(a)
	a = clk.next(t)
	if tr.Routable(0) || tr.Status()[0].Health != Down || a.d != 2*DefaultProbeMinWait {
		t.Fatalf("two failed probes: %+v, next wait %v", tr.Status()[0], a.d)
	}
	code.Store(200)
	clk.fire(a)
	a = clk.next(t)
	if !tr.Routable(0) || a.d != DefaultProbeInterval {
		t.Fatalf("recovered: %+v, next wait %v", tr.Status()[0], a.d)
	}
	if got := testutil.ToFloat64(tr.m.probes.WithLabelValues("0", "fail")); got != 2 {
		t.Errorf("failed probes metric %v, want 2", got)
	}
	n, err := testutil.GatherAndCount(reg, "agentkv_failover_worker_routable", "agentkv_failover_breaker_state")
	if err != nil || n != 2 {
		t.Errorf("gauges: %d, %v", n, err)
	}
}

// A worker down at start is reprobed with a doubling backoff (capped at the
// interval), never given up on, and served once it listens.
func TestTrackerWorkerDownAtStart(t *testing.T) {
	clk := newStepClock()
	tr, _ := newTracker(t, clk, Config{Probe: ProbeConfig{Interval: time.Second}})
	addr := closedPort(t)
	if err := tr.Add(3, "http://"+addr+"/"); err != nil {
		t.Fatal(err)
	}
	ready := make(chan error, 1)
	go func() { ready <- tr.WaitReady(context.Background()) }()
	var waits []time.Duration
	var a stepAsk
	for i := 0; i < 6; i++ {
		if i > 0 {
			clk.fire(a)
		}
		a = clk.next(t)
		waits = append(waits, a.d)
		if tr.Routable(3) {
			t.Fatal("a closed port is routable")
		}
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(waits, want) {
		t.Fatalf("backoff %v, want %v", waits, want)
	}
	select {
	case err := <-ready:
		t.Fatalf("WaitReady returned %v with the worker down", err)
	default:
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err) // cannot rebind: nothing to test
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	clk.fire(a)
	clk.next(t)
	if !tr.Routable(3) {
		t.Fatalf("up worker not routable: %+v", tr.Status())
	}
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
}

// A connect error ejects at once; the probe loop wakes, and once the
// worker answers again the breaker half-opens; two successes close it.
func TestTrackerFastEjectAndReturn(t *testing.T) {
	clk := newStepClock()
	tr, _ := newTracker(t, clk, Config{})
	var code, other atomic.Int32
	code.Store(200)
	other.Store(200)
	_ = tr.Add(0, healthServer(t, &code))
	_ = tr.Add(1, healthServer(t, &other))
	clk.next(t)
	clk.next(t)
	if got := tr.Allowed(nil, nil); !slices.Equal(got, []uint64{0, 1}) {
		t.Fatalf("Allowed %v", got)
	}
	// Worker 0 is down: the report ejects it at once, and the probe the
	// report wakes (without its timer) fails too, so nothing can make it
	// routable before the checks below (under -race on a loaded box a
	// passing probe did, between the report and the check).
	code.Store(503)
	tr.Report(0, Outcome{Kind: Connect, Err: errors.New("connection refused")})
	if tr.Routable(0) {
		t.Fatal("worker still routable after a connection refused")
	}
	if got := tr.Allowed(nil, []uint64{1}); len(got) != 0 {
		t.Fatalf("Allowed excluding 1: %v", got)
	}
	a := clk.next(t) // the woken probe failed; the next one waits
	if tr.Routable(0) {
		t.Fatalf("routable after a failed probe: %+v", tr.Status()[0])
	}
	// The worker is back: the next probe passes and the breaker
	// half-opens.
	code.Store(200)
	clk.fire(a)
	clk.next(t)
	st := tr.Status()[0]
	if st.Breaker != HalfOpen || !st.Routable {
		t.Fatalf("after a good probe: %+v", st)
	}
	tr.Report(0, Outcome{Kind: OK, Status: 200})
	tr.Report(0, Outcome{Kind: OK, Status: 200})
	if st := tr.Status()[0]; st.Breaker != Closed || st.BreakerOpens != 1 {
		t.Fatalf("after two successes: %+v", st)
	}
}

// A stream cut mid-way wakes the worker's probe loop at once: a worker
// killed under its streams (cuts alone, fewer than FailureThreshold, do not
// open its breaker) is down after two quick probes, not a probe interval
// or two later. A cut on a worker that still answers its probes changes
// nothing.
func TestTrackerCutProbesAtOnce(t *testing.T) {
	clk := newStepClock()
	tr, _ := newTracker(t, clk, Config{})
	var code atomic.Int32
	code.Store(200)
	_ = tr.Add(0, healthServer(t, &code))
	a := clk.next(t)
	if a.d != DefaultProbeInterval || !tr.Routable(0) {
		t.Fatalf("after a good probe: wait %v, routable %v", a.d, tr.Routable(0))
	}
	tr.Report(0, Outcome{Kind: Cut, Started: true, Err: errors.New("unexpected EOF")})
	a = clk.next(t) // woken without its 5 s timer: the probe passed
	if a.d != DefaultProbeInterval || !tr.Routable(0) {
		t.Fatalf("a cut on a live worker: wait %v, %+v", a.d, tr.Status()[0])
	}
	code.Store(503) // the worker dies
	start := clk.Now()
	tr.Report(0, Outcome{Kind: Cut, Started: true, Err: errors.New("unexpected EOF")})
	a = clk.next(t)
	if a.d != DefaultProbeMinWait {
		t.Fatalf("after the cut and a failed probe the next probe waits %v, want %v", a.d, DefaultProbeMinWait)
	}
	clk.fire(a)
	a = clk.next(t)
	st := tr.Status()[0]
	if st.Routable || st.Health != Down || st.Breaker != Closed {
		t.Fatalf("two failed probes after the cut: %+v", st)
	}
	if took := clk.Now().Sub(start); took > DefaultProbeMinWait {
		t.Fatalf("down %v after the cut, want ≤ %v", took, DefaultProbeMinWait)
	}
	_ = a
}

// A sick worker (5xx while /health is fine) stays out for OpenFor: the
// probes do not cut the open period short.
func TestTrackerSickWorkerWaitsOutOpenFor(t *testing.T) {
	clk := newStepClock()
	tr, _ := newTracker(t, clk, Config{})
	var code atomic.Int32
	code.Store(200)
	_ = tr.Add(0, healthServer(t, &code))
	a := clk.next(t)
	for i := 0; i < 5; i++ {
		tr.Report(0, Outcome{Kind: Status, Status: 503})
	}
	if tr.Routable(0) {
		t.Fatal("routable after 5 × 503")
	}
	clk.fire(a) // a good probe 5 s later
	a = clk.next(t)
	if tr.Routable(0) {
		t.Fatal("a probe half-opened a breaker opened by 5xx")
	}
	clk.Advance(25 * time.Second)
	if !tr.Routable(0) || tr.Status()[0].Breaker != HalfOpen {
		t.Fatalf("after 30 s: %+v", tr.Status()[0])
	}
	tr.Report(0, Outcome{Kind: Timeout, Err: context.DeadlineExceeded})
	if tr.Routable(0) {
		t.Fatal("a half-open failure did not reopen")
	}
	if got := testutil.ToFloat64(tr.m.failures.WithLabelValues("0", "status")); got != 5 {
		t.Errorf("status failures %v", got)
	}
	if got := testutil.ToFloat64(tr.m.opens.WithLabelValues("0")); got != 2 {
		t.Errorf("opens %v", got)
	}
}

// A stalled /health times out and counts as a failed probe.
func TestTrackerProbeTimeout(t *testing.T) {
	tr, err := New(Config{Probe: ProbeConfig{Interval: -1, Timeout: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	s := stallServer(t)
	_ = tr.Add(0, s.URL)
	if !tr.Routable(0) {
		t.Fatal("with probes off a worker is up")
	}
	if err := tr.Probe(context.Background(), 0); err == nil || !isTimeout(err) {
		t.Fatalf("probe of a stalled server: %v", err)
	}
	if err := tr.Probe(context.Background(), 9); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("unknown worker: %v", err)
	}
}

func TestTrackerAddRemoveClose(t *testing.T) {
	clk := newStepClock()
	tr, _ := newTracker(t, clk, Config{Probe: ProbeConfig{Interval: -1}})
	_ = tr.Add(1, "http://a")
	_ = tr.Add(1, "http://a/") // same
	_ = tr.Add(2, "http://b")
	tr.Report(2, Outcome{Kind: Connect, Err: errors.New("refused")})
	if got := tr.Allowed(nil, nil); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Allowed %v", got)
	}
	_ = tr.Add(2, "http://c") // another URL: starts over
	if !tr.Routable(2) || tr.Status()[1].URL != "http://c" {
		t.Fatalf("re-added: %+v", tr.Status())
	}
	tr.Remove(1)
	tr.Report(1, Outcome{Kind: Connect}) // unknown: ignored
	if st := tr.Status(); len(st) != 1 || st[0].ID != 2 {
		t.Fatalf("after remove: %+v", st)
	}
	_ = tr.Close()
	if err := tr.Add(5, "http://d"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tr.Remove(2)
	if err := tr.WaitReady(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitReady with none: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{MigrationLimit: -1}, {Probe: ProbeConfig{Path: "health"}}, {Probe: ProbeConfig{FailureThreshold: -2}},
		{Retry: RetryConfig{Multiplier: 0.1}}, {Breaker: BreakerConfig{OpenFor: -time.Second}}} {
		if _, err := New(c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): %v", c, err)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Registerer: reg}); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("second tracker on one registry: %v", err)
	}
}
