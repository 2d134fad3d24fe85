package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentkv/agentkv/internal/limitio"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Reader errors.
var (
	// ErrFormat means the input is not in a format this package reads, or
	// not in the format that was asked for.
	ErrFormat = errors.New("trace: unrecognised trace format")
	// ErrLineTooLong means one JSONL line exceeds MaxLineBytes.
	ErrLineTooLong = errors.New("trace: line too long")
	// ErrBlockSize means records disagree about the block size, or a block
	// size is missing or out of range.
	ErrBlockSize = errors.New("trace: bad or inconsistent block size")
	// ErrTooLarge means a compressed input decompressed past
	// ReadOptions.MaxDecompressedBytes or MaxExpansion times its
	// compressed size; the error is a *limitio.LimitError with the figures.
	ErrTooLarge = errors.New("trace: decompressed input too large")
)

// MaxLineBytes bounds one JSONL line (and one Claude Code file).
const MaxLineBytes = 64 << 20

// Bounds on compressed input; see ReadOptions.
const (
	DefaultMaxDecompressedBytes = 16 << 30
	DefaultMaxExpansion         = 128
	ExpansionSlack              = 1 << 20
)

// ParseError is bad input: where it is and what is wrong with it. Line is
// 1-based; Path, when set, is the JSON path of the offending value inside
// the line or document (e.g. "requests[3].in").
type ParseError struct {
	File string
	Line int
	Path string
	Err  error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString("trace: ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

// Format names a trace format.
type Format int

const (
	// FormatAuto detects the format from the content.
	FormatAuto Format = iota
	// FormatMooncake is Mooncake / AIPerf JSONL.
	FormatMooncake
	// FormatClaudeCode is a kv-cache-tester Claude Code session (one JSON
	// object per file).
	FormatClaudeCode
	// FormatDynamo is dynamo.request.trace.v1 JSONL, which this package's
	// Writer also produces.
	FormatDynamo
)

var formatNames = map[Format]string{
	FormatAuto:       "auto",
	FormatMooncake:   "mooncake",
	FormatClaudeCode: "claude",
	FormatDynamo:     "dynamo",
}

// String returns the name ParseFormat accepts.
func (f Format) String() string {
	if n, ok := formatNames[f]; ok {
		return n
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ParseFormat parses "auto", "mooncake", "claude" (or "claude-code"),
// "dynamo" (or "agentkv", our own records).
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return FormatAuto, nil
	case "mooncake", "aiperf":
		return FormatMooncake, nil
	case "claude", "claude-code", "claudecode":
		return FormatClaudeCode, nil
	case "dynamo", "agentkv", "own":
		return FormatDynamo, nil
	}
	return FormatAuto, fmt.Errorf("%w: %q (want auto, mooncake, claude or dynamo)", ErrFormat, s)
}

// ReadOptions tune the readers. The zero value reads anything with the
// defaults.
type ReadOptions struct {
	// Format forces a format; FormatAuto detects it.
	Format Format
	// MooncakeBlockTokens is the block size of Mooncake hash ids, which the
	// format does not record. Default 512 (Mooncake's and AIPerf's).
	MooncakeBlockTokens int

	// MaxDecompressedBytes caps what a gzip or zstd input may decompress
	// to; past it the read fails with ErrTooLarge. 0 =
	// DefaultMaxDecompressedBytes (16 GiB); negative = no cap.
	MaxDecompressedBytes int64
	// MaxExpansion caps the decompressed bytes at MaxExpansion times the
	// compressed bytes read so far plus ExpansionSlack (1 MiB), so a small
	// file cannot stand for a huge one (real traces expand 3 to 11-fold
	// under gzip -9 and zstd -19, regular synthetic ones with sequential
	// hash ids up to 90-fold; gzip can reach 1,000-fold and a zstd frame of
	// RLE blocks 32,000-fold). Past it the read fails with ErrTooLarge.
	// 0 = DefaultMaxExpansion (128); negative = no cap. Lower it for traces
	// from untrusted sources: the readers allocate up to 100 times what
	// they decompress.
	MaxExpansion int
}

// limits returns the caps for a compressed stream reading from in.
func (o ReadOptions) limits(in *limitio.Counter) *limitio.Reader {
	l := &limitio.Reader{In: in, Max: o.MaxDecompressedBytes, Ratio: int64(o.MaxExpansion), Slack: ExpansionSlack, Err: ErrTooLarge}
	switch {
	case l.Max == 0:
		l.Max = DefaultMaxDecompressedBytes
	case l.Max < 0:
		l.Max = 0
	}
	if l.Ratio == 0 {
		l.Ratio = DefaultMaxExpansion
	}
	return l
}

// ReadFile reads one trace file into a Workload, decompressing gzip or zstd
// (detected from the content) and detecting the format unless opt says.
// The Workload's Name is the file's base name.
func ReadFile(path string, opt ReadOptions) (Workload, error) {
	f, err := os.Open(path)
	if err != nil {
		return Workload{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return Read(f, filepath.Base(path), opt)
}

// Read reads a trace from r; name labels errors and the Workload. r is
// streamed (Mooncake and Dynamo JSONL line by line, a Claude Code file up
// to MaxLineBytes), never read whole, so standard input has the same
// bounds as a file.
func Read(r io.Reader, name string, opt ReadOptions) (Workload, error) {
	w, _, err := ReadDetect(r, name, opt)
	return w, err
}

// ReadDetect is Read that also returns the format it read (opt.Format, or
// the one detected).
func ReadDetect(r io.Reader, name string, opt ReadOptions) (Workload, Format, error) {
	br, closeFn, err := opt.Decompress(r)
	if err != nil {
		return Workload{}, opt.Format, &ParseError{File: name, Err: err}
	}
	defer closeFn()
	f := opt.Format
	if f == FormatAuto {
		head, _ := br.Peek(4096)
		f, err = DetectFormat(head)
		if err != nil {
			return Workload{}, f, &ParseError{File: name, Line: 1, Err: err}
		}
	}
	var w Workload
	switch f {
	case FormatMooncake:
		w, err = ReadMooncake(br, name, opt.MooncakeBlockTokens)
	case FormatClaudeCode:
		w, err = ReadClaudeCode(br, name)
	case FormatDynamo:
		w, err = ReadDynamo(br, name)
	default:
		err = fmt.Errorf("%w: %v", ErrFormat, f)
	}
	return w, f, err
}

// Decompress returns a buffered reader of r's content, transparently
// decompressing gzip (including concatenated members) or zstd, recognised
// by their magic numbers, under the default caps (see
// ReadOptions.Decompress). Call closeFn when done.
func Decompress(r io.Reader) (br *bufio.Reader, closeFn func(), err error) {
	return ReadOptions{}.Decompress(r)
}

// Decompress is the package-level Decompress with o's MaxDecompressedBytes
// and MaxExpansion: reading past either fails with ErrTooLarge (wrapped in
// a *limitio.LimitError). Plain input is passed through uncapped; the
// readers bound its lines.
func (o ReadOptions) Decompress(r io.Reader) (br *bufio.Reader, closeFn func(), err error) {
	cnt := &limitio.Counter{R: r}
	in := bufio.NewReaderSize(cnt, 1<<20)
	magic, _ := in.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		gz, err := gzip.NewReader(in)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		l := o.limits(cnt)
		l.R = gz
		return bufio.NewReaderSize(l, 1<<20), func() { gz.Close() }, nil
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zs, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		l := o.limits(cnt)
		l.R = zs
		return bufio.NewReaderSize(l, 1<<20), zs.Close, nil
	}
	return in, func() {}, nil
}

// DetectFormat guesses the format from the first bytes of the
// (decompressed) content: a JSON object holding "requests" and
// "block_size" is a Claude Code session; a line with the Dynamo schema tag
// is a Dynamo trace; a line with "input_length", "hash_ids" or
// "output_length" is Mooncake.
func DetectFormat(head []byte) (Format, error) {
	head = bytes.TrimLeft(head, " \t\r\n\ufeff")
	if len(head) == 0 {
		return FormatAuto, fmt.Errorf("%w: empty input", ErrFormat)
	}
	if head[0] != '{' {
		return FormatAuto, fmt.Errorf("%w: does not start with a JSON object", ErrFormat)
	}
	line := head
	if i := bytes.IndexByte(head, '\n'); i >= 0 {
		line = head[:i]
	}
	switch {
	case bytes.Contains(line, []byte(`"dynamo.request.trace.v1"`)) || bytes.Contains(line, []byte(`"event_type"`)):
		return FormatDynamo, nil
	case bytes.Contains(head, []byte(`"requests"`)) && bytes.Contains(head, []byte(`"block_size"`)):
		return FormatClaudeCode, nil
	case bytes.Contains(line, []byte(`"input_length"`)) || bytes.Contains(line, []byte(`"hash_ids"`)) ||
		bytes.Contains(line, []byte(`"output_length"`)) || bytes.Contains(line, []byte(`"text_input"`)):
		return FormatMooncake, nil
	case bytes.Contains(head, []byte(`"requests"`)):
		return FormatClaudeCode, nil
	}
	return FormatAuto, fmt.Errorf("%w: no known fields in the first line", ErrFormat)
}

// lineReader yields lines (without the newline) with their 1-based numbers.
type lineReader struct {
	r    *bufio.Reader
	line int
	buf  []byte
}

// next returns the next line; io.EOF at the end. The slice is valid until
// the next call.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		chunk, err := l.r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			if len(l.buf)+len(chunk) > MaxLineBytes {
				l.line++
				return nil, ErrLineTooLong
			}
			l.grow(len(chunk))
			l.buf = append(l.buf, chunk...)
			continue
		}
		if err != nil && err != io.EOF {
			return nil, err
		}
		if len(chunk) == 0 && len(l.buf) == 0 && err == io.EOF {
			return nil, io.EOF
		}
		l.line++
		var out []byte
		if len(l.buf) > 0 {
			if len(l.buf)+len(chunk) > MaxLineBytes {
				return nil, ErrLineTooLong
			}
			l.grow(len(chunk))
			l.buf = append(l.buf, chunk...)
			out = l.buf
		} else {
			out = chunk
		}
		if len(out) > MaxLineBytes {
			return nil, ErrLineTooLong
		}
		out = bytes.TrimRight(out, "\r\n")
		return out, nil
	}
}

// grow makes room for n more bytes in l.buf, doubling its capacity (append
// grows large slices by 1.25, which allocates five times a long line on the
// way to the cap), never past MaxLineBytes.
func (l *lineReader) grow(n int) {
	if len(l.buf)+n <= cap(l.buf) {
		return
	}
	nb := make([]byte, len(l.buf), min(max(2*cap(l.buf), len(l.buf)+n), MaxLineBytes))
	copy(nb, l.buf)
	l.buf = nb
}
