package main

import (
	"bytes"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/trace"
)

// hugeLine is an endless Mooncake-looking line: its first bytes pass format
// detection, then 'a's without a newline up to size bytes. read counts what
// was pulled from it.
type hugeLine struct {
	head       string
	size, read int64
}

func (h *hugeLine) Read(p []byte) (int, error) {
	if h.read >= h.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), h.size-h.read))
	for i := range n {
		if k := h.read + int64(i); k < int64(len(h.head)) {
			p[i] = h.head[k]
		} else {
			p[i] = 'a'
		}
	}
	h.read += int64(n)
	return n, nil
}

// TestTraceInspectStdinStreams: issue #22 item 5. `trace inspect -` used to
// read all of stdin into memory (a 2 GiB line took 4.6-4.9 GB); it now
// streams with the file readers' bounds: a 2 GiB line stops at the 64 MiB
// line cap, having pulled little more than that from stdin, and allocates
// a bounded multiple of the cap.
func TestTraceInspectStdinStreams(t *testing.T) {
	in := &hugeLine{head: `{"timestamp": 0, "input_length": 1, "hash_ids": [`, size: 2 << 30}
	var out, errb bytes.Buffer
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	code := run(&cmdEnv{stdin: in, stdout: &out, stderr: &errb}, []string{"trace", "inspect", "-"})
	runtime.ReadMemStats(&b)
	alloc := b.TotalAlloc - a.TotalAlloc
	t.Logf("exit %d, pulled %d bytes from stdin, allocated %d: %s", code, in.read, alloc, strings.TrimSpace(errb.String()))
	if code == 0 || !strings.Contains(errb.String(), "line too long") {
		t.Fatalf("exit %d, stderr %q: want the line-too-long error", code, errb.String())
	}
	if limit := int64(trace.MaxLineBytes + 4<<20); in.read > limit {
		t.Fatalf("pulled %d bytes from stdin, want at most %d (streamed, stopped at the line cap)", in.read, limit)
	}
	if limit := uint64(3 * trace.MaxLineBytes); alloc > limit {
		t.Fatalf("allocated %d bytes for a %d-byte line cap, limit %d", alloc, trace.MaxLineBytes, limit)
	}
}

// TestTraceInspectStdinFormats: stdin is detected like a file, compressed
// or not, and --format still forces one.
func TestTraceInspectStdinFormats(t *testing.T) {
	line := `{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}` + "\n"
	for _, tc := range []struct {
		name  string
		args  []string
		input string
		ok    bool
	}{
		{"detected", []string{"trace", "inspect", "-"}, line, true},
		{"forced", []string{"trace", "inspect", "--format", "mooncake", "-"}, line, true},
		{"undetectable", []string{"trace", "inspect", "-"}, "hello\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.input, tc.args...)
			if (code == 0) != tc.ok {
				t.Fatalf("exit %d: %s %s", code, stdout, stderr)
			}
			if tc.ok && !strings.Contains(stdout, "requests") {
				t.Fatalf("no summary: %s", stdout)
			}
			if !tc.ok && !strings.Contains(stderr, "--format") {
				t.Fatalf("stderr %q does not suggest --format", stderr)
			}
		})
	}
}
