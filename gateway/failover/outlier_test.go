package failover

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// ejectLog records OnEject calls.
type ejectLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *ejectLog) on(id uint64, ejected bool, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, fmt.Sprintf("%d %v %s", id, ejected, reason))
}

func (l *ejectLog) got() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.calls, "; ")
}

// newFleetTracker tracks n workers with probes off (every worker up),
// on a fake clock.
func newFleetTracker(t *testing.T, n int, cfg Config) (*Tracker, *stepClock, *ejectLog, func(reason string, id uint64) float64) {
	t.Helper()
	clk := newStepClock()
	log := &ejectLog{}
	cfg.Probe.Interval, cfg.OnEject = -1, log.on
	tr, reg := newTracker(t, clk, cfg)
	for i := range n {
		if err := tr.Add(uint64(i), fmt.Sprintf("http://127.0.0.1:%d", 1+i)); err != nil {
			t.Fatal(err)
		}
	}
	_ = reg
	ejections := func(reason string, id uint64) float64 {
		return testutil.ToFloat64(tr.m.ejections.WithLabelValues(fmt.Sprint(id), reason))
	}
	return tr, clk, log, ejections
}

var errStalled = errors.New("stalled")

// TestTrackerTimeoutsEject: three timeouts in a row eject a worker (a
// wedged one times out every request); the ejection is counted by reason,
// shown in Status, handed to OnEject, and ends (OnEject false) after one
// ejection period by the injected clock; the next lasts twice as long.
func TestTrackerTimeoutsEject(t *testing.T) {
	tr, clk, log, ejections := newFleetTracker(t, 3, Config{Breaker: BreakerConfig{OpenFor: 10 * time.Second}})
	timeout := Outcome{Kind: Timeout, Err: errStalled}
	for i := range 3 {
		if !tr.Routable(2) {
			t.Fatalf("ejected after %d timeouts", i)
		}
		tr.Report(2, timeout)
	}
	if tr.Routable(2) || ejections(ReasonTimeout, 2) != 1 || log.got() != "2 true timeout" {
		t.Fatalf("not ejected: routable %v, counted %v, OnEject %q", tr.Routable(2), ejections(ReasonTimeout, 2), log.got())
	}
	st := tr.Status()[2]
	if !st.Ejected || st.EjectReason != ReasonTimeout || !st.EjectedUntil.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("status %+v", st)
	}
	if got := tr.Allowed(nil, nil); len(got) != 2 {
		t.Fatalf("allowed %v", got)
	}
	clk.Advance(10 * time.Second)
	if got := tr.Allowed(nil, nil); len(got) != 3 {
		t.Fatalf("after one ejection period: allowed %v", got)
	}
	if log.got() != "2 true timeout; 2 false timeout" {
		t.Fatalf("OnEject %q", log.got())
	}
	// A trial that fails ejects it again, for twice as long.
	tr.Report(2, timeout)
	if st := tr.Status()[2]; !st.Ejected || st.EjectReason != ReasonTrialFailed ||
		!st.EjectedUntil.Equal(clk.Now().Add(20*time.Second)) {
		t.Fatalf("second ejection %+v", st)
	}
	clk.Advance(20 * time.Second)
	tr.Report(2, Outcome{Kind: OK})
	tr.Report(2, Outcome{Kind: OK})
	if st := tr.Status()[2]; st.Breaker != Closed || !st.Routable {
		t.Fatalf("after two good trials: %+v", st)
	}
}

// TestTrackerEjectionCap: at most MaxEjectedShare of the workers are
// ejected for their outcomes at once (one of three by default): a
// second failing worker stays routable, counted as capped; a worker that
// cannot be reached is ejected whatever the cap.
func TestTrackerEjectionCap(t *testing.T) {
	tr, _, _, ejections := newFleetTracker(t, 3, Config{})
	for range 3 {
		tr.Report(0, Outcome{Kind: Timeout, Err: errStalled})
	}
	for range 10 {
		tr.Report(1, Outcome{Kind: Status, Status: 500})
	}
	if tr.Routable(0) || !tr.Routable(1) {
		t.Fatalf("routable: 0 %v, 1 %v", tr.Routable(0), tr.Routable(1))
	}
	if c := testutil.ToFloat64(tr.m.capped.WithLabelValues("1")); c < 1 || ejections(ReasonErrors, 1) != 0 {
		t.Fatalf("capped %v, ejected %v", c, ejections(ReasonErrors, 1))
	}
	tr.Report(1, Outcome{Kind: Connect, Err: errStalled})
	if tr.Routable(1) || ejections(ReasonConnect, 1) != 1 {
		t.Fatal("a connect error was capped")
	}
	// With six workers, two may go.
	tr6, _, _, _ := newFleetTracker(t, 6, Config{})
	for id := range uint64(3) {
		for range 3 {
			tr6.Report(id, Outcome{Kind: Timeout, Err: errStalled})
		}
	}
	if got := tr6.Allowed(nil, nil); len(got) != 4 {
		t.Fatalf("six workers: allowed %v, want 4", got)
	}
}

// feed gives worker id n first-token samples at spt seconds per prompt
// token for prompts of tokens tokens.
func feed(tr *Tracker, id uint64, n, tokens int, spt float64) {
	for range n {
		tr.ObserveFirstToken(id, tokens, time.Duration(spt*float64(tokens)*float64(time.Second)))
	}
}

// TestTrackerLatencyOutlier: a worker whose TTFT per prompt token is far
// outside its peers' is ejected (reason latency), whatever its prompts'
// sizes; one within the factor is not; with latency ejection off, none is.
func TestTrackerLatencyOutlier(t *testing.T) {
	tr, _, log, ejections := newFleetTracker(t, 3, Config{})
	feed(tr, 0, 10, 1000, 100e-6) // 10k tokens/s
	feed(tr, 1, 10, 4000, 120e-6)
	feed(tr, 2, 9, 300, 400e-6) // 4× slower: within the factor of 5
	if !tr.Routable(2) {
		t.Fatal("ejected before its tenth sample")
	}
	feed(tr, 2, 1, 300, 400e-6)
	if !tr.Routable(2) {
		t.Fatal("a worker 4× slower than its peers was ejected (factor 5)")
	}
	feed(tr, 2, 10, 300, 3e-3) // now 25× slower
	if tr.Routable(2) || ejections(ReasonLatency, 2) != 1 || log.got() != "2 true latency" {
		t.Fatalf("latency outlier not ejected: %q", log.got())
	}
	if st := tr.Status()[2]; !strings.Contains(st.LastError, "time to first token") {
		t.Fatalf("last error %q", st.LastError)
	}

	off, _, _, _ := newFleetTracker(t, 3, Config{Outlier: OutlierConfig{LatencyFactor: -1}})
	feed(off, 0, 10, 1000, 100e-6)
	feed(off, 1, 10, 1000, 100e-6)
	feed(off, 2, 20, 1000, 1)
	if !off.Routable(2) {
		t.Fatal("ejected with latency ejection off")
	}
	// Two workers: no peer majority to judge by.
	two, _, _, _ := newFleetTracker(t, 2, Config{})
	feed(two, 0, 10, 1000, 100e-6)
	feed(two, 1, 20, 1000, 1)
	if !two.Routable(1) {
		t.Fatal("judged with a single peer")
	}
}

// TestLongPromptOnSlowWorkerNotEjected: a 128K-token prompt on a healthy
// worker that is slower than its peers (2.5×) gets a first-byte deadline
// above its real prefill time, and its TTFT, normalised by its size, does
// not make it an outlier.
func TestLongPromptOnSlowWorkerNotEjected(t *testing.T) {
	tr, _, log, _ := newFleetTracker(t, 3, Config{})
	feed(tr, 0, 20, 2000, 100e-6)
	feed(tr, 1, 20, 2000, 100e-6)
	feed(tr, 2, 20, 2000, 250e-6)
	const long = 128 << 10
	prefill := time.Duration(long * 250e-6 * float64(time.Second)) // 32.8 s
	if d := tr.FirstByteDeadline(2, long, 0); d <= prefill {
		t.Fatalf("deadline %v for a %v prefill", d, prefill)
	}
	tr.ObserveFirstToken(2, long, prefill)
	tr.ObserveFirstToken(2, long, prefill)
	if !tr.Routable(2) || log.got() != "" {
		t.Fatalf("a slow but healthy worker was ejected: %q", log.got())
	}
	// A short prompt's deadline stays short: the floor plus a little.
	if d := tr.FirstByteDeadline(0, 100, 0); d > DefaultFirstByteFloor+time.Second {
		t.Fatalf("short prompt deadline %v", d)
	}
}

// TestFirstByteDeadline: floor + factor × expected, from the worker's
// observations, its peers' median, or the configured defaults.
func TestFirstByteDeadline(t *testing.T) {
	tr, _, _, _ := newFleetTracker(t, 3, Config{Outlier: OutlierConfig{FirstByteFactor: 2, FirstByteFloor: time.Second,
		PrefillRate: 1000, TokenTime: 10 * time.Millisecond, MinPromptTokens: 100, AttentionTokens: -1}})
	// Nothing observed: 1 s + 2 × (5000 / 1000 s + 100 × 10 ms) = 13 s.
	if d := tr.FirstByteDeadline(0, 5000, 100); d != 13*time.Second {
		t.Fatalf("defaults: %v", d)
	}
	// Prompts below MinPromptTokens count as MinPromptTokens.
	if d := tr.FirstByteDeadline(0, 1, 0); d != 1200*time.Millisecond {
		t.Fatalf("tiny prompt: %v", d)
	}
	tr.ObserveFirstToken(1, 1000, 100*time.Millisecond) // 10k tokens/s
	tr.ObserveDecode(1, 100, 100*time.Millisecond)      // 1 ms a token
	// Worker 1's own, and worker 0 (nothing observed) takes the median.
	for _, id := range []uint64{0, 1} {
		if d := tr.FirstByteDeadline(id, 5000, 100); d != 2200*time.Millisecond {
			t.Fatalf("worker %d: %v", id, d)
		}
	}
	if d := tr.FirstByteDeadline(99, 5000, 0); d != 2*time.Second {
		t.Fatalf("unknown worker: %v", d)
	}
	// With the attention allowance a long prompt counts for more.
	att, _, _, _ := newFleetTracker(t, 1, Config{Outlier: OutlierConfig{FirstByteFactor: 1, FirstByteFloor: -1,
		PrefillRate: 1000, AttentionTokens: 1000}})
	if d := att.FirstByteDeadline(0, 3000, 0); d != 12*time.Second { // 3000 × (1 + 3) / 1000
		t.Fatalf("attention allowance: %v", d)
	}
	for _, c := range []OutlierConfig{{MaxEjectedShare: 2}, {LatencyFactor: 0.5}, {FirstByteFactor: -1},
		{PrefillRate: -1}} {
		if _, err := New(Config{Outlier: c}); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}
