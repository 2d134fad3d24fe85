package simrun

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/internal/shareddata"
	"github.com/agentkv/agentkv/trace"
)

// tiledClaudeCode is the README study's tiled Claude Code workload
// (simulate --workload ../shared/data/claude_code_traces --tile N): every
// public session copied N times, the copies sharing the 15,040-token
// system prompt and tool list.
func tiledClaudeCode(t *testing.T, copies int) trace.Workload {
	files, err := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	var ws []trace.Workload
	for _, f := range files {
		w, err := trace.ReadFile(f, trace.ReadOptions{})
		require.NoError(t, err, f)
		ws = append(ws, w)
	}
	merged, err := trace.Merge("claude_code_traces", ws...)
	require.NoError(t, err)
	tiled, err := trace.Tile(&merged, trace.TileConfig{Copies: copies, Stagger: time.Second, Seed: 1,
		SharedPrefixBlocks: 15040 / merged.BlockTokens})
	require.NoError(t, err)
	return tiled
}

// TestInferredSessionsStudy: the closed-loop kv+admission run with every
// session id removed (sessions inferred from the prompts) is within 2 % of
// the run on the true ids, and every inferred session ends: a true session
// whose turns were split between inferred sessions finishing in all of
// them (only its last turn's ended before, so the others ran on as Acting
// programs holding room, until at 128 programs of --tile 90 the door held
// 8 new programs for good and the replay stalled).
func TestInferredSessionsStudy(t *testing.T) {
	copies, level := 90, 128
	if raceEnabled {
		copies, level = 10, 32 // the replay runs 8-10x slower
	}
	w := tiledClaudeCode(t, copies)
	cl := Cluster{Workers: 4, BlockSize: 64}
	run := func(infer bool) *Result {
		opt := Options{Cluster: cl, Policy: mustPolicy(t, "kv+admission"), Concurrency: level, Seed: 1, InferSessions: infer}
		opt.onDone = func(r *agentkv.Router, _ []*sim.Engine, _ []*sim.Request) {
			require.Zero(t, r.Sessions().Len(), "every session ended (infer=%v)", infer)
		}
		res, err := Run(&w, opt)
		require.NoError(t, err, "infer=%v", infer)
		return res
	}
	named, inferred := run(false), run(true)
	ratio := inferred.WindowThroughput / named.WindowThroughput
	t.Logf("%d copies, %d programs: tok/s %.0f on inferred ids against %.0f on the true ones (%.4f)", copies, level,
		inferred.WindowThroughput, named.WindowThroughput, ratio)
	require.InDelta(t, 1, ratio, 0.02)
}
