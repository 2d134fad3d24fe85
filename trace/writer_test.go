package trace

import (
	"bytes"
	stdgzip "compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

func sampleRecord(i int) Record {
	return Record{
		EventTimeUnixMs: uint64(1_700_000_000_000 + i),
		EventSource:     SourceDynamo,
		AgentContext:    AgentContext{SessionID: fmt.Sprintf("s%d", i%7)},
		Request: Request{
			RequestID: fmt.Sprintf("req-%d", i), Model: "m", InputTokens: uint64(1000 + i), OutputTokens: 17,
			RequestReceivedMs: uint64(1_700_000_000_000 + i), TTFTMs: 12.5, TotalTimeMs: 100,
			Replay: Replay{TraceBlockSize: 64, InputLength: 1000 + i, InputSequenceHashes: []uint64{1, 2, uint64(i)}},
		},
	}
}

func segments(t *testing.T, dir string) []string {
	files, err := filepath.Glob(filepath.Join(dir, "trace.*"))
	require.NoError(t, err)
	sort.Strings(files)
	return files
}

func decompressAll(t *testing.T, path string, c Compression) []byte {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var r io.Reader = f
	switch c {
	case Gzip: // the standard library's independent gzip reader
		gz, err := stdgzip.NewReader(f)
		require.NoError(t, err)
		r = gz
	case Zstd:
		zs, err := zstd.NewReader(f)
		require.NoError(t, err)
		defer zs.Close()
		r = zs
	}
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return b
}

func TestWriterRotationAndCompression(t *testing.T) {
	for _, c := range []Compression{None, Gzip, Zstd} {
		t.Run(c.String(), func(t *testing.T) {
			dir := t.TempDir()
			const n = 500
			const maxSeg = 8 << 10
			w, err := NewWriter(WriterConfig{Path: filepath.Join(dir, "trace"), Compression: c,
				MaxSegmentBytes: maxSeg, BatchBytes: 3000, QueueBytes: 1 << 20, FlushInterval: -1})
			require.NoError(t, err)
			want := make([]Record, n)
			for i := range n {
				want[i] = sampleRecord(i)
				require.NoError(t, w.Write(&want[i]))
			}
			require.NoError(t, w.Close())
			st := w.Stats()
			require.Equal(t, uint64(n), st.Accepted)
			require.Equal(t, uint64(n), st.Written)
			require.Zero(t, st.Dropped+st.Lost)

			files := segments(t, dir)
			require.Greater(t, len(files), 3)
			require.Equal(t, uint64(len(files)), st.Segments)
			var total uint64
			for i, f := range files {
				require.True(t, strings.HasSuffix(f, fmt.Sprintf(".%06d%s", i, c.Extension())), f)
				b := decompressAll(t, f, c)
				require.LessOrEqual(t, len(b), maxSeg, f)
				require.True(t, bytes.HasSuffix(b, []byte("\n")), "segments end at record boundaries")
				total += uint64(len(b))
			}
			require.Equal(t, st.Bytes, total)
			got, err := ReadRecordFiles(files...)
			require.NoError(t, err)
			require.Len(t, got, n)
			for i := range got {
				require.Equal(t, normalize(want[i], false), got[i], "record %d", i)
			}
		})
	}
}

// blockingSink blocks every Write until release is closed.
type blockingSink struct {
	release chan struct{}
	mu      sync.Mutex // guards buf
	buf     bytes.Buffer
}

func (s *blockingSink) Write(p []byte) (int, error) {
	<-s.release
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func TestWriterDropsInsteadOfBlocking(t *testing.T) {
	sink := &blockingSink{release: make(chan struct{})}
	w, err := NewWriter(WriterConfig{Sink: sink, BatchBytes: 1024, QueueBytes: 2048, FlushInterval: -1})
	require.NoError(t, err)
	var accepted []int
	dropped := 0
	for i := range 2000 {
		rec := sampleRecord(i)
		switch err := w.Write(&rec); {
		case err == nil:
			accepted = append(accepted, i)
		case errors.Is(err, ErrDropped):
			dropped++
		default:
			t.Fatal(err)
		}
	}
	// The sink is stuck, yet every Write returned: most records dropped.
	require.Greater(t, dropped, 1000)
	require.Equal(t, uint64(dropped), w.Stats().Dropped)
	close(sink.release)
	require.NoError(t, w.Close())
	st := w.Stats()
	require.Equal(t, uint64(len(accepted)), st.Written, "Close loses nothing accepted")
	var ids []string
	require.NoError(t, ReadRecords(bytes.NewReader(sink.buf.Bytes()), "sink", func(_ int, r *Record) error {
		ids = append(ids, r.Request.RequestID)
		return nil
	}))
	require.Len(t, ids, len(accepted))
	for k, i := range accepted {
		require.Equal(t, fmt.Sprintf("req-%d", i), ids[k], "accepted records keep their order")
	}
}

// fakeTicker is a Ticker driven by the test.
type fakeTicker struct{ c chan time.Time }

func (f *fakeTicker) Chan() <-chan time.Time { return f.c }
func (f *fakeTicker) Stop()                  {}

// notifySink signals every write.
type notifySink struct {
	mu    sync.Mutex // guards buf
	buf   bytes.Buffer
	wrote chan struct{}
}

func (s *notifySink) Write(p []byte) (int, error) {
	s.mu.Lock()
	n, err := s.buf.Write(p)
	s.mu.Unlock()
	select {
	case s.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (s *notifySink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

func TestWriterPeriodicFlush(t *testing.T) {
	tick := &fakeTicker{c: make(chan time.Time)}
	var gotInterval time.Duration
	sink := &notifySink{wrote: make(chan struct{}, 1)}
	w, err := NewWriter(WriterConfig{Sink: sink, FlushInterval: 250 * time.Millisecond,
		NewTicker: func(d time.Duration) Ticker { gotInterval = d; return tick }})
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, gotInterval)
	for i := range 3 {
		rec := sampleRecord(i)
		require.NoError(t, w.Write(&rec))
	}
	require.Empty(t, sink.String(), "three small records stay in the batch until a flush")
	tick.c <- time.Time{} // received by the loop: the flush is under way
	select {
	case <-sink.wrote:
	case <-time.After(2 * time.Minute): // a bound for a lost flush, not a window
		t.Fatal("tick did not flush")
	}
	require.Equal(t, 3, strings.Count(sink.String(), "\n"))
	require.NoError(t, w.Close())
}

func TestWriterFlushAndGzipPrefixReadable(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(WriterConfig{Sink: &buf, Compression: Gzip, FlushInterval: -1})
	require.NoError(t, err)
	rec := sampleRecord(1)
	require.NoError(t, w.Write(&rec))
	require.NoError(t, w.Flush())
	// A flushed gzip stream decodes up to the flush point before Close.
	gz, err := stdgzip.NewReader(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	got, _ := io.ReadAll(gz)
	require.Contains(t, string(got), `"request_id":"req-1"`)
	require.NoError(t, w.Close())
	w2, _ := Read(bytes.NewReader(buf.Bytes()), "gz", ReadOptions{})
	require.Len(t, w2.Sessions, 1)
}

func TestWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(WriterConfig{Sink: &buf, BatchBytes: 4096, QueueBytes: 64 << 20, FlushInterval: -1})
	require.NoError(t, err)
	const writers, per = 8, 1500
	var wg sync.WaitGroup
	var mu sync.Mutex // guards accepted
	accepted := map[string]bool{}
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				rec := sampleRecord(g*per + i)
				if w.Write(&rec) == nil {
					mu.Lock()
					accepted[rec.Request.RequestID] = true
					mu.Unlock()
				}
				if i%500 == 0 {
					require.NoError(t, w.Flush())
				}
				_ = w.Stats()
			}
		}()
	}
	wg.Wait()
	require.NoError(t, w.Close())
	got := map[string]bool{}
	require.NoError(t, ReadRecords(bytes.NewReader(buf.Bytes()), "buf", func(_ int, r *Record) error {
		require.False(t, got[r.Request.RequestID], "duplicate %s", r.Request.RequestID)
		got[r.Request.RequestID] = true
		return nil
	}))
	require.Equal(t, accepted, got)
	st := w.Stats()
	require.Equal(t, uint64(writers*per), st.Accepted+st.Dropped)
}

func TestWriterContentFree(t *testing.T) {
	for _, include := range []bool{false, true} {
		var buf bytes.Buffer
		w, err := NewWriter(WriterConfig{Sink: &buf, IncludeContent: include})
		require.NoError(t, err)
		rec := sampleRecord(0)
		rec.Payload = &Payload{RequestID: "req-0", Request: []byte(`{"prompt":"secret"}`)}
		require.NoError(t, w.Write(&rec))
		payload := Record{EventType: EventRequestPayload, Payload: &Payload{RequestID: "req-0", Response: []byte(`"secret answer"`)}}
		require.NoError(t, w.Write(&payload))
		require.NoError(t, w.Close())
		if include {
			require.Equal(t, 2, strings.Count(buf.String(), "secret"))
			require.Zero(t, w.Stats().Skipped)
		} else {
			require.NotContains(t, buf.String(), "secret")
			require.Equal(t, 1, strings.Count(buf.String(), "\n"))
			require.Equal(t, uint64(1), w.Stats().Skipped)
		}
	}
}

type failSink struct{}

func (failSink) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriterSinkErrorAndClosed(t *testing.T) {
	w, err := NewWriter(WriterConfig{Sink: failSink{}, FlushInterval: -1})
	require.NoError(t, err)
	for i := range 10 {
		rec := sampleRecord(i)
		require.NoError(t, w.Write(&rec))
	}
	err = w.Close()
	require.ErrorContains(t, err, "disk full")
	require.Equal(t, uint64(10), w.Stats().Lost)
	rec := sampleRecord(0)
	require.ErrorIs(t, w.Write(&rec), ErrClosed)
	require.ErrorIs(t, w.Flush(), ErrClosed)
	require.ErrorIs(t, w.Close(), ErrClosed)
}

func TestWriterConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  WriterConfig
	}{
		{"neither", WriterConfig{}},
		{"both", WriterConfig{Path: "x", Sink: io.Discard}},
		{"compression", WriterConfig{Sink: io.Discard, Compression: 7}},
		{"negative", WriterConfig{Sink: io.Discard, QueueBytes: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewWriter(tc.cfg)
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "trace: "), err.Error())
		})
	}
	// A segment that cannot be created is a sink error reported by Close.
	w, err := NewWriter(WriterConfig{Path: filepath.Join(t.TempDir(), "missing-dir", "trace"), FlushInterval: -1})
	require.NoError(t, err)
	rec := sampleRecord(0)
	require.NoError(t, w.Write(&rec))
	require.Error(t, w.Close())
	require.Equal(t, uint64(1), w.Stats().Lost)
}

func TestWriterOversizedRecordGetsOwnSegment(t *testing.T) {
	dir := t.TempDir()
	w, err := NewWriter(WriterConfig{Path: filepath.Join(dir, "trace"), MaxSegmentBytes: 300, FlushInterval: -1})
	require.NoError(t, err)
	small, big := sampleRecord(1), sampleRecord(2)
	for i := range 100 {
		big.Request.Replay.InputSequenceHashes = append(big.Request.Replay.InputSequenceHashes, uint64(i))
	}
	for _, r := range []*Record{&small, &big, &small} {
		require.NoError(t, w.Write(r))
	}
	require.NoError(t, w.Close())
	files := segments(t, dir)
	require.Len(t, files, 3)
	recs, err := ReadRecordFiles(files...)
	require.NoError(t, err)
	require.Len(t, recs, 3)
	require.Len(t, recs[1].Request.Replay.InputSequenceHashes, 103)
}

// discardSink counts bytes.
type countSink struct{ n int }

func (c *countSink) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

func BenchmarkWriter(b *testing.B) {
	for _, n := range []int{16, 256} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			sink := &countSink{}
			w, err := NewWriter(WriterConfig{Sink: sink, FlushInterval: -1, QueueBytes: 64 << 20})
			if err != nil {
				b.Fatal(err)
			}
			rec := sampleRecord(42)
			r := rand.New(rand.NewPCG(1, 2))
			rec.Request.Replay.InputSequenceHashes = nil
			for range n {
				rec.Request.Replay.InputSequenceHashes = append(rec.Request.Replay.InputSequenceHashes, r.Uint64())
			}
			rec.Request.FinishReasonMetadata = FinishMetadata{FinishReason: "tool_calls", ToolCalls: []ToolCallMeta{{Name: "bash"}}}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := 0; i < b.N; i++ {
				rec.Request.RequestReceivedMs++
				_ = w.Write(&rec)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu := processCPU() - cpu0
			st := w.Stats()
			if cpu > 0 {
				// CPU time of the whole process (caller and background
				// goroutine): robust to other load on a shared machine.
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
			b.ReportMetric(float64(sink.n)/float64(b.N), "bytes/record")
		})
	}
}
