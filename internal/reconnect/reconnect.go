// Package reconnect is what the ZeroMQ subscribers of the engine adapters
// (engine/vllm's Subscriber, engine/sglang's StoreSubscriber) share: a
// connection loop with exponential backoff (Loop) and the start/close
// lifecycle of their loops (Group).
package reconnect

import (
	"context"
	"time"
)

// Loop calls session until ctx ends. session runs one connection and
// returns when it fails, saying whether any data arrived on it. Between
// attempts Loop waits a backoff that starts at min, doubles up to max after
// each failure, and starts over from min after a connection that delivered
// data. onRetry, if set, is told of each failure and the wait before the
// next attempt.
func Loop(ctx context.Context, min, max time.Duration, session func(context.Context) (gotData bool, err error),
	onRetry func(err error, wait time.Duration)) {
	loop(ctx, min, max, session, onRetry, realTimer)
}

// timer starts a wait of d: it returns a channel that fires when the wait
// is over and a function that abandons it.
type timer func(d time.Duration) (<-chan time.Time, func())

func realTimer(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// loop is Loop with the waits made by wait (tests inject a fake clock).
func loop(ctx context.Context, min, max time.Duration, session func(context.Context) (gotData bool, err error),
	onRetry func(err error, wait time.Duration), wait timer) {
	backoff := min
	for ctx.Err() == nil {
		got, err := session(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = min
		}
		if onRetry != nil {
			onRetry(err, backoff)
		}
		fired, stop := wait(backoff)
		select {
		case <-ctx.Done():
			stop()
			return
		case <-fired:
		}
		backoff = nextBackoff(backoff, max)
	}
}

func nextBackoff(d, max time.Duration) time.Duration {
	if d >= max/2 {
		return max
	}
	return 2 * d
}
