package vllm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/go-zeromq/zmq4"

	"github.com/agentkv/agentkv/internal/reconnect"
)

// Default subscriber settings.
const (
	DefaultReconnectMin  = 100 * time.Millisecond
	DefaultReconnectMax  = 5 * time.Second
	DefaultReplayTimeout = 2 * time.Second
	DefaultDialTimeout   = 2 * time.Second
)

// Subscriber errors.
var (
	ErrNoEndpoint = errors.New("vllm: no event endpoint")
	ErrEndpoint   = errors.New("vllm: endpoint cannot be offset per DP rank")
	ErrStarted    = errors.New("vllm: subscriber already started")
	ErrClosed     = errors.New("vllm: subscriber closed")
)

// Config configures a Subscriber. Zero fields mean the documented
// defaults.
type Config struct {
	// WorkerID identifies the engine instance in emitted events.
	WorkerID uint64
	// Endpoint is the publisher's PUB socket, "tcp://host:port" (vLLM's
	// --kv-events-config endpoint, default port 5557). DP rank r publishes
	// on port+r. Required.
	Endpoint string
	// ReplayEndpoint is the publisher's ROUTER replay socket, offset per
	// rank the same way; empty disables replay, so gaps end in Cleared.
	ReplayEndpoint string
	// DPRanks is the number of data-parallel ranks; 0 means 1.
	DPRanks int
	// Topic is the subscription prefix; "" receives every topic.
	Topic string
	// Sink receives the events. With more than one rank it is called from
	// one goroutine per rank concurrently. Required.
	Sink EventSink
	// Decode configures the payload decoder.
	Decode DecodeOptions
	// CatchUp replays the publisher's buffer from sequence 0 on the first
	// batch, so blocks stored before the subscriber joined are indexed.
	CatchUp bool
	// Epoch extracts a publisher-lifetime token from the topic frame; see
	// StreamConfig.Epoch.
	Epoch func(topic []byte) []byte
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// connection attempts; 0 means 100 ms and 5 s.
	ReconnectMin, ReconnectMax time.Duration
	// ReplayTimeout bounds one replay request; 0 means 2 s.
	ReplayTimeout time.Duration
	// DialTimeout bounds one TCP connect; 0 means 2 s.
	DialTimeout time.Duration
	// MaxMessageBytes bounds one ZeroMQ message from the engine (live or
	// replayed, all frames together); 0 means DefaultMaxMessageBytes
	// (64 MiB). A larger frame header drops the connection before the
	// frame is allocated (ErrMessageTooLarge, logged; the rank
	// reconnects).
	MaxMessageBytes int64
	// FirstEventID is every rank's first EventID; see StreamConfig.
	FirstEventID uint64
	// Logger receives connection and stream warnings; nil discards.
	Logger *slog.Logger
}

// Subscriber receives KV events from every DP rank of one engine over
// ZeroMQ, one SUB socket and one goroutine per rank, and applies them to a
// Sink through a Stream per rank. It reconnects with exponential backoff
// and resynchronises sequence gaps through the replay socket.
//
// A Subscriber is safe for concurrent use. Start it once; Close stops every
// goroutine it started and waits for them.
type Subscriber struct {
	cfg     Config
	streams []*Stream
	eps     []string

	loops reconnect.Group // one per rank

	conns      []atomic.Bool   // per rank: connected now
	reconnects []atomic.Uint64 // per rank: connections lost or refused
}

// NewSubscriber validates cfg and returns a Subscriber that is not yet
// connected.
func NewSubscriber(cfg Config) (*Subscriber, error) {
	if cfg.Endpoint == "" {
		return nil, ErrNoEndpoint
	}
	if cfg.Sink == nil {
		return nil, ErrNoSink
	}
	if cfg.DPRanks < 0 {
		return nil, fmt.Errorf("vllm: DPRanks %d < 0", cfg.DPRanks)
	}
	if cfg.DPRanks == 0 {
		cfg.DPRanks = 1
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = DefaultReconnectMin
	}
	if cfg.ReconnectMax <= 0 {
		cfg.ReconnectMax = DefaultReconnectMax
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = DefaultReplayTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Subscriber{cfg: cfg, loops: reconnect.Group{Started: ErrStarted, Closed: ErrClosed},
		conns:      make([]atomic.Bool, cfg.DPRanks),
		reconnects: make([]atomic.Uint64, cfg.DPRanks),
	}
	for r := 0; r < cfg.DPRanks; r++ {
		ep, err := RankEndpoint(cfg.Endpoint, r)
		if err != nil {
			return nil, err
		}
		s.eps = append(s.eps, ep)
		var rp Replayer
		if cfg.ReplayEndpoint != "" {
			rep, err := RankEndpoint(cfg.ReplayEndpoint, r)
			if err != nil {
				return nil, err
			}
			rp = &zmqReplayer{endpoint: rep, timeout: cfg.ReplayTimeout, dial: cfg.DialTimeout, max: cfg.MaxMessageBytes}
		}
		st, err := NewStream(StreamConfig{
			Worker:   flashindex.Worker{ID: cfg.WorkerID, DPRank: uint32(r)},
			Sink:     cfg.Sink,
			Replayer: rp,
			Decode:   cfg.Decode,
			CatchUp:  cfg.CatchUp,
			Epoch:    cfg.Epoch,
			Logger:   cfg.Logger,

			FirstEventID: cfg.FirstEventID,
		})
		if err != nil {
			return nil, err
		}
		s.streams = append(s.streams, st)
	}
	return s, nil
}

// RankEndpoint returns the endpoint of DP rank r: vLLM and SGLang add the
// rank to a TCP port ("tcp://h:5557" → "tcp://h:5558" for rank 1) and
// append "_dp<r>" to an inproc name. Rank 0 is the endpoint itself.
func RankEndpoint(endpoint string, rank int) (string, error) {
	if rank == 0 {
		return endpoint, nil
	}
	if strings.HasPrefix(endpoint, "inproc://") {
		return endpoint + "_dp" + strconv.Itoa(rank), nil
	}
	if !strings.HasPrefix(endpoint, "tcp://") {
		return "", fmt.Errorf("%w: %q", ErrEndpoint, endpoint)
	}
	i := strings.LastIndexByte(endpoint, ':')
	port, err := strconv.Atoi(endpoint[i+1:])
	if i < len("tcp://") || err != nil || port+rank > 65535 {
		return "", fmt.Errorf("%w: %q", ErrEndpoint, endpoint)
	}
	return endpoint[:i+1] + strconv.Itoa(port+rank), nil
}

// DPRanks returns the number of ranks subscribed.
func (s *Subscriber) DPRanks() int { return len(s.streams) }

// Stream returns rank r's Stream, for its Stats and LastError.
func (s *Subscriber) Stream(rank int) *Stream { return s.streams[rank] }

// RankStats is one rank's connection state and stream counters.
type RankStats struct {
	Endpoint   string
	Connected  bool
	Reconnects uint64 // connections lost or refused
	StreamStats
}

// Stats returns every rank's counters, indexed by rank.
func (s *Subscriber) Stats() []RankStats {
	out := make([]RankStats, len(s.streams))
	for r, st := range s.streams {
		out[r] = RankStats{Endpoint: s.eps[r], Connected: s.conns[r].Load(),
			Reconnects: s.reconnects[r].Load(), StreamStats: st.Stats()}
	}
	return out
}

// Start connects every rank in the background and returns at once. The
// goroutines run until ctx is done or Close is called.
func (s *Subscriber) Start(ctx context.Context) error {
	return s.loops.Start(ctx, len(s.streams), s.run)
}

// Close stops the subscriber and waits for its goroutines. It is safe to
// call more than once.
func (s *Subscriber) Close() error {
	s.loops.Close()
	return nil
}

var quietZMQ = zmq4.WithLogger(log.New(io.Discard, "", 0))

func (s *Subscriber) run(ctx context.Context, rank int) {
	st := s.streams[rank]
	reconnect.Loop(ctx, s.cfg.ReconnectMin, s.cfg.ReconnectMax, func(ctx context.Context) (bool, error) {
		got, err := s.session(ctx, rank, st)
		s.conns[rank].Store(false)
		return got, err
	}, func(err error, wait time.Duration) {
		s.reconnects[rank].Add(1)
		s.cfg.Logger.Warn("vllm: event connection lost", "endpoint", s.eps[rank], "err", err, "retry_in", wait)
	})
}

// session connects once and handles messages until the connection fails.
// It reports whether any message arrived.
func (s *Subscriber) session(ctx context.Context, rank int, st *Stream) (gotData bool, err error) {
	return Receive(ctx, s.eps[rank], s.cfg.Topic, s.cfg.MaxMessageBytes, s.cfg.DialTimeout,
		func() { s.conns[rank].Store(true) }, st.Handle)
}

// Receive is one connection of an engine's ZeroMQ event subscriber: a SUB
// socket dialled to endpoint (over LimitEndpoint, messages capped at
// maxBytes as LimitZMQ does; one try, dialTimeout), subscribed to topic.
// It calls connected once dialled, then hands every message's frames to
// handle until the connection fails, ctx ends, or handle returns an
// error, and reports whether any message arrived. Subscriber runs it per
// rank, sglang.StoreSubscriber for the Mooncake master, each under
// reconnect's Loop.
func Receive(ctx context.Context, endpoint, topic string, maxBytes int64, dialTimeout time.Duration,
	connected func(), handle func(ctx context.Context, frames [][]byte) error) (gotData bool, err error) {
	sctx, cancel := context.WithCancel(LimitZMQ(ctx, maxBytes))
	defer cancel()
	sub := zmq4.NewSub(sctx, quietZMQ, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(dialTimeout))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, topic); err != nil {
		return false, err
	}
	if err := sub.Dial(LimitEndpoint(endpoint)); err != nil {
		return false, err
	}
	connected()
	got := false
	for {
		msg, err := sub.Recv()
		if err != nil {
			return got, err
		}
		got = true
		if err := handle(ctx, msg.Frames); err != nil {
			return got, err
		}
	}
}

// zmqReplayer asks a vLLM/SGLang ROUTER replay socket for buffered batches:
// it sends ["", seq] (an empty delimiter, then the start sequence number as
// 8 bytes big-endian) from a DEALER socket and reads ["", seq, payload]
// frames until seq is -1.
type zmqReplayer struct {
	endpoint string
	timeout  time.Duration
	dial     time.Duration
	max      int64 // MaxMessageBytes
}

func (z *zmqReplayer) Replay(ctx context.Context, from uint64, fn func(uint64, []byte)) error {
	ctx, cancel := context.WithTimeout(ctx, z.timeout)
	defer cancel()
	d := zmq4.NewDealer(LimitZMQ(ctx, z.max), quietZMQ, zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(z.dial))
	defer d.Close()
	if err := d.Dial(LimitEndpoint(z.endpoint)); err != nil {
		return fmt.Errorf("vllm: replay: %w", err)
	}
	req := make([]byte, 8)
	binary.BigEndian.PutUint64(req, from)
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, req)); err != nil {
		return fmt.Errorf("vllm: replay request: %w", err)
	}
	for {
		msg, err := d.Recv()
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("vllm: replay: %w", cerr)
			}
			return fmt.Errorf("vllm: replay: %w", err)
		}
		f := msg.Frames
		if len(f) > 0 && len(f[0]) == 0 {
			f = f[1:] // the empty delimiter
		}
		if len(f) != 2 || len(f[0]) != 8 {
			return fmt.Errorf("vllm: replay: unexpected %d-frame reply", len(msg.Frames))
		}
		seq := binary.BigEndian.Uint64(f[0])
		if seq == EndSeq {
			return nil
		}
		fn(seq, f[1])
	}
}
