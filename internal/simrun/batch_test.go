package simrun

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/trace"
)

// TestBatchWorkload: a step takes the next n programs with their
// subagents, every root starting at 0; a step past the workload's end
// wraps with renamed sessions (parents and waits renamed with them); a
// batch larger than the workload and an open-loop trace are errors.
func TestBatchWorkload(t *testing.T) {
	w := smallSynthetic(10)
	var roots []string
	subs := map[string]int{}
	for _, s := range w.Sessions {
		if s.Parent == "" {
			roots = append(roots, s.ID)
		}
	}
	require.Len(t, roots, 10)
	for _, step := range []int{0, 1, 2} {
		b, err := Batch(&w, 4, step)
		require.NoError(t, err)
		require.NoError(t, b.Validate())
		var got []string
		for _, s := range b.Sessions {
			if s.Parent == "" {
				got = append(got, s.ID)
				require.Zero(t, s.Start)
			} else {
				subs[s.ID]++
			}
		}
		var want []string
		for k := range 4 {
			j := 4*step + k
			id := roots[j%10]
			if j >= 10 {
				id += "#s2"
			}
			want = append(want, id)
		}
		require.ElementsMatch(t, want, got, "step %d", step)
	}
	all, err := Batch(&w, 0, 0)
	require.NoError(t, err)
	require.Len(t, all.Sessions, len(w.Sessions))
	_, err = Batch(&w, 11, 0)
	require.ErrorContains(t, err, "11 programs")
	_, err = Batch(&trace.Workload{Name: "m", OpenLoop: true}, 1, 0)
	require.ErrorContains(t, err, "open-loop")
}

// TestBatchRun: a batch offers every program at 0, has no steady window,
// runs every request, and its longest completion is its makespan.
func TestBatchRun(t *testing.T) {
	w := smallSynthetic(16)
	for _, name := range []string{"kv", "kv+cap", "global-lb", "kv+admission"} {
		opt := Options{Cluster: Cluster{Workers: 2, DeviceBlocks: 6000}, Policy: mustPolicy(t, name), Concurrency: 12,
			Seed: 1, Batch: true, MaxRunning: 0}
		if name == "kv+cap" {
			opt.MaxRunning = 6
		}
		var reqs []*sim.Request
		opt.onDone = func(r *agentkv.Router, es []*sim.Engine, q []*sim.Request) {
			indexAgrees(t, name, r, es)
			reqs = q
		}
		r, err := Run(&w, opt)
		require.NoError(t, err, name)
		require.True(t, r.Batch)
		require.Equal(t, 1, r.RolloutSteps)
		require.False(t, r.Window.Steady)
		require.Equal(t, r.Requests, r.Finished+r.Rejected, name)
		require.Equal(t, r.Makespan, r.Completion.Max, name)
		programs := map[string]bool{}
		for _, q := range reqs {
			if q.Parent == "" && q.Turn == 0 {
				require.Zero(t, q.Arrival, "%s: %s offered at 0", name, q.Session)
				programs[q.Session] = true
			}
		}
		require.Len(t, programs, 12, name)
	}
}

// TestBatchStepsFlush: a second step runs on flushed engines, and the
// router's index, cleared with them, agrees with the new engines. With
// GlobalLB (no cache, no state a step keeps) the steps of a batch that
// wraps onto the same programs are the same run: two steps take twice
// one's makespan and compute twice its tokens.
func TestBatchStepsFlush(t *testing.T) {
	w := smallSynthetic(8)
	for _, name := range []string{"global-lb", "kv", "kv+admission"} {
		opt := Options{Cluster: Cluster{Workers: 2, DeviceBlocks: 6000}, Policy: mustPolicy(t, name), Concurrency: 8, Seed: 1, Batch: true}
		one, err := Run(&w, opt)
		require.NoError(t, err)
		opt.Steps = 2
		opt.onDone = func(r *agentkv.Router, es []*sim.Engine, _ []*sim.Request) { indexAgrees(t, name, r, es) }
		two, err := Run(&w, opt)
		require.NoError(t, err)
		require.Equal(t, 2, two.RolloutSteps)
		require.Equal(t, 2*one.Requests, two.Requests, name)
		require.Equal(t, 2*one.PromptTokens, two.PromptTokens, name)
		require.Equal(t, two.Requests, two.Finished+two.Rejected, name)
		if name == "global-lb" {
			require.Equal(t, 2*one.Makespan, two.Makespan)
			require.Equal(t, 2*one.ComputedTokens, two.ComputedTokens)
			require.Equal(t, one.Completion.P50, two.Completion.P50)
			require.InDelta(t, one.Busy, two.Busy, 1e-9)
		}
	}
}

// TestBatchColdStartFloor: a batch offered at once starts cold, with no
// program ended to learn growth from. kv+admission's cold start begins at
// sixteen programs' share of a worker (Door.ColdStartFloor) and tightens
// as the running programs grow, where the prior alone held the batch to
// eight a worker: more of the batch starts at once, its first turns wait
// less at the door, and it ends no later. The simulation is deterministic:
// the figures depend on what the run did, not on the machine.
func TestBatchColdStartFloor(t *testing.T) {
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions = 64
	w := trace.Synthetic(cfg)
	run := batchRun(t, &w, Cluster{Workers: 4, BlockSize: 64, DeviceBlocks: 6875}, 64)
	// The floor alone, without the probes (TestBatchProbe has those).
	floor := run(noProbes())
	held := run(admissionPolicy("kv+admission (prior alone)", func(c *admission.Config) {
		c.Door.ColdStartObserved, c.Door.ColdStartFloor, c.Door.Probe = 0, 0, nil
	}))
	t.Logf("floor: makespan %v, hold first p50 %v max %v; prior alone: makespan %v, hold first p50 %v max %v",
		floor.Makespan, floor.HoldFirst.P50, floor.HoldFirst.Max, held.Makespan, held.HoldFirst.P50, held.HoldFirst.Max)
	require.Positive(t, held.HoldFirst.Max, "the prior alone held first turns at the door")
	require.Less(t, floor.HoldFirst.P50, held.HoldFirst.P50)
	require.LessOrEqual(t, floor.Makespan, held.Makespan)
}

// TestBatchProbe: 256 tiled Claude Code sessions offered as one rollout
// step, among them 11 copies of one that pauses 96 minutes after its
// third turn. Without probes the door lets them in by arrival and the
// late copies start that pause late; with them (Door.Probe, in Agentic)
// first turns wait less (p99) and the step ends at least 5 % sooner,
// within 5 % of KV routing's, which starts every first turn at once.
// Deterministic: the figures depend on what the run did.
func TestBatchProbe(t *testing.T) {
	w := tiledClaudeCode(t, 90)
	run := batchRun(t, &w, Cluster{Workers: 4, BlockSize: 64}, 256)
	probed := run(mustPolicy(t, "kv+admission"))
	door := run(noProbes())
	kv := run(mustPolicy(t, "kv"))
	t.Logf("makespan: probes %v (hold first p99 %v), no probes %v (hold first p99 %v), kv %v",
		probed.Makespan, probed.HoldFirst.P99, door.Makespan, door.HoldFirst.P99, kv.Makespan)
	require.Less(t, float64(probed.Makespan), 0.95*float64(door.Makespan), "probes shorten the step")
	require.Less(t, probed.HoldFirst.P99, door.HoldFirst.P99, "first turns wait less at the door")
	require.Less(t, float64(probed.Makespan), 1.05*float64(kv.Makespan))
}

// TestBatchSiblings: the tiled Claude Code sessions as one step of 256
// programs; every copy of a session shares its first 15,040 tokens with
// the other copies (rollouts of one task), and one session pauses 96
// minutes after its third turn. With siblings first
// (Door.Probe.Siblings, in Agentic) the copies of a session one of which
// is in a long tool call start before the rest of the line: some first
// turns run ahead for it, and the step ends at least 3 % sooner than
// without, and sooner than KV routing's. On the synthetic workload, whose
// programs share only the system prompt (no group), the step is the same
// to the nanosecond. Deterministic: the figures depend on what the runs did.
func TestBatchSiblings(t *testing.T) {
	if raceEnabled {
		t.Skip("four deterministic replays of 256 programs, no concurrency of their own (45 s under -race): the plain go test runs them")
	}
	w := tiledClaudeCode(t, 90)
	run := batchRun(t, &w, Cluster{Workers: 4, BlockSize: 64}, 256)
	with := run(mustPolicy(t, "kv+admission"))
	without := run(admissionPolicy("kv+admission (no siblings)", func(c *admission.Config) { c.Door.Probe.Siblings = 0 }))
	kv := run(mustPolicy(t, "kv"))
	t.Logf("makespan: siblings %v (%d first), none %v (%d), kv %v",
		with.Makespan, with.Admission.SiblingsFirst, without.Makespan, without.Admission.SiblingsFirst, kv.Makespan)
	require.Positive(t, with.Admission.SiblingsFirst)
	require.Zero(t, without.Admission.SiblingsFirst)
	require.Less(t, float64(with.Makespan), 0.97*float64(without.Makespan), "siblings first shortens the step")
	require.Less(t, with.Makespan, kv.Makespan)

	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions = 128
	syn := trace.Synthetic(cfg)
	srun := batchRun(t, &syn, Cluster{Workers: 4, BlockSize: 64}, 128)
	a := srun(mustPolicy(t, "kv+admission"))
	b := srun(admissionPolicy("kv+admission (no siblings)", func(c *admission.Config) { c.Door.Probe.Siblings = 0 }))
	require.Zero(t, a.Admission.SiblingsFirst, "one shared system prompt: no group")
	require.Equal(t, b.Makespan, a.Makespan)
}

// TestClosedLoopProbeNeutral: in the closed loop, where programs are
// offered as others end (not a burst, past the first offer, which here
// is: 384 programs over 10 s), probes move the steady-state throughput by
// under 2 %.
func TestClosedLoopProbeNeutral(t *testing.T) {
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions, cfg.RampUp = 384, 10*time.Second // the first offer comes in bursts of 16 and more a second
	w := trace.Synthetic(cfg)
	run := func(p Policy) *Result {
		r, err := Run(&w, Options{Cluster: Cluster{Workers: 4, BlockSize: 64}, Policy: p, Concurrency: 128, Seed: 1})
		require.NoError(t, err, p.Name)
		return r
	}
	with := run(mustPolicy(t, "kv+admission"))
	without := run(noProbes())
	t.Logf("window tok/s: probes %.0f, none %.0f (%.4f); %d probes", with.WindowThroughput, without.WindowThroughput, with.WindowThroughput/without.WindowThroughput, with.Admission.Probed)
	require.Positive(t, with.Admission.Probed, "the first offer, a burst, was probed")
	require.InDelta(t, 1, with.WindowThroughput/without.WindowThroughput, 0.02)
}

// batchRun returns a runner of one rollout step of the first n programs
// of w on cluster cl, which checks that every request ended.
func batchRun(t *testing.T, w *trace.Workload, cl Cluster, n int) func(Policy) *Result {
	return func(p Policy) *Result {
		t.Helper()
		r, err := Run(w, Options{Cluster: cl, Policy: p, Concurrency: n, Seed: 1, Batch: true})
		require.NoError(t, err, p.Name)
		require.Equal(t, r.Requests, r.Finished+r.Rejected, p.Name)
		return r
	}
}

// admissionPolicy is kv+admission with admission.Agentic as edit leaves it.
func admissionPolicy(name string, edit func(*admission.Config)) Policy {
	cfg := admission.Agentic()
	edit(&cfg)
	return Policy{Name: name, Select: agentkv.KVAware, Admission: &cfg}
}

// noProbes is kv+admission without Door.Probe.
func noProbes() Policy {
	return admissionPolicy("kv+admission (no probes)", func(c *admission.Config) { c.Door.Probe = nil })
}
