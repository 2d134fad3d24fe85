package failover

import (
	"fmt"
	"strconv"
	"time"
)

// Breaker defaults (the SGLang gateway's).
const (
	DefaultFailureThreshold = 5
	DefaultOpenFor          = 30 * time.Second
	DefaultSuccessThreshold = 2
	// DefaultTimeoutThreshold is the number of timeouts in a row that
	// open a breaker (a wedged worker times out every request).
	DefaultTimeoutThreshold = 3
	// DefaultMaxOpenForFactor: MaxOpenFor defaults to ten OpenFor.
	DefaultMaxOpenForFactor = 10
)

// BreakerConfig configures a per-worker circuit breaker. Zero fields mean
// the documented defaults.
type BreakerConfig struct {
	// FailureThreshold is the number of consecutive failures that opens a
	// closed breaker (default 5).
	FailureThreshold int
	// OpenFor is how long an open breaker stays open before it half-opens
	// and lets trial requests through (default 30 s), the first time.
	// Ejections grow as Envoy's do: the n-th opening lasts n × OpenFor,
	// capped at MaxOpenFor, where n, the ejection multiplier, goes up by
	// one at each opening and down by one for each OpenFor the breaker
	// then stays closed. A successful health probe half-opens a breaker
	// opened by a connect error sooner.
	OpenFor time.Duration
	// MaxOpenFor caps an opening (default 10 × OpenFor; below OpenFor:
	// OpenFor, i.e. no growth).
	MaxOpenFor time.Duration
	// TimeoutThreshold is the number of consecutive timeouts that opens a
	// closed breaker (default 3; it is never above FailureThreshold).
	// Timeouts also count towards FailureThreshold.
	TimeoutThreshold int
	// SuccessThreshold is the number of consecutive successes in half-open
	// that close the breaker (default 2). A failure in half-open reopens it.
	SuccessThreshold int
	// NoFastEject turns off fast passive ejection: by default a connect
	// error (refused, reset before any reply) opens the breaker at once,
	// so a dead worker leaves routing on its first failed request instead
	// of its fifth.
	NoFastEject bool
}

func (c *BreakerConfig) withDefaults() (BreakerConfig, error) {
	o := *c
	if o.FailureThreshold == 0 {
		o.FailureThreshold = DefaultFailureThreshold
	}
	if o.OpenFor == 0 {
		o.OpenFor = DefaultOpenFor
	}
	if o.SuccessThreshold == 0 {
		o.SuccessThreshold = DefaultSuccessThreshold
	}
	if o.MaxOpenFor == 0 {
		o.MaxOpenFor = DefaultMaxOpenForFactor * o.OpenFor
	}
	o.MaxOpenFor = max(o.MaxOpenFor, o.OpenFor)
	if o.TimeoutThreshold == 0 {
		o.TimeoutThreshold = DefaultTimeoutThreshold
	}
	o.TimeoutThreshold = min(o.TimeoutThreshold, o.FailureThreshold)
	switch {
	case o.TimeoutThreshold < 0:
		return o, fmt.Errorf("%w: breaker TimeoutThreshold %d < 0", ErrConfig, o.TimeoutThreshold)
	case o.FailureThreshold < 0:
		return o, fmt.Errorf("%w: breaker FailureThreshold %d < 0", ErrConfig, o.FailureThreshold)
	case o.OpenFor < 0:
		return o, fmt.Errorf("%w: breaker OpenFor %v < 0", ErrConfig, o.OpenFor)
	case o.SuccessThreshold < 0:
		return o, fmt.Errorf("%w: breaker SuccessThreshold %d < 0", ErrConfig, o.SuccessThreshold)
	}
	return o, nil
}

// State is a circuit breaker's state.
type State uint8

const (
	// Closed lets every request through and counts consecutive failures.
	Closed State = iota
	// Open refuses every request until OpenFor has passed (or a health
	// probe succeeds).
	Open
	// HalfOpen lets requests through on trial: SuccessThreshold successes
	// in a row close the breaker, one failure reopens it.
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Breaker is one worker's circuit breaker, the synchronous core: time is
// passed in, nothing runs in the background. A Breaker is not safe for
// concurrent use; Tracker wraps one per worker under its lock.
type Breaker struct {
	cfg      BreakerConfig
	state    State
	fails    int           // consecutive failures while closed
	touts    int           // consecutive timeouts while closed
	succs    int           // consecutive successes while half-open
	openedAt time.Time     // when it last opened
	openFor  time.Duration // how long this opening lasts
	closedAt time.Time     // when it last closed (zero: never opened)
	mult     int           // the ejection multiplier (see OpenFor)
	opens    uint64        // times it opened
}

// NewBreaker returns a closed breaker.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Breaker{cfg: c}, nil
}

// State returns the state at now: an open breaker whose OpenFor has passed
// is half-open.
func (b *Breaker) State(now time.Time) State {
	b.advance(now)
	return b.state
}

// Allow reports whether a request may go to the worker at now (closed or
// half-open).
func (b *Breaker) Allow(now time.Time) bool { return b.State(now) != Open }

// Opens returns how many times the breaker opened.
func (b *Breaker) Opens() uint64 { return b.opens }

// OpenUntil returns when the current opening ends (zero when not open).
func (b *Breaker) OpenUntil(now time.Time) time.Time {
	if b.State(now) != Open {
		return time.Time{}
	}
	return b.openedAt.Add(b.openFor)
}

// Multiplier returns the ejection multiplier: the next opening lasts
// (Multiplier()+1) × OpenFor, less decay, capped at MaxOpenFor.
func (b *Breaker) Multiplier() int { return b.mult }

func (b *Breaker) advance(now time.Time) {
	if b.state == Open && now.Sub(b.openedAt) >= b.openFor {
		b.state, b.succs = HalfOpen, 0
	}
}

func (b *Breaker) open(now time.Time) {
	if b.state == Closed && !b.closedAt.IsZero() && b.cfg.OpenFor > 0 {
		b.mult = max(0, b.mult-int(now.Sub(b.closedAt)/b.cfg.OpenFor))
	}
	b.mult++
	b.openFor = min(time.Duration(b.mult)*b.cfg.OpenFor, b.cfg.MaxOpenFor)
	b.state, b.openedAt, b.fails, b.touts, b.succs = Open, now, 0, 0, 0
	b.opens++
}

// Eject opens a closed or half-open breaker now (an outlier found by
// latency); false when it was already open.
func (b *Breaker) Eject(now time.Time) bool {
	if b.State(now) == Open {
		return false
	}
	b.open(now)
	return true
}

// Success records a request the worker served.
func (b *Breaker) Success(now time.Time) {
	b.advance(now)
	switch b.state {
	case Closed:
		b.fails, b.touts = 0, 0
	case HalfOpen:
		b.succs++
		if b.succs >= b.cfg.SuccessThreshold {
			b.state, b.succs, b.fails, b.touts, b.closedAt = Closed, 0, 0, 0, now
		}
	}
	// Open: a late reply of a request sent before it opened changes
	// nothing.
}

// Failure records a failure of the worker. connect says the worker could
// not be reached at all: unless NoFastEject, that opens the breaker at
// once.
func (b *Breaker) Failure(now time.Time, connect bool) {
	k := Other
	if connect {
		k = Connect
	}
	b.fail(now, k, true)
}

// fail records a failure of kind k; with mayOpen false a failure that
// would open the breaker (other than a connect error) leaves it as it is,
// its counts at the threshold, so the next failure tries again. It
// returns whether the breaker opened.
func (b *Breaker) fail(now time.Time, k Kind, mayOpen bool) bool {
	b.advance(now)
	switch b.state {
	case Closed:
		b.fails++
		if k == Timeout {
			b.touts++
		} else {
			b.touts = 0
		}
		trip := b.fails >= b.cfg.FailureThreshold || b.touts >= b.cfg.TimeoutThreshold
		switch {
		case k == Connect && !b.cfg.NoFastEject:
			b.open(now)
			return true
		case trip && mayOpen:
			b.open(now)
			return true
		case trip:
			b.fails, b.touts = min(b.fails, b.cfg.FailureThreshold-1), min(b.touts, b.cfg.TimeoutThreshold-1)
		}
	case HalfOpen:
		if mayOpen || k == Connect {
			b.open(now)
			return true
		}
	}
	// Open: already out; the open period is not extended by requests that
	// were in flight when it opened.
	return false
}

// Tripping reports whether a failure of kind k now would open the
// breaker.
func (b *Breaker) Tripping(now time.Time, k Kind) bool {
	switch b.State(now) {
	case Closed:
		t := b.touts
		if k == Timeout {
			t++
		}
		return b.fails+1 >= b.cfg.FailureThreshold || t >= b.cfg.TimeoutThreshold ||
			(k == Connect && !b.cfg.NoFastEject)
	case HalfOpen:
		return true
	}
	return false
}

// timeoutTrip reports whether one more timeout now would open a closed
// breaker by TimeoutThreshold alone (not by FailureThreshold).
func (b *Breaker) timeoutTrip(now time.Time) bool {
	return b.State(now) == Closed && b.touts+1 >= b.cfg.TimeoutThreshold && b.fails+1 < b.cfg.FailureThreshold
}

// Record records an attempt's outcome: WorkerFailure outcomes as failures
// (Connect as a connect failure, a Timeout of a worker that sent nothing
// towards TimeoutThreshold too), ClientGone and a Timeout after the worker
// sent part of its reply not at all, the rest as successes.
func (b *Breaker) Record(now time.Time, o Outcome) { b.record(now, o, true) }

func (b *Breaker) record(now time.Time, o Outcome, mayOpen bool) bool {
	switch {
	case o.Kind == ClientGone, o.Kind == Timeout && o.Sent:
		// Not the worker's failure, and not a success either: a slow
		// worker that sent part of its reply.
	case o.WorkerFailure():
		return b.fail(now, o.Kind, mayOpen)
	default:
		b.Success(now)
	}
	return false
}

// ProbeOK tells the breaker a health probe succeeded: an open breaker
// half-opens at once, so a restarted worker gets trial requests without
// waiting out OpenFor.
func (b *Breaker) ProbeOK(now time.Time) {
	b.advance(now)
	if b.state == Open {
		b.state, b.succs = HalfOpen, 0
	}
}
