package trace

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// allocDuring reports the bytes f allocated (TotalAlloc delta).
func allocDuring(f func()) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// readerAllocMultiple is the stated bound: reading any plain input of up
// to 1 MiB allocates at most this many bytes per input byte (plus
// readerAllocFixed for the 1 MiB read buffers).
const (
	readerAllocMultiple = 128
	readerAllocFixed    = 4 << 20
)

// hostileTraces are ~1 MiB inputs built to cost the readers the most per
// byte: the smallest rows, the densest hash id lists, the most requests.
func hostileTraces() map[string]string {
	const size = 1 << 20
	fill := func(prefix, unit, sep, suffix string) string {
		var b strings.Builder
		b.WriteString(prefix)
		for b.Len() < size-len(suffix)-len(unit)-len(sep) {
			b.WriteString(unit)
			b.WriteString(sep)
		}
		b.WriteString(unit)
		b.WriteString(suffix)
		return b.String()
	}
	return map[string]string{
		"mooncake tiny rows":      fill("", `{"input_length":1}`, "\n", ""),
		"mooncake tiny sessions":  fill("", `{"session_id":"a","input_length":1}`, "\n", ""),
		"mooncake dense hash ids": fill(`{"input_length":4294967296,"hash_ids":[`, "0", ",", "]}"),
		"claude tiny requests":    fill(`{"block_size":1,"requests":[`, `{"t":0,"in":1}`, ",", "]}"),
		"claude dense hash ids":   fill(`{"block_size":1,"requests":[{"t":0,"in":4294967296,"hash_ids":[`, "0", ",", "]}]}"),
		"claude deep subagents": strings.Repeat(`{"block_size":1,"requests":[{"t":0,"type":"subagent","requests":[`, 1)[:0] +
			`{"block_size":1,"requests":[` + strings.Repeat(`{"t":0,"type":"subagent","requests":[`, 30) + strings.Repeat(`]}`, 30) + `]}`,
		"dynamo tiny records": fill("", `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"x","request_received_ms":1,"output_tokens":1}}`, "\n", ""),
		"dynamo dense hashes": `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1,"request":{"request_id":"x","request_received_ms":1,"output_tokens":1,"replay":{"trace_block_size":1,"input_length":4294967296,"input_sequence_hashes":[` +
			strings.Repeat("0,", size/2-100) + "0]}}}",
	}
}

// TestReadersAllocationBounded: issue #22's target. No plain input of up to
// 1 MiB makes a reader allocate more than readerAllocMultiple times its
// size, whether the read succeeds or fails.
func TestReadersAllocationBounded(t *testing.T) {
	for name, in := range hostileTraces() {
		t.Run(name, func(t *testing.T) {
			var err error
			got := allocDuring(func() { _, err = Read(strings.NewReader(in), "x", ReadOptions{}) })
			t.Logf("%s: %d bytes: allocated %d (%.1fx), err %v", name, len(in), got, float64(got)/float64(len(in)), err)
			if limit := uint64(readerAllocMultiple*len(in) + readerAllocFixed); got > limit {
				t.Fatalf("allocated %d bytes for %d bytes of input, limit %d", got, len(in), limit)
			}
		})
	}
}

// TestCompressedBombs: compressed inputs are capped by MaxExpansion and
// MaxDecompressedBytes: a few KB of gzip or zstd standing for a GiB fails
// with ErrTooLarge early, having allocated a bounded amount; an explicit
// MaxDecompressedBytes applies; honest compressed traces pass.
func TestCompressedBombs(t *testing.T) {
	line := `{"session_id":"s","input_length":1,"hash_ids":[1]}` + "\n"
	// n copies of body, compressed as n concatenated members (gzip) or
	// frames (zstd) of body each: a valid stream that decompresses to n
	// bodies, built by compressing body once (compressing a whole GiB took
	// minutes under -race).
	gz := func(body string, n int) []byte {
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		w.Write([]byte(body))
		w.Close()
		return bytes.Repeat(b.Bytes(), n)
	}
	zs := func(body string, n int) []byte {
		var b bytes.Buffer
		w, _ := zstd.NewWriter(&b, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
		w.Write([]byte(body))
		w.Close()
		return bytes.Repeat(b.Bytes(), n)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"gzip, 1 GiB of rows", gz(strings.Repeat(line, 1<<10), (1<<30)/(len(line)<<10))},
		{"zstd, 1 GiB of rows", zs(strings.Repeat(line, 1<<10), (1<<30)/(len(line)<<10))},
		{"zstd, a 1 GiB line", append(zs(`{"input_length":`, 1), zs(strings.Repeat("7", 1<<20), 1<<10)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			got := allocDuring(func() { _, err = Read(bytes.NewReader(tc.data), "x", ReadOptions{}) })
			t.Logf("%d bytes: allocated %d, err %v", len(tc.data), got, err)
			if !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrLineTooLong) {
				t.Fatalf("err %v, want ErrTooLarge or ErrLineTooLong", err)
			}
			// At most MaxExpansion x input + slack decompressed, read at a
			// bounded cost per byte.
			decompressed := uint64(DefaultMaxExpansion*len(tc.data) + ExpansionSlack)
			if limit := readerAllocMultiple*decompressed + readerAllocFixed; got > limit {
				t.Fatalf("allocated %d, limit %d", got, limit)
			}
		})
	}
	// An explicit cap, under the expansion cap.
	small := gz(line, 1<<16)
	if _, err := Read(bytes.NewReader(small), "x", ReadOptions{MaxDecompressedBytes: 1 << 20}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("%d decompressed bytes under a 1 MiB cap: %v", len(line)<<16, err)
	}
	if _, err := Read(bytes.NewReader(small), "x", ReadOptions{MaxDecompressedBytes: -1, MaxExpansion: -1}); err != nil {
		t.Fatalf("caps off: %v", err)
	}
}

// TestHonestCompressedTracesPass: a regular synthetic trace (sequential hash
// ids, the most compressible honest shape; the shared real traces expand
// 3 to 11-fold) compressed as hard as zstd allows still expands within
// DefaultMaxExpansion, and reads.
func TestHonestCompressedTracesPass(t *testing.T) {
	w := syntheticForBounds(t)
	var plain bytes.Buffer
	if err := WriteMooncake(&plain, &w); err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw, _ := zstd.NewWriter(&z, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	zw.Write(plain.Bytes())
	zw.Close()
	ratio := float64(plain.Len()) / float64(z.Len())
	t.Logf("%d bytes, zstd %d, expansion %.1f", plain.Len(), z.Len(), ratio)
	if ratio > DefaultMaxExpansion {
		t.Fatalf("an honest trace expands %.1f-fold, too close to the cap %d", ratio, DefaultMaxExpansion)
	}
	if _, err := Read(bytes.NewReader(z.Bytes()), "x", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
}

func syntheticForBounds(t *testing.T) Workload {
	t.Helper()
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, `{"session_id":"s%d","timestamp":%d,"input_length":%d,"output_length":50,"hash_ids":[`, i%300, i*10, 512*(1+i%40))
		for j := range 1 + i%40 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%d", (i%300)*1000+j)
		}
		b.WriteString("]}\n")
	}
	w, err := Read(strings.NewReader(b.String()), "s", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// nestedSubagents is a Claude Code file whose subagents nest depth deep.
func nestedSubagents(depth int) string {
	return `{"block_size":1,"requests":[` + strings.Repeat(`{"t":0,"type":"subagent","requests":[`, depth) +
		`{"t":0,"in":1}` + strings.Repeat(`]}`, depth) + `]}`
}

// TestClaudeCodeSubagentDepth: issue #22 item 6. Unbounded nesting made
// session IDs (and Summarize's root walk) quadratic in the file: 3,000
// levels, 117 KB, took 23 s and 180 MB. Nesting is bounded by
// MaxSubagentDepth with a clear error.
func TestClaudeCodeSubagentDepth(t *testing.T) {
	w, err := ReadClaudeCode(strings.NewReader(nestedSubagents(MaxSubagentDepth)), "x")
	if err != nil || len(w.Sessions) != MaxSubagentDepth+1 {
		t.Fatalf("depth %d: %d sessions, %v", MaxSubagentDepth, len(w.Sessions), err)
	}
	if _, err := Summarize(&w); err != nil {
		t.Fatal(err)
	}
	for _, d := range []int{MaxSubagentDepth + 1, 3000} {
		var pe *ParseError
		_, err := ReadClaudeCode(strings.NewReader(nestedSubagents(d)), "x")
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("depth %d: %v, want a nesting ParseError", d, err)
		}
	}
}

// TestClaudeCodeLines: request line numbers are still right with the
// incremental counter (errors point at the request's own line).
func TestClaudeCodeLines(t *testing.T) {
	in := "{\"block_size\":1,\"requests\":[\n{\"t\":0,\"in\":1},\n\n{\"t\":0,\"in\":1},\n{\"t\":0}\n]}"
	var pe *ParseError
	if _, err := ReadClaudeCode(strings.NewReader(in), "x"); !errors.As(err, &pe) || pe.Line != 5 || pe.Path != "requests[2].in" {
		t.Fatalf("err %v, want line 5 requests[2].in", err)
	}
}

// BenchmarkReadClaudeCode: per-request cost is flat in the number of
// requests (it was quadratic: every request's line was counted from the
// start of the file).
func BenchmarkReadClaudeCode(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		in := `{"block_size":1,"requests":[` + strings.Repeat("{\"t\":0,\"in\":1},\n", n-1) + `{"t":0,"in":1}]}`
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ReadClaudeCode(strings.NewReader(in), "x"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
		})
	}
}
