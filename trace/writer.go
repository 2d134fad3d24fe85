package trace

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression selects how the Writer compresses its output.
type Compression int

const (
	// None writes plain JSONL.
	None Compression = iota
	// Gzip writes one gzip stream per segment (.jsonl.gz), as Dynamo's
	// default sink does; Dynamo's replay reads these files directly.
	Gzip
	// Zstd writes one zstd frame stream per segment (.jsonl.zst).
	Zstd
)

// String returns "none", "gzip" or "zstd".
func (c Compression) String() string {
	switch c {
	case None:
		return "none"
	case Gzip:
		return "gzip"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("Compression(%d)", int(c))
}

// Extension returns the file-name suffix of a segment: ".jsonl",
// ".jsonl.gz" or ".jsonl.zst".
func (c Compression) Extension() string {
	switch c {
	case Gzip:
		return ".jsonl.gz"
	case Zstd:
		return ".jsonl.zst"
	}
	return ".jsonl"
}

// Writer errors.
var (
	// ErrDropped is returned by Write when the queue is full: the record
	// was not accepted and is counted in WriterStats.Dropped.
	ErrDropped = errors.New("trace: writer queue full, record dropped")
	// ErrClosed is returned by Write, Flush and Close after Close.
	ErrClosed = errors.New("trace: writer closed")
)

// Ticker delivers periodic ticks; *time.Ticker satisfies it through
// TickerFunc's default. Tests inject a channel they control.
type Ticker interface {
	Chan() <-chan time.Time
	Stop()
}

type timeTicker struct{ t *time.Ticker }

func (t timeTicker) Chan() <-chan time.Time { return t.t.C }
func (t timeTicker) Stop()                  { t.t.Stop() }

// WriterConfig configures a Writer. Zero fields mean the documented
// defaults; exactly one of Path and Sink must be set.
type WriterConfig struct {
	// Path is the segment prefix: segments are named
	// Path.000000.jsonl[.gz|.zst], Path.000001..., like Dynamo's
	// /tmp/dynamo-request-trace.NNNNNN.jsonl.gz. A segment file is created
	// when its first record is written, so no empty segments are left.
	Path string
	// Sink is a single output stream, used instead of Path (no rotation).
	// The Writer never closes it; it is written from one goroutine.
	Sink io.Writer
	// Compression of each segment (or of Sink). Default None.
	Compression Compression
	// MaxSegmentBytes rolls to a new segment once a segment holds this many
	// uncompressed bytes; segments are cut at record boundaries and never
	// exceed it unless one record alone does. Default 256 MiB (Dynamo's
	// DYN_REQUEST_TRACE_JSONL_GZ_ROLL_BYTES). Ignored with Sink.
	MaxSegmentBytes int64
	// QueueBytes bounds the encoded bytes waiting to be written; when the
	// queue is full, Write drops the record. Default 4 MiB.
	QueueBytes int
	// BatchBytes is the size of one hand-off batch. Default 64 KiB.
	BatchBytes int
	// FlushInterval is how often buffered records are pushed through the
	// compressor to the file. Default 1 s (Dynamo's default); negative
	// disables periodic flushing (Flush and Close still flush).
	FlushInterval time.Duration
	// NewTicker makes the flush ticker; nil uses time.NewTicker. Inject a
	// fake to drive periodic flushes from a test.
	NewTicker func(time.Duration) Ticker
	// IncludeContent writes Record.Payload (prompts and responses). Off by
	// default: traces are content-free, payloads are stripped and
	// request_payload records are skipped.
	IncludeContent bool
}

// WriterStats counts what happened to the records offered to a Writer.
// Accepted = Written + Lost + (still queued); Dropped records were never
// accepted.
type WriterStats struct {
	Accepted uint64 // Write returned nil
	Dropped  uint64 // Write returned ErrDropped
	Skipped  uint64 // content records skipped because IncludeContent is off
	Written  uint64 // handed to the sink without error
	Lost     uint64 // accepted but not written because the sink failed
	Bytes    uint64 // uncompressed bytes written
	Segments uint64 // segment files opened (Path) or 1 (Sink)
}

type batch struct {
	buf []byte
	n   int // records in buf
}

// Writer writes trace records asynchronously: Write encodes the record into
// an in-memory batch and returns at once; a background goroutine compresses
// and writes full batches. Write never waits for I/O: when every batch
// buffer is queued it drops the record and counts it.
//
// A Writer is safe for concurrent use. Close flushes and writes every
// accepted record before returning.
type Writer struct {
	cfg        WriterConfig
	batchBytes int

	// mu guards cur, curN, closed and every send on full.
	mu     sync.Mutex
	cur    []byte
	curN   int
	closed bool

	free    chan []byte // empty batch buffers
	full    chan batch  // batches waiting for the background goroutine
	flush   chan chan error
	done    chan struct{} // closed by Close: the loop drains and exits
	stopped chan struct{} // closed by the loop when it has exited
	exitErr error         // set before stopped is closed

	accepted, dropped, skipped atomic.Uint64
	written, lost, bytes, segs atomic.Uint64

	// Owned by the background goroutine.
	out     *segmentWriter
	sinkErr error
}

// NewWriter validates cfg, opens nothing yet, and starts the background
// goroutine. Call Close to stop it.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if (cfg.Path == "") == (cfg.Sink == nil) {
		return nil, errors.New("trace: WriterConfig needs exactly one of Path and Sink")
	}
	if cfg.Compression < None || cfg.Compression > Zstd {
		return nil, fmt.Errorf("trace: unknown compression %d", int(cfg.Compression))
	}
	if cfg.MaxSegmentBytes < 0 || cfg.QueueBytes < 0 || cfg.BatchBytes < 0 {
		return nil, errors.New("trace: WriterConfig sizes must not be negative")
	}
	if cfg.MaxSegmentBytes == 0 {
		cfg.MaxSegmentBytes = 256 << 20
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = 4 << 20
	}
	if cfg.BatchBytes == 0 {
		cfg.BatchBytes = 64 << 10
	}
	if cfg.BatchBytes > cfg.QueueBytes {
		cfg.BatchBytes = cfg.QueueBytes
	}
	if cfg.FlushInterval == 0 {
		cfg.FlushInterval = time.Second
	}
	nbuf := max(cfg.QueueBytes/cfg.BatchBytes, 2)
	w := &Writer{
		cfg:        cfg,
		batchBytes: cfg.BatchBytes,
		free:       make(chan []byte, nbuf),
		full:       make(chan batch, nbuf),
		flush:      make(chan chan error),
		done:       make(chan struct{}),
		stopped:    make(chan struct{}),
	}
	for range nbuf {
		w.free <- make([]byte, 0, cfg.BatchBytes+cfg.BatchBytes/4)
	}
	w.out = &segmentWriter{cfg: &w.cfg, segs: &w.segs}
	var tick Ticker
	if cfg.FlushInterval > 0 {
		if cfg.NewTicker != nil {
			tick = cfg.NewTicker(cfg.FlushInterval)
		} else {
			tick = timeTicker{time.NewTicker(cfg.FlushInterval)}
		}
	}
	go w.loop(tick)
	return w, nil
}

// Write encodes r and queues it. It returns nil when the record was
// accepted (Close will write it), ErrDropped when the queue is full, and
// ErrClosed after Close. It never blocks on I/O; r may be reused as soon as
// it returns.
func (w *Writer) Write(r *Record) error {
	if !w.cfg.IncludeContent && r.EventType == EventRequestPayload {
		w.skipped.Add(1)
		return nil
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.cur == nil {
		select {
		case b := <-w.free:
			w.cur = b[:0]
		default:
			w.mu.Unlock()
			w.dropped.Add(1)
			return ErrDropped
		}
	}
	w.cur = r.AppendJSON(w.cur, w.cfg.IncludeContent)
	w.cur = append(w.cur, '\n')
	w.curN++
	if len(w.cur) >= w.batchBytes {
		// Never blocks: at most cap(full) buffers exist.
		w.full <- batch{w.cur, w.curN}
		w.cur, w.curN = nil, 0
	}
	w.mu.Unlock()
	w.accepted.Add(1)
	return nil
}

// Flush writes every record accepted so far through the compressor to the
// file or sink and returns the first sink error, if any. It blocks until
// done.
func (w *Writer) Flush() error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	ack := make(chan error, 1)
	select {
	case w.flush <- ack:
		return <-ack
	case <-w.stopped:
		return ErrClosed
	}
}

// Close stops accepting records, writes and flushes every accepted record,
// closes the current segment (not a caller's Sink), and returns the first
// sink error. A second Close returns ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.mu.Unlock()
	close(w.done)
	<-w.stopped
	return w.exitErr
}

// Stats returns the counters; safe to call at any time.
func (w *Writer) Stats() WriterStats {
	return WriterStats{
		Accepted: w.accepted.Load(),
		Dropped:  w.dropped.Load(),
		Skipped:  w.skipped.Load(),
		Written:  w.written.Load(),
		Lost:     w.lost.Load(),
		Bytes:    w.bytes.Load(),
		Segments: w.segs.Load(),
	}
}

func (w *Writer) loop(tick Ticker) {
	var tc <-chan time.Time
	if tick != nil {
		tc = tick.Chan()
		defer tick.Stop()
	}
	for {
		select {
		case b := <-w.full:
			w.writeBatch(b)
		case <-tc:
			w.drain()
		case ack := <-w.flush:
			ack <- w.drain()
		case <-w.done:
			w.drain()
			if err := w.out.close(); err != nil && w.sinkErr == nil {
				w.sinkErr = err
			}
			w.exitErr = w.sinkErr
			close(w.stopped)
			return
		}
	}
}

// drain takes the partial batch and every queued batch, in order, writes
// them and flushes the compressor.
func (w *Writer) drain() error {
	var pending []batch
	w.mu.Lock()
	for len(w.full) > 0 { // producers send only under mu, so this cannot block
		pending = append(pending, <-w.full)
	}
	if w.curN > 0 {
		pending = append(pending, batch{w.cur, w.curN})
		w.cur, w.curN = nil, 0
	}
	w.mu.Unlock()
	for _, b := range pending {
		w.writeBatch(b)
	}
	if w.sinkErr == nil {
		if err := w.out.flush(); err != nil {
			w.sinkErr = err
		}
	}
	return w.sinkErr
}

func (w *Writer) writeBatch(b batch) {
	if w.sinkErr == nil {
		if err := w.out.write(b.buf); err != nil {
			w.sinkErr = err
		}
	}
	if w.sinkErr != nil {
		w.lost.Add(uint64(b.n))
	} else {
		w.written.Add(uint64(b.n))
		w.bytes.Add(uint64(len(b.buf)))
	}
	w.free <- b.buf[:0]
}

// segmentWriter owns the files and compressors; used only by the
// background goroutine.
type segmentWriter struct {
	cfg  *WriterConfig
	segs *atomic.Uint64

	seq  int
	file *os.File  // current segment file (Path mode)
	dst  io.Writer // file or cfg.Sink
	gz   *gzip.Writer
	zs   *zstd.Encoder
	n    int64 // uncompressed bytes in the current segment
	open bool
}

func (s *segmentWriter) openSegment() error {
	if s.cfg.Sink != nil {
		s.dst = s.cfg.Sink
	} else {
		name := fmt.Sprintf("%s.%06d%s", s.cfg.Path, s.seq, s.cfg.Compression.Extension())
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("trace: open segment: %w", err)
		}
		s.seq++
		s.file, s.dst = f, f
	}
	switch s.cfg.Compression {
	case Gzip:
		if s.gz == nil {
			gz, err := gzip.NewWriterLevel(s.dst, gzip.BestSpeed)
			if err != nil {
				return err
			}
			s.gz = gz
		} else {
			s.gz.Reset(s.dst)
		}
	case Zstd:
		if s.zs == nil {
			zs, err := zstd.NewWriter(s.dst, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
			if err != nil {
				return err
			}
			s.zs = zs
		} else {
			s.zs.Reset(s.dst)
		}
	}
	s.n = 0
	s.open = true
	s.segs.Add(1)
	return nil
}

func (s *segmentWriter) raw(p []byte) error {
	var err error
	switch s.cfg.Compression {
	case Gzip:
		_, err = s.gz.Write(p)
	case Zstd:
		_, err = s.zs.Write(p)
	default:
		_, err = s.dst.Write(p)
	}
	if err != nil {
		return fmt.Errorf("trace: write: %w", err)
	}
	s.n += int64(len(p))
	return nil
}

// write writes whole lines, rolling segments at line boundaries.
func (s *segmentWriter) write(p []byte) error {
	for len(p) > 0 {
		if !s.open {
			if err := s.openSegment(); err != nil {
				return err
			}
		}
		if s.cfg.Sink != nil {
			return s.raw(p)
		}
		room := s.cfg.MaxSegmentBytes - s.n
		if int64(len(p)) <= room {
			return s.raw(p)
		}
		cut := 0
		if room > 0 {
			cut = bytes.LastIndexByte(p[:room], '\n') + 1
		}
		if cut == 0 && s.n == 0 {
			// One record larger than a segment: it gets a segment alone.
			cut = bytes.IndexByte(p, '\n') + 1
			if cut == 0 {
				cut = len(p)
			}
		}
		if cut > 0 {
			if err := s.raw(p[:cut]); err != nil {
				return err
			}
			p = p[cut:]
		}
		if err := s.closeSegment(); err != nil {
			return err
		}
	}
	return nil
}

func (s *segmentWriter) flush() error {
	if !s.open {
		return nil
	}
	var err error
	switch s.cfg.Compression {
	case Gzip:
		err = s.gz.Flush()
	case Zstd:
		err = s.zs.Flush()
	}
	if err != nil {
		return fmt.Errorf("trace: flush: %w", err)
	}
	return nil
}

func (s *segmentWriter) closeSegment() error {
	if !s.open {
		return nil
	}
	s.open = false
	var err error
	switch s.cfg.Compression {
	case Gzip:
		err = s.gz.Close()
	case Zstd:
		err = s.zs.Close()
	}
	if s.file != nil {
		if cerr := s.file.Close(); err == nil {
			err = cerr
		}
		s.file = nil
	}
	if err != nil {
		return fmt.Errorf("trace: close segment: %w", err)
	}
	return nil
}

func (s *segmentWriter) close() error {
	return s.closeSegment()
}
