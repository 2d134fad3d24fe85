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
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/eventplane/embedded"
	"github.com/agentkv/agentkv/flashindex"
)

// The test binary doubles as the agentkv command when this variable is
// set, so tests can run real agentkv processes without building one.
const runAsCLI = "AGENTKV_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(runAsCLI) == "1" {
		os.Exit(run(&cmdEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// cliProcess is an agentkv subprocess.
type cliProcess struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	lines  chan string
}

func startProcess(t *testing.T, args ...string) *cliProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsCLI+"=1")
	p := &cliProcess{cmd: cmd, stderr: &lockedBuffer{}, lines: make(chan string, 64)}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return p
}

func (p *cliProcess) line(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			require.True(t, ok, "process exited before %q; stderr: %s", prefix, p.stderr.String())
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q line; stderr: %s", prefix, p.stderr.String())
		}
	}
}

// TestReplicaProcessesSurviveAKill runs three "agentkv proxy --nats"
// processes in front of the same two workers, with an "agentkv relay"
// process bridging one worker's KV events. Sessions are sent round-robin
// over the live replicas; one replica is killed (SIGKILL) mid-run and the
// sessions continue through the others without an error, every turn on
// its session's worker; restarted, it is ready within seconds, starts
// from the newest snapshot and routes like the others.
func TestReplicaProcessesSurviveAKill(t *testing.T) {
	const bs = 16
	ns, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	require.NoError(t, err)
	defer ns.Stop()
	a, b := newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freeTCPPort(t))
	pub := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	require.NoError(t, pub.Listen(ep))
	defer pub.Close()

	ports := []int{freeTCPPort(t), freeTCPPort(t), freeTCPPort(t)}
	startReplica := func(i int) *cliProcess {
		p := startProcess(t, "proxy", "--listen", "127.0.0.1:"+strconv.Itoa(ports[i]), "--worker", a.URL(), "--worker", b.URL(),
			"--nats", ns.URL(), "--replica", "r"+strconv.Itoa(i), "--affinity", "hard", "--snapshot-every", "300ms")
		p.line(t, "agentkv proxy listening on ")
		return p
	}
	base := func(i int) string { return "http://127.0.0.1:" + strconv.Itoa(ports[i]) }
	procs := []*cliProcess{startReplica(0), startReplica(1), startReplica(2)}
	relay := startProcess(t, "relay", "--nats", ns.URL(), "--worker-id", "1", "--url", b.URL(), "--events", ep, "--health-every", "0")
	relay.line(t, "agentkv relay: worker 1")

	// Worker 1 publishes the system prompt's blocks.
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
	seq := uint64(0)
	eventually(t, "KV events to reach every replica", func() bool {
		frame := make([]byte, 8)
		binary.BigEndian.PutUint64(frame, seq)
		seq++
		require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), frame, payload)))
		for i := range procs {
			if metricValue(t, base(i), "agentkv_eventplane_events_applied_total") == 0 {
				return false
			}
		}
		return true
	})

	alive := []bool{true, true, true}
	var mu sync.Mutex
	worker := map[int]string{}
	lb := 0
	turn := func(s, n int) {
		t.Helper()
		for !alive[lb%3] {
			lb++
		}
		i := lb % 3
		lb++
		hdr := map[string]string{"X-Claude-Code-Session-Id": "proc-sess-" + strconv.Itoa(s)}
		resp, body := post(t, base(i)+vllm.ChatPath, hdr, chatBody(t, false, chatMsg{"user", "session " + strconv.Itoa(s) + " turn " + strconv.Itoa(n)}))
		require.Equal(t, http.StatusOK, resp.StatusCode, "replica %d: %s", i, body)
		w := resp.Header.Get(headerWorker)
		mu.Lock()
		defer mu.Unlock()
		if prev, ok := worker[s]; ok {
			require.Equal(t, prev, w, "session %d turn %d through replica %d moved", s, n, i)
		}
		worker[s] = w
	}
	const sessions = 30
	for n := 0; n < 3; n++ {
		for s := 0; s < sessions; s++ {
			turn(s, n)
		}
	}
	// Kill replica 1 mid-run; the balancer takes it out of rotation.
	require.NoError(t, procs[1].cmd.Process.Signal(syscall.SIGKILL))
	_ = procs[1].cmd.Wait()
	alive[1] = false
	for n := 3; n < 6; n++ {
		for s := 0; s < sessions; s++ {
			turn(s, n)
		}
	}
	// Restart it: ready within seconds, warm, routing like the others.
	t0 := time.Now()
	procs[1] = startReplica(1)
	eventually(t, "the restarted replica to be ready", func() bool {
		r, err := http.Get(base(1) + "/readyz")
		if err != nil {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return strings.HasPrefix(string(body), "ok:")
	})
	ready := time.Since(t0)
	require.Less(t, ready, 10*time.Second)
	alive[1] = true
	resp, body := post(t, base(1)+vllm.ChatPath, nil, chatBody(t, false, msgs...))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, b.URL(), resp.Header.Get(headerWorker), "the restarted replica knows worker 1's blocks")
	require.Equal(t, strconv.Itoa(nb*bs), resp.Header.Get(headerCachedTokens))
	for n := 6; n < 9; n++ {
		for s := 0; s < sessions; s++ {
			turn(s, n)
		}
	}
	t.Logf("restarted replica ready in %v; %d sessions × 9 turns, every turn on its session's worker", ready, sessions)
	require.Contains(t, procs[1].stderr.String(), "starting warm from snapshot")

	// The relay of worker 1 stops (its worker is going away): every
	// replica removes worker 1; its sessions move to worker 0 by
	// compare-and-set and stay there.
	require.NoError(t, relay.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, relay.cmd.Wait())
	for i := range procs {
		eventually(t, "replica "+strconv.Itoa(i)+" to drop worker 1", func() bool {
			resp, _ := post(t, base(i)+vllm.ChatPath, nil, chatBody(t, false, msgs...))
			return resp.StatusCode == http.StatusOK && resp.Header.Get(headerWorker) == a.URL()
		})
	}
	mu.Lock()
	clear(worker) // sessions on worker 1 move once
	mu.Unlock()
	for n := 9; n < 11; n++ {
		for s := 0; s < sessions; s++ {
			turn(s, n)
		}
	}
	for s := 0; s < sessions; s++ {
		require.Equal(t, a.URL(), worker[s], "session %d", s)
	}
	// The relay comes back: worker 1 is routed to again.
	relay = startProcess(t, "relay", "--nats", ns.URL(), "--worker-id", "1", "--url", b.URL(), "--events", ep, "--health-every", "0")
	relay.line(t, "agentkv relay: worker 1")
	for i := range procs {
		eventually(t, "replica "+strconv.Itoa(i)+" to route to worker 1 again", func() bool {
			hdr := map[string]string{"X-Claude-Code-Session-Id": "new-" + strconv.FormatInt(time.Now().UnixNano(), 10)}
			resp, _ := post(t, base(i)+vllm.ChatPath, hdr, chatBody(t, false, chatMsg{"user", "fresh"}))
			return resp.StatusCode == http.StatusOK && resp.Header.Get(headerWorker) == b.URL()
		})
	}
}
