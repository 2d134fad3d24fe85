package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/stretchr/testify/require"
)

// capture sits in front of a mock worker and records the raw bodies of the
// generation requests it forwards.
type capture struct {
	srv  *httptest.Server
	mock *mock.Server

	mu     sync.Mutex // guards bodies
	bodies [][]byte
}

func newCapture(t *testing.T, m *mock.Server) *capture {
	t.Helper()
	u, _ := url.Parse(m.URL())
	rp := httputil.NewSingleHostReverseProxy(u)
	c := &capture{mock: m}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == ChatPath {
			c.mu.Lock()
			c.bodies = append(c.bodies, b)
			c.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *capture) got() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.bodies...)
}

// hintCluster is a stack in front of two mock workers (real HTTP, KV
// events over ZMQ), each behind a capture; the test places each turn.
type hintCluster struct {
	place atomic.Int64 // the worker the next turn goes to
	stack *Stack
	srv   *httptest.Server
	caps  []*capture
}

func startHintCluster(t *testing.T, policies string, mode HintMode) *hintCluster {
	t.Helper()
	hints, err := kvhint.NamedPolicies(policies)
	require.NoError(t, err)
	c := &hintCluster{}
	var specs []WorkerSpec
	for range 2 {
		m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: 1000,
			Engine: simConfigSmall()})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		cp := newCapture(t, m)
		c.caps = append(c.caps, cp)
		specs = append(specs, WorkerSpec{URL: cp.srv.URL, Events: m.EventsEndpoint(), Replay: m.ReplayEndpoint(),
			Tokenizer: m, Hints: mode})
	}
	// KV-aware routing, with each turn placed on the worker the test names
	// (c.place), as if the cost function had sent it there.
	gc := Config{Route: func(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error) {
		req.Override = &agentkv.Override{AllowedWorkers: []uint64{uint64(c.place.Load())}}
		return c.stack.Router().Route(ctx, req)
	}}
	c.stack, c.srv = testStack(t, StackConfig{Affinity: agentkv.AffinityOff, Hints: hints, Gateway: gc}, specs...)
	// A ZeroMQ subscriber misses what is published before its
	// subscription reaches the publisher: probe each worker directly
	// until the router has seen its events.
	for i, cp := range c.caps {
		for n := 0; c.indexed(uint64(i)) == 0; n++ {
			require.Less(t, n, 2000, "worker %d: no KV events reached the router", i)
			body := fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`,
				mock.DefaultModel, e2eWords(48, fmt.Sprintf("probe%dx%d", i, n)))
			resp, err := http.Post(cp.mock.URL()+ChatPath, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			resp.Body.Close()
			c.waitIndexed(uint64(i), 1, 200*time.Millisecond)
		}
	}
	return c
}

// indexed is how many device blocks of worker id the router's index holds.
func (c *hintCluster) indexed(id uint64) int {
	for _, ws := range c.stack.Router().Index().Stats().Workers {
		if ws.Worker.ID == id {
			return ws.Device
		}
	}
	return 0
}

// waitIndexed polls until worker id has at least n indexed device blocks
// or d has passed.
func (c *hintCluster) waitIndexed(id uint64, n int, d time.Duration) bool {
	for end := time.Now().Add(d); c.indexed(id) < n; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}

// chat sends one non-streaming chat turn of session and returns the
// body sent and the cached prompt tokens the worker reported.
func (c *hintCluster) chat(t *testing.T, session string, msgs ...string) ([]byte, int) {
	t.Helper()
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var ms []msg
	for i, m := range msgs {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		ms = append(ms, msg{role, m})
	}
	body, _ := json.Marshal(map[string]any{"model": mock.DefaultModel, "max_tokens": 2, "messages": ms})
	resp, out := postJSON(t, c.srv.URL+ChatPath, map[string]string{"x-dynamo-session-id": session}, string(body))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(out))
	var cr struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(out, &cr))
	return body, cr.Usage.Details.Cached
}

// awaitIndexed waits until the router's index holds at least n device
// blocks of worker id (its KV events arrived).
func (c *hintCluster) awaitIndexed(t *testing.T, id uint64, n int) {
	t.Helper()
	require.True(t, c.waitIndexed(id, n, time.Minute), "worker %d: its KV events never reached the router", id)
}

func simConfigSmall() sim.Config { return sim.Config{BlockSize: 16, DeviceBlocks: 4096} }

// TestHintsEndToEnd: a session's first turn runs on worker 0, its second
// is placed on worker 1, and the share policy attaches a
// kv.fetch naming worker 0 to that request, in its kv_hints body field.
// Worker 1 pulls the blocks from worker 0 over HTTP before it runs the
// turn, so the turn hits on the prefix it never computed.
func TestHintsEndToEnd(t *testing.T) {
	c := startHintCluster(t, "share", HintsInline)
	first := strings.Repeat("lorem ipsum dolor sit amet ", 60)
	base := c.indexed(0)
	b0, cached := c.chat(t, "s-1", first)
	require.Zero(t, cached)
	c.awaitIndexed(t, 0, base+16)
	c.place.Store(1)
	_, cached = c.chat(t, "s-1", first, "ok", "and now the next question")
	require.Greater(t, cached, 16*16, "the second turn did not hit on the fetched prefix")

	got0, got1 := c.caps[0].got(), c.caps[1].got()
	require.Len(t, got0, 1)
	require.Len(t, got1, 1)
	require.Equal(t, b0, got0[0], "the first turn (no hints) changed on the way")
	var sent struct {
		Hints json.RawMessage `json:"kv_hints"`
	}
	require.NoError(t, json.Unmarshal(got1[0], &sent))
	var env kvhint.Envelope
	require.NoError(t, kvhint.DecodeJSON(sent.Hints, &env))
	require.Len(t, env.Actions, 1)
	a := env.Actions[0]
	require.Equal(t, kvhint.KindShare, a.Kind)
	require.Equal(t, c.caps[0].srv.URL, a.Sources[0].Endpoint)

	st := c.caps[1].mock.HintStats()
	require.EqualValues(t, 1, st.Fetches)
	require.Positive(t, st.FetchBlocks)
	require.EqualValues(t, 1, st.Actions[kvhint.KindShare][kvhint.OutcomeAccepted])
	require.EqualValues(t, st.FetchBlocks, c.caps[0].mock.HintStats().Exported)
	hs := c.stack.HintStats(1)
	require.EqualValues(t, 1, hs.AttachedEnvelopes)
}

// TestHintsOffBytesUnchanged: with no hint policies, or with a worker
// whose spec takes no hints, the bytes a worker receives are the bytes
// the client sent, on turns that would otherwise carry a kv.fetch.
func TestHintsOffBytesUnchanged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies string
		mode     HintMode
	}{
		{"no policies", "", HintsInline},
		{"worker takes none", "all", HintsOff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startHintCluster(t, tc.policies, tc.mode)
			first := strings.Repeat("lorem ipsum dolor sit amet ", 60)
			base := c.indexed(0)
			b0, _ := c.chat(t, "s-1", first)
			c.awaitIndexed(t, 0, base+16)
			c.place.Store(1)
			b1, _ := c.chat(t, "s-1", first, "ok", "and now the next question")
			require.Equal(t, [][]byte{b0}, c.caps[0].got())
			require.Equal(t, [][]byte{b1}, c.caps[1].got())
			require.Zero(t, c.caps[1].mock.HintStats().Inline)
		})
	}
}

// TestParseWorkerSpecHints reads hints= from a worker spec.
func TestParseWorkerSpecHints(t *testing.T) {
	for s, want := range map[string]HintMode{"http://h:1": HintsOff, "http://h:1,hints=inline": HintsInline,
		"http://h:1,hints=control": HintsControl, "http://h:1,hints=off": HintsOff} {
		ws, err := ParseWorkerSpec(s)
		require.NoError(t, err, s)
		require.Equal(t, want, ws.Hints, s)
	}
	_, err := ParseWorkerSpec("http://h:1,hints=sometimes")
	require.ErrorContains(t, err, "hints")
}

// TestHintPayloadParts: a payload whose kv_hints hold a cached (shared)
// block list reads, in small and large reads and again through GetBody,
// as exactly the body the uncached encoder writes.
func TestHintPayloadParts(t *testing.T) {
	h, err := NewHintChannel(HintsInline, "http://127.0.0.1:9", nil)
	require.NoError(t, err)
	defer h.Close(context.Background())
	blocks := make([]uint64, 100)
	for i := range blocks {
		blocks[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	body := []byte(`{"model":"m","messages":[]}  `)
	for turn := range 3 {
		env := &kvhint.Envelope{MessageID: fmt.Sprint("m", turn), SessionID: "s", Actions: []kvhint.Action{
			{ID: "a", Kind: kvhint.KindPin, TTL: time.Minute, Target: kvhint.Target{Blocks: blocks[:40+30*turn]}}}}
		want, err := kvhint.AppendToBody(nil, body, env)
		require.NoError(t, err)
		require.NoError(t, h.Sink().Send(context.Background(), env))
		p := h.Payload(body)
		require.Greater(t, len(p.Tail), 1, "the block list is shared, not copied")
		require.Equal(t, want, p.Bytes())
		require.Equal(t, len(want), p.Len())
		req, err := p.NewRequest(context.Background(), "http://127.0.0.1:9/x")
		require.NoError(t, err)
		require.EqualValues(t, len(want), req.ContentLength)
		rc, err := req.GetBody()
		require.NoError(t, err)
		// The holder lets go first (the attempt ends) while the transport
		// still holds the bodies; another payload takes a pooled tail.
		p.Release()
		require.NoError(t, h.Sink().Send(context.Background(), &kvhint.Envelope{MessageID: "other", Actions: []kvhint.Action{
			{ID: "b", Kind: kvhint.KindPin, TTL: time.Minute, Target: kvhint.Target{Blocks: blocks[:3]}}}}))
		other := h.Payload(body)
		got, err := io.ReadAll(req.Body)
		require.NoError(t, err)
		require.Equal(t, want, got)
		require.NoError(t, req.Body.Close())
		require.NoError(t, req.Body.Close(), "a second Close drops nothing more")
		other.Release()
		var small []byte
		buf := make([]byte, 7)
		for {
			n, err := rc.Read(buf)
			small = append(small, buf[:n]...)
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		require.Equal(t, want, small)
		require.NoError(t, rc.Close())
	}
}
