package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/trace"
)

// The end-to-end rig: three mock vLLM workers (engine/mock, real HTTP
// servers publishing real KV events over ZeroMQ with a replay socket),
// a Stack over them configured as "agentkv proxy --mock-workers 3" does
// (soft affinity, the in-process tokenizer, billing preamble stripped, a
// --trace-out file), served over loopback HTTP.

const (
	e2eWorkers = 3
	e2eSpeedup = 1000 // every modelled duration / 1000: a 30 ms step is 30 µs
	e2eTimeout = 3 * time.Minute
)

type e2eCluster struct {
	t         *testing.T
	mocks     []*mock.Server
	stack     *Stack
	srv       *httptest.Server
	reg       *prometheus.Registry
	fh        *os.File
	tw        *trace.Writer
	tracePath string
	bs        int

	mu    sync.Mutex           // guards turns
	turns map[string][]e2eTurn // by session id, in order
}

// e2eTurn is one model request of a session as its client saw it.
type e2eTurn struct {
	session, parent string
	api             API
	worker          uint64 // from X-Agentkv-Worker-Id
	workerURL       string // X-Agentkv-Worker
	prompt          int    // prompt tokens, cached included, from the API's usage
	cached          int    // cached tokens, from the API's own field
	completion      int
	tool            string // the tool called, "" for a text reply
}

func (tn e2eTurn) String() string {
	what := "text"
	if tn.tool != "" {
		what = "call " + tn.tool
	}
	return fmt.Sprintf("{%s worker=%d prompt=%d cached=%d completion=%d %s}", tn.api, tn.worker, tn.prompt, tn.cached, tn.completion, what)
}

// startE2E starts the workers and the stack. With native the workers
// serve every API (the gateway passes each through); without, they serve
// chat and text completions only, as an older vLLM does, and the gateway
// translates Responses and Messages to chat completions.
func startE2E(t *testing.T, native bool) *e2eCluster {
	t.Helper()
	c := &e2eCluster{t: t, turns: map[string][]e2eTurn{}, reg: prometheus.NewRegistry()}
	mc := mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: e2eSpeedup,
		Aliases: []string{"*"}} // harnesses send their own model names
	set := Baseline
	if native {
		set, _ = ParseAPIs("all")
	} else {
		mc.APIs = []mock.API{mock.APIChat, mock.APICompletions}
	}
	var specs []WorkerSpec
	for i := 0; i < e2eWorkers; i++ {
		s, err := mock.Start(mc)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		c.mocks = append(c.mocks, s)
		specs = append(specs, WorkerSpec{URL: s.URL(), Events: s.EventsEndpoint(), Replay: s.ReplayEndpoint(),
			Native: set, Tokenizer: s})
	}
	c.bs = c.mocks[0].BlockSize()
	c.tracePath = filepath.Join(t.TempDir(), "trace.jsonl")
	var err error
	c.fh, err = os.Create(c.tracePath)
	require.NoError(t, err)
	c.tw, err = trace.NewWriter(trace.WriterConfig{Sink: c.fh, QueueBytes: 64 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.stack, err = NewStack(ctx, StackConfig{Workers: specs, Affinity: DefaultAffinity, Refresh: -1,
		Trace: c.tw, Registry: c.reg, Gateway: Config{StripBillingHeader: true}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.stack.Close()) })
	c.srv = httptest.NewServer(c.stack.Handler("/metrics"))
	t.Cleanup(func() { require.NoError(t, c.closeFront()) })
	c.awaitEvents()
	return c
}

// closeFront stops the HTTP server (waiting for its handlers, so every
// request has written its trace record) and closes the trace writer.
// The stack keeps running (its event subscribers with it). Safe to call
// twice.
func (c *e2eCluster) closeFront() error {
	c.srv.Close()
	if c.tw == nil {
		return nil
	}
	err := c.tw.Close()
	if cerr := c.fh.Close(); err == nil {
		err = cerr
	}
	c.tw = nil
	return err
}

// awaitEvents makes sure every worker is routable and its KV events reach
// the router before the sessions start; see awaitStackReady.
func (c *e2eCluster) awaitEvents() {
	c.t.Helper()
	awaitStackReady(c.t, c.stack, c.mocks)
}

// awaitStackReady waits until every worker of the stack has passed its
// first health probe (until then the gateway routes only to the workers
// that have, so a first session's worker would depend on which probe came
// back first) and its KV events reach the router. A ZeroMQ subscriber
// misses what its publisher sends before the subscription has reached it,
// so each worker gets a probe request of its own (straight to the worker,
// unique words) until the router's index shows blocks of that worker,
// learnt from its events.
func awaitStackReady(t *testing.T, stack *Stack, mocks []*mock.Server) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tr := stack.Gateway().Tracker()
	for i := range mocks {
		for !tr.Routable(uint64(i)) {
			require.True(t, time.Now().Before(deadline), "worker %d never passed its first health probe", i)
			time.Sleep(5 * time.Millisecond)
		}
	}
	device := func(id uint64) int {
		for _, ws := range stack.Router().Index().Stats().Workers {
			if ws.Worker.ID == id {
				return ws.Device
			}
		}
		return 0
	}
	for i, m := range mocks {
		for n := 0; ; n++ {
			require.True(t, time.Now().Before(deadline), "worker %d: no KV events reached the router", i)
			body := fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`,
				m.Model(), e2eWords(3*m.BlockSize(), fmt.Sprintf("probe%dx%d", i, n)))
			resp, err := http.Post(m.URL()+ChatPath, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			end := time.Now().Add(250 * time.Millisecond)
			for device(uint64(i)) == 0 && time.Now().Before(end) {
				time.Sleep(5 * time.Millisecond)
			}
			if device(uint64(i)) > 0 {
				break
			}
		}
	}
}

// deviceBlocks is how many device blocks of worker id the router's index
// holds from events.
func (c *e2eCluster) deviceBlocks(id uint64) int {
	for _, ws := range c.stack.Router().Index().Stats().Workers {
		if ws.Worker.ID == id {
			return ws.Device
		}
	}
	return 0
}

// waitFor polls cond until it holds or d has passed.
func (c *e2eCluster) waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// record adds a turn, reading the worker from the gateway's headers.
func (c *e2eCluster) record(t *testing.T, tn e2eTurn, resp *http.Response) {
	t.Helper()
	require.NotNil(t, resp, "%s: no HTTP response captured", tn.session)
	id, _, ok := strings.Cut(resp.Header.Get(HeaderWorkerID), "/")
	require.True(t, ok, "%s: %s = %q", tn.session, HeaderWorkerID, resp.Header.Get(HeaderWorkerID))
	w, err := strconv.ParseUint(id, 10, 64)
	require.NoError(t, err)
	tn.worker, tn.workerURL = w, resp.Header.Get(HeaderWorker)
	want, ok := c.stack.Gateway().WorkerURL(w)
	require.True(t, ok)
	require.Equal(t, want, tn.workerURL, "%s: %s and %s disagree", tn.session, HeaderWorker, HeaderWorkerID)
	c.mu.Lock()
	c.turns[tn.session] = append(c.turns[tn.session], tn)
	c.mu.Unlock()
}

// checkSession asserts what every session must show: at least minTurns
// turns, a tool call on every user turn (even turns) and text after each
// tool result; every turn after the first on the previous turn's worker,
// with cached tokens > 0 in the API's own usage field, at least the
// previous prompt's full blocks and at most the previous prompt and reply.
func (c *e2eCluster) checkSession(t *testing.T, id string, minTurns int) []e2eTurn {
	t.Helper()
	c.mu.Lock()
	turns := slices.Clone(c.turns[id])
	c.mu.Unlock()
	require.GreaterOrEqual(t, len(turns), minTurns, "session %s: %v", id, turns)
	for k, tn := range turns {
		if k%2 == 0 {
			require.NotEmpty(t, tn.tool, "session %s turn %d (a user turn) got no tool call: %v", id, k, turns)
		} else {
			require.Empty(t, tn.tool, "session %s turn %d (a tool result) got a tool call: %v", id, k, turns)
		}
		require.Greater(t, tn.prompt, 0)
		require.Greater(t, tn.completion, 0)
		if k == 0 {
			continue
		}
		prev := turns[k-1]
		require.Equal(t, prev.worker, tn.worker, "session %s turn %d moved worker: %v", id, k, turns)
		require.Greater(t, tn.prompt, prev.prompt, "session %s: the context must grow: %v", id, turns)
		lo, hi := prev.prompt/c.bs*c.bs, (prev.prompt+prev.completion)/c.bs*c.bs
		require.True(t, tn.cached > 0 && tn.cached >= lo && tn.cached <= hi,
			"session %s turn %d: cached %d, want the previous turn's full blocks, in [%d, %d]: %v", id, k, tn.cached, lo, hi, turns)
	}
	return turns
}

// records closes the front (server and trace writer) and reads its trace back with package trace:
// request_end records by session, each session's in turn order (prompts
// grow within a session; the file is in completion order).
func (c *e2eCluster) records(t *testing.T) map[string][]trace.Record {
	t.Helper()
	require.NoError(t, c.closeFront())
	raw, err := os.ReadFile(c.tracePath)
	require.NoError(t, err)
	out := map[string][]trace.Record{}
	err = trace.ReadRecords(bytes.NewReader(raw), c.tracePath, func(_ int, r *trace.Record) error {
		if r.EventType == trace.EventRequestEnd {
			out[r.AgentContext.SessionID] = append(out[r.AgentContext.SessionID], *r)
		}
		return nil
	})
	require.NoError(t, err)
	for _, rs := range out {
		slices.SortStableFunc(rs, func(a, b trace.Record) int { return int(a.Request.InputTokens) - int(b.Request.InputTokens) })
	}
	return out
}

// checkTrace asserts that session id's trace records match what its
// client saw, turn by turn: session and parent, API, worker, tokens,
// cached tokens, tool calls, a TTFT, and no error kind.
func (c *e2eCluster) checkTrace(t *testing.T, recs map[string][]trace.Record, id, parent string, turns []e2eTurn) {
	t.Helper()
	rs := recs[id]
	require.Len(t, rs, len(turns), "session %s: %d trace records for %d turns", id, len(rs), len(turns))
	for k, r := range rs {
		tn := turns[k]
		where := fmt.Sprintf("session %s turn %d", id, k)
		require.Equal(t, trace.SchemaV1, r.Schema, where)
		require.Equal(t, id, r.AgentContext.SessionID, where)
		require.Equal(t, parent, r.AgentContext.ParentSessionID, where)
		require.Equal(t, tn.api.String(), r.Request.API, where)
		require.Empty(t, r.Request.ErrorKind, where)
		require.Equal(t, tn.worker, r.Request.Worker.DecodeWorkerID, where)
		require.EqualValues(t, tn.prompt, r.Request.InputTokens, "%s: the router's tokens for the prompt and the worker's", where)
		require.EqualValues(t, tn.cached, r.Request.CachedTokens, where)
		require.EqualValues(t, tn.completion, r.Request.OutputTokens, where)
		require.Greater(t, r.Request.TTFTMs, 0.0, where)
		require.Equal(t, c.bs, r.Request.Replay.TraceBlockSize, where)
		require.Len(t, r.Request.Replay.InputSequenceHashes, (tn.prompt+c.bs-1)/c.bs, where)
		var tools []string
		for _, tc := range r.Request.FinishReasonMetadata.ToolCalls {
			tools = append(tools, tc.Name)
		}
		if tn.tool != "" {
			require.Equal(t, []string{tn.tool}, tools, where)
		} else {
			require.Empty(t, tools, where)
		}
	}
}

// checkIndexed asserts that the router's index, fed by the workers' KV
// events only, holds every full block of the session's last prompt on the
// worker that served it (the events may trail the reply by a moment).
func (c *e2eCluster) checkIndexed(t *testing.T, recs map[string][]trace.Record, id string) {
	t.Helper()
	rs := recs[id]
	last := rs[len(rs)-1]
	seq := last.Request.Replay.InputSequenceHashes[:last.Request.InputTokens/uint64(c.bs)]
	w := last.Request.Worker.DecodeWorkerID
	var got int
	ok := c.waitFor(30*time.Second, func() bool {
		got = 0
		for _, m := range c.stack.Router().Index().FindMatches(seq, nil) {
			if m.Worker == (flashindex.Worker{ID: w}) {
				got = m.Device
			}
		}
		return got == len(seq)
	})
	require.True(t, ok, "session %s: the index holds %d of the last prompt's %d blocks on worker %d", id, got, len(seq), w)
}

// counter sums the gateway counter name over the series whose labels
// include every pair of want.
func (c *e2eCluster) counter(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	return counterValue(t, c.reg, name, want)
}

// counterValue sums the counters named name in reg whose labels include want.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// e2eWords is n distinct words starting with prefix: n tokens for the
// mock's word-level tokenizer.
func e2eWords(n int, prefix string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s%d", prefix, i)
	}
	return b.String()
}
