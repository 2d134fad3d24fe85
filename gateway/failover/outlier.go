package failover

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Outlier detection defaults.
const (
	DefaultMaxEjectedShare    = 1.0 / 3
	DefaultLatencyFactor      = 5.0
	DefaultLatencyMinSamples  = 10
	DefaultMinPromptTokens    = 256
	DefaultAttentionTokens    = 32 << 10
	DefaultFirstByteFactor    = 3.0
	DefaultFirstByteFloor     = 2 * time.Second
	DefaultPrefillRate        = 2000.0 // tokens per second, before any is observed
	DefaultTokenTime          = 50 * time.Millisecond
	DefaultContextTokens      = 131072
	DefaultProgressPath       = "/metrics"
	DefaultConfirmWait        = time.Second
	latencyAlpha              = 0.2 // EWMA weight of a new sample
	latencyRefresh            = 16  // samples between refreshes of the fleet's median
	defaultMinPeersForLatency = 2
)

// Ejection reasons, the label of agentkv_gateway_worker_ejections_total.
const (
	// ReasonConnect: the worker could not be reached (fast ejection).
	ReasonConnect = "connect"
	// ReasonTimeout: TimeoutThreshold timeouts in a row (a wedged worker).
	ReasonTimeout = "timeout"
	// ReasonErrors: FailureThreshold failures in a row (5xx, cut streams).
	ReasonErrors = "errors"
	// ReasonLatency: its time to first token, per prompt token, far
	// outside its peers'.
	ReasonLatency = "latency"
	// ReasonTrialFailed: a half-open trial request failed.
	ReasonTrialFailed = "trial_failed"
)

// OutlierConfig configures ejection from live traffic (beyond the
// breaker's consecutive failures) and the first-byte deadlines. Zero
// fields mean the documented defaults.
type OutlierConfig struct {
	// MaxEjectedShare caps the share of the tracked workers ejected at
	// once for their outcomes or latency (default 1/3; at least one worker
	// may always be ejected), so a slow or failing cluster does not eject
	// itself: past it a worker stays routable however it does. Workers
	// ejected because they cannot be reached (connect errors) and workers
	// probed down are not capped and do not count.
	MaxEjectedShare float64
	// LatencyFactor ejects a worker whose time to first token per prompt
	// token (an EWMA of the streamed requests' TTFT / max(uncached prompt
	// tokens, MinPromptTokens)) is above LatencyFactor × the median of its
	// routable peers' (default 5; negative turns latency ejection off).
	LatencyFactor float64
	// LatencyMinSamples is the number of samples a worker needs before it
	// is judged, and each of its peers before it counts (default 10); at
	// least two peers must count.
	LatencyMinSamples int
	// MinPromptTokens is the least prompt size a TTFT is divided by (and
	// a deadline is computed for), since a short prompt's TTFT is mostly
	// fixed cost (default 256).
	MinPromptTokens int
	// AttentionTokens is the prompt size at which prefilling costs twice
	// as much per token as a short prompt does (attention grows with the
	// context): a prompt of n tokens counts as n × (1 + n/AttentionTokens)
	// short-prompt tokens, for deadlines and for judging latency, so a
	// 128K-token prefill learnt from short prompts is not cut short
	// (default 32,768; negative: linear).
	AttentionTokens int
	// FirstByteFactor and FirstByteFloor make a request's first-byte
	// deadline (FirstByteDeadline, Send): FirstByteFloor +
	// FirstByteFactor × the expected time (defaults 3 and 2 s; a negative
	// floor is none).
	FirstByteFactor float64
	FirstByteFloor  time.Duration
	// ContextTokens is the model's context length (default 131,072): a
	// whole (not streamed) reply with no max_tokens may generate up to
	// ContextTokens − its prompt, and its deadline allows for that.
	ContextTokens int
	// ProgressPath is the worker's Prometheus metrics path (default
	// "/metrics") whose progress counters (ParseProgress) confirm a wedge.
	// A timeout of a worker that sent nothing starts a check: the path is
	// read twice, ConfirmWait apart (real time). Counters that advanced
	// mean the worker is busy, not wedged: timeouts alone do not eject it.
	// Counters that stood still eject it (ReasonTimeout) if it still
	// holds a request sent before the first read that it sent nothing of,
	// or its timeouts reached TimeoutThreshold: a wedged worker is out
	// about ConfirmWait after its first timeout. A worker whose counters
	// cannot be read is ejected at TimeoutThreshold timeouts in a row.
	// ConfirmWait defaults to 1 s; negative turns confirmation off (then
	// TimeoutThreshold timeouts eject).
	ProgressPath string
	ConfirmWait  time.Duration
	// PrefillRate (tokens/s) and TokenTime (per output token) are assumed
	// for a worker until its own are observed and no peer's are (defaults
	// 2,000 tokens/s and 50 ms).
	PrefillRate float64
	TokenTime   time.Duration
}

func (c *OutlierConfig) withDefaults() (OutlierConfig, error) {
	o := *c
	if o.MaxEjectedShare == 0 {
		o.MaxEjectedShare = DefaultMaxEjectedShare
	}
	if o.LatencyFactor == 0 {
		o.LatencyFactor = DefaultLatencyFactor
	}
	if o.LatencyMinSamples == 0 {
		o.LatencyMinSamples = DefaultLatencyMinSamples
	}
	if o.MinPromptTokens == 0 {
		o.MinPromptTokens = DefaultMinPromptTokens
	}
	if o.AttentionTokens == 0 {
		o.AttentionTokens = DefaultAttentionTokens
	}
	if o.FirstByteFactor == 0 {
		o.FirstByteFactor = DefaultFirstByteFactor
	}
	if o.FirstByteFloor == 0 {
		o.FirstByteFloor = DefaultFirstByteFloor
	}
	o.FirstByteFloor = max(o.FirstByteFloor, 0) // negative: no floor
	if o.PrefillRate == 0 {
		o.PrefillRate = DefaultPrefillRate
	}
	if o.TokenTime == 0 {
		o.TokenTime = DefaultTokenTime
	}
	if o.ContextTokens == 0 {
		o.ContextTokens = DefaultContextTokens
	}
	if o.ProgressPath == "" {
		o.ProgressPath = DefaultProgressPath
	}
	if o.ConfirmWait == 0 {
		o.ConfirmWait = DefaultConfirmWait
	}
	switch {
	case o.MaxEjectedShare < 0 || o.MaxEjectedShare > 1 || math.IsNaN(o.MaxEjectedShare):
		return o, fmt.Errorf("%w: MaxEjectedShare %v outside [0, 1]", ErrConfig, o.MaxEjectedShare)
	case math.IsNaN(o.LatencyFactor) || (o.LatencyFactor > 0 && o.LatencyFactor < 1):
		return o, fmt.Errorf("%w: LatencyFactor %v (want ≥ 1, or negative for off)", ErrConfig, o.LatencyFactor)
	case o.LatencyMinSamples < 0 || o.MinPromptTokens < 0:
		return o, fmt.Errorf("%w: negative LatencyMinSamples or MinPromptTokens", ErrConfig)
	case !(o.FirstByteFactor > 0):
		return o, fmt.Errorf("%w: FirstByteFactor %v must be > 0", ErrConfig, o.FirstByteFactor)
	case !(o.PrefillRate > 0) || o.TokenTime < 0:
		return o, fmt.Errorf("%w: PrefillRate %v must be > 0, TokenTime ≥ 0", ErrConfig, o.PrefillRate)
	case o.ContextTokens < 0:
		return o, fmt.Errorf("%w: ContextTokens %d < 0", ErrConfig, o.ContextTokens)
	case !strings.HasPrefix(o.ProgressPath, "/"):
		return o, fmt.Errorf("%w: ProgressPath %q must start with /", ErrConfig, o.ProgressPath)
	}
	return o, nil
}

// latency is one worker's observed speed; guarded by Tracker.mu.
type latency struct {
	n    int     // first-token samples since it was last judged (reset at ejection)
	any  bool    // spt holds a sample
	spt  float64 // EWMA seconds to first token per prompt token
	tpot float64 // EWMA seconds per output token (0: none yet)
}

func ewma(old, x float64, first bool) float64 {
	if first {
		return x
	}
	return old + latencyAlpha*(x-old)
}

// ObserveFirstToken records a streamed request's time to first token on
// worker id, for a prompt with uncached tokens the worker had to prefill
// and nothing queued ahead of it (Attempt.FirstByte also counts the work
// queued ahead): it feeds the worker's prefill speed (for the first-byte
// deadlines) and latency ejection, which it may trigger (ReasonLatency).
// Whole replies, whose first byte comes after the whole generation, must
// not be reported.
func (t *Tracker) ObserveFirstToken(id uint64, uncached int, ttft time.Duration) {
	t.observeFirst(id, t.promptWork(uncached), ttft)
}

// observeFirst records a TTFT for work short-prompt tokens of prefill
// (the request's own and those queued ahead of it).
func (t *Tracker) observeFirst(id uint64, work float64, ttft time.Duration) {
	if ttft <= 0 || !(work > 0) {
		return
	}
	now := t.cfg.Now()
	x := ttft.Seconds() / work
	t.mu.Lock()
	w := t.workers[id]
	if w == nil {
		t.mu.Unlock()
		return
	}
	w.lat.spt = ewma(w.lat.spt, x, !w.lat.any)
	w.lat.any = true
	w.lat.n++
	// The fleet's median is refreshed every few samples: the common case
	// (a worker well inside it) costs one comparison.
	if t.latSeq++; t.latSeq%latencyRefresh == 0 || t.latMedian == 0 {
		t.latMedian, _ = t.medianLocked(func(l *latency) (float64, bool) { return l.spt, l.any })
	}
	var ev []ejectEvent
	if w.lat.spt > t.cfg.Outlier.LatencyFactor*t.latMedian && t.outlierLocked(w) && t.mayEjectLocked(now, w) && w.br.Eject(now) {
		w.lat.n = 0
		w.lastErr = fmt.Sprintf("time to first token %.3g ms per 1k prompt tokens, over %g × its peers' median",
			w.lat.spt*1e6, t.cfg.Outlier.LatencyFactor)
		ev = append(ev, t.ejectedLocked(now, w, ReasonLatency))
		t.notifyLocked()
	}
	t.mu.Unlock()
	t.fire(ev)
}

// ObserveDecode records that worker id streamed tokens output tokens in
// d after its first: the time per output token of whole-reply deadlines.
func (t *Tracker) ObserveDecode(id uint64, tokens int, d time.Duration) {
	if tokens < 1 || d <= 0 {
		return
	}
	x := d.Seconds() / float64(tokens)
	t.mu.Lock()
	if w := t.workers[id]; w != nil {
		w.lat.tpot = ewma(w.lat.tpot, x, w.lat.tpot == 0)
	}
	t.mu.Unlock()
}

// outlierLocked reports whether w's latency is far outside its peers'.
func (t *Tracker) outlierLocked(w *tracked) bool {
	oc := &t.cfg.Outlier
	if oc.LatencyFactor < 0 || w.lat.n < oc.LatencyMinSamples {
		return false
	}
	now := t.cfg.Now()
	var buf [64]float64
	peers := buf[:0]
	for _, p := range t.workers {
		if p != w && p.lat.n >= oc.LatencyMinSamples && p.routable(now) {
			peers = append(peers, p.lat.spt)
		}
	}
	if len(peers) < defaultMinPeersForLatency {
		return false
	}
	return w.lat.spt > oc.LatencyFactor*median(peers)
}

// median sorts xs and returns its median.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// FirstByteDeadline returns how long a request to worker id may wait for
// its reply's first byte with nothing queued ahead of it (Send adds the
// work queued ahead): FirstByteFloor + FirstByteFactor × (the time to
// prefill max(promptTokens, MinPromptTokens) × (1 + promptTokens /
// AttentionTokens) at the worker's observed speed + outputTokens × its
// observed time per output token). Pass outputTokens 0 for a stream (its
// first byte comes with the first token) and the output budget for a
// whole reply (whose first byte comes at the end). A worker with no
// observation yet is assumed as fast as the median of those with one, or
// PrefillRate and TokenTime. The deadline scales with the prompt: a
// 128K-token prompt on a slow worker gets the time it needs.
func (t *Tracker) FirstByteDeadline(id uint64, promptTokens, outputTokens int) time.Duration {
	work := t.promptWork(promptTokens)
	t.mu.Lock()
	d := t.deadlineLocked(t.workers[id], work, outputTokens)
	t.mu.Unlock()
	return d
}

// deadlineLocked is the first-byte deadline on w (nil: a worker with no
// observation) for work short-prompt tokens of prefill and outputTokens
// generated before the first byte.
func (t *Tracker) deadlineLocked(w *tracked, work float64, outputTokens int) time.Duration {
	oc := &t.cfg.Outlier
	spt, tpot := 1/oc.PrefillRate, oc.TokenTime.Seconds()
	if w != nil && w.lat.any {
		spt = w.lat.spt
	} else if m, ok := t.medianLocked(func(l *latency) (float64, bool) { return l.spt, l.any }); ok {
		spt = m
	}
	if w != nil && w.lat.tpot > 0 {
		tpot = w.lat.tpot
	} else if m, ok := t.medianLocked(func(l *latency) (float64, bool) { return l.tpot, l.tpot > 0 }); ok {
		tpot = m
	}
	exp := work*spt + float64(max(outputTokens, 0))*tpot
	d := float64(oc.FirstByteFloor) + oc.FirstByteFactor*exp*float64(time.Second)
	if !(d < float64(math.MaxInt64/2)) {
		return math.MaxInt64 / 2
	}
	return time.Duration(d)
}

// promptWork is what prefilling n prompt tokens costs, in short-prompt
// tokens: max(n, MinPromptTokens) × (1 + n/AttentionTokens).
func (t *Tracker) promptWork(n int) float64 {
	oc := &t.cfg.Outlier
	w := float64(max(n, oc.MinPromptTokens, 1))
	if oc.AttentionTokens > 0 {
		w *= 1 + float64(max(n, 0))/float64(oc.AttentionTokens)
	}
	return w
}

func (t *Tracker) medianLocked(get func(*latency) (float64, bool)) (float64, bool) {
	var buf [64]float64
	xs := buf[:0]
	for _, w := range t.workers {
		if x, ok := get(&w.lat); ok {
			xs = append(xs, x)
		}
	}
	if len(xs) == 0 {
		return 0, false
	}
	return median(xs), true
}

// mayEjectLocked reports whether one more worker (w) may be ejected for
// its outcomes or latency under MaxEjectedShare.
func (t *Tracker) mayEjectLocked(now time.Time, w *tracked) bool {
	n := 0
	for _, o := range t.workers {
		if o != w && o.outlierEjected(now) {
			n++
		}
	}
	limit := max(1, int(math.Floor(t.cfg.Outlier.MaxEjectedShare*float64(len(t.workers))+1e-9)))
	return n < limit
}

// outlierEjected: the breaker is open for the worker's outcomes or
// latency, not because it cannot be reached.
func (w *tracked) outlierEjected(now time.Time) bool {
	return w.br.State(now) == Open && w.reason != ReasonConnect
}

// ejectEvent is an ejection (or its end) to log, count and hand to
// Config.OnEject, after the lock is released.
type ejectEvent struct {
	id      uint64
	label   string
	ejected bool
	reason  string
	until   time.Time
	n       uint64
	lastErr string
}

// ejectedLocked records that w's breaker just opened for reason.
func (t *Tracker) ejectedLocked(now time.Time, w *tracked, reason string) ejectEvent {
	w.reason, w.notified = reason, reason != ReasonConnect
	return ejectEvent{id: w.id, label: w.label, ejected: true, reason: reason, until: w.br.OpenUntil(now),
		n: w.br.Opens(), lastErr: w.lastErr}
}

// sweepLocked notices outlier ejections that ended by time (the breaker
// half-opened) and returns them for fire.
func (t *Tracker) sweepLocked(now time.Time, dst []ejectEvent) []ejectEvent {
	for _, w := range t.workers {
		if w.notified && w.br.State(now) != Open {
			w.notified = false
			dst = append(dst, ejectEvent{id: w.id, label: w.label, reason: w.reason})
		}
	}
	return dst
}

// fire logs and counts ejections and calls Config.OnEject for outlier
// ejections and their ends; no lock may be held.
func (t *Tracker) fire(evs []ejectEvent) {
	for _, e := range evs {
		if e.ejected {
			if t.m != nil {
				t.m.ejections.WithLabelValues(e.label, e.reason).Inc()
			}
			t.log.Warn("failover: worker ejected", "worker", e.id, "reason", e.reason, "until", e.until,
				"ejections", e.n, "last_error", e.lastErr)
		} else {
			t.log.Info("failover: worker ejection over; on trial", "worker", e.id, "reason", e.reason)
		}
		if t.cfg.OnEject != nil && e.reason != ReasonConnect {
			t.cfg.OnEject(e.id, e.ejected, e.reason)
		}
	}
}
