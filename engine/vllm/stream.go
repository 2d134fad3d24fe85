package vllm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/agentkv/agentkv/flashindex"
)

// EndSeq is the sequence number that ends a replay stream: -1 as an 8-byte
// big-endian two's complement integer.
const EndSeq = ^uint64(0)

// EventSink receives normalised events; *flashindex.Index satisfies it. The
// sink must not retain the *Event or its slices after Apply returns.
type EventSink interface {
	Apply(ev *flashindex.Event) error
}

// SinkFunc adapts a function to EventSink.
type SinkFunc func(ev *flashindex.Event) error

// Apply calls f(ev).
func (f SinkFunc) Apply(ev *flashindex.Event) error { return f(ev) }

// Replayer fetches buffered batches from a publisher, starting at sequence
// number from, and calls fn for each in order. It returns when the
// publisher ends the stream (nil), or on failure or ctx expiry (an error).
type Replayer interface {
	Replay(ctx context.Context, from uint64, fn func(seq uint64, payload []byte)) error
}

// ReplayFunc adapts a function to Replayer.
type ReplayFunc func(ctx context.Context, from uint64, fn func(seq uint64, payload []byte)) error

// Replay calls f.
func (f ReplayFunc) Replay(ctx context.Context, from uint64, fn func(seq uint64, payload []byte)) error {
	return f(ctx, from, fn)
}

// StreamConfig configures a Stream. Zero fields mean the documented
// defaults.
type StreamConfig struct {
	// Worker is stamped on every emitted event.
	Worker flashindex.Worker
	// Sink receives the events. Required.
	Sink EventSink
	// Replayer fills sequence gaps; nil means gaps cannot be filled and
	// always end in a Cleared event.
	Replayer Replayer
	// Decode configures the payload decoder.
	Decode DecodeOptions
	// CatchUp treats the first batch seen as a gap from sequence 0, so the
	// replay buffer fills in what the publisher sent before the subscriber
	// joined. Off by default: the stream starts at the first batch seen.
	CatchUp bool
	// Epoch, if set, extracts a publisher-lifetime token from the topic
	// frame (SGLang appends one); a change of token is a restart.
	Epoch func(topic []byte) []byte
	// FirstEventID is the EventID of the first event; 0 means 1. An index
	// ignores event ids at or below the last one it applied for a worker,
	// so a new Stream feeding an index that already holds events for the
	// worker (one restored from a snapshot, say) must start above them.
	FirstEventID uint64
	// Logger receives warnings (gaps, drops, sink errors); nil discards.
	Logger *slog.Logger
}

// StreamStats counts what a Stream did. All counts are totals since the
// Stream was built.
type StreamStats struct {
	Frames          uint64 // live messages handled
	BadFrames       uint64 // messages that were not [topic, 8-byte seq, payload]
	Batches         uint64 // payloads decoded, live or replayed
	Malformed       uint64 // payloads dropped whole (ErrMalformed)
	Events          uint64 // events emitted to the sink, Cleared resets included
	Dropped         uint64 // events dropped (unknown type, medium, bad field)
	UnknownType     uint64 // of Dropped: unknown event type
	UnknownMedium   uint64 // of Dropped: unknown medium
	Filtered        uint64 // events of other KV cache groups
	Rejected        uint64 // events the sink returned an error for
	Duplicates      uint64 // batches already applied, skipped
	Gaps            uint64 // sequence gaps seen
	GapsRecovered   uint64 // gaps filled completely by replay
	GapsUnrecovered uint64 // gaps that ended in a Cleared event
	ReplayErrors    uint64 // replay requests that failed
	Replayed        uint64 // batches applied from replay
	Restarts        uint64 // publisher restarts (sequence went back, new epoch)
	DPRankMismatch  uint64 // batches whose dp rank differs from the Worker's
	LastSeq         uint64 // the last sequence number applied
}

// Stream is the synchronous core of a subscription to one publisher (one DP
// rank): it checks sequence numbers, fills gaps through the Replayer,
// decodes payloads and hands events to the Sink. Every emitted event gets
// the next EventID of the stream, so IDs are consecutive from
// StreamConfig.FirstEventID (default 1).
//
// When a gap cannot be filled (no Replayer, the replay failed, or the
// publisher's buffer no longer holds the batches) and when the publisher
// restarts, the Stream emits a Cleared event for its Worker: the index then
// under-reports that worker's cache rather than keeping stale blocks.
// Malformed payloads and undecodable events are counted and skipped.
//
// Handle is not safe for concurrent use; Stats is, from any goroutine.
type Stream struct {
	cfg    StreamConfig
	dec    *Decoder
	emitFn func(*flashindex.Event) error

	started  bool
	joining  bool   // CatchUp: the first batch seen was past 0 (its fill is no gap to warn of)
	expected uint64 // next sequence number to apply
	lastLive uint64 // last sequence number seen on the live socket
	epoch    []byte
	nextID   uint64
	cleared  flashindex.Event
	isClear  bool // the last event emitted was a Cleared
	lastErr  atomic.Pointer[errBox]

	mu    sync.Mutex // guards stats
	stats StreamStats
}

type errBox struct{ err error }

// ErrNoSink reports a StreamConfig or Config without a Sink.
var ErrNoSink = errors.New("vllm: no event sink")

// NewStream returns a Stream.
func NewStream(cfg StreamConfig) (*Stream, error) {
	if cfg.Sink == nil {
		return nil, ErrNoSink
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Stream{cfg: cfg, dec: NewDecoder(cfg.Decode), nextID: max(cfg.FirstEventID, 1)}
	s.emitFn = s.emit
	return s, nil
}

// Worker returns the worker the Stream stamps on its events.
func (s *Stream) Worker() flashindex.Worker { return s.cfg.Worker }

// Stats returns a snapshot of the counters.
func (s *Stream) Stats() StreamStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// LastError returns the last sink or decoding error, or nil.
func (s *Stream) LastError() error {
	if b := s.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

func (s *Stream) count(f func(st *StreamStats)) {
	s.mu.Lock()
	f(&s.stats)
	s.mu.Unlock()
}

func (s *Stream) emit(ev *flashindex.Event) error {
	s.isClear = ev.Kind == flashindex.Cleared
	ev.Worker = s.cfg.Worker
	ev.EventID = s.nextID
	s.nextID++
	return s.cfg.Sink.Apply(ev)
}

func (s *Stream) clear(reason string) {
	if s.isClear {
		return // a second Cleared in a row changes nothing
	}
	s.cleared = flashindex.Event{Kind: flashindex.Cleared}
	err := s.emit(&s.cleared)
	s.count(func(st *StreamStats) {
		st.Events++
		if err != nil {
			st.Rejected++
		}
	})
	if err != nil {
		s.lastErr.Store(&errBox{err})
	}
	s.cfg.Logger.Warn("vllm: clearing worker state", "worker", s.cfg.Worker.String(), "reason", reason)
}

// Handle processes one live message [topic, seq, payload]. It returns only
// ctx's error (when a replay was cut short); bad input is counted.
func (s *Stream) Handle(ctx context.Context, frames [][]byte) error {
	s.count(func(st *StreamStats) { st.Frames++ })
	if len(frames) != 3 || len(frames[1]) != 8 {
		s.count(func(st *StreamStats) { st.BadFrames++ })
		return nil
	}
	return s.Offer(ctx, frames[0], binary.BigEndian.Uint64(frames[1]), frames[2])
}

// Offer processes one live batch already split into its parts.
func (s *Stream) Offer(ctx context.Context, topic []byte, seq uint64, payload []byte) error {
	if seq == EndSeq {
		s.count(func(st *StreamStats) { st.BadFrames++ })
		return nil
	}
	restart := false
	if s.cfg.Epoch != nil {
		e := s.cfg.Epoch(topic)
		if s.started && !bytes.Equal(e, s.epoch) {
			restart = true
		}
		s.epoch = append(s.epoch[:0], e...)
	}
	switch {
	case !s.started:
		s.started = true
		s.expected = seq
		if s.cfg.CatchUp {
			s.expected, s.joining = 0, seq > 0
		}
	case restart || seq <= s.lastLive:
		// ZeroMQ never repeats or reorders a message on one connection,
		// so a live sequence number that does not rise means a new
		// publisher, and a restarted engine starts with an empty cache.
		s.count(func(st *StreamStats) { st.Restarts++ })
		s.clear("publisher restarted")
		s.expected = 0
	}
	s.lastLive = seq
	if seq < s.expected {
		s.count(func(st *StreamStats) { st.Duplicates++ })
		return nil
	}
	if seq > s.expected {
		if err := s.fill(ctx, seq); err != nil {
			return err
		}
		if seq < s.expected {
			s.count(func(st *StreamStats) { st.Duplicates++ })
			return nil
		}
	}
	s.apply(seq, payload)
	return nil
}

// fill replays [s.expected, seq) and resets the worker if that fails.
func (s *Stream) fill(ctx context.Context, seq uint64) error {
	s.count(func(st *StreamStats) { st.Gaps++ })
	if s.joining {
		s.cfg.Logger.Info("vllm: reading what the publisher sent before this subscriber joined from its replay buffer",
			"worker", s.cfg.Worker.String(), "first_seen", seq)
	} else {
		s.cfg.Logger.Warn("vllm: sequence gap", "worker", s.cfg.Worker.String(), "expected", s.expected, "got", seq)
	}
	s.joining = false
	holed := false
	if s.cfg.Replayer != nil {
		err := s.cfg.Replayer.Replay(ctx, s.expected, func(rseq uint64, payload []byte) {
			if rseq == EndSeq || rseq < s.expected {
				return
			}
			if rseq > s.expected && !holed {
				// The publisher's buffer no longer reaches back far enough.
				holed = true
				s.clear("replay buffer does not reach the gap")
			}
			s.count(func(st *StreamStats) { st.Replayed++ })
			s.apply(rseq, payload)
		})
		if err != nil {
			s.count(func(st *StreamStats) { st.ReplayErrors++ })
			s.cfg.Logger.Warn("vllm: replay failed", "worker", s.cfg.Worker.String(), "err", err)
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
		}
	}
	if s.expected < seq {
		if !holed {
			s.clear("sequence gap not recovered")
		}
		holed = true
		s.expected = seq
	}
	s.count(func(st *StreamStats) {
		if holed {
			st.GapsUnrecovered++
		} else {
			st.GapsRecovered++
		}
	})
	return nil
}

func (s *Stream) apply(seq uint64, payload []byte) {
	s.expected = seq + 1
	b, err := s.dec.Decode(payload, s.emitFn)
	s.count(func(st *StreamStats) {
		st.Batches++
		st.LastSeq = seq
		st.Events += uint64(b.Emitted)
		st.Dropped += uint64(b.Dropped)
		st.UnknownType += uint64(b.UnknownType)
		st.UnknownMedium += uint64(b.UnknownMed)
		st.Filtered += uint64(b.Filtered)
		st.Rejected += uint64(b.Rejected)
		if err != nil {
			st.Malformed++
		}
		if b.DPRank >= 0 && uint32(b.DPRank) != s.cfg.Worker.DPRank {
			st.DPRankMismatch++
		}
	})
	switch {
	case err != nil:
		s.lastErr.Store(&errBox{err})
		s.cfg.Logger.Warn("vllm: dropped malformed batch", "worker", s.cfg.Worker.String(), "seq", seq, "err", err)
	case b.FirstReject != nil:
		s.lastErr.Store(&errBox{b.FirstReject})
		s.cfg.Logger.Warn("vllm: sink rejected events", "worker", s.cfg.Worker.String(), "seq", seq, "n", b.Rejected, "err", b.FirstReject)
	case b.FirstDrop != nil:
		s.lastErr.Store(&errBox{b.FirstDrop})
		s.cfg.Logger.Warn("vllm: dropped events", "worker", s.cfg.Worker.String(), "seq", seq, "n", b.Dropped, "err", b.FirstDrop)
	}
}
