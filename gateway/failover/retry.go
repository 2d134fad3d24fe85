package failover

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Retry defaults (the SGLang gateway's).
const (
	DefaultMaxTries       = 5
	DefaultInitialBackoff = 50 * time.Millisecond
	DefaultMultiplier     = 1.5
	DefaultJitter         = 0.2
	DefaultMaxBackoff     = 5 * time.Second
)

// RetryConfig configures the retry policy for failures before the first
// byte. Zero fields mean the documented defaults.
type RetryConfig struct {
	// MaxTries bounds the attempts per request, the first included
	// (default 5; 1 disables retries).
	MaxTries int
	// InitialBackoff is the wait before the second attempt (default 50 ms);
	// each later wait is Multiplier (default 1.5) times the one before, at
	// most MaxBackoff (default 5 s).
	InitialBackoff time.Duration
	Multiplier     float64
	MaxBackoff     time.Duration
	// Jitter spreads each wait uniformly over ±Jitter of it (default 0.2);
	// negative means none.
	Jitter float64
	// Seed seeds the jitter (0: a random seed).
	Seed uint64
}

func (c *RetryConfig) withDefaults() (RetryConfig, error) {
	o := *c
	if o.MaxTries == 0 {
		o.MaxTries = DefaultMaxTries
	}
	if o.InitialBackoff == 0 {
		o.InitialBackoff = DefaultInitialBackoff
	}
	if o.Multiplier == 0 {
		o.Multiplier = DefaultMultiplier
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = DefaultMaxBackoff
	}
	switch {
	case o.Jitter == 0:
		o.Jitter = DefaultJitter
	case o.Jitter < 0:
		o.Jitter = 0
	}
	switch {
	case o.MaxTries < 0:
		return o, fmt.Errorf("%w: retry MaxTries %d < 0", ErrConfig, o.MaxTries)
	case o.InitialBackoff < 0 || o.MaxBackoff < 0:
		return o, fmt.Errorf("%w: retry backoffs must be ≥ 0", ErrConfig)
	case o.Multiplier < 1 || math.IsNaN(o.Multiplier) || math.IsInf(o.Multiplier, 0):
		return o, fmt.Errorf("%w: retry Multiplier %v < 1", ErrConfig, o.Multiplier)
	case o.Jitter >= 1 || math.IsNaN(o.Jitter):
		return o, fmt.Errorf("%w: retry Jitter %v must be in [0, 1)", ErrConfig, o.Jitter)
	}
	return o, nil
}

// Retry is a bounded retry policy with exponential backoff and jitter. It
// is safe for concurrent use.
type Retry struct {
	cfg   RetryConfig
	after func(time.Duration) <-chan time.Time

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// NewRetry returns the policy; after is the clock's timer (nil:
// time.After).
func NewRetry(cfg RetryConfig, after func(time.Duration) <-chan time.Time) (*Retry, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	seed := c.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	if after == nil {
		after = time.After
	}
	return &Retry{cfg: c, after: after, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// MaxTries returns the configured bound on attempts.
func (r *Retry) MaxTries() int { return r.cfg.MaxTries }

// Backoff returns the wait after the n-th failed attempt (n ≥ 1), before
// attempt n+1: InitialBackoff·Multiplier^(n−1), capped at MaxBackoff, with
// jitter.
func (r *Retry) Backoff(n int) time.Duration {
	d := float64(r.cfg.InitialBackoff) * math.Pow(r.cfg.Multiplier, float64(max(n-1, 0)))
	d = min(d, float64(r.cfg.MaxBackoff))
	if r.cfg.Jitter > 0 {
		r.mu.Lock()
		u := r.rng.Float64()
		r.mu.Unlock()
		d *= 1 + r.cfg.Jitter*(2*u-1)
	}
	return time.Duration(d)
}

// Do runs attempt (numbered from 1) until it reports done, MaxTries
// attempts were made, or ctx ends, waiting Backoff between attempts. It
// returns nil when an attempt reported done, ErrTriesExhausted when the last
// allowed attempt still asked for a retry, and ctx.Err() when ctx ended
// first (attempt is not called again once ctx has ended).
func (r *Retry) Do(ctx context.Context, attempt func(ctx context.Context, try int) (retry bool)) error {
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !attempt(ctx, try) {
			return nil
		}
		if try >= r.cfg.MaxTries {
			return ErrTriesExhausted
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.after(r.Backoff(try)):
		}
	}
}
