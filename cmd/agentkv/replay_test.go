package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/trace"
)

// replayServer is a minimal OpenAI server for the replay CLI: it streams
// two tokens and usage (cached_tokens = half the prompt words), or fails
// with status when set, and records each request's headers.
type replayServer struct {
	srv    *httptest.Server
	status int                   // non-zero: answer every completion with it
	onReq  func(r *http.Request) // called on arrival, may block

	mu   sync.Mutex // guards hdrs
	hdrs []http.Header
}

func newReplayServer(t *testing.T) *replayServer {
	s := &replayServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			fmt.Fprint(w, `{"data":[{"id":"replay-model"}]}`)
			return
		}
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.hdrs = append(s.hdrs, r.Header.Clone())
		s.mu.Unlock()
		if s.onReq != nil {
			s.onReq(r)
		}
		if s.status != 0 {
			http.Error(w, "nope", s.status)
			return
		}
		n := len(strings.Fields(body.Messages[0].Content))
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", n, n/2)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *replayServer) headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdrs...)
}

func TestReplaySyntheticWritesCapture(t *testing.T) {
	s := newReplayServer(t)
	out := filepath.Join(t.TempDir(), "sub", "run.jsonl.gz")
	code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", s.srv.URL, "--sessions", "3", "--speed", "1e6",
		"--harness", "claude-code", "--concurrency", "2", "--max-requests", "12", "--trace-out", out, "--session-prefix", "run1:",
		"--header", "Authorization: Bearer x")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "closed loop")
	assert.Contains(t, stdout, "harness claude-code, concurrency 2, speed ×1e+06")
	assert.Contains(t, stdout, "model replay-model")
	assert.Contains(t, stdout, "requests    12 finished of 12 planned (12 ok, 0 failed)")
	assert.Contains(t, stdout, "cache hits  ")
	assert.Contains(t, stdout, "trace       "+out+": 12 records")
	assert.Empty(t, stderr, "no progress line when stderr is not a terminal")

	hdrs := s.headers()
	require.Len(t, hdrs, 12)
	for _, h := range hdrs {
		assert.True(t, strings.HasPrefix(h.Get("X-Claude-Code-Session-Id"), "run1:s"), h.Get("X-Claude-Code-Session-Id"))
		assert.Equal(t, "Bearer x", h.Get("Authorization"))
	}
	recs, err := trace.ReadRecordFiles(out)
	require.NoError(t, err)
	require.Len(t, recs, 12)
	for _, r := range recs {
		assert.Equal(t, "replay-model", r.Request.Model)
		assert.EqualValues(t, 2, r.Request.OutputTokens)
		assert.InDelta(t, 0.5, r.Request.KVHitRate, 0.01)
		assert.Equal(t, 64, r.Request.Replay.TraceBlockSize)
		assert.True(t, strings.HasPrefix(r.AgentContext.SessionID, "run1:"))
	}
	// The capture reads back as a workload that replay (and simulate) take.
	w, err := trace.ReadFile(out, trace.ReadOptions{})
	require.NoError(t, err)
	assert.False(t, w.OpenLoop)
	code, _, stderr = runCLI(t, "", "replay", "--endpoint", s.srv.URL, "--workload", out, "--speed", "1e6")
	require.Equal(t, 0, code, stderr)
}

func TestReplayMooncakeOpenLoop(t *testing.T) {
	s := newReplayServer(t)
	var b strings.Builder
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 700, "output_length": 3, "hash_ids": [0, %d]}`+"\n", i*100, i+1)
	}
	path := filepath.Join(t.TempDir(), "mc.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", s.srv.URL+"/v1", "--workload", path, "--speed", "1000", "--model", "x")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "5 requests")
	assert.Contains(t, stdout, "open loop")
	assert.Contains(t, stdout, "requests    5 finished of 5 planned (5 ok")
	assert.Contains(t, stdout, "3500 prompt (server) for 3500 in the trace")
	assert.Len(t, s.headers(), 5)
	for _, h := range s.headers() {
		assert.NotEmpty(t, h.Get("X-Dynamo-Session-Id"), "dynamo headers by default")
		assert.Equal(t, "true", h.Get("X-Dynamo-Session-Final"), "single-turn sessions end with their turn")
	}
}

func TestReplayErrors(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", "http://"+addr, "--sessions", "1")
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "endpoint unreachable")
		assert.Contains(t, stderr, addr)
		assert.NotContains(t, stdout, "requests ")
	})
	t.Run("http errors are counted and shown", func(t *testing.T) {
		s := newReplayServer(t)
		s.status = http.StatusServiceUnavailable
		code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", s.srv.URL, "--sessions", "2", "--speed", "1e6", "--max-requests", "5")
		assert.Equal(t, 1, code)
		assert.Contains(t, stdout, "errors      http_503 ×5")
		assert.Contains(t, stderr, "every request failed (http_503 ×5)")
	})
	t.Run("bad workload file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.jsonl")
		require.NoError(t, os.WriteFile(path, []byte("{\"input_length\": \"x\"}\n"), 0o644))
		code, _, stderr := runCLI(t, "", "replay", "--endpoint", "http://127.0.0.1:1", "--workload", path)
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, "bad.jsonl")
	})
}

func TestReplayInterruptPrintsPartialSummary(t *testing.T) {
	s := newReplayServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	old := replaySignalContext
	replaySignalContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	t.Cleanup(func() { replaySignalContext = old })
	var mu sync.Mutex
	n := 0
	s.onReq = func(r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if k == 3 {
			cancel() // Ctrl-C while the third request is in flight
			<-r.Context().Done()
		}
	}
	code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", s.srv.URL, "--sessions", "4", "--speed", "1e6", "--concurrency", "1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "interrupted: the summary above is partial")
	assert.Contains(t, stdout, "requests    2 finished of ")
	assert.Contains(t, stdout, "1 cancelled")
}

func TestReplayUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", nil, "--endpoint is required"},
		{"bad endpoint", []string{"--endpoint", "localhost:8000"}, "http:// or https://"},
		{"bad harness", []string{"--endpoint", "http://x", "--harness", "cursor"}, "unknown harness"},
		{"bad api", []string{"--endpoint", "http://x", "--api", "embeddings"}, "unknown api"},
		{"zero speed", []string{"--endpoint", "http://x", "--speed", "0"}, "--speed must be positive"},
		{"nan speed", []string{"--endpoint", "http://x", "--speed", "NaN"}, "--speed must be positive"},
		{"negative concurrency", []string{"--endpoint", "http://x", "--concurrency", "-1"}, "--concurrency"},
		{"negative max", []string{"--endpoint", "http://x", "--max-requests", "-1"}, "--max-requests"},
		{"zero timeout", []string{"--endpoint", "http://x", "--timeout", "0s"}, "--timeout"},
		{"bad header", []string{"--endpoint", "http://x", "--header", "novalue"}, "Name: value"},
		{"extra arg", []string{"--endpoint", "http://x", "file.jsonl"}, "unexpected argument"},
		{"bad format", []string{"--endpoint", "http://x", "--workload", "f", "--format", "xml"}, "xml"},
		{"zero sessions", []string{"--endpoint", "http://x", "--sessions", "0"}, "--sessions"},
		{"batch past the workload", []string{"--endpoint", "http://x", "--batch", "--sessions", "4", "--concurrency", "5"}, "a batch of 5 programs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", append([]string{"replay"}, tc.args...)...)
			assert.Equal(t, 2, code, stderr)
			assert.Contains(t, stderr, tc.want)
		})
	}
	code, stdout, _ := runCLI(t, "", "replay", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "usage: agentkv replay --endpoint URL")
	assert.Contains(t, stdout, "-trace-out")
}

// TestReplayThroughProxy replays small multi-turn sessions through the real
// agentkv proxy in front of two fake vLLM workers: every request is routed
// and streamed back with the workers' usage.
func TestReplayThroughProxy(t *testing.T) {
	f1, f2 := newFakeVLLM(t, 16, 4096), newFakeVLLM(t, 16, 4096)
	_, srv := testProxy(t, proxyConfig{}, f1, f2)
	var b strings.Builder
	for s := 0; s < 3; s++ {
		for k := 0; k < 4; k++ {
			fmt.Fprintf(&b, `{"session_id": "s%d", "timestamp": %d, "delay": 10, "input_length": %d, "output_length": 2, "hash_ids": [%s]}`+"\n",
				s, s*10, 48*(k+1), strings.Trim(strings.Repeat("7,", k+1), ","))
		}
	}
	path := filepath.Join(t.TempDir(), "sessions.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", srv.URL, "--workload", path, "--speed", "1e3",
		"--harness", "claude-code", "--max-requests", "10", "--concurrency", "3")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "model m")
	assert.Contains(t, stdout, "requests    10 finished of 10 planned (10 ok, 0 failed)")
	assert.Contains(t, stdout, "reported by 10 of 10 requests", "the workers' cached_tokens come through the proxy")
	assert.Equal(t, 10, f1.requests()+f2.requests())
}
