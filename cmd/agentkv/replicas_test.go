package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/freeport"
	"github.com/agentkv/agentkv/sharedpool"
)

// startCmd runs an agentkv command in-process and returns a reader of its
// stdout lines, its exit status channel and its stderr.
func startCmd(t *testing.T, args ...string) (*bufio.Scanner, chan int, *lockedBuffer) {
	t.Helper()
	pr, pw := io.Pipe()
	stderr := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(&cmdEnv{stdin: strings.NewReader(""), stdout: pw, stderr: stderr}, args)
		pw.Close()
	}()
	return bufio.NewScanner(pr), done, stderr
}

func drain(s *bufio.Scanner) {
	go func() {
		for s.Scan() {
		}
	}()
}

// TestProxyReplicasOnNATS runs two "agentkv proxy --nats" replicas (the
// first with an embedded NATS server) in front of the same two workers and
// an "agentkv relay" for the worker that publishes KV events: both
// replicas route the prompt to that worker with its cached prefix, and a
// session started on one replica continues on the same worker through the
// other.
func TestProxyReplicasOnNATS(t *testing.T) {
	const bs = 16
	a, b := newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t))
	pub := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	require.NoError(t, pub.Listen(ep))
	defer pub.Close()

	outA, doneA, errA := startCmd(t, "proxy", "--listen", "127.0.0.1:0", "--worker", a.URL(), "--worker", b.URL(),
		"--nats", "embedded", "--nats-port", "0", "--nats-dir", t.TempDir(), "--replica", "a", "--affinity", "hard")
	require.True(t, outA.Scan(), "no NATS line; stderr: %s", errA.String())
	natsURL, _, ok := strings.Cut(strings.TrimPrefix(outA.Text(), "agentkv proxy: embedded NATS JetStream at "), " ")
	require.True(t, ok, outA.Text())
	require.True(t, outA.Scan(), "no listening line; stderr: %s", errA.String())
	baseA, _, _ := strings.Cut(strings.TrimPrefix(outA.Text(), "agentkv proxy listening on "), ": ")
	drain(outA)

	outB, doneB, errB := startCmd(t, "proxy", "--listen", "127.0.0.1:0", "--worker", a.URL(), "--worker", b.URL(),
		"--nats", natsURL, "--replica", "b", "--affinity", "hard")
	require.True(t, outB.Scan(), "no listening line; stderr: %s", errB.String())
	baseB, _, _ := strings.Cut(strings.TrimPrefix(outB.Text(), "agentkv proxy listening on "), ": ")
	drain(outB)

	outR, doneR, errR := startCmd(t, "relay", "--nats", natsURL, "--worker-id", "1", "--url", b.URL(), "--events", ep, "--health-every", "0")
	require.True(t, outR.Scan(), "no relay line; stderr: %s", errR.String())
	require.Contains(t, outR.Text(), "worker 1")
	drain(outR)

	msgs := []chatMsg{{"system", systemPrompt}, {"user", "which worker has me?"}}
	toks := tokensOf(renderChat(toMaps(msgs)))
	nb := 8
	hashes := make([]uint64, nb)
	for i := range hashes {
		hashes[i] = 0xabc000 + uint64(i)
	}
	payload, err := vllm.Encoding{MapEvents: true}.Append(nil, 1, []vllm.WireEvent{{
		Kind: flashindex.Stored, Hashes: hashes, Tokens: toks[:nb*bs], BlockSize: bs, Medium: "GPU"}})
	require.NoError(t, err)
	s := uint64(0)
	eventually(t, "KV events to reach both replicas through the relay and the stream", func() bool {
		frame := make([]byte, 8)
		binary.BigEndian.PutUint64(frame, s)
		s++
		require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), frame, payload)))
		return metricValue(t, baseA, "agentkv_eventplane_events_applied_total") > 0 &&
			metricValue(t, baseB, "agentkv_eventplane_events_applied_total") > 0
	})
	for _, base := range []string{baseA, baseB} {
		// The other replica's last request has ended, but its load report
		// (in flight, on core NATS) may not have reached this one yet:
		// stale, that load outweighs the cached prefix.
		eventually(t, "the other replica's requests to have ended here", func() bool {
			return metricValue(t, base, "agentkv_eventplane_remote_requests") == 0
		})
		resp, body := post(t, base+vllm.ChatPath, nil, chatBody(t, false, msgs...))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, b.URL(), resp.Header.Get(headerWorker))
		require.Equal(t, strconv.Itoa(nb*bs), resp.Header.Get(headerCachedTokens))

		r, err := http.Get(base + "/readyz")
		require.NoError(t, err)
		rb, _ := io.ReadAll(r.Body)
		r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode)
		require.True(t, strings.HasPrefix(string(rb), "ok: replica"), string(rb))
	}
	// Sessions alternate between the replicas and stay on one worker.
	for i := 0; i < 10; i++ {
		hdr := map[string]string{"X-Claude-Code-Session-Id": "sess-" + strconv.Itoa(i)}
		var first string
		for turn := 0; turn < 4; turn++ {
			base := []string{baseA, baseB}[(i+turn)%2]
			resp, body := post(t, base+vllm.ChatPath, hdr, chatBody(t, false, chatMsg{"user", "turn " + strconv.Itoa(turn) + " of " + strconv.Itoa(i)}))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			w := resp.Header.Get(headerWorker)
			if turn == 0 {
				first = w
			}
			require.Equal(t, first, w, "session %d turn %d", i, turn)
		}
	}

	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	if err := self.Signal(os.Interrupt); err != nil {
		t.Skipf("cannot signal self on this platform: %v", err)
	}
	require.Equal(t, 0, <-doneR, errR.String())
	require.Equal(t, 0, <-doneB, errB.String())
	require.Equal(t, 0, <-doneA, errA.String())
}

// TestProxyReplicasOwnPrograms: with --admission, each program's turns
// are admitted by one replica (its owner, the first to see it), whichever
// replica the balancer sent them to.
func TestProxyReplicasOwnPrograms(t *testing.T) {
	a, b := newFakeVLLM(t, 16, 1000), newFakeVLLM(t, 16, 1000)
	outA, doneA, errA := startCmd(t, "proxy", "--listen", "127.0.0.1:0", "--worker", a.URL(), "--worker", b.URL(), "--admission",
		"--nats", "embedded", "--nats-port", "0", "--nats-dir", t.TempDir(), "--replica", "a", "--affinity", "hard")
	require.True(t, outA.Scan(), "no NATS line; stderr: %s", errA.String())
	natsURL, _, _ := strings.Cut(strings.TrimPrefix(outA.Text(), "agentkv proxy: embedded NATS JetStream at "), " ")
	require.True(t, outA.Scan(), "no listening line; stderr: %s", errA.String())
	baseA, _, _ := strings.Cut(strings.TrimPrefix(outA.Text(), "agentkv proxy listening on "), ": ")
	drain(outA)
	outB, doneB, errB := startCmd(t, "proxy", "--listen", "127.0.0.1:0", "--worker", a.URL(), "--worker", b.URL(), "--admission",
		"--nats", natsURL, "--replica", "b", "--affinity", "hard")
	require.True(t, outB.Scan(), "no listening line; stderr: %s", errB.String())
	baseB, _, _ := strings.Cut(strings.TrimPrefix(outB.Text(), "agentkv proxy listening on "), ": ")
	drain(outB)

	owners := map[string]int{}
	for i := 0; i < 12; i++ {
		hdr := map[string]string{"X-Claude-Code-Session-Id": "prog-" + strconv.Itoa(i)}
		owner, worker := "", ""
		for turn := 0; turn < 4; turn++ {
			base := []string{baseA, baseB}[(i+turn)%2]
			resp, body := post(t, base+vllm.ChatPath, hdr, chatBody(t, false, chatMsg{"user", "turn " + strconv.Itoa(turn)}))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			got := resp.Header.Get(headerReplica)
			require.NotEmpty(t, got)
			if turn == 0 {
				owner, worker = got, resp.Header.Get(headerWorker)
			}
			require.Equal(t, owner, got, "program %d turn %d admitted by another replica", i, turn)
			require.Equal(t, worker, resp.Header.Get(headerWorker))
		}
		owners[owner]++
	}
	require.Len(t, owners, 2, "both replicas own programs: %v", owners)

	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	require.NoError(t, self.Signal(os.Interrupt))
	require.Equal(t, 0, <-doneB, errB.String())
	require.Equal(t, 0, <-doneA, errA.String())
}

func TestParsePoolLayout(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want sharedpool.Layout
	}{
		{"page=16,mla", sharedpool.Layout{PageSize: 16, MLA: true}},
		{"page=64, tp=2, pp=2", sharedpool.Layout{PageSize: 64, TPSize: 2, PPSize: 2}},
		{"page=16,tp=2,tp-lcm=4,split-heads,eagle,tag=t,key-prefix=t_org-m,backend=mooncake",
			sharedpool.Layout{PageSize: 16, TPSize: 2, TPLCMSize: 4, SplitHeads: true, Eagle: true, ExtraBackendTag: "t", KeyPrefix: "t_org-m", Backend: "mooncake"}},
	} {
		got, err := parsePoolLayout(tc.spec)
		require.NoError(t, err, tc.spec)
		require.Equal(t, tc.want, got, tc.spec)
	}
	for spec, want := range map[string]string{
		"":                                  "page=N is required",
		"tp=2":                              "page=N is required",
		"page=x":                            "page wants a number",
		"page=-3":                           "page wants a number",
		"page":                              "page wants a number",
		"page=16,mla=1":                     "mla takes no value",
		"page=16,shards=2":                  "unknown field",
		"page=16,backend=x":                 "unsupported HiCache backend",
		"page=16,tp=3,tp-lcm=4,split-heads": "not a multiple",
	} {
		_, err := parsePoolLayout(spec)
		require.ErrorContains(t, err, want, spec)
	}
}

func TestRelayCLIUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"relay"}, "--nats is required"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1"}, "give a worker"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1", "--url", "http://127.0.0.1:1"}, "--url and --events go together"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1", "--store", "tcp://127.0.0.1:1"}, "--store needs --pool-layout"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1", "--store", "tcp://127.0.0.1:1", "--pool-layout", "tp=2"}, "page=N is required"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1", "--url", "http://127.0.0.1:1", "--events", "tcp://127.0.0.1:2", "--pool-layout", "page=16"}, "need --store"},
		{[]string{"relay", "--nats", "nats://127.0.0.1:1", "--store", "tcp://127.0.0.1:1", "--pool-layout", "page=16", "extra"}, "unexpected argument"},
	} {
		code, _, stderr := runCLI(t, "", tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Contains(t, stderr, tc.want, tc.args)
	}
}
