package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/trace"
)

// chaosResult is what a chaos run's clients saw.
type chaosResult struct {
	requests, failedBeforeFirstByte, erroredMidStream, migrated int64
	sessionsDone                                                int64
	prompt, cached                                              int64
	// reusable counts the prompt tokens a turn shares with its session's
	// previous turn (that turn's prompt and reply): what a perfect cache
	// could have served, which depends on how many turns the run managed
	// (a loaded machine completes fewer, and first turns share little).
	reusable int64
}

func (r *chaosResult) hitRate() float64 { return float64(r.cached) / float64(max(r.prompt, 1)) }

// reachable is the hit rate a perfect cache would have had on the turns
// this run made.
func (r *chaosResult) reachable() float64 { return float64(r.reusable) / float64(max(r.prompt, 1)) }

// efficiency is the share of the reachable hit rate the run got (the
// shared system prompt can put it above 1).
func (r *chaosResult) efficiency() float64 { return r.hitRate() / max(r.reachable(), 1e-9) }

// runChaos drives sessions concurrent multi-turn chat sessions (streamed,
// usage on; each turn resends the conversation) through a fleet of three
// mock workers for dur; with kill, worker (k mod 3) is killed every
// period and restarted period/4 later.
func runChaos(t *testing.T, sessions, turns int, kill, admission bool, period, dur time.Duration) chaosResult {
	fc := fastFailover()
	fc.MigrationLimit = 2
	f := newFleet(t, 3, nil, Config{Failover: fc}, admission)
	for i := range 3 {
		f.waitRoutable(i, true)
	}
	// The run lasts dur and until the sessions made as many later turns
	// (those a cache can serve) as there are sessions, within two minutes:
	// a loaded machine that managed only first turns in dur would leave
	// nothing to measure the cache on. (Not every session need progress:
	// admission may hold some at the door while the others run.)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var later atomic.Int64 // later turns completed
	go func() {
		end := time.Now().Add(dur)
		for ctx.Err() == nil {
			if time.Now().After(end) && later.Load() >= int64(sessions) {
				cancel()
				return
			}
			sleepCtx(ctx, 20*time.Millisecond)
		}
	}()
	var res chaosResult
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	if kill {
		chaos.Add(1)
		go func() {
			defer chaos.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(period):
				}
				// One worker down at a time, as the run means: the one
				// revived last must be routable again (its probe passed)
				// before the next dies, which on a loaded machine can
				// take longer than a period. (Once, under -race at load
				// 7, two were out and first turns got 502s.)
				for !(f.routable(0) && f.routable(1) && f.routable(2)) {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
				f.kill(k % 3)
				select {
				case <-stop:
				case <-time.After(period / 4):
				}
				f.revive(k % 3)
			}
		}()
	}
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := []map[string]string{{"role": "system", "content": longPrompt(-1)},
				{"role": "user", "content": longPrompt(s)}}
			prev := 0 // the previous turn's prompt and reply tokens
			for turn := range turns {
				if ctx.Err() != nil {
					break // time is up: the session ran to the end
				}
				body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 48, "messages": msgs})
				atomic.AddInt64(&res.requests, 1)
				resp, text, err := f.post(ctx, ChatPath, fmt.Sprintf("chaos%d", s), string(body))
				if ctx.Err() != nil {
					break
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					if atomic.AddInt64(&res.failedBeforeFirstByte, 1) == 1 {
						// Why no other worker took it (for the record: a run
						// under heavy load failed here once).
						t.Logf("workers when the first request failed: %+v", f.stack.Gateway().Tracker().Status())
					}
					t.Logf("session %d turn %d: %v %v", s, turn, err, text)
					return
				}
				reply, events, u := chatStreamResult(text)
				if events == 0 || !strings.HasSuffix(strings.TrimSpace(text), "data: [DONE]") {
					atomic.AddInt64(&res.erroredMidStream, 1)
					return // the session ends: its client saw an error event
				}
				atomic.AddInt64(&res.prompt, int64(u.PromptTokens))
				atomic.AddInt64(&res.cached, int64(u.CachedTokens))
				atomic.AddInt64(&res.reusable, int64(min(prev, u.PromptTokens)))
				prev = u.PromptTokens + u.CompletionTokens
				msgs = append(msgs, map[string]string{"role": "assistant", "content": reply},
					map[string]string{"role": "user", "content": fmt.Sprintf("tool output %d %d ok", s, turn)})
				if turn > 0 {
					later.Add(1)
				}
			}
			atomic.AddInt64(&res.sessionsDone, 1)
		}()
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	res.migrated = int64(testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "migrated")))
	return res
}

// chatStreamResult reads a chat stream: its text, its chunk count, its
// usage.
func chatStreamResult(body string) (string, int, Usage) {
	var s translate.SSEScanner
	var b strings.Builder
	var u Usage
	n := 0
	s.On = func(_ string, data []byte) {
		var ch apiwire.ChatChunk
		if json.Unmarshal(data, &ch) != nil {
			return
		}
		n++
		translate.Learn(&ch, &u)
		for _, c := range ch.Choices {
			b.WriteString(deref(c.Delta.Content))
		}
	}
	s.Feed([]byte(body))
	s.Flush()
	return b.String(), n, u
}

// TestFailoverChaos: concurrent multi-turn sessions over three mock
// workers while one after another is killed and restarted. No request
// fails before its first byte (retries find a live worker); streams cut
// mid-way are migrated or end with the error event; the hit rate stays
// near a run without faults. AGENTKV_CHAOS_FULL=1 runs the issue's
// figure: 200 sessions, a kill every 20 s, two minutes.
func TestFailoverChaos(t *testing.T) {
	sessions, period, dur := 100, 1500*time.Millisecond, 6*time.Second
	if os.Getenv("AGENTKV_CHAOS_FULL") != "" {
		sessions, period, dur = 200, 20*time.Second, 2*time.Minute
	}
	const turns = 1 << 20 // until dur ends
	// With admission too: every session is then a program placed on a
	// worker, which the router must move off a dead one.
	for _, admission := range []bool{false, true} {
		t.Run(fmt.Sprint("admission=", admission), func(t *testing.T) {
			base := runChaos(t, sessions, turns, false, admission, period, dur)
			hit := runChaos(t, sessions, turns, true, admission, period, dur)
			t.Logf("no faults: %d requests, %d sessions done, hit rate %.3f of a reachable %.3f (%.2f)", base.requests,
				base.sessionsDone, base.hitRate(), base.reachable(), base.efficiency())
			t.Logf("chaos: %d requests, %d failed before the first byte, %d migrated, %d ended with an error event, %d sessions done, hit rate %.3f of a reachable %.3f (%.2f)",
				hit.requests, hit.failedBeforeFirstByte, hit.migrated, hit.erroredMidStream, hit.sessionsDone, hit.hitRate(),
				hit.reachable(), hit.efficiency())
			require.Zero(t, base.failedBeforeFirstByte+base.erroredMidStream)
			require.Zero(t, hit.failedBeforeFirstByte, "no request failed before its first byte")
			// Thresholds on what each run managed, not on the machine: a
			// loaded machine completes fewer turns, and first turns share
			// only the system prompt (the absolute hit rate once fell to
			// 0.469 that way).
			require.Greater(t, base.efficiency(), 0.6, "without faults the cache serves most of what it could")
			require.Greater(t, hit.efficiency(), base.efficiency()-0.35, "the hit rate holds up under chaos")
		})
	}
	// Most kills find requests before their first byte (the mock decodes
	// fast): those are retried. TestFailoverMigration covers the cut
	// stream deterministically.
}

// manualClock is the tracker's clock in the wedge test: breakers open and
// half-open when the test says, so a rejoin is deterministic.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// wedgeLoad is one client's mixed traffic: the three APIs, streamed and
// not, in turn.
var wedgeLoad = []struct {
	path   string
	stream bool
}{{ChatPath, true}, {ResponsesPath, false}, {MessagesPath, true}, {ChatPath, false}, {ResponsesPath, true}, {MessagesPath, false}}

// replyComplete reports whether a reply reached its client whole: 200,
// and a stream that ended with its API's final event.
func replyComplete(path string, stream bool, resp *http.Response, body string) bool {
	if resp == nil || resp.StatusCode != http.StatusOK {
		return false
	}
	if !stream {
		return true
	}
	switch path {
	case ResponsesPath:
		return strings.Contains(body, "response.completed") && !strings.Contains(body, "response.failed")
	case MessagesPath:
		return strings.Contains(body, "message_stop") && !strings.Contains(body, "event: error")
	}
	return strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]")
}

// TestWedgedWorkerEjected: one of three mock workers wedges (its /health
// and /metrics stay green; generations are accepted and never answered)
// under mixed load over the three APIs, streamed and not. Every request
// is answered whole; a request waits at most its first-byte deadline plus
// one retry (each attempt the gateway gave up on took no longer than its
// deadline, by the gateway's own trace, and no request took more than two
// attempts); only requests sent to the wedged worker before its ejection
// are retried (none after it: the wedged worker receives nothing more);
// the worker is ejected for timeouts (counter, /readyz) and leaves the
// router, and, once it recovers, is routable again at the end of one
// ejection period by the tracker's clock and serves again.
func TestWedgedWorkerEjected(t *testing.T) {
	clk := &manualClock{now: time.Unix(1_800_000_000, 0)}
	fc := fastFailover()
	fc.Now = clk.Now
	// A deadline far above what a healthy mock takes even on a loaded
	// machine, so only the wedged worker's requests time out.
	const floor = 3 * time.Second
	fc.Outlier = failover.OutlierConfig{FirstByteFloor: floor}
	var specs []WorkerSpec
	var mocks []*mock.Server
	var cfgs []mock.Config
	for range 3 {
		cfg := mockConfig(nil)
		m, err := mock.Start(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		cfg.Listen = m.Addr()
		mocks, cfgs = append(mocks, m), append(cfgs, cfg)
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(),
			Native: APISet(Chat, Completions, Responses, Messages, CountTokens)})
	}
	tracePath := filepath.Join(t.TempDir(), "trace.jsonl")
	fh, err := os.Create(tracePath)
	require.NoError(t, err)
	tw, err := trace.NewWriter(trace.WriterConfig{Sink: fh, QueueBytes: 64 << 20})
	require.NoError(t, err)
	stack, srv := testStack(t, StackConfig{Trace: tw, Gateway: Config{Failover: fc, FirstByteTimeout: time.Minute}}, specs...)
	f := &fleet{t: t, mocks: mocks, cfgs: cfgs, stack: stack, srv: srv}
	for i := range 3 {
		f.waitRoutable(i, true)
	}
	tr := stack.Gateway().Tracker()
	const wedged = 2
	retries := func(w int) float64 {
		return gathered(t, stack.Registry(), "agentkv_failover_retries_total", "worker", strconv.Itoa(w))
	}

	// Mixed load until stop; each client counts what it got.
	var served [3]atomic.Int64 // complete replies by worker
	var bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const clients = 9
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				l := wedgeLoad[(c+i)%len(wedgeLoad)]
				sess := fmt.Sprintf("wedge%d-%d", c, i/4) // a session of four turns
				resp, body, err := f.post(context.Background(), l.path, sess, bodyFor(l.path, longPrompt(c)+fmt.Sprint(i), l.stream))
				if err != nil || !replyComplete(l.path, l.stream, resp, body) {
					bad.Add(1)
					t.Logf("client %d request %d (%s stream=%v): %v %.300s", c, i, l.path, l.stream, err, body)
					continue
				}
				served[f.workerOf(resp)].Add(1)
			}
		}()
	}
	var stopOnce sync.Once
	stopClients := func() { stopOnce.Do(func() { close(stop); wg.Wait() }) }
	t.Cleanup(stopClients) // a failed check must not leave clients logging after the test
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		require.Eventually(t, cond, 60*time.Second, 2*time.Millisecond, what)
	}
	waitFor("every worker serves", func() bool { return served[0].Load() > 5 && served[1].Load() > 5 && served[2].Load() > 5 })

	// Wedge worker 2 by its admin endpoint: health stays green.
	resp, _ := postJSON(t, mocks[wedged].URL()+"/admin/fault", nil, `{"wedge":true}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	waitFor("the wedged worker is ejected", func() bool { return !tr.Routable(wedged) })
	heldAtEjection := mocks[wedged].WedgedTotal()
	st := tr.Status()[wedged]
	require.True(t, st.Ejected)
	require.Equal(t, failover.ReasonTimeout, st.EjectReason)
	require.Equal(t, failover.Up, st.Health, "its health probes stay green")
	// The ejection's metric is counted by the tracker's listener, just
	// after the worker stops being routable.
	waitFor("the ejection is counted", func() bool {
		return gathered(t, stack.Registry(), "agentkv_gateway_worker_ejections_total", "worker", strconv.Itoa(wedged),
			"reason", failover.ReasonTimeout) == 1
	})
	for _, w := range stack.Router().Workers() {
		require.NotEqual(t, uint64(wedged), w.ID, "an ejected worker leaves the router")
	}
	rresp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	rbody, _ := io.ReadAll(rresp.Body)
	rresp.Body.Close()
	require.Equal(t, http.StatusOK, rresp.StatusCode)
	require.Contains(t, string(rbody), "ejected (timeout)")

	// Load goes on: every request still completes on the two others, and
	// the wedged worker gets nothing more.
	after := served[0].Load() + served[1].Load()
	waitFor("load goes on", func() bool { return served[0].Load()+served[1].Load() > after+60 })
	waitFor("the held requests time out", func() bool { return mocks[wedged].Wedged() == 0 })
	require.LessOrEqual(t, mocks[wedged].WedgedTotal(), heldAtEjection+clients,
		"only requests routed before the ejection reach the wedged worker")
	require.Zero(t, retries(0)+retries(1), "no retry away from a healthy worker")
	require.LessOrEqual(t, retries(wedged), float64(mocks[wedged].WedgedTotal()), "retries only for requests the wedged worker held")
	require.Positive(t, retries(wedged))

	// It recovers: at the end of its ejection period (the tracker's
	// clock) it is on trial, and serves again.
	resp, _ = postJSON(t, mocks[wedged].URL()+"/admin/fault", nil, `{}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	clk.Set(st.EjectedUntil.Add(-time.Nanosecond))
	require.False(t, tr.Routable(wedged), "back before its ejection period ended")
	clk.Set(st.EjectedUntil)
	require.True(t, tr.Routable(wedged), "not back at the end of its ejection period")
	before := served[wedged].Load()
	waitFor("the recovered worker serves again", func() bool { return served[wedged].Load() > before+3 })
	waitFor("its breaker closes", func() bool { return tr.Status()[wedged].Breaker == failover.Closed })
	stopClients()
	require.Zero(t, bad.Load(), "every request was answered whole")

	// The gateway's own timings: no request took more than two attempts,
	// and every attempt it gave up on ended within its deadline (the
	// floor plus a little for these short prompts; generously bounded).
	srv.Close()
	require.NoError(t, stack.Close())
	require.NoError(t, tw.Close())
	require.NoError(t, fh.Close())
	raw, err := os.ReadFile(tracePath)
	require.NoError(t, err)
	attempts := map[string]int{}
	retried := 0
	err = trace.ReadRecords(bytes.NewReader(raw), tracePath, func(_ int, r *trace.Record) error {
		if r.EventType != trace.EventRequestEnd {
			return nil
		}
		base, _, _ := strings.Cut(r.Request.RequestID, "-")
		attempts[base]++
		if r.Request.ErrorKind == "retried" {
			retried++
			require.Less(t, r.Request.TotalTimeMs, float64(3*floor/time.Millisecond),
				"a timed-out attempt waited past its deadline: %+v", r.Request)
		}
		return nil
	})
	require.NoError(t, err)
	for id, n := range attempts {
		require.LessOrEqual(t, n, 2, "request %s took %d attempts", id, n)
	}
	require.Equal(t, float64(retried), retries(wedged))
	t.Logf("served %d/%d/%d, %d requests retried off the wedged worker (%d reached it)", served[0].Load(),
		served[1].Load(), served[2].Load(), retried, mocks[wedged].WedgedTotal())
}

// summed is the sum of the counters or gauges name whose labels include
// the given name/value pairs (0 when there is none).
func summed(t *testing.T, g prometheus.Gatherer, name string, labels ...string) (sum float64) {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if hasLabels(m.GetLabel(), labels) {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}

func hasLabels(have []*dto.LabelPair, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		found := false
		for _, lp := range have {
			if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// gathered returns the value of the counter or gauge name whose labels
// include the given name/value pairs (0 when there is none).
func gathered(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m.GetLabel(), labels) {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestLongPromptNotEjected: a 128K-token prompt on a healthy but slow
// fleet (the mock at a twentieth of its usual speed-up) takes far longer
// to its first token than the short prompts the workers were judged by,
// and more than the deadline floor: its deadline, scaled by its size, lets
// it finish on the first worker tried, and its TTFT, normalised by its
// size, ejects no one.
func TestLongPromptNotEjected(t *testing.T) {
	fc := fastFailover()
	// A small floor, so only the scaling by size lets the long prompt
	// through; a factor that leaves room for a loaded machine.
	fc.Outlier = failover.OutlierConfig{FirstByteFloor: 50 * time.Millisecond, FirstByteFactor: 6, LatencyMinSamples: 3}
	fc.Breaker.OpenFor = 200 * time.Millisecond
	var specs []WorkerSpec
	var cfgs []mock.Config
	for range 3 {
		cfg := mockConfig(nil)
		cfg.Speedup = 50
		m, err := mock.Start(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		cfg.Listen = m.Addr()
		cfgs = append(cfgs, cfg)
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Native: Baseline})
	}
	stack, srv := testStack(t, StackConfig{Gateway: Config{Failover: fc, FirstByteTimeout: 10 * time.Minute}}, specs...)
	f := &fleet{t: t, cfgs: cfgs, stack: stack, srv: srv}
	for i := range 3 {
		f.waitRoutable(i, true)
	}
	// Short prompts teach the tracker each worker's speed. On a loaded
	// machine one may be ejected on the way (a latency outlier, or its
	// first byte past the 50 ms floor); its breaker's short opening
	// (OpenFor above) ends, a probe readmits it, and the warm-up goes on
	// until each worker has its samples: bounded by progress, not a count.
	seen, n := map[int]int{}, 0
	for i := 0; len(seen) < 3 || seen[0] < 4 || seen[1] < 4 || seen[2] < 4; i++ {
		for w := range 3 {
			if seen[w] < 4 && !f.routable(w) {
				f.waitRoutable(w, true)
			}
		}
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprint("short", i), chatBody(longPrompt(i), true))
		require.NoError(t, err)
		require.True(t, replyComplete(ChatPath, true, resp, body), body)
		seen[f.workerOf(resp)]++
		n = i + 1
		require.Less(t, n, 2000, "the short prompts did not reach every worker: %v %+v", seen, stack.Gateway().Tracker().Status())
	}
	t.Logf("the short prompts took %d requests to reach every worker 4 times: %v", n, seen)
	// What the short prompts cost (on a loaded machine one may have met
	// its 50 ms floor and been retried, or been ejected): the long prompts
	// must add nothing.
	counts := func() (out [3][3]float64) {
		for w := range 3 {
			ws := strconv.Itoa(w)
			out[w] = [3]float64{gathered(t, stack.Registry(), "agentkv_failover_retries_total", "worker", ws),
				gathered(t, stack.Registry(), "agentkv_failover_failures_total", "worker", ws),
				summed(t, stack.Registry(), "agentkv_gateway_worker_ejections_total", "worker", ws)}
		}
		return out
	}
	before := counts()
	for _, stream := range []bool{false, true} {
		var b strings.Builder
		for i := range 127_000 {
			fmt.Fprintf(&b, "t%v%d ", stream, i) // uncached each time
		}
		body := fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":8,"messages":[{"role":"user","content":%q}]}`, stream, b.String())
		start := time.Now()
		resp, out, err := f.post(context.Background(), ChatPath, fmt.Sprint("long", stream), body)
		require.NoError(t, err)
		require.True(t, replyComplete(ChatPath, stream, resp, out), "%.300s", out)
		w := f.workerOf(resp)
		took, tr := time.Since(start), stack.Gateway().Tracker()
		t.Logf("128K-token prompt (stream %v) answered in %v by worker %d; its whole-reply deadline there was %v (a short prompt's %v)",
			stream, took, w, tr.FirstByteDeadline(uint64(w), 127_000, 8), tr.FirstByteDeadline(uint64(w), 200, 8))
		if !stream {
			require.Greater(t, took, tr.FirstByteDeadline(uint64(w), 200, 8), "the long prompt needed its scaled deadline")
		}
	}
	require.Equal(t, before, counts(), "retries, failures and ejections per worker before and after the long prompts")
}

// TestStreamWedgedMidway: a worker that stops a stream mid-way (the mock's
// wedge_after) with the connection open is caught by the stream idle
// timeout (Config.StreamIdleTimeout, the proxy's --stream-idle-timeout)
// and the chat stream continues on the other worker, whole and
// continuous, exactly as a cut stream migrates.
func TestStreamWedgedMidway(t *testing.T) {
	fc := fastFailover()
	fc.MigrationLimit = 1
	f := newFleet(t, 2, nil, Config{Failover: fc, StreamIdleTimeout: 300 * time.Millisecond}, false)
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	resp, _ := postJSON(t, f.mock(0).URL()+"/admin/fault", nil, `{"wedge_after":3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	for i := 0; ; i++ {
		require.Less(t, i, 200, "no stream reached worker 0")
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprint("mid", i), chatBody(longPrompt(i), true))
		require.NoError(t, err)
		text, events := streamText(t, body)
		require.True(t, replyComplete(ChatPath, true, resp, body), "%v %.300s", events, body)
		if f.workerOf(resp) != 0 {
			continue
		}
		// Worker 0 sent three tokens, then nothing: the rest came from
		// worker 1, continuing the same text.
		require.Equal(t, 1.0, testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "migrated")))
		require.NotEmpty(t, text)
		require.Equal(t, 1, f.mock(0).WedgedTotal(), "one stream wedged")
		return
	}
}
