package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/eventplane/embedded"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/internal/freeport"
	"github.com/agentkv/agentkv/sharedpool"
)

// The agentkv binary the process tests run, built once per test run.
var agentkvBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	if addr := os.Getenv(bareHopEnv); addr != "" { // BenchmarkFrontDoor's bare hop
		runBareHop(addr, os.Getenv(bareHopUpstreamsEnv))
		return
	}
	code := m.Run()
	if agentkvBin.dir != "" {
		_ = os.RemoveAll(agentkvBin.dir)
	}
	os.Exit(code)
}

// agentkvBinary builds this command ("go build", without the test's
// instrumentation) into a temporary directory, once.
func agentkvBinary(t testing.TB) string {
	t.Helper()
	agentkvBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "agentkv-bin-")
		if err != nil {
			agentkvBin.err = err
			return
		}
		agentkvBin.dir, agentkvBin.path = dir, filepath.Join(dir, "agentkv")
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			goTool = "go"
		}
		t0 := time.Now()
		out, err := exec.Command(goTool, "build", "-o", agentkvBin.path, ".").CombinedOutput()
		if err != nil {
			agentkvBin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		t.Logf("built %s in %v", agentkvBin.path, time.Since(t0).Round(time.Millisecond))
	})
	require.NoError(t, agentkvBin.err)
	return agentkvBin.path
}

// cliProcess is an agentkv subprocess.
type cliProcess struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	lines  chan string
}

func startProcess(t testing.TB, args ...string) *cliProcess {
	t.Helper()
	cmd := exec.Command(agentkvBinary(t), args...)
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

func (p *cliProcess) line(t testing.TB, prefix string) string {
	t.Helper()
	// A bound for a process that hangs, far above a start-up on a loaded
	// machine (the process's own start-up waits log their retries).
	deadline := time.After(3 * time.Minute)
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

// mooncakeFrames encodes one Mooncake master batch (Dynamo's
// {event_type, object_key, tenant_id, group_id} shape).
func mooncakeFrames(t *testing.T, seq uint64, keys []string) [][]byte {
	evs := make([]map[string]any, len(keys))
	for i, k := range keys {
		evs[i] = map[string]any{"event_type": "stored", "object_key": k, "tenant_id": "default", "group_id": ""}
	}
	payload, err := msgpack.Marshal([]any{time.Now().UnixMilli(), evs})
	require.NoError(t, err)
	s := make([]byte, 8)
	binary.BigEndian.PutUint64(s, seq)
	return [][]byte{[]byte("mooncake"), s, payload}
}

// balancer sends each request to the next live replica, round-robin; a
// request that cannot reach its replica or whose reply breaks off (killed:
// connection refused or reset, or a body cut after its headers) marks it
// down and goes to the next, as a load balancer's health check and retry
// would.
type balancer struct {
	bases []string
	mu    sync.Mutex
	up    []bool
	next  int
	// counts
	retries int
	served  []int
}

func newBalancer(bases []string) *balancer {
	b := &balancer{bases: bases, up: make([]bool, len(bases)), served: make([]int, len(bases))}
	for i := range b.up {
		b.up[i] = true
	}
	return b
}

func (b *balancer) pick() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := 0; k < len(b.bases); k++ {
		i := (b.next + k) % len(b.bases)
		if b.up[i] {
			b.next = i + 1
			return i
		}
	}
	return -1
}

func (b *balancer) set(i int, up bool) {
	b.mu.Lock()
	b.up[i] = up
	b.mu.Unlock()
}

// post sends a chat request; it returns the replica that answered, the
// response and its body.
func (b *balancer) post(hdr map[string]string, body []byte) (int, *http.Response, []byte, error) {
	for attempt := 0; attempt < 2*len(b.bases); attempt++ {
		i := b.pick()
		if i < 0 {
			return -1, nil, nil, errors.New("no replica up")
		}
		req, err := http.NewRequest(http.MethodPost, b.bases[i]+vllm.ChatPath, bytes.NewReader(body))
		if err != nil {
			return i, nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		var data []byte
		if err == nil {
			data, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			// Refused, reset, or cut after the headers (a replica
			// SIGKILLed mid-reply: unexpected EOF): the replica is down
			// for this balancer and the request goes to the next, as a
			// load balancer retries an idempotent turn.
			b.mu.Lock()
			b.up[i] = false
			b.retries++
			b.mu.Unlock()
			continue
		}
		b.mu.Lock()
		b.served[i]++
		b.mu.Unlock()
		return i, resp, data, nil
	}
	return -1, nil, nil, errors.New("every replica failed")
}

// agentSession is a multi-turn conversation: each turn resends the whole
// history plus a new user message.
type agentSession struct {
	id     string
	msgs   []chatMsg
	worker string
}

func (s *agentSession) body(n int) []byte {
	s.msgs = append(s.msgs, chatMsg{"user", fmt.Sprintf("session %s turn %d: read the file, run the tests, fix what fails, explain", s.id, n)})
	b, _ := json.Marshal(map[string]any{"model": "agentkv-mock", "messages": s.msgs, "max_tokens": 8})
	return b
}

func (s *agentSession) reply(data []byte) error {
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &r); err != nil || len(r.Choices) == 0 {
		return fmt.Errorf("reply %q: %v", data, err)
	}
	s.msgs = append(s.msgs, chatMsg{"assistant", r.Choices[0].Message.Content})
	return nil
}

// waitProgress polls cond until it holds. The bound scales with the
// run's progress, not the machine's speed: it fails only when progress()
// (a counter such as an applied sequence) has not moved for a minute
// while cond is false, or after 10 minutes in all.
func waitProgress(t *testing.T, what string, progress func() float64, cond func() bool) {
	t.Helper()
	const stall, limit = time.Minute, 10 * time.Minute
	start := time.Now()
	last, moved := progress(), time.Now()
	for !cond() {
		if p := progress(); p != last {
			last, moved = p, time.Now()
		}
		if time.Since(moved) > stall || time.Since(start) > limit {
			t.Fatalf("waiting for %s: no progress for %v (at %v after %v)", what, time.Since(moved).Round(time.Millisecond),
				last, time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func readyz(base string) string {
	r, err := http.Get(base + "/readyz")
	if err != nil {
		return ""
	}
	defer r.Body.Close()
	body, _ := io.ReadAll(r.Body)
	return string(body)
}

// TestReplicaProcessesSurviveAKill is the end-to-end check with
// processes: three "agentkv proxy --nats URL --worker ..." replicas in
// front of the same two "agentkv mock-worker" processes, an "agentkv
// relay" beside each worker (the first also carrying a fake Mooncake
// master's shared-pool events), all separate processes of the agentkv
// binary built once for the test, on an in-process NATS JetStream server.
//
// Concurrent multi-turn sessions go round-robin over the replicas; one
// replica is SIGKILLed mid-run and the sessions continue through the
// others without an error, every turn on its session's worker. Restarted,
// it is ready within seconds, warm from the newest snapshot (index and
// shared pool), and routes as the others do: probes of every session's
// prompt get the same worker and cached tokens from all three replicas.
// Then a relay stops (its worker going away): every replica drops that
// worker, and takes it back when the relay returns.
func TestReplicaProcessesSurviveAKill(t *testing.T) {
	const bs = 16
	ns, err := embedded.Start(embedded.Config{Dir: t.TempDir()})
	require.NoError(t, err)
	defer ns.Stop()

	// Two mock vLLM workers, their KV events on ZMQ with replay sockets.
	var workers, events, replays []string
	for range 2 {
		ev, rep := fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t)), fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t))
		p := startProcess(t, "mock-worker", "--listen", "127.0.0.1:"+strconv.Itoa(freeport.Port(t)), "--events", ev, "--replay", rep,
			"--speedup", "1000", "--min-output", "4", "--max-output", "8")
		url, _, _ := strings.Cut(strings.TrimPrefix(p.line(t, "mock worker "), "mock worker "), " ")
		workers, events, replays = append(workers, url), append(events, ev), append(replays, rep)
	}
	// A fake Mooncake master: SGLang HiCache pages as MLA objects, one per page.
	poolLayout := sharedpool.Layout{PageSize: bs, MLA: true}
	master := fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t))
	mpub := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	require.NoError(t, mpub.Listen(master))
	defer mpub.Close()

	relayArgs := func(i int) []string {
		a := []string{"relay", "--nats", ns.URL(), "--worker-id", strconv.Itoa(i), "--url", workers[i], "--events", events[i], "--replay", replays[i]}
		if i == 0 {
			a = append(a, "--store", master, "--pool-layout", "page=16,mla")
		}
		return a
	}
	relays := []*cliProcess{startProcess(t, relayArgs(0)...), startProcess(t, relayArgs(1)...)}
	for i, r := range relays {
		r.line(t, "agentkv relay: worker "+strconv.Itoa(i))
	}
	relays[0].line(t, "agentkv relay: pool mooncake")

	ports := []int{freeport.Port(t), freeport.Port(t), freeport.Port(t)}
	bases := make([]string, 3)
	startReplica := func(i int) *cliProcess {
		p := startProcess(t, "proxy", "--listen", "127.0.0.1:"+strconv.Itoa(ports[i]), "--worker", workers[0], "--worker", workers[1],
			"--nats", ns.URL(), "--replica", "r"+strconv.Itoa(i), "--snapshot-every", "500ms")
		p.line(t, "agentkv proxy listening on ")
		return p
	}
	procs := make([]*cliProcess, 3)
	for i := range procs {
		bases[i] = "http://127.0.0.1:" + strconv.Itoa(ports[i])
		procs[i] = startReplica(i)
	}
	for i := range procs {
		eventually(t, "replica "+strconv.Itoa(i)+" ready", func() bool { return strings.HasPrefix(readyz(bases[i]), "ok:") })
	}

	// Shared pool: the Mooncake master announces every page of three
	// documents no worker has seen, one per replica.
	docs := make([][]byte, 3)
	var keys []string
	poolPages := make([]int, 3)
	for i := range docs {
		msgs := []chatMsg{{"system", strings.Repeat(fmt.Sprintf("Pool document %d holds the design notes of module %d. ", i, i), 20)}, {"user", "summarise"}}
		b, err := json.Marshal(map[string]any{"model": "agentkv-mock", "messages": msgs, "max_tokens": 8})
		require.NoError(t, err)
		docs[i] = b
		resp, body := post(t, workers[0]+"/tokenize", nil, b)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		var tok struct{ Tokens []uint32 }
		require.NoError(t, json.Unmarshal(body, &tok))
		pages := sharedpool.PageHashes(tok.Tokens, bs, false, nil)
		poolPages[i] = len(pages)
		for _, pg := range pages {
			keys = poolLayout.AppendObjectKeys(keys, pg)
		}
	}
	var mseq uint64
	eventually(t, "the shared pool on every replica", func() bool {
		mseq++ // a batch the relay's SUB missed (slow joiner) is a gap the pool absorbs
		require.NoError(t, mpub.SendMulti(zmq4.NewMsgFrom(mooncakeFrames(t, mseq, keys)...)))
		time.Sleep(20 * time.Millisecond)
		for i := range bases {
			if int(metricValue(t, bases[i], "agentkv_eventplane_pool_pages")) != len(keys) {
				return false
			}
		}
		return true
	})
	for i := range bases {
		resp, body := post(t, bases[i]+vllm.ChatPath, nil, docs[i])
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.Equal(t, strconv.Itoa(poolPages[i]*bs), resp.Header.Get(gateway.HeaderSharedTokens),
			"replica %d credits the worker with the document's pages in the shared pool", i)
		require.Equal(t, "0", resp.Header.Get(headerCachedTokens))
	}

	lb := newBalancer(bases)
	const nSessions, turnsPerPhase = 24, 3
	sessions := make([]*agentSession, nSessions)
	for s := range sessions {
		sessions[s] = &agentSession{id: strconv.Itoa(s), msgs: []chatMsg{{"system", systemPrompt}}}
	}
	var done sync.WaitGroup
	errs := make(chan error, nSessions*8)
	// phase runs turns [from, from+turnsPerPhase) of every session
	// concurrently (each session's turns in order); midway calls back
	// once half of the phase's turns are done.
	phase := func(from int, midway func()) {
		var half sync.Once
		var count int
		var cmu sync.Mutex
		for _, s := range sessions {
			done.Add(1)
			go func() {
				defer done.Done()
				for n := from; n < from+turnsPerPhase; n++ {
					i, resp, data, err := lb.post(map[string]string{"X-Claude-Code-Session-Id": "proc-sess-" + s.id}, s.body(n))
					switch {
					case err != nil:
						errs <- fmt.Errorf("session %s turn %d: %v", s.id, n, err)
						return
					case resp.StatusCode != http.StatusOK:
						errs <- fmt.Errorf("session %s turn %d through replica %d: %d %s", s.id, n, i, resp.StatusCode, data)
						return
					}
					w := resp.Header.Get(headerWorker)
					if s.worker == "" {
						s.worker = w
					} else if w != s.worker {
						errs <- fmt.Errorf("session %s turn %d through replica %d moved from %s to %s", s.id, n, i, s.worker, w)
						return
					}
					if err := s.reply(data); err != nil {
						errs <- err
						return
					}
					cmu.Lock()
					count++
					c := count
					cmu.Unlock()
					if midway != nil && c == nSessions*turnsPerPhase/2 {
						half.Do(midway)
					}
				}
			}()
		}
		done.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	phase(0, nil)
	// Every replica has stored a snapshot (every 500 ms) by now.
	for i := range bases {
		eventually(t, "replica "+strconv.Itoa(i)+" to store a snapshot", func() bool {
			return metricValue(t, bases[i], "agentkv_eventplane_snapshot_bytes") > 0
		})
	}
	// Kill replica 1 while the next turns are in flight.
	phase(turnsPerPhase, func() {
		if err := procs[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			errs <- err
		}
		_ = procs[1].cmd.Wait()
		lb.set(1, false)
	})
	servedBefore := lb.served[1]

	// Restart it: ready, warm (index and pool from the newest snapshot),
	// caught up with the others, within seconds.
	t0 := time.Now()
	procs[1] = startReplica(1)
	eventually(t, "the restarted replica to be ready", func() bool { return strings.HasPrefix(readyz(bases[1]), "ok:") })
	ready := time.Since(t0)
	poolAtStart := metricValue(t, bases[1], "agentkv_eventplane_pool_pages")
	applied := func(i int) func() float64 {
		return func() float64 { return metricValue(t, bases[i], "agentkv_eventplane_applied_sequence") }
	}
	// Bounded by progress: it fails only when the restarted replica stops
	// applying events short of the others, however slow the machine.
	waitProgress(t, "the restarted replica to catch up", applied(1), func() bool {
		want := applied(0)()
		return applied(1)() >= want && want > 0
	})
	caughtUp := time.Since(t0)
	eventually(t, "the restarted replica to log its warm start", func() bool {
		return strings.Contains(procs[1].stderr.String(), "starting warm from snapshot")
	})
	require.Equal(t, float64(len(keys)), poolAtStart, "the shared pool came with the snapshot, before any new pool event")

	// It routes as the others do: every session's last prompt, sent
	// without its session (KV-aware routing alone), gets the same worker
	// and cached tokens from each replica, and that worker is the
	// session's.
	lb.set(1, true)
	agree := 0
	for _, s := range sessions {
		b, err := json.Marshal(map[string]any{"model": "agentkv-mock", "messages": s.msgs[:len(s.msgs)-1], "max_tokens": 8})
		require.NoError(t, err)
		var got [3][2]string
		for i := range bases {
			// The same state on all: the previous probe's end and its
			// load report reached every replica (a replica that still
			// counts it against the worker weighs the prefix against it,
			// as it should).
			for j := range bases {
				eventually(t, "replica "+strconv.Itoa(j)+" to see no request in flight elsewhere", func() bool {
					return metricValue(t, bases[j], "agentkv_eventplane_remote_requests") == 0
				})
			}
			// And the KV events the previous probe's worker sent (its
			// stores, any eviction) applied on every replica alike.
			eventually(t, "the replicas to apply the same events", func() bool {
				a0 := applied(0)()
				return a0 == applied(1)() && a0 == applied(2)()
			})
			resp, body := post(t, bases[i]+vllm.ChatPath, nil, b)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			got[i] = [2]string{resp.Header.Get(headerWorker), resp.Header.Get(headerCachedTokens)}
		}
		require.Equal(t, got[0], got[1], "session %s: replica 1 (restarted) vs replica 0", s.id)
		require.Equal(t, got[0], got[2], "session %s: replica 2 vs replica 0", s.id)
		require.Equal(t, s.worker, got[1][0], "session %s: KV-aware routing finds its worker", s.id)
		require.NotEqual(t, "0", got[1][1])
		agree++
	}
	// The shared pool credit too, on the restarted replica.
	// Document 1 was sent once (to replica 1 before the kill): its pages
	// are now on that worker's device, so nothing is credited twice (once
	// the worker's KV events reached the restarted replica: under -race
	// they may trail the first try).
	var resp *http.Response
	var body []byte
	waitProgress(t, "the worker's KV events to reach the restarted replica", applied(1), func() bool {
		resp, body = post(t, bases[1]+vllm.ChatPath, nil, docs[1])
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		return resp.Header.Get(gateway.HeaderSharedTokens) == ""
	})
	require.Equal(t, strconv.Itoa(poolPages[1]*bs), resp.Header.Get(headerCachedTokens))

	phase(2*turnsPerPhase, nil)
	require.Greater(t, lb.served[1], servedBefore, "the restarted replica serves again")
	t.Logf("restarted replica ready in %v, caught up in %v (pool %v pages from the snapshot); %d sessions × %d turns, every turn on its session's worker; "+
		"%d requests retried by the balancer after the kill; %d/%d probes agree on all three replicas; served per replica %v",
		ready.Round(time.Millisecond), caughtUp.Round(time.Millisecond), poolAtStart, nSessions, 3*turnsPerPhase, lb.retries, agree, nSessions, lb.served)

	// The relay of worker 1 stops (its worker is going away): every
	// replica removes worker 1; its sessions move to worker 0 by
	// compare-and-set and stay there.
	require.NoError(t, relays[1].cmd.Process.Signal(os.Interrupt))
	require.NoError(t, relays[1].cmd.Wait())
	for i := range bases {
		eventually(t, "replica "+strconv.Itoa(i)+" to drop worker 1", func() bool {
			resp, _ := post(t, bases[i]+vllm.ChatPath, nil, docs[0])
			return resp.StatusCode == http.StatusOK && resp.Header.Get(headerWorker) == workers[0]
		})
	}
	for _, s := range sessions {
		s.worker = "" // sessions on worker 1 move once
	}
	phase(3*turnsPerPhase, nil)
	for _, s := range sessions {
		require.Equal(t, workers[0], s.worker, "session %s", s.id)
	}
	// The relay comes back: worker 1 is routed to again.
	relays[1] = startProcess(t, relayArgs(1)...)
	relays[1].line(t, "agentkv relay: worker 1")
	for i := range bases {
		eventually(t, "replica "+strconv.Itoa(i)+" to route to worker 1 again", func() bool {
			hdr := map[string]string{"X-Claude-Code-Session-Id": "new-" + strconv.FormatInt(time.Now().UnixNano(), 10)}
			fresh, _ := json.Marshal(map[string]any{"model": "agentkv-mock", "messages": []chatMsg{{"user", "fresh"}}, "max_tokens": 4})
			resp, _ := post(t, bases[i]+vllm.ChatPath, hdr, fresh)
			return resp.StatusCode == http.StatusOK && resp.Header.Get(headerWorker) == workers[1]
		})
	}
}

// TestRelayWaitsForNATSAndWorker starts "agentkv relay" before its NATS
// server and its worker, as the README's replica block does when pasted
// (the replica embedding NATS and the mock worker still building): the
// relay logs each retry, naming what it waits for (never NATS's "outbound
// buffer limit exceeded"), and bridges the worker once both are up. With
// a short --wait and no worker it gives up with the reason.
func TestRelayWaitsForNATSAndWorker(t *testing.T) {
	natsPort, workerPort := freeport.Port(t), freeport.Port(t)
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	workerURL := fmt.Sprintf("http://127.0.0.1:%d", workerPort)
	ev := fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t))
	relay := startProcess(t, "relay", "--nats", natsURL, "--worker-id", "0", "--url", workerURL, "--events", ev)
	eventually(t, "the relay to say it waits for NATS", func() bool {
		return strings.Contains(relay.stderr.String(), "relay: waiting for NATS "+natsURL)
	})
	ns, err := embedded.Start(embedded.Config{Dir: t.TempDir(), Port: natsPort})
	require.NoError(t, err)
	defer ns.Stop()
	eventually(t, "the relay to say it waits for the worker", func() bool {
		return strings.Contains(relay.stderr.String(), "relay: waiting for worker "+workerURL)
	})
	startProcess(t, "mock-worker", "--listen", fmt.Sprintf("127.0.0.1:%d", workerPort), "--events", ev, "--speedup", "1000")
	relay.line(t, "agentkv relay: worker 0 ("+workerURL)
	// stderr reaches the buffer through exec's copying goroutine, which
	// may trail the stdout line read above: wait for the log line.
	eventually(t, "the relay to log that the worker answered", func() bool {
		return strings.Contains(relay.stderr.String(), "relay: worker "+workerURL+" answered")
	})
	require.NotContains(t, relay.stderr.String(), "outbound buffer limit exceeded", "start-up warnings name their cause")

	// No worker and a short --wait: the relay gives up, saying why.
	gone := fmt.Sprintf("http://127.0.0.1:%d", freeport.Port(t))
	p := startProcess(t, "relay", "--nats", ns.URL(), "--worker-id", "1", "--url", gone, "--events", ev, "--wait", "300ms")
	for range p.lines {
	}
	require.Error(t, p.cmd.Wait())
	require.Contains(t, p.stderr.String(), "worker "+gone+" not answering after")
}
