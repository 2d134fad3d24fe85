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
)

// BreakerConfig configures a per-worker circuit breaker. Zero fields mean
// the documented defaults.
type BreakerConfig struct {
	// FailureThreshold is the number of consecutive failures that opens a
	// closed breaker (default 5).
	FailureThreshold int
	// OpenFor is how long an open breaker stays open before it half-opens
	// and lets trial requests through (default 30 s). A successful health
	// probe half-opens it sooner.
	OpenFor time.Duration
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
	switch {
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
	fails    int       // consecutive failures while closed
	succs    int       // consecutive successes while half-open
	openedAt time.Time // when it last opened
	opens    uint64    // times it opened
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

func (b *Breaker) advance(now time.Time) {
	if b.state == Open && now.Sub(b.openedAt) >= b.cfg.OpenFor {
		b.state, b.succs = HalfOpen, 0
	}
}

func (b *Breaker) open(now time.Time) {
	b.state, b.openedAt, b.fails, b.succs = Open, now, 0, 0
	b.opens++
}

// Success records a request the worker served.
func (b *Breaker) Success(now time.Time) {
	b.advance(now)
	switch b.state {
	case Closed:
		b.fails = 0
	case HalfOpen:
		b.succs++
		if b.succs >= b.cfg.SuccessThreshold {
			b.state, b.succs, b.fails = Closed, 0, 0
		}
	}
	// Open: a late reply of a request sent before it opened changes
	// nothing.
}

// Failure records a failure of the worker. connect says the worker could
// not be reached at all: unless NoFastEject, that opens the breaker at
// once.
func (b *Breaker) Failure(now time.Time, connect bool) {
	b.advance(now)
	switch b.state {
	case Closed:
		b.fails++
		if b.fails >= b.cfg.FailureThreshold || (connect && !b.cfg.NoFastEject) {
			b.open(now)
		}
	case HalfOpen:
		b.open(now)
	}
	// Open: already out; the open period is not extended by requests that
	// were in flight when it opened.
}

// Record records an attempt's outcome: WorkerFailure outcomes as failures
// (Connect as a connect failure), ClientGone not at all, the rest as
// successes.
func (b *Breaker) Record(now time.Time, o Outcome) {
	switch {
	case o.Kind == ClientGone:
	case o.WorkerFailure():
		b.Failure(now, o.Kind == Connect)
	default:
		b.Success(now)
	}
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
