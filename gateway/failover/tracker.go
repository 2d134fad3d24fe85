package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Errors.
var (
	// ErrConfig wraps every configuration error.
	ErrConfig = errors.New("failover: bad config")
	// ErrTriesExhausted is Retry.Do's error when every allowed attempt
	// asked for another.
	ErrTriesExhausted = errors.New("failover: every try failed")
	// ErrUnknownWorker names a worker the Tracker does not hold.
	ErrUnknownWorker = errors.New("failover: unknown worker")
	// ErrClosed is returned by a closed Tracker.
	ErrClosed = errors.New("failover: tracker closed")
)

// Probe defaults.
const (
	DefaultProbePath      = "/health"
	DefaultProbeInterval  = 5 * time.Second
	DefaultProbeTimeout   = 2 * time.Second
	DefaultProbeFailures  = 2
	DefaultProbeMinWait   = 100 * time.Millisecond
	maxProbeBodyDiscarded = 64 << 10
)

// ProbeConfig configures the active health probes. Zero fields mean the
// documented defaults.
type ProbeConfig struct {
	// Path is probed with GET on each worker's base URL (default
	// "/health", vLLM's and SGLang's); any 2xx is healthy.
	Path string
	// Interval is the period between probes of a healthy worker (default
	// 5 s); negative disables probing (every worker is then taken as up,
	// and only the breakers take workers out).
	Interval time.Duration
	// Timeout bounds one probe (default 2 s).
	Timeout time.Duration
	// FailureThreshold is the number of consecutive failed probes that
	// take an up worker down (default 2). A worker not yet seen up (at
	// start) is down from its first failed probe.
	FailureThreshold int
	// MinWait is the first wait before reprobing a worker that is down or
	// was just ejected by a connect error (default 100 ms); the wait
	// doubles after each failed probe, up to Interval. A worker down at
	// start is thus waited for with backoff, never given up on.
	MinWait time.Duration
}

func (c *ProbeConfig) withDefaults() (ProbeConfig, error) {
	o := *c
	if o.Path == "" {
		o.Path = DefaultProbePath
	}
	if o.Interval == 0 {
		o.Interval = DefaultProbeInterval
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultProbeTimeout
	}
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultProbeFailures
	}
	if o.MinWait == 0 {
		o.MinWait = DefaultProbeMinWait
	}
	switch {
	case !strings.HasPrefix(o.Path, "/"):
		return o, fmt.Errorf("%w: probe Path %q must start with /", ErrConfig, o.Path)
	case o.Timeout < 0 || o.MinWait < 0:
		return o, fmt.Errorf("%w: probe Timeout and MinWait must be ≥ 0", ErrConfig)
	case o.FailureThreshold < 0:
		return o, fmt.Errorf("%w: probe FailureThreshold %d < 0", ErrConfig, o.FailureThreshold)
	}
	return o, nil
}

// Config configures a Tracker. Zero fields mean the documented defaults.
type Config struct {
	Breaker BreakerConfig
	Probe   ProbeConfig
	Retry   RetryConfig
	// Outlier configures ejection from live traffic (latency outliers,
	// the cap on the share ejected) and first-byte deadlines.
	Outlier OutlierConfig
	// MigrationLimit bounds how many times one request's stream may move
	// to another worker after it started (0: migration off, Dynamo's
	// default; Dynamo suggests 3). Negative is an error.
	MigrationLimit int
	// HTTPClient sends the probes (nil: http.DefaultClient; each probe has
	// its own Probe.Timeout).
	HTTPClient *http.Client
	// Now and After are the clock (default time.Now and time.After).
	Now   func() time.Time
	After func(time.Duration) <-chan time.Time
	// Logger receives health and breaker transitions (nil discards).
	Logger *slog.Logger
	// Registerer, if set, receives the per-worker metrics (see Tracker).
	Registerer prometheus.Registerer
	// OnHealth, if set, is called (from the probe goroutine, with no lock
	// held) each time a worker's probed health changes, e.g. to take a
	// worker that went down out of the router and bring it back, with an
	// empty cache, when it is up again.
	OnHealth func(id uint64, from, to Health)
	// OnEject, if set, is called (with no lock held) when a worker is
	// ejected for its outcomes or latency (ejected true, with the reason:
	// ReasonTimeout, ReasonErrors, ReasonLatency, ReasonTrialFailed) and
	// when that ejection ends (false: the breaker half-opened, the worker
	// is on trial). Connect ejections do not call it (the probes follow a
	// dead worker through OnHealth). A gateway uses it as it uses OnHealth:
	// to take the worker's capacity and sessions out of the router.
	OnEject func(id uint64, ejected bool, reason string)
}

// Health is what the probes say of a worker.
type Health uint8

const (
	// Unknown: not probed yet. Not routable while probes run.
	Unknown Health = iota
	// Up: the last probe succeeded (or probes are off).
	Up
	// Down: FailureThreshold probes failed in a row (or the first probe
	// of a worker never seen up).
	Down
)

func (h Health) String() string {
	switch h {
	case Unknown:
		return "unknown"
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "health(" + strconv.Itoa(int(h)) + ")"
}

// WorkerStatus is a snapshot of one worker.
type WorkerStatus struct {
	ID      uint64
	URL     string
	Health  Health
	Breaker State
	// Routable: new requests may go to it (health not unknown or down,
	// breaker not open).
	Routable bool
	// BreakerOpens counts the times its breaker opened.
	BreakerOpens uint64
	// Ejected: the breaker is open; EjectReason says why (a Reason*
	// constant) and EjectedUntil when it half-opens (sooner for a
	// connect ejection whose probe succeeds).
	Ejected      bool
	EjectReason  string
	EjectedUntil time.Time
	// LastError is the last probe or request failure ("" when none).
	LastError string
}

// Tracker holds the health of a set of workers: a circuit breaker each,
// fed by the request path (Report), and an active probe loop each. The
// router consumes it through Allowed (the workers a request may go to, as
// Override.AllowedWorkers) and Ready. A Tracker is safe for concurrent use;
// Close stops its probe loops.
//
// With a Registerer it exports, labelled by worker ID:
// agentkv_failover_worker_routable (1/0), agentkv_failover_worker_health
// (0 unknown, 1 up, 2 down), agentkv_failover_breaker_state (0 closed,
// 1 open, 2 half-open), agentkv_failover_breaker_opens_total,
// agentkv_failover_failures_total{kind}, agentkv_failover_retries_total,
// agentkv_failover_migrations_total and agentkv_failover_probes_total{result}.
type Tracker struct {
	cfg    Config
	log    *slog.Logger
	retry  *Retry
	probes bool
	m      *trackerMetrics // nil without a Registerer

	ctx    context.Context // the probe loops'; cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // probe loops

	mu      sync.Mutex // guards workers, changed, closed, latMedian, latSeq
	workers map[uint64]*tracked
	changed chan struct{} // closed (and replaced) when routability may have changed
	closed  bool
	// latMedian is the fleet's median TTFT per prompt token, refreshed
	// every latencyRefresh samples (latSeq counts them): a worker at most
	// LatencyFactor times it is not judged further.
	latMedian float64
	latSeq    uint64
}

// tracked is one worker's state; guarded by Tracker.mu.
type tracked struct {
	id         uint64
	url        string
	label      string
	health     Health
	probeFails int
	br         Breaker
	byConnect  bool          // the breaker last opened on a connect error
	kick       chan struct{} // wakes the probe loop (capacity 1)
	stop       context.CancelFunc
	lastErr    string
	reason     string // why the breaker last opened (Reason*)
	notified   bool   // OnEject was told of an ejection whose end it was not yet told
	lat        latency
	// pending is the prefill work (short-prompt tokens) of the attempts
	// in held: sent, no first byte yet.
	pending float64
	held    map[*Attempt]struct{}
	// confirming: a wedge is being confirmed (confirmWedge);
	// lastProgress: when a check last found progress (real time).
	confirming   bool
	lastProgress time.Time
}

// touts is the breaker's count of timeouts in a row.
func (w *tracked) touts() int { return w.br.touts }

// New returns a Tracker with no workers.
func New(cfg Config) (*Tracker, error) {
	var err error
	if cfg.Breaker, err = cfg.Breaker.withDefaults(); err != nil {
		return nil, err
	}
	if cfg.Probe, err = cfg.Probe.withDefaults(); err != nil {
		return nil, err
	}
	if cfg.Outlier, err = cfg.Outlier.withDefaults(); err != nil {
		return nil, err
	}
	if cfg.MigrationLimit < 0 {
		return nil, fmt.Errorf("%w: MigrationLimit %d < 0", ErrConfig, cfg.MigrationLimit)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	t := &Tracker{cfg: cfg, log: cfg.Logger, probes: cfg.Probe.Interval > 0, workers: map[uint64]*tracked{},
		changed: make(chan struct{})}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.retry, err = NewRetry(cfg.Retry, cfg.After); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		if t.m, err = newTrackerMetrics(cfg.Registerer, t); err != nil {
			return nil, fmt.Errorf("failover: metrics: %w", err)
		}
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// Retry returns the retry policy.
func (t *Tracker) Retry() *Retry { return t.retry }

// MigrationLimit returns Config.MigrationLimit (0: migration off).
func (t *Tracker) MigrationLimit() int { return t.cfg.MigrationLimit }

// Add starts tracking a worker at baseURL (its probe loop starts at once
// when probes are on: the worker is routable from its first successful
// probe). Adding an ID again with another URL starts it over; with the
// same URL it is a no-op.
func (t *Tracker) Add(id uint64, baseURL string) error {
	br, err := NewBreaker(t.cfg.Breaker)
	if err != nil {
		return err
	}
	baseURL = strings.TrimRight(baseURL, "/")
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ErrClosed
	}
	if old := t.workers[id]; old != nil {
		if old.url == baseURL {
			t.mu.Unlock()
			return nil
		}
		t.removeLocked(old)
	}
	w := &tracked{id: id, url: baseURL, label: strconv.FormatUint(id, 10), br: *br, kick: make(chan struct{}, 1)}
	if !t.probes {
		w.health = Up
	}
	t.workers[id] = w
	t.notifyLocked()
	if t.probes {
		ctx, stop := context.WithCancel(t.ctx)
		w.stop = stop
		t.wg.Add(1)
		go t.probeLoop(ctx, w)
	}
	t.mu.Unlock()
	return nil
}

// Remove stops tracking a worker.
func (t *Tracker) Remove(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w := t.workers[id]; w != nil {
		t.removeLocked(w)
		t.notifyLocked()
	}
}

func (t *Tracker) removeLocked(w *tracked) {
	if w.stop != nil {
		w.stop()
	}
	delete(t.workers, w.id)
	if t.m != nil {
		t.m.forget(w.label)
	}
}

// Close stops the probe loops and waits for them. Safe to call twice.
func (t *Tracker) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	t.cancel()
	t.wg.Wait()
	return nil
}

func (t *Tracker) notifyLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

func (w *tracked) routable(now time.Time) bool {
	return w.health == Up && w.br.Allow(now)
}

// Routable reports whether new requests may go to the worker.
func (t *Tracker) Routable(id uint64) bool {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.workers[id]
	return w != nil && w.routable(now)
}

// Allowed appends to dst (and returns) the IDs, ascending, of the routable
// workers not in exclude (the workers this request already failed on), for
// agentkv.Override.AllowedWorkers. An empty result means no worker may
// take the request (note that an empty AllowedWorkers means the opposite
// to the router: do not pass it on).
func (t *Tracker) Allowed(dst []uint64, exclude []uint64) []uint64 {
	now := t.cfg.Now()
	var evs []ejectEvent
	t.mu.Lock()
	for id, w := range t.workers {
		if w.routable(now) && !slices.Contains(exclude, id) {
			dst = append(dst, id)
		}
		if w.notified && w.br.State(now) != Open {
			evs = t.sweepLocked(now, evs)
		}
	}
	t.mu.Unlock()
	t.fire(evs)
	slices.Sort(dst)
	return dst
}

// Ready reports whether at least one worker is routable.
func (t *Tracker) Ready() bool {
	now := t.cfg.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, w := range t.workers {
		if w.routable(now) {
			return true
		}
	}
	return false
}

// WaitReady blocks until at least one worker is routable (nil) or ctx ends
// (ctx.Err()). A worker whose breaker half-opens by time alone is noticed at
// its next report or probe.
func (t *Tracker) WaitReady(ctx context.Context) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		if t.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Status returns a snapshot of every worker, by ID.
func (t *Tracker) Status() []WorkerStatus {
	now := t.cfg.Now()
	t.mu.Lock()
	out := make([]WorkerStatus, 0, len(t.workers))
	for _, w := range t.workers {
		out = append(out, w.status(now))
	}
	evs := t.sweepLocked(now, nil)
	t.mu.Unlock()
	t.fire(evs)
	slices.SortFunc(out, func(a, b WorkerStatus) int { return compareU64(a.ID, b.ID) })
	return out
}

func compareU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (w *tracked) status(now time.Time) WorkerStatus {
	st := WorkerStatus{ID: w.id, URL: w.url, Health: w.health, Breaker: w.br.State(now), Routable: w.routable(now),
		BreakerOpens: w.br.Opens(), LastError: w.lastErr}
	if st.Breaker == Open {
		st.Ejected, st.EjectReason, st.EjectedUntil = true, w.reason, w.br.OpenUntil(now)
	}
	return st
}

// Report records the outcome of an attempt on a worker: it feeds the
// worker's breaker (see Breaker.Record) and the failure metrics. A connect
// error ejects the worker at once (unless NoFastEject). A connect error or
// a cut stream wakes its probe loop, which probes it at once and then, while
// it fails, with backoff (MinWait doubling): a dead worker goes down after
// FailureThreshold quick probes, and comes back when it answers.
func (t *Tracker) Report(id uint64, o Outcome) {
	now := t.cfg.Now()
	t.mu.Lock()
	w := t.workers[id]
	if w == nil {
		t.mu.Unlock()
		return
	}
	before, opens := w.br.State(now), w.br.Opens()
	mayOpen, capped := t.mayOpenLocked(now, w, o)
	w.br.record(now, o, mayOpen)
	after := w.br.State(now)
	if o.Err != nil && o.Kind != ClientGone {
		w.lastErr = o.Err.Error()
	} else if o.WorkerFailure() {
		w.lastErr = "status " + strconv.Itoa(o.Status)
	}
	opened := w.br.Opens() != opens
	var evs []ejectEvent
	var cancels []func(error)
	if opened && o.silent() {
		cancels = w.heldCancelsLocked() // a silent worker will not answer them
	}
	if opened {
		w.byConnect = o.Kind == Connect
		reason := ReasonErrors
		switch {
		case o.Kind == Connect:
			reason = ReasonConnect
		case before == HalfOpen:
			reason = ReasonTrialFailed
		case o.Kind == Timeout:
			reason = ReasonTimeout
		}
		evs = append(evs, t.ejectedLocked(now, w, reason))
	}
	if o.Kind == Connect || o.Kind == Cut {
		// The worker may be dead: probe it now rather than at the next
		// interval, so a worker killed under its streams (cuts alone do
		// not open the breaker until FailureThreshold) is down within
		// a probe or two, not a probe interval or two.
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
	if before != after {
		t.notifyLocked()
	}
	evs = t.sweepLocked(now, evs)
	label, touts := w.label, w.touts()
	t.mu.Unlock()
	if o.silent() {
		t.log.Info("failover: worker sent nothing before the deadline", "worker", id, "timeouts_in_a_row", touts)
	}
	if t.m != nil && o.Kind != OK {
		t.m.failures.WithLabelValues(label, o.Kind.String()).Inc()
	}
	if capped {
		if t.m != nil {
			t.m.capped.WithLabelValues(label).Inc()
		}
		t.log.Warn("failover: worker not ejected: the share of workers ejected is at its cap", "worker", id,
			"kind", o.Kind.String(), "max_share", t.cfg.Outlier.MaxEjectedShare)
	}
	if opened {
		if t.m != nil {
			t.m.opens.WithLabelValues(label).Inc()
		}
	} else if before != after {
		t.log.Info("failover: breaker state changed", "worker", id, "from", before.String(), "to", after.String())
	}
	t.fire(evs)
	cancelAll(cancels)
}

// mayOpenLocked decides whether o may open w's breaker (false, capped
// true: the share of workers ejected is at its cap). A silent timeout
// starts a wedge check (confirmWedge) instead of opening it on timeouts
// alone.
func (t *Tracker) mayOpenLocked(now time.Time, w *tracked, o Outcome) (mayOpen, capped bool) {
	switch {
	case o.silent() && t.confirms() && w.br.State(now) == Closed:
		if !w.confirming {
			w.confirming = true
			t.goLocked(func(ctx context.Context) { t.confirmWedge(ctx, w) })
		}
		return !w.br.timeoutTrip(now), false
	case o.WorkerFailure() && o.Kind != Connect && w.br.Tripping(now, o.Kind) && !t.mayEjectLocked(now, w):
		return false, true
	}
	return true, false
}

// Retried counts a retry away from worker id (the attempt on it failed
// before the first byte and the request went on to another).
func (t *Tracker) Retried(id uint64) {
	if t.m != nil {
		t.m.retries.WithLabelValues(strconv.FormatUint(id, 10)).Inc()
	}
}

// Migrated counts a stream migrated away from worker id mid-generation.
func (t *Tracker) Migrated(id uint64) {
	if t.m != nil {
		t.m.migrations.WithLabelValues(strconv.FormatUint(id, 10)).Inc()
	}
}

// Probe probes one worker now and records the result; it returns the
// probe's error (nil: healthy).
func (t *Tracker) Probe(ctx context.Context, id uint64) error {
	t.mu.Lock()
	w := t.workers[id]
	t.mu.Unlock()
	if w == nil {
		return fmt.Errorf("%w: %d", ErrUnknownWorker, id)
	}
	return t.probe(ctx, w)
}

func (t *Tracker) probe(ctx context.Context, w *tracked) error {
	err := t.get(ctx, w.url+t.cfg.Probe.Path)
	if ctx.Err() != nil {
		return ctx.Err() // stopping: record nothing
	}
	now := t.cfg.Now()
	t.mu.Lock()
	if t.workers[w.id] != w {
		t.mu.Unlock()
		return err
	}
	before, wasRoutable := w.health, w.routable(now)
	if err == nil {
		w.health, w.probeFails = Up, 0
		if w.byConnect {
			w.br.ProbeOK(now) // it was unreachable and answers again
		}
	} else {
		w.probeFails++
		w.lastErr = err.Error()
		if w.health != Up || w.probeFails >= t.cfg.Probe.FailureThreshold {
			w.health = Down
		}
	}
	after, isRoutable := w.health, w.routable(now)
	if wasRoutable != isRoutable || before != after {
		t.notifyLocked()
	}
	evs := t.sweepLocked(now, nil)
	t.mu.Unlock()
	t.fire(evs)
	if t.m != nil {
		result := "ok"
		if err != nil {
			result = "fail"
		}
		t.m.probes.WithLabelValues(w.label, result).Inc()
	}
	if before != after {
		t.log.Info("failover: worker health changed", "worker", w.id, "url", w.url, "from", before.String(),
			"to", after.String(), "err", err)
		if t.cfg.OnHealth != nil {
			t.cfg.OnHealth(w.id, before, after)
		}
	}
	return err
}

func (t *Tracker) get(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Probe.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := t.cfg.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxProbeBodyDiscarded)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("failover: probe %s: status %d", url, resp.StatusCode)
	}
	return nil
}

// probeLoop probes w until ctx ends: every Interval while it is up, with a
// backoff from MinWait to Interval while it is down, unknown or just
// ejected.
func (t *Tracker) probeLoop(ctx context.Context, w *tracked) {
	defer t.wg.Done()
	wait := t.cfg.Probe.MinWait
	for {
		_ = t.probe(ctx, w)
		if ctx.Err() != nil {
			return
		}
		t.mu.Lock()
		healthy := w.health == Up && w.probeFails == 0 && !(w.byConnect && w.br.State(t.cfg.Now()) == Open)
		t.mu.Unlock()
		next := t.cfg.Probe.Interval
		if healthy {
			wait = t.cfg.Probe.MinWait
		} else {
			next, wait = wait, min(2*wait, t.cfg.Probe.Interval)
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.cfg.After(next):
		}
	}
}

// trackerMetrics are the Tracker's counters; the state gauges are read at
// scrape time by its collector.
type trackerMetrics struct {
	failures, probes            *prometheus.CounterVec
	retries, migrations, opens  *prometheus.CounterVec
	ejections, capped           *prometheus.CounterVec
	routable, health, breakerSt *prometheus.Desc
	t                           *Tracker
}

func newTrackerMetrics(reg prometheus.Registerer, t *Tracker) (*trackerMetrics, error) {
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentkv", Subsystem: "failover",
			Name: name, Help: help}, append([]string{"worker"}, labels...))
	}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("agentkv_failover_"+name, help, []string{"worker"}, nil)
	}
	m := &trackerMetrics{
		failures:   cv("failures_total", "Failed attempts per worker by kind (connect, timeout, status, cut, client_gone, other).", "kind"),
		probes:     cv("probes_total", "Health probes per worker by result (ok, fail).", "result"),
		retries:    cv("retries_total", "Requests retried on another worker after failing on this one before the first byte."),
		migrations: cv("migrations_total", "Streams migrated away from this worker mid-generation."),
		opens:      cv("breaker_opens_total", "Times this worker's circuit breaker opened."),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentkv", Subsystem: "gateway",
			Name: "worker_ejections_total",
			Help: "Workers ejected from routing (breaker opened) by reason: connect, timeout, errors, latency, trial_failed."},
			[]string{"worker", "reason"}),
		capped:    cv("ejections_capped_total", "Ejections not made because the share of workers ejected was at its cap."),
		routable:  desc("worker_routable", "1 when new requests may go to the worker, else 0."),
		health:    desc("worker_health", "The worker's probed health: 0 unknown, 1 up, 2 down."),
		breakerSt: desc("breaker_state", "The worker's circuit breaker: 0 closed, 1 open, 2 half-open."),
		t:         t,
	}
	for _, c := range []prometheus.Collector{m.failures, m.probes, m.retries, m.migrations, m.opens, m.ejections, m.capped, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *trackerMetrics) forget(label string) {
	for _, v := range []*prometheus.CounterVec{m.failures, m.probes, m.retries, m.migrations, m.opens, m.ejections, m.capped} {
		v.DeletePartialMatch(prometheus.Labels{"worker": label})
	}
}

// Describe implements prometheus.Collector.
func (m *trackerMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.routable
	ch <- m.health
	ch <- m.breakerSt
}

// Collect implements prometheus.Collector.
func (m *trackerMetrics) Collect(ch chan<- prometheus.Metric) {
	for _, s := range m.t.Status() {
		l := strconv.FormatUint(s.ID, 10)
		r := 0.0
		if s.Routable {
			r = 1
		}
		ch <- prometheus.MustNewConstMetric(m.routable, prometheus.GaugeValue, r, l)
		ch <- prometheus.MustNewConstMetric(m.health, prometheus.GaugeValue, float64(s.Health), l)
		ch <- prometheus.MustNewConstMetric(m.breakerSt, prometheus.GaugeValue, float64(s.Breaker), l)
	}
}
