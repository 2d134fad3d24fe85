package sglang

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/engine/vllm"

	"github.com/agentkv/agentkv/internal/reconnect"
	"github.com/agentkv/agentkv/sharedpool"
)

// StoreConfig configures a StoreSubscriber. Zero fields mean the documented
// defaults.
type StoreConfig struct {
	// Endpoint is the Mooncake master's KV event PUB socket,
	// "tcp://host:port". Required.
	Endpoint string
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
	// Pool receives the events. Required unless OnBatch is set. The
	// subscriber is its only writer; routers query it concurrently (Pool
	// is safe for that).
	Pool *sharedpool.Pool
	// OnBatch, if set, receives every decoded batch, before Pool (if any)
	// applies it; a relay forwards the batches to the event plane with it
	// (eventplane.Publisher.ApplyPool). It runs on the subscriber's
	// goroutine; the batch is valid only during the call. Without a Pool,
	// Gaps and Overflows stay 0 (the pools applying the batches see them)
	// and Applied counts the store and remove events forwarded.
	OnBatch func(*sharedpool.Batch)
	// OnReport, if set, is called after each applied batch with what it
	// did (gaps and overflows clear the pool; see sharedpool.Report). It
	// runs on the subscriber's goroutine and must not block.
	OnReport func(sharedpool.Report)
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// connection attempts; 0 means 100 ms and 5 s.
	ReconnectMin, ReconnectMax time.Duration
	// DialTimeout bounds one TCP connect; 0 means 2 s.
	DialTimeout time.Duration
	// MaxMessageBytes bounds one ZeroMQ message from the Mooncake master;
	// 0 means vllm.DefaultMaxMessageBytes (64 MiB). A larger frame header
	// drops the connection before the frame is allocated.
	MaxMessageBytes int64
	// Logger receives connection warnings; nil discards.
	Logger *slog.Logger
}

// StoreStats are a StoreSubscriber's counters.
type StoreStats struct {
	Batches    uint64 // batches applied
	Applied    uint64 // store and remove events applied
	Rejected   uint64 // malformed events inside readable batches
	Malformed  uint64 // messages that could not be decoded at all (skipped)
	Gaps       uint64 // sequence gaps (each cleared the pool)
	Overflows  uint64 // size-bound clears
	Reconnects uint64 // connections lost or refused
	Connected  bool
}

// StoreSubscriber feeds the HiCache + Mooncake store's KV events into a
// sharedpool.Pool: one ZeroMQ SUB connection to the Mooncake master,
// reconnecting with backoff. A sequence gap cannot be replayed (the master
// keeps no replay buffer), so the pool clears the affected state and
// reports the gap; the pool refills as objects are stored again.
//
// A StoreSubscriber is safe for concurrent use; Start launches one
// goroutine, which Close (or the context) stops.
type StoreSubscriber struct {
	cfg StoreConfig

	loop reconnect.Group

	batches, applied, rejected, malformed atomic.Uint64
	gaps, overflows, reconnects           atomic.Uint64
	connected                             atomic.Bool
}

// ErrNoPool means StoreConfig has neither a Pool nor an OnBatch.
var ErrNoPool = errors.New("sglang: StoreConfig.Pool or OnBatch is required")

var (
	errStoreStarted = errors.New("sglang: store subscriber already started")
	errStoreClosed  = errors.New("sglang: store subscriber closed")
)

// NewStoreSubscriber validates cfg.
func NewStoreSubscriber(cfg StoreConfig) (*StoreSubscriber, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("sglang: StoreConfig.Endpoint is required")
	}
	if cfg.Pool == nil && cfg.OnBatch == nil {
		return nil, ErrNoPool
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = 100 * time.Millisecond
	}
	if cfg.ReconnectMax <= 0 {
		cfg.ReconnectMax = 5 * time.Second
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &StoreSubscriber{cfg: cfg, loop: reconnect.Group{Started: errStoreStarted, Closed: errStoreClosed}}, nil
}

// Start connects in the background and returns at once.
func (s *StoreSubscriber) Start(ctx context.Context) error {
	return s.loop.Start(ctx, 1, func(ctx context.Context, _ int) { s.run(ctx) })
}

// Close stops the subscriber and waits for its goroutine. It is safe to
// call more than once.
func (s *StoreSubscriber) Close() error {
	s.loop.Close()
	return nil
}

// Stats returns the counters.
func (s *StoreSubscriber) Stats() StoreStats {
	return StoreStats{
		Batches: s.batches.Load(), Applied: s.applied.Load(), Rejected: s.rejected.Load(),
		Malformed: s.malformed.Load(), Gaps: s.gaps.Load(), Overflows: s.overflows.Load(),
		Reconnects: s.reconnects.Load(), Connected: s.connected.Load(),
	}
}

// Handle applies one ZeroMQ message's frames to the pool. The subscriber
// calls it for every message; it is exported so tests and other transports
// can feed frames directly. A message that cannot be decoded is counted and
// skipped: the next batch's sequence number reveals what was lost.
func (s *StoreSubscriber) Handle(frames [][]byte) {
	var rep sharedpool.Report
	var err error
	switch {
	case s.cfg.OnBatch == nil:
		rep, err = s.cfg.Pool.ApplyFrames(frames)
	default:
		var b sharedpool.Batch
		if b, err = sharedpool.DecodeFrames(frames); err != nil {
			break
		}
		s.cfg.OnBatch(&b)
		if s.cfg.Pool != nil {
			rep = s.cfg.Pool.Apply(&b)
		} else {
			rep = sharedpool.Report{Seq: b.Seq, Applied: len(b.Events), Rejected: len(b.Rejected)}
		}
	}
	if err != nil {
		s.malformed.Add(1)
		s.cfg.Logger.Warn("sglang: malformed store event message skipped", "err", err)
		return
	}
	s.batches.Add(1)
	s.applied.Add(uint64(rep.Applied))
	s.rejected.Add(uint64(rep.Rejected))
	s.overflows.Add(uint64(rep.Overflows))
	if rep.Gap != nil {
		s.gaps.Add(1)
		s.cfg.Logger.Warn("sglang: store event sequence gap; shared pool state cleared", "seq", rep.Seq)
	}
	if s.cfg.OnReport != nil {
		s.cfg.OnReport(rep)
	}
}

func (s *StoreSubscriber) run(ctx context.Context) {
	reconnect.Loop(ctx, s.cfg.ReconnectMin, s.cfg.ReconnectMax, func(ctx context.Context) (bool, error) {
		got, err := s.session(ctx)
		s.connected.Store(false)
		return got, err
	}, func(err error, wait time.Duration) {
		s.reconnects.Add(1)
		s.cfg.Logger.Warn("sglang: store event connection lost", "endpoint", s.cfg.Endpoint, "err", err, "retry_in", wait)
	})
}

// session connects once and handles messages until the connection fails.
// It reports whether any message arrived.
func (s *StoreSubscriber) session(ctx context.Context) (bool, error) {
	return vllm.Receive(ctx, s.cfg.Endpoint, s.cfg.Topic, s.cfg.MaxMessageBytes, s.cfg.DialTimeout,
		func() { s.connected.Store(true) },
		func(_ context.Context, frames [][]byte) error { s.Handle(frames); return nil })
}
