package kvhint

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Sink delivers envelopes to one worker (a worker adapter implements it:
// an HTTP call, a ZMQ side channel, a field on the next request). Send may
// block; wrap a Sink in a Queue to keep routing from ever waiting on it.
// Send takes ownership of env: the caller must not modify it afterwards.
type Sink interface {
	Send(ctx context.Context, env *Envelope) error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, env *Envelope) error

// Send calls f(ctx, env).
func (f SinkFunc) Send(ctx context.Context, env *Envelope) error { return f(ctx, env) }

// QueueConfig configures a Queue. Zero fields mean the defaults.
type QueueConfig struct {
	// Capacity is how many envelopes may wait. Default 256.
	Capacity int
	// Timeout bounds each call to the inner sink (through its context).
	// Zero means no per-call timeout.
	Timeout time.Duration
	// DropOldest makes a full queue drop its oldest envelope to make room
	// for the new one (newer hints supersede older ones). By default the
	// new envelope is dropped.
	DropOldest bool
}

// QueueStats are a Queue's counters.
type QueueStats struct {
	Enqueued  uint64 // envelopes accepted into the queue
	Delivered uint64 // inner Send returned nil
	Failed    uint64 // inner Send returned an error
	Dropped   uint64 // new envelopes refused because the queue was full
	Evicted   uint64 // queued envelopes dropped to make room (DropOldest)
	Discarded uint64 // queued but never sent: Close gave up before reaching them
	Closed    uint64 // Send called after Close
	Queued    int    // waiting now
}

// Queue is a non-blocking Sink: Send enqueues and returns at once, and one
// goroutine delivers queued envelopes to the inner Sink in order. When the
// queue is full the envelope (or, with DropOldest, the oldest queued one) is
// dropped and counted; routing never waits on a slow engine.
//
// A Queue is safe for concurrent use. It calls the inner Sink from its own
// goroutine only, never while holding a lock. Close stops it.
type Queue struct {
	inner   Sink
	timeout time.Duration
	oldest  bool

	mu     sync.RWMutex // guards closed and sending on ch (so ch is never sent to after close)
	closed bool
	ch     chan *Envelope

	ctx    context.Context // canceled when Close gives up; passed to inner Send
	cancel context.CancelFunc
	done   chan struct{} // closed when the delivery goroutine exits

	enqueued, delivered, failed, dropped, evicted, discarded, afterClose atomic.Uint64
}

// NewQueue starts a Queue in front of inner.
func NewQueue(inner Sink, cfg QueueConfig) (*Queue, error) {
	if inner == nil {
		return nil, configErr("queue: nil inner sink")
	}
	if cfg.Capacity < 0 || cfg.Timeout < 0 {
		return nil, configErr("queue: negative Capacity or Timeout")
	}
	if cfg.Capacity == 0 {
		cfg.Capacity = 256
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{
		inner: inner, timeout: cfg.Timeout, oldest: cfg.DropOldest,
		ch: make(chan *Envelope, cfg.Capacity), ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
	go q.run()
	return q, nil
}

// Send enqueues env without blocking. It returns ErrQueueFull when env was
// dropped (never with DropOldest, which drops an older envelope instead) and
// ErrClosed after Close. ctx is not used for the enqueue (it cannot block);
// deliveries use the Queue's own context. The Queue owns env from now on.
func (q *Queue) Send(_ context.Context, env *Envelope) error {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.afterClose.Add(1)
		return ErrClosed
	}
	select {
	case q.ch <- env:
		q.enqueued.Add(1)
		return nil
	default:
	}
	if !q.oldest {
		q.dropped.Add(1)
		return ErrQueueFull
	}
	// Make room by dropping the oldest; other senders may race for the
	// slot, so retry a bounded number of times.
	for range 4 {
		select {
		case <-q.ch:
			q.evicted.Add(1)
		default:
		}
		select {
		case q.ch <- env:
			q.enqueued.Add(1)
			return nil
		default:
		}
	}
	q.dropped.Add(1)
	return ErrQueueFull
}

func (q *Queue) run() {
	defer close(q.done)
	for env := range q.ch {
		if q.ctx.Err() != nil {
			q.discarded.Add(1)
			continue
		}
		ctx, cancel := q.ctx, context.CancelFunc(nil)
		if q.timeout > 0 {
			ctx, cancel = context.WithTimeout(q.ctx, q.timeout)
		}
		err := q.inner.Send(ctx, env)
		if cancel != nil {
			cancel()
		}
		if err != nil {
			q.failed.Add(1)
		} else {
			q.delivered.Add(1)
		}
	}
}

// Close stops accepting envelopes and waits until the queued ones are
// delivered or ctx is done. In the latter case it cancels the context of the
// inner Send in progress, discards what is still queued, and returns
// ctx.Err() without waiting further for the inner sink. Calling Close again
// waits the same way.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		q.cancel()
		return ctx.Err()
	}
}

// Done is closed when the delivery goroutine has exited (after Close).
func (q *Queue) Done() <-chan struct{} { return q.done }

// Stats returns the counters. Once Done is closed,
// Enqueued = Delivered + Failed + Evicted + Discarded; before that, Queued
// and at most one envelope in flight make up the difference.
func (q *Queue) Stats() QueueStats {
	return QueueStats{
		Enqueued: q.enqueued.Load(), Delivered: q.delivered.Load(), Failed: q.failed.Load(),
		Dropped: q.dropped.Load(), Evicted: q.evicted.Load(), Discarded: q.discarded.Load(), Closed: q.afterClose.Load(),
		Queued: len(q.ch),
	}
}
