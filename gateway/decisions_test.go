package gateway

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/internal/loadgen"
	"github.com/agentkv/agentkv/trace"
)

var updateDecisions = flag.Bool("update-decisions", false, "rewrite testdata/readme_replay_decisions.golden from this run")

// TestReadmeReplayDecisions pins the routing of the README's replay
// (`agentkv replay --api messages --sessions 4 --max-requests 24` against
// `agentkv proxy --mock-workers 2`): every request's worker, the cached
// tokens the router expected there (X-Agentkv-Cached-Tokens) and the
// cached tokens the engine reported (usage) must equal the golden file, so
// a change to the front door (how a body is read, rendered, tokenized,
// hashed) that changes a routing decision or a cache figure fails here.
// It runs once with the workers' tokenizer in process and once through
// their /tokenize (the fallback path), which must agree with each other
// and with the file.
//
// The README runs the four sessions at once; here they run one after
// another (--concurrency 1: the workload has no subagents, so the order
// of requests is fixed), and each request waits until the router's index
// holds exactly the blocks every worker holds, so each decision sees the
// same state every run.
func TestReadmeReplayDecisions(t *testing.T) {
	golden := filepath.Join("testdata", "readme_replay_decisions.golden")
	var runs []string
	for _, inProcess := range []bool{true, false} {
		name := "tokenize-endpoint"
		if inProcess {
			name = "in-process-tokenizer"
		}
		got := readmeReplayDecisions(t, inProcess)
		if *updateDecisions && inProcess {
			require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
		}
		want, err := os.ReadFile(golden)
		require.NoError(t, err, "run with -update-decisions to write it")
		require.Equal(t, string(want), got, "%s: routing decisions differ from %s", name, golden)
		runs = append(runs, got)
	}
	require.Equal(t, runs[0], runs[1])
}

// readmeReplayDecisions runs the replay and returns one line per request:
// "SESSION/TURN worker=W routed-cached=R engine-cached=E prompt=P".
func readmeReplayDecisions(t *testing.T, inProcess bool) string {
	t.Helper()
	var mocks []*mock.Server
	var specs []WorkerSpec
	native, _ := ParseAPIs("all")
	for range 2 {
		m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: 100})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		spec := WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Replay: m.ReplayEndpoint(), Native: native, Hints: HintsInline}
		if inProcess {
			spec.Tokenizer = m
		}
		mocks = append(mocks, m)
		specs = append(specs, spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stack, err := NewStack(ctx, StackConfig{Workers: specs, Affinity: DefaultAffinity, Refresh: -1,
		Registry: prometheus.NewRegistry()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = stack.Close() })
	srv := httptest.NewServer(stack.Handler(""))
	t.Cleanup(srv.Close)
	awaitStackReady(t, stack, mocks)

	// caughtUp reports whether the index holds as many device blocks of
	// each worker as the worker holds.
	caughtUp := func() bool {
		st := stack.Router().Index().Stats()
		for i, m := range mocks {
			dev := 0
			for _, ws := range st.Workers {
				if ws.Worker.ID == uint64(i) {
					dev = ws.Device
				}
			}
			if dev != m.CachedBlocks() {
				return false
			}
		}
		return true
	}
	rt := &decisionTransport{next: NewHTTPClient().Transport, wait: func() {
		end := time.Now().Add(2 * time.Minute)
		for !caughtUp() {
			if time.Now().After(end) {
				t.Errorf("the router's index never caught up with the workers' KV events")
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}, routed: map[string][2]string{}}

	sc := trace.DefaultSyntheticConfig()
	sc.Sessions, sc.Seed = 4, 1
	w := trace.Synthetic(sc)
	for _, s := range w.Sessions {
		require.Empty(t, s.Parent, "the README's workload has no subagents, so one program at a time fixes the order")
	}
	r, err := loadgen.New(loadgen.Config{Endpoint: srv.URL, API: loadgen.Messages, Harness: loadgen.Messages.DefaultHarness(),
		Model: mocks[0].Model(), Concurrency: 1, Speed: 1e6, MaxRequests: 24, IgnoreEOS: true, SkipPreflight: true,
		Client: &http.Client{Transport: rt}})
	require.NoError(t, err)
	rep, err := r.Run(ctx, &w)
	require.NoError(t, err)
	require.Len(t, rep.Results, 24)
	var b strings.Builder
	for _, res := range rep.Results {
		require.True(t, res.OK(), "%s: %s %s", res.RequestID, res.Error, res.Detail)
		require.True(t, res.HasCached, res.RequestID)
		h := rt.get(res.RequestID)
		fmt.Fprintf(&b, "%s worker=%s routed-cached=%s engine-cached=%d prompt=%d\n",
			res.RequestID, h[0], h[1], res.CachedTokens, res.PromptTokens)
	}
	return b.String()
}

// decisionTransport waits before each request (for the index to catch
// up) and keeps each reply's routing headers by X-Request-Id.
type decisionTransport struct {
	next http.RoundTripper
	wait func()

	mu     sync.Mutex
	routed map[string][2]string // request id → worker id, router's cached tokens
}

func (d *decisionTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	d.wait()
	resp, err := d.next.RoundTrip(req)
	if err == nil {
		d.mu.Lock()
		d.routed[req.Header.Get("X-Request-Id")] = [2]string{resp.Header.Get(HeaderWorkerID), resp.Header.Get(HeaderCachedTokens)}
		d.mu.Unlock()
	}
	return resp, err
}

func (d *decisionTransport) get(id string) [2]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.routed[id]
}
