package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/freeport"
)

// These tests break real mock workers (engine/mock: HTTP and ZMQ on
// loopback) behind a Stack and check what the client sees.

// fleet is a Stack over mock workers that can be killed and restarted.
type fleet struct {
	t       *testing.T
	mocks   []*mock.Server
	cfgs    []mock.Config
	stack   *Stack
	srv     *httptest.Server
	restart sync.Mutex
}

// fastFailover probes often so tests see health changes in milliseconds.
func fastFailover() failover.Config {
	return failover.Config{Probe: failover.ProbeConfig{Interval: 100 * time.Millisecond, MinWait: 10 * time.Millisecond,
		Timeout: time.Second}, Retry: failover.RetryConfig{InitialBackoff: 5 * time.Millisecond}}
}

func mockConfig(apis []mock.API) mock.Config {
	return mock.Config{Events: "tcp://127.0.0.1:0", Speedup: 1000, Aliases: []string{"*"}, APIs: apis,
		MinOutput: 24, MaxOutput: 40}
}

// newFleet starts n mock workers (serving apis natively; nil: all) and a
// Stack over them with gateway config gc.
func newFleet(t *testing.T, n int, apis []mock.API, gc Config, admission bool) *fleet {
	t.Helper()
	f := &fleet{t: t}
	var specs []WorkerSpec
	for range n {
		cfg := mockConfig(apis)
		m, err := mock.Start(cfg)
		require.NoError(t, err)
		cfg.Listen, cfg.Events = m.Addr(), m.EventsEndpoint()
		f.mocks, f.cfgs = append(f.mocks, m), append(f.cfgs, cfg)
		native := Baseline
		if apis == nil {
			native = APISet(Chat, Completions, Responses, Messages, CountTokens)
		}
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Native: native})
	}
	t.Cleanup(func() {
		f.restart.Lock()
		defer f.restart.Unlock()
		for _, m := range f.mocks {
			if m != nil {
				_ = m.Close()
			}
		}
	})
	if gc.FirstByteTimeout == 0 {
		gc.FirstByteTimeout = 5 * time.Second
	}
	// A short admission tick: a turn held at the door (its worker died and
	// the live one is full) waits for the tick that pauses an idle program,
	// 5 s by default.
	f.stack, f.srv = testStack(t, StackConfig{Gateway: gc, Admission: admission, Tick: 200 * time.Millisecond, Registry: prometheus.NewRegistry()}, specs...)
	return f
}

// kill closes worker i: its connections drop, its port refuses.
func (f *fleet) kill(i int) {
	f.restart.Lock()
	defer f.restart.Unlock()
	require.NoError(f.t, f.mocks[i].Close())
	f.mocks[i] = nil
}

// revive starts worker i again on its port, with an empty cache.
func (f *fleet) revive(i int) {
	f.restart.Lock()
	defer f.restart.Unlock()
	var err error
	for try := 0; try < 50; try++ { // the port may linger a moment
		if f.mocks[i], err = mock.Start(f.cfgs[i]); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(f.t, err)
}

func (f *fleet) mock(i int) *mock.Server {
	f.restart.Lock()
	defer f.restart.Unlock()
	return f.mocks[i]
}

// workerOf returns the index of the worker that answered.
func (f *fleet) workerOf(resp *http.Response) int {
	u := resp.Header.Get(HeaderWorker)
	for i, c := range f.cfgs {
		if u == "http://"+c.Listen {
			return i
		}
	}
	return -1
}

func (f *fleet) routable(i int) bool { return f.stack.Gateway().Tracker().Routable(uint64(i)) }

func (f *fleet) waitRoutable(i int, want bool) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.routable(i) == want }, 10*time.Second, 5*time.Millisecond,
		"worker %d routable should become %v", i, want)
}

// post sends one request and returns the reply.
func (f *fleet) post(ctx context.Context, path, session, body string) (*http.Response, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Dynamo-Session-Id", session)
	}
	if path == MessagesPath {
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

func chatBody(prompt string, stream bool) string {
	return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":64,"messages":[{"role":"user","content":%q}]}`, stream, prompt)
}

func bodyFor(path, prompt string, stream bool) string {
	switch path {
	case ResponsesPath:
		return fmt.Sprintf(`{"model":"m","stream":%v,"max_output_tokens":64,"input":%q}`, stream, prompt)
	case MessagesPath:
		return fmt.Sprintf(`{"model":"m","stream":%v,"max_tokens":64,"messages":[{"role":"user","content":%q}]}`, stream, prompt)
	}
	return chatBody(prompt, stream)
}

func longPrompt(seed int) string {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "w%d_%d ", seed, i)
	}
	return b.String()
}

// streamText is the assistant text of an SSE body in any API's shape, and
// the last event's name (or error marker).
func streamText(t *testing.T, body string) (text string, events []string) {
	t.Helper()
	var s translate.SSEScanner
	var b strings.Builder
	s.On = func(ev string, data []byte) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m), string(data))
		name := ev
		if name == "" {
			name, _ = m["type"].(string)
		}
		if _, bad := m["error"]; bad && ev == "" {
			name = "error-chunk"
		}
		events = append(events, name)
		switch {
		case m["choices"] != nil:
			for _, c := range m["choices"].([]any) {
				if d, ok := c.(map[string]any)["delta"].(map[string]any); ok {
					if s, ok := d["content"].(string); ok {
						b.WriteString(s)
					}
				}
			}
		case name == "response.output_text.delta":
			b.WriteString(m["delta"].(string))
		case name == "content_block_delta":
			if d := m["delta"].(map[string]any); d["type"] == "text_delta" {
				b.WriteString(d["text"].(string))
			}
		}
	}
	s.Feed([]byte(body))
	s.Flush()
	if strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		events = append(events, "[DONE]") // the scanner does not hand it on
	}
	return b.String(), events
}

// TestFailoverRetryBeforeFirstByte: a worker that answers 503, or refuses
// connections, before the first byte costs the client nothing: the
// request is served by the other worker, and a refusing worker is out of
// routing at once (no second request reaches it).
func TestFailoverRetryBeforeFirstByte(t *testing.T) {
	fc := fastFailover()
	fc.Breaker.OpenFor = 200 * time.Millisecond
	f := newFleet(t, 2, nil, Config{Failover: fc}, false)
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	require.NoError(t, f.mock(0).SetFaults(mock.Faults{FailStatus: 503}))
	served := map[int]int{}
	for i := range 12 {
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprintf("s%d", i), chatBody(longPrompt(i), i%2 == 0))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		served[f.workerOf(resp)]++
	}
	require.Equal(t, 12, served[1], "every request is served by the healthy worker")
	retried := testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "retried"))
	require.Greater(t, retried, 0.0, "some requests were first routed to the failing worker and retried")

	// Refused connections: the worker is ejected on the first one. (The
	// 503s may have opened its breaker: wait until it is back.)
	require.NoError(t, f.mock(0).ClearFaults())
	f.waitRoutable(0, true)
	opens := f.stack.gw.Tracker().Status()[0].BreakerOpens
	retriedBefore := testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "retried"))
	require.NoError(t, f.mock(0).SetFaults(mock.Faults{Refuse: true}))
	f.stack.cfg.HTTPClient.CloseIdleConnections() // refusing takes new connections only
	for i := range 8 {
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprintf("r%d", i), chatBody(longPrompt(100+i), true))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, 1, f.workerOf(resp))
	}
	require.False(t, f.routable(0))
	// A request that met the refusal ejected the worker at once, and only
	// once. Under load (-race) the 100 ms probe can find the refusal first
	// and eject it before any request is routed there: then no breaker
	// opened at all.
	if testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "retried")) > retriedBefore {
		require.Equal(t, opens+1, f.stack.gw.Tracker().Status()[0].BreakerOpens, "ejected once, on the first refusal")
	} else {
		require.Equal(t, opens, f.stack.gw.Tracker().Status()[0].BreakerOpens, "ejected by the probe, no request refused")
	}
	// Back: the probes bring it in again.
	require.NoError(t, f.mock(0).ClearFaults())
	f.waitRoutable(0, true)
}

// TestFailoverCutMidStreamErrorEvent: with migration off, a stream the
// worker cuts ends with the API's own error event, natively passed
// through and translated, and counts as a cut.
func TestFailoverCutMidStreamErrorEvent(t *testing.T) {
	for _, tc := range []struct {
		name string
		apis []mock.API
	}{{"native", nil}, {"translated", []mock.API{mock.APIChat, mock.APICompletions}}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, 1, tc.apis, Config{Failover: fastFailover()}, false)
			f.waitRoutable(0, true)
			want := map[string]string{ChatPath: "error-chunk", ResponsesPath: "response.failed", MessagesPath: "error"}
			for i, path := range []string{ChatPath, ResponsesPath, MessagesPath} {
				require.NoError(t, f.mock(0).SetFaults(mock.Faults{CutAfter: 4, CutCount: 1}))
				resp, body, err := f.post(context.Background(), path, "", bodyFor(path, longPrompt(i), true))
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				text, events := streamText(t, body)
				require.NotEmpty(t, text, "the tokens before the cut reached the client")
				require.Equal(t, want[path], events[len(events)-1], "%s: %v", path, events)
				require.NotContains(t, events, "[DONE]")
				api := map[string]string{ChatPath: "chat", ResponsesPath: "responses", MessagesPath: "messages"}[path]
				require.Equal(t, 1.0, testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues(api, "cut")))
			}
		})
	}
}

// TestFailoverMigration: with migration on, a stream cut mid-generation
// continues on the other worker: the client sees one stream whose text is
// the cut worker's tokens then the continuation, nothing lost or
// repeated, ended properly.
func TestFailoverMigration(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		apis       []mock.API
	}{{"chat native", ChatPath, nil}, {"messages translated", MessagesPath, []mock.API{mock.APIChat}},
		{"responses translated", ResponsesPath, []mock.API{mock.APIChat}}} {
		t.Run(tc.name, func(t *testing.T) {
			fc := fastFailover()
			fc.MigrationLimit = 2
			f := newFleet(t, 2, tc.apis, Config{Failover: fc}, false)
			f.waitRoutable(0, true)
			f.waitRoutable(1, true)
			prompt := longPrompt(7)
			// The first turn binds the session to a worker; arm that one.
			resp, body, err := f.post(context.Background(), tc.path, "mig", bodyFor(tc.path, prompt, false))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			home := f.workerOf(resp)
			require.NoError(t, f.mock(home).SetFaults(mock.Faults{CutAfter: 5, CutCount: 1}))

			resp, body, err = f.post(context.Background(), tc.path, "mig", bodyFor(tc.path, prompt, true))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			text, events := streamText(t, body)
			last := map[string]string{ChatPath: "[DONE]", MessagesPath: "message_stop", ResponsesPath: "response.completed"}[tc.path]
			require.Equal(t, last, events[len(events)-1], "%v", events)
			require.NotContains(t, events, "error")

			// What it should be: the reply's first 5 words (the reply is a
			// function of the prompt), then what a worker answers to the
			// continuation request.
			other := f.mock(1 - home)
			direct := directChat(t, other.URL(), chatBody(prompt, false))
			words := strings.Fields(direct)
			require.Greater(t, len(words), 5)
			sent := strings.Join(words[:5], " ")
			cont, ok := continueChat([]byte(chatFor(t, tc.path, prompt)), sent, 5)
			require.True(t, ok)
			rest := directChat(t, other.URL(), string(cont))
			require.Equal(t, sent+rest, text, "one continuous stream: the cut worker's 5 words, then the continuation")
			// Its usage is the whole stream's (#34): the original prompt,
			// and the 5 words sent before the cut as completion, not as
			// the continuation's prompt.
			p0, _ := directUsage(t, other.URL(), chatBody(prompt, false))
			_, cc := directUsage(t, other.URL(), string(cont))
			gotP, gotC := streamUsage(t, tc.path, body)
			require.Equal(t, [2]int{p0, 5 + cc}, [2]int{gotP, gotC}, "prompt and completion tokens the client was told")
			require.Equal(t, 1.0, testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues(api(tc.path), "migrated")))
		})
	}
}

func api(path string) string {
	return map[string]string{ChatPath: "chat", ResponsesPath: "responses", MessagesPath: "messages"}[path]
}

// chatFor is the chat body the gateway sends a chat worker for path's
// streamed request (its translation).
func chatFor(t *testing.T, path, prompt string) string {
	t.Helper()
	g := &Gateway{m: mustMetrics(t)}
	a := map[string]API{ChatPath: Chat, ResponsesPath: Responses, MessagesPath: Messages}[path]
	c, err := g.parse(a, []byte(bodyFor(path, prompt, true)), nil)
	require.NoError(t, err)
	return string(c.chatB)
}

func mustMetrics(t *testing.T) *metrics {
	m, err := newMetrics(nil)
	require.NoError(t, err)
	return m
}

// directUsage sends a chat body to a worker (not streamed) and returns
// its prompt and completion tokens.
func directUsage(t *testing.T, url, body string) (prompt, completion int) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	m["stream"] = false
	delete(m, "stream_options")
	b, _ := json.Marshal(m)
	resp, err := http.Post(url+ChatPath, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		Usage apiwire.Usage `json:"usage"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return out.Usage.PromptTokens, out.Usage.CompletionTokens
}

// streamUsage reads the prompt (all of it, cached included) and
// completion tokens a streamed reply of path's API reported.
func streamUsage(t *testing.T, path, body string) (prompt, completion int) {
	t.Helper()
	_, datas := sseEvents(t, []byte(body))
	num := func(m any, keys ...string) int {
		for _, k := range keys {
			mm, _ := m.(map[string]any)
			m = mm[k]
		}
		f, _ := m.(float64)
		return int(f)
	}
	for _, d := range datas {
		switch path {
		case ChatPath:
			if u, ok := d["usage"].(map[string]any); ok {
				prompt, completion = num(u, "prompt_tokens"), num(u, "completion_tokens")
			}
		case MessagesPath:
			switch d["type"] {
			case "message_start":
				prompt = num(d, "message", "usage", "input_tokens") + num(d, "message", "usage", "cache_read_input_tokens")
			case "message_delta":
				completion = num(d, "usage", "output_tokens")
				if in := num(d, "usage", "input_tokens"); in > 0 {
					prompt = in + num(d, "usage", "cache_read_input_tokens")
				}
			}
		case ResponsesPath:
			if d["type"] == "response.completed" {
				prompt, completion = num(d, "response", "usage", "input_tokens"), num(d, "response", "usage", "output_tokens")
			}
		}
	}
	return prompt, completion
}

// directChat sends a chat body to a worker (not streamed) and returns the
// reply's content.
func directChat(t *testing.T, url, body string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	m["stream"] = false
	delete(m, "stream_options")
	b, _ := json.Marshal(m)
	resp, err := http.Post(url+ChatPath, "application/json", bytes.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(rb))
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(rb, &out))
	return out.Choices[0].Message.Content
}

// TestFailoverKilledWorker: a worker killed under its sessions: no request
// fails, none reaches it within 2 s of the first failure (none at all:
// it is ejected on the first refused connection), its sessions continue
// on the other worker, the failed attempts' load is undone, and the
// worker returns to routing when it is back.
func TestFailoverKilledWorker(t *testing.T) {
	f := newFleet(t, 2, nil, Config{Failover: fastFailover()}, false)
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	home := map[string]int{}
	for i := range 16 {
		s := fmt.Sprintf("k%d", i)
		resp, body, err := f.post(context.Background(), ChatPath, s, chatBody(longPrompt(i), false))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		home[s] = f.workerOf(resp)
	}
	f.kill(0)
	start := time.Now()
	for turn := range 2 {
		for i := range 16 {
			s := fmt.Sprintf("k%d", i)
			resp, body, err := f.post(context.Background(), ChatPath, s, chatBody(longPrompt(i)+fmt.Sprintf(" turn %d", turn), true))
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			require.Equal(t, 1, f.workerOf(resp), "session %s continues on the live worker", s)
			_, events := streamText(t, body)
			require.Equal(t, "[DONE]", events[len(events)-1])
		}
	}
	require.False(t, f.routable(0))
	st := f.stack.gw.Tracker().Status()[0]
	// Ejected on the first failure, not after five: its breaker opened
	// once, or never when a health probe saw it dead before any request
	// reached it (a loaded machine's timing); the retried count below
	// says no more than one request met it.
	require.LessOrEqual(t, st.BreakerOpens, uint64(1), "ejected on the first failure, not after five")
	connectFailures := testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "retried"))
	require.LessOrEqual(t, connectFailures, 1.0, "after the first failure no request was sent to the dead worker (%.0f retried in %v)",
		connectFailures, time.Since(start))
	for _, w := range f.stack.Router().Workers() {
		require.Zero(t, f.stack.Router().WorkerLoad(w).Requests, "worker %v: load of finished and failed requests undone", w)
	}
	f.revive(0)
	f.waitRoutable(0, true)
	require.Eventually(t, func() bool {
		return len(f.stack.Router().Workers()) == 2
	}, 10*time.Second, 10*time.Millisecond, "the worker rejoins the router")
	moved := 0
	for i := range 16 {
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprintf("new%d", i), chatBody(longPrompt(1000+i), false))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		if f.workerOf(resp) == 0 {
			moved++
		}
	}
	require.Greater(t, moved, 0, "new sessions reach the restarted worker")
}

// TestFailoverUndoApproximate: a request that fails on every worker
// leaves no approximate-index record and no load behind.
func TestFailoverUndoApproximate(t *testing.T) {
	var specs []WorkerSpec
	var mocks []*mock.Server
	for range 2 {
		m, err := mock.Start(mock.Config{Speedup: 1000, Aliases: []string{"*"}}) // no events: approximate
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		mocks = append(mocks, m)
		specs = append(specs, WorkerSpec{URL: m.URL()})
	}
	s, srv := testStack(t, StackConfig{Gateway: Config{Failover: fastFailover()}}, specs...)
	require.True(t, s.Approximate())
	require.Eventually(t, func() bool { return s.Gateway().Ready() == nil }, 10*time.Second, 5*time.Millisecond)
	for _, m := range mocks {
		require.NoError(t, m.SetFaults(mock.Faults{FailStatus: 500}))
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+ChatPath, strings.NewReader(chatBody(longPrompt(3), false)))
	req.Header.Set("X-Dynamo-Session-Id", "undo")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"error"`)
	for _, w := range s.Router().Workers() {
		require.Zero(t, s.Router().WorkerLoad(w).Requests)
		require.Zero(t, s.Router().Index().Stats().Approx, "no approximate record is left")
	}
	_ = flashindex.Worker{}
}

// TestFailoverWorkerDownAtStart: a worker that is down when the stack
// starts is not fatal; /readyz says 503 until it is up, then it serves.
func TestFailoverWorkerDownAtStart(t *testing.T) {
	addr := freeport.Addr(t)
	s, srv := testStack(t, StackConfig{BlockSize: 16, Gateway: Config{Failover: fastFailover(), ReadyWait: -1}},
		WorkerSpec{URL: "http://" + addr})
	get := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/healthz"), "live")
	require.Equal(t, http.StatusServiceUnavailable, get("/readyz"))
	resp, body := postJSON(t, srv.URL+ChatPath, nil, chatBody("hello", false))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))

	m, err := mock.Start(mock.Config{Listen: addr, Speedup: 1000, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.Eventually(t, func() bool { return get("/readyz") == http.StatusOK && len(s.Router().Workers()) == 1 },
		15*time.Second, 10*time.Millisecond)
	resp, body = postJSON(t, srv.URL+ChatPath, nil, chatBody("hello", false))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// TestFailoverSlowWorker: a worker that stalls before its first byte
// times out (FirstByteTimeout), the request moves to the other worker,
// the slow worker's breaker opens after its threshold, half-opens after
// OpenFor and closes once it answers again.
func TestFailoverSlowWorker(t *testing.T) {
	fc := fastFailover()
	fc.Breaker = failover.BreakerConfig{FailureThreshold: 2, SuccessThreshold: 1, OpenFor: 300 * time.Millisecond}
	f := newFleet(t, 2, nil, Config{Failover: fc, FirstByteTimeout: 150 * time.Millisecond}, false)
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	require.NoError(t, f.mock(0).SetFaults(mock.Faults{StallFirst: 5 * time.Second}))
	for i := 0; f.stack.gw.Tracker().Status()[0].BreakerOpens == 0; i++ {
		require.Less(t, i, 40, "the slow worker's breaker never opened")
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprintf("slow%d", i), chatBody(longPrompt(i), true))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Equal(t, 1, f.workerOf(resp))
	}
	require.False(t, f.routable(0), "breaker open: traffic moved")
	require.Greater(t, testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "retried")), 0.0)
	require.NoError(t, f.mock(0).ClearFaults())
	require.Eventually(t, func() bool { return f.stack.gw.Tracker().Status()[0].Breaker == failover.HalfOpen },
		5*time.Second, 5*time.Millisecond, "half-opens after OpenFor")
	// Trial requests close it again.
	for i := 0; f.stack.gw.Tracker().Status()[0].Breaker != failover.Closed; i++ {
		require.Less(t, i, 200, "the recovered worker's breaker never closed")
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprintf("back%d", i), chatBody(longPrompt(500+i), true))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
	}
}

// TestFailoverClientDisconnect: a client that leaves mid-stream cancels
// the upstream request, frees the router's state and counts as 499.
func TestFailoverClientDisconnect(t *testing.T) {
	f := newFleet(t, 1, nil, Config{Failover: fastFailover()}, false)
	f.waitRoutable(0, true)
	require.NoError(t, f.mock(0).SetFaults(mock.Faults{StallMid: 30 * time.Second, StallAfter: 2}))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+ChatPath, strings.NewReader(chatBody(longPrompt(1), true)))
	req.Header.Set("X-Dynamo-Session-Id", "gone")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	buf := make([]byte, 64)
	_, err = resp.Body.Read(buf) // the first bytes arrived: the request is in flight
	require.NoError(t, err)
	w := f.stack.Router().Workers()[0]
	require.Equal(t, 1, f.stack.Router().WorkerLoad(w).Requests)
	cancel()
	resp.Body.Close()
	require.Eventually(t, func() bool {
		return f.stack.Router().WorkerLoad(w).Requests == 0 &&
			testutil.ToFloat64(f.stack.gw.m.responses.WithLabelValues("chat", "499")) == 1
	}, 10*time.Second, 5*time.Millisecond, "router state freed, 499 counted")
	require.Eventually(t, func() bool { return runningOn(t, f.mock(0).URL()) == 0 }, 10*time.Second, 5*time.Millisecond,
		"the upstream request was cancelled (the worker runs nothing)")
}

// runningOn reads vllm:num_requests_running from a worker's /metrics.
func runningOn(t *testing.T, url string) int {
	return int(metricOn(t, url, "vllm:num_requests_running"))
}

// metricOn reads the (first) sample of a metric from a worker's /metrics.
func metricOn(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			var v float64
			_, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			require.NoError(t, err)
			return v
		}
	}
	t.Fatalf("no %s in %s/metrics", name, url)
	return -1
}

var _ = agentkv.ErrNoWorkers
