package simrun

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/cputime"
	"github.com/agentkv/agentkv/internal/shareddata"
	"github.com/agentkv/agentkv/trace"
)

func smallSynthetic(sessions int) trace.Workload {
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions = sessions
	cfg.MaxTurns = 8
	return trace.Synthetic(cfg)
}

func mustPolicy(t testing.TB, name string) Policy {
	p, err := PolicyByName(name)
	require.NoError(t, err)
	return p
}

func TestDeterministic(t *testing.T) {
	w := smallSynthetic(24)
	for _, name := range []string{"random", "kv", "kv+admission"} {
		opt := Options{Cluster: Cluster{Workers: 3, DeviceBlocks: 3000}, Policy: mustPolicy(t, name), Concurrency: 12, Seed: 7}
		a, err := Run(&w, opt)
		require.NoError(t, err)
		b, err := Run(&w, opt)
		require.NoError(t, err)
		a.Wall, b.Wall = 0, 0
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		require.JSONEq(t, string(ja), string(jb), name)
		require.Equal(t, a.Requests, a.Finished+a.Rejected, name)
		require.Positive(t, a.Finished, name)
	}
}

// TestKVBeatsRoundRobinSynthetic: on the synthetic agentic workload with
// caches that hold a few sessions each, KV-aware routing hits the cache more
// than round-robin, and admission keeps programs resident.
func TestKVBeatsRoundRobinSynthetic(t *testing.T) {
	w := smallSynthetic(48)
	cl := Cluster{Workers: 4, DeviceBlocks: 8000}
	res := map[string]*Result{}
	for _, name := range []string{"round-robin", "kv", "kv+admission"} {
		r, err := Run(&w, Options{Cluster: cl, Policy: mustPolicy(t, name), Concurrency: 32, Seed: 1})
		require.NoError(t, err)
		res[name] = r
		t.Logf("%-13s hit %.3f throughput %.0f tok/s re-prefill %d pauses %d", name, r.HitRate, r.Throughput, r.RePrefillTokens, r.Pauses)
	}
	require.Greater(t, res["kv"].HitRate, res["round-robin"].HitRate+0.05)
	require.Less(t, res["kv"].RePrefillTokens, res["round-robin"].RePrefillTokens)
	require.Greater(t, res["kv+admission"].HitRate, res["round-robin"].HitRate)
	require.Zero(t, res["kv"].Pauses, "no admission, no holds")
}

func TestSweepOrderAndProgress(t *testing.T) {
	w := smallSynthetic(8)
	pols := []Policy{mustPolicy(t, "round-robin"), mustPolicy(t, "kv")}
	var calls int
	out, err := Sweep(&w, Options{Cluster: Cluster{Workers: 2, DeviceBlocks: 4000}}, pols, []int{2, 4}, 2,
		func(done, total int, _ *Result) { calls++; require.Equal(t, 4, total) })
	require.NoError(t, err)
	require.Equal(t, 4, calls)
	require.Len(t, out, 4)
	for i, r := range out {
		require.Equal(t, pols[i/2].Name, r.Policy)
		require.Equal(t, []int{2, 4}[i%2], r.Concurrency)
	}
	_, err = Run(&w, Options{})
	require.Error(t, err)
	_, err = PolicyByName("nope")
	require.Error(t, err)
}

func readMooncakePrefix(t testing.TB, file string, n int) trace.Workload {
	w, err := trace.ReadFile(filepath.Join(shareddata.Dir(t), file), trace.ReadOptions{})
	require.NoError(t, err)
	// Keep the first n turns by arrival; Mooncake turns are sessions of
	// their own unless the trace names sessions.
	kept := 0
	var out []trace.Session
	for _, s := range w.Sessions {
		if kept >= n {
			break
		}
		if len(s.Turns) > n-kept {
			s.Turns = s.Turns[:n-kept]
		}
		kept += len(s.Turns)
		out = append(out, s)
	}
	w.Sessions = out
	return w
}

// TestMooncakeAmpleCacheReachesCeiling: one worker with a cache larger than
// the whole trace must hit exactly what an infinite cache would (the
// trace package computes that ceiling independently), less the last token
// of a fully cached prompt, which an engine always recomputes.
func TestMooncakeAmpleCacheReachesCeiling(t *testing.T) {
	n := 1500
	if raceEnabled {
		n = 200
	}
	w := readMooncakePrefix(t, "mooncake_conversation_trace.jsonl", n)
	plan, err := trace.Schedule(&w, trace.TimingModel{})
	require.NoError(t, err)
	ceiling := trace.InfiniteCacheCeiling(&w, plan)
	r, err := Run(&w, Options{Cluster: Cluster{Workers: 1, BlockSize: 512, DeviceBlocks: 200_000}, Policy: mustPolicy(t, "kv"), Seed: 1})
	require.NoError(t, err)
	t.Logf("simulated hit rate %.4f, infinite-cache ceiling %.4f (by blocks %.4f)", r.HitRate, ceiling.TokenRatio(), ceiling.BlockRatio())
	require.Zero(t, r.Workers[0].Evictions, "the cache was meant to be ample")
	require.LessOrEqual(t, r.HitRate, ceiling.TokenRatio()+1e-9)
	require.InDelta(t, ceiling.TokenRatio(), r.HitRate, 0.005)
}

// TestKVBeatsRoundRobinOnRealTraces replays the start of both Mooncake
// traces and tiled Claude Code sessions through the real router.
func TestKVBeatsRoundRobinOnRealTraces(t *testing.T) {
	dir := shareddata.Dir(t)
	cases := map[string]trace.Workload{}
	// The replays are single-goroutine; under the race detector (8-10x
	// slower) a prefix short enough to run shows no cache reuse to win, so
	// the Mooncake cases run only without it.
	if !raceEnabled {
		cases["mooncake-conversation"] = readMooncakePrefix(t, "mooncake_conversation_trace.jsonl", 500)
		cases["mooncake-synthetic"] = readMooncakePrefix(t, "mooncake_synthetic_trace.jsonl", 500)
	}
	files, err := filepath.Glob(filepath.Join(dir, "claude_code_traces", "trace_*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var cc []trace.Workload
	for _, f := range files[:min(len(files), 8)] {
		w, err := trace.ReadFile(f, trace.ReadOptions{})
		require.NoError(t, err, f)
		cc = append(cc, w)
	}
	merged, err := trace.Merge("claude-code", cc...)
	require.NoError(t, err)
	tiled, err := trace.Tile(&merged, trace.TileConfig{Copies: 4, Stagger: 10 * time.Second, Seed: 1})
	require.NoError(t, err)
	cases["claude-code-tiled"] = tiled

	for name, w := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cl := Cluster{Workers: 8, DeviceBlocks: 8000}
			if name == "claude-code-tiled" {
				cl.BlockSize = 64
				cl.DeviceBlocks = 2000
			}
			kv, err := Run(&w, Options{Cluster: cl, Policy: mustPolicy(t, "kv"), Seed: 1})
			require.NoError(t, err)
			rr, err := Run(&w, Options{Cluster: cl, Policy: mustPolicy(t, "round-robin"), Seed: 1})
			require.NoError(t, err)
			t.Logf("hit rate kv %.4f vs round-robin %.4f; throughput %.0f vs %.0f tok/s", kv.HitRate, rr.HitRate, kv.Throughput, rr.Throughput)
			require.Greater(t, kv.HitRate, rr.HitRate)
		})
	}
}

// BenchmarkMooncakeConversationKV replays the whole Mooncake conversation
// trace (12,031 requests) on 8 simulated workers through the real router
// with the KV-aware policy. cpu-s/op is process CPU time per replay.
func BenchmarkMooncakeConversationKV(b *testing.B) {
	w, err := trace.ReadFile(filepath.Join(shareddata.Dir(b), "mooncake_conversation_trace.jsonl"), trace.ReadOptions{})
	require.NoError(b, err)
	opt := Options{Cluster: Cluster{Workers: 8}, Policy: mustPolicy(b, "kv"), Seed: 1}
	var last *Result
	var cpu time.Duration
	for b.Loop() {
		c0 := cputime.Process()
		r, err := Run(&w, opt)
		require.NoError(b, err)
		cpu += cputime.Process() - c0
		last = r
	}
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(last.Requests)/(cpu.Seconds()/float64(b.N)), "requests/cpu-s")
	b.ReportMetric(float64(last.BlockOps)/(cpu.Seconds()/float64(b.N)), "blockops/cpu-s")
	b.ReportMetric(last.HitRate, "hit-rate")
}

// TestSweepSharesUncappedRun: kv+cap's uncapped candidate is kv's run, so
// a sweep with both makes it once; the result is the one a separate run
// gives, and a sweep without kv still runs it.
func TestSweepSharesUncappedRun(t *testing.T) {
	w := smallSynthetic(24)
	base := Options{Cluster: Cluster{Workers: 2, DeviceBlocks: 3000}, Seed: 3}
	levels := []int{4, 16} // caps 12 at 16 only
	pols := []Policy{mustPolicy(t, "kv"), mustPolicy(t, "kv+cap")}
	require.Equal(t, 2+1, SweepRuns(pols, levels, 2), "kv twice, kv+cap only at cap 12")
	require.Equal(t, 1+2, SweepRuns(pols[1:], levels, 2))
	var calls int
	out, err := Sweep(&w, base, pols, levels, 2, func(done, total int, _ *Result) {
		calls++
		require.Equal(t, 3, total)
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls)
	require.Len(t, out, 4)
	alone, err := Sweep(&w, base, pols[1:], levels, 1, nil)
	require.NoError(t, err)
	for i, l := range levels {
		kv, capped := out[i], out[len(levels)+i]
		require.Equal(t, "kv", kv.Policy)
		require.Equal(t, "kv+cap", capped.Policy)
		require.Empty(t, kv.SameAs)
		a := alone[i]
		require.Empty(t, a.SameAs, "no kv in the sweep: kv+cap ran it")
		require.Equal(t, a.Cap, capped.Cap, "level %d", l)
		require.Equal(t, a.CapsTried, capped.CapsTried, "level %d", l)
		require.InDelta(t, a.SteadyThroughput(), capped.SteadyThroughput(), 0, "level %d", l)
		if capped.Cap == 0 {
			require.Equal(t, "kv", capped.SameAs)
			require.Same(t, kv.Result, capped.Result, "the same run")
			// what a separate run of kv+cap without a cap measures
			opt := base
			opt.Policy, opt.Concurrency = mustPolicy(t, "kv+cap"), l
			r, err := Run(&w, opt)
			require.NoError(t, err)
			ja, _ := json.Marshal(r.Result)
			jb, _ := json.Marshal(capped.Result)
			require.JSONEq(t, string(ja), string(jb))
		}
	}
	require.Equal(t, []int{0}, out[len(levels)].CapsTried, "level 4: no cap below it")
	require.ElementsMatch(t, []int{0, 12}, out[len(levels)+1].CapsTried)
}
