package main

import (
	"context"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/internal/loadgen"
	"github.com/agentkv/agentkv/internal/simrun"
	"github.com/agentkv/agentkv/trace"
)

// TestBatchTimeline: a program's completion is its last reply's end from
// the run's start (subagents count for their root), scaled into trace
// time; requests of sessions outside the batch are ignored.
func TestBatchTimeline(t *testing.T) {
	w := &trace.Workload{Sessions: []trace.Session{{ID: "a"}, {ID: "b"}, {ID: "a.1", Parent: "a"}, {ID: "a.1.1", Parent: "a.1"}}}
	bt := newBatchTimeline(w, "p-")
	on := bt.wrap(nil)
	res := func(s, parent string, turn int, off, e2e time.Duration) *loadgen.Result {
		return &loadgen.Result{Session: "p-" + s, Parent: parent, Turn: turn, Offset: off, E2E: e2e}
	}
	on(res("a", "", 0, 0, time.Second))
	on(res("b", "", 0, 10*time.Millisecond, time.Second))
	on(res("a.1.1", "p-a.1", 0, 2*time.Second, 3*time.Second))
	on(res("b", "", 1, 2*time.Second, time.Second))
	on(res("x", "", 0, 0, time.Hour))
	st := bt.stats(10)
	require.Equal(t, batchStats{Programs: 2, Makespan: 50 * time.Second, LastFirstSent: 100 * time.Millisecond,
		CompletionP50: 30 * time.Second, CompletionP99: 50 * time.Second}, st)
}

// TestReplayBatchAgreesWithSimulate replays a small batch live, through
// the proxy's router over four mock workers (the simulated engine in real
// time, sped up), with KV routing and with admission, and compares it with
// simulate's batch on the same workload and seed. The assertion is on the
// replay's own recorded timeline, not on wall-clock windows: every
// program ran and every request succeeded, and the live makespan in trace
// time is at least 0.7 of the simulated one (the mock runs the same engine
// model, so a loaded machine only stretches the live run; 0.7 leaves room
// for routing that differs between the two, since prompts on the wire are
// tokenised text). The agreement itself (±10 %) is measured by the fuller
// run the README reports, not here, where CPU contention decides it.
func TestReplayBatchAgreesWithSimulate(t *testing.T) {
	if testing.Short() {
		t.Skip("live replay")
	}
	const programs, speed = 6, 100
	sc := trace.DefaultSyntheticConfig()
	sc.Sessions, sc.Seed = programs, 1
	w := trace.Synthetic(sc)
	for _, adm := range []bool{false, true} {
		name := map[bool]string{false: "kv", true: "kv+admission"}[adm]
		p, err := simrun.PolicyByName(name)
		require.NoError(t, err)
		simRes, err := simrun.Run(&w, simrun.Options{Cluster: simrun.Cluster{Workers: 4, BlockSize: 64, DeviceBlocks: 440_000 / 64},
			Policy: p, Concurrency: programs, Seed: 1, Batch: true})
		require.NoError(t, err)

		var specs []gateway.WorkerSpec
		for range 4 {
			m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: speed,
				MinOutput: 1 << 14, MaxOutput: 1 << 14, Aliases: []string{"*"}, Engine: sim.Config{BlockSize: 64}})
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			set, _ := gateway.ParseAPIs("all")
			specs = append(specs, gateway.WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Replay: m.ReplayEndpoint(),
				Native: set, Tokenizer: m})
		}
		px, err := newProxy(context.Background(), proxyConfig{Workers: specs, BlockSize: 64, Policy: agentkv.KVAware,
			Admission: adm, Tick: time.Second * 5 / speed, Refresh: -1, Registry: prometheus.NewRegistry()})
		require.NoError(t, err)
		srv := httptest.NewServer(px.Handler())
		code, stdout, stderr := runCLI(t, "", "replay", "--endpoint", srv.URL, "--batch", "--sessions", "6",
			"--concurrency", "6", "--speed", "100", "--progress=false")
		srv.Close()
		require.NoError(t, px.Close())
		require.Equal(t, 0, code, stderr)
		require.Contains(t, stdout, " 0 failed)")
		m := regexp.MustCompile(`batch +(\d+) programs offered at once .*makespan ([0-9.]+)(m|s)`).FindStringSubmatch(stdout)
		require.NotNil(t, m, stdout)
		require.Equal(t, "6", m[1])
		live, err := time.ParseDuration(m[2] + m[3])
		require.NoError(t, err)
		t.Logf("%s: live makespan %v, simulated %v (%.2f)", name, live, simRes.Makespan, live.Seconds()/simRes.Makespan.Seconds())
		require.GreaterOrEqual(t, live.Seconds(), 0.7*simRes.Makespan.Seconds(), name)
	}
}
