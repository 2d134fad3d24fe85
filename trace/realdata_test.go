package trace

import (
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/shareddata"
)

func claudeFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	require.NoError(t, err)
	if len(files) == 0 {
		t.Skip("no Claude Code traces in ../shared/data/claude_code_traces")
	}
	sort.Strings(files)
	return files
}

func TestRealMooncakeTraces(t *testing.T) {
	dir := shareddata.Dir(t)
	for _, tc := range []struct {
		file          string
		requests      int
		ceiling       float64
		avgIn, avgOut float64
	}{
		{"mooncake_conversation_trace.jsonl", 12031, 0.366, 12035, 343},
		{"mooncake_synthetic_trace.jsonl", 3993, 0.640, 15325, 149},
	} {
		t.Run(tc.file, func(t *testing.T) {
			w, err := ReadFile(filepath.Join(dir, tc.file), ReadOptions{})
			require.NoError(t, err)
			require.True(t, w.OpenLoop)
			require.Equal(t, 512, w.BlockTokens)
			require.NoError(t, w.Validate())
			s, err := Summarize(&w)
			require.NoError(t, err)
			require.Equal(t, tc.requests, s.Requests)
			require.Equal(t, tc.requests, s.Sessions)
			require.InDelta(t, tc.ceiling, s.Ceiling.BlockRatio(), 0.0005, "ceiling by blocks")
			require.InDelta(t, tc.avgIn, s.AvgInput(), 0.5)
			require.InDelta(t, tc.avgOut, s.AvgOutput(), 0.5)
			for _, ses := range w.Sessions {
				for _, tu := range ses.Turns {
					require.Equal(t, (tu.InputTokens+511)/512, len(tu.HashIDs))
				}
			}
		})
	}
}

func TestRealClaudeCodeTraces(t *testing.T) {
	files := claudeFiles(t)
	subagents := 0
	for _, f := range files {
		w, err := ReadFile(f, ReadOptions{})
		require.NoError(t, err, f)
		require.NoError(t, w.Validate(), f)
		require.Equal(t, 64, w.BlockTokens)
		for _, s := range w.Sessions {
			if s.Parent != "" {
				subagents++
			}
			require.NotEmpty(t, s.Turns, "%s %s", f, s.ID)
			for _, tu := range s.Turns {
				require.Equal(t, (tu.InputTokens+63)/64, len(tu.HashIDs), "%s %s", f, s.ID)
			}
		}
	}
	require.Equal(t, 4, subagents)
}

func TestRealClaudeSubagents(t *testing.T) {
	dir := shareddata.Dir(t)
	w, err := ReadFile(filepath.Join(dir, "claude_code_traces", "trace_0277.json"), ReadOptions{})
	require.NoError(t, err)
	require.Len(t, w.Sessions, 5)
	root := w.Sessions[0]
	require.Equal(t, "trace_0277", root.ID)
	require.Len(t, root.Turns, 9)
	byID := map[string]Session{}
	for _, s := range w.Sessions {
		byID[s.ID] = s
	}
	// Three Explore subagents fan out after the first turn and are joined by
	// the second; a Plan subagent runs between turns 6 and 7.
	for _, id := range []string{"agent_001", "agent_002", "agent_003"} {
		s := byID["trace_0277/"+id]
		require.Equal(t, "trace_0277", s.Parent)
		require.Equal(t, 0, s.ParentTurn)
		require.Equal(t, "Explore", s.Agent)
		require.Less(t, s.Start, time.Second)
	}
	require.Equal(t, []string{"trace_0277/agent_001", "trace_0277/agent_002", "trace_0277/agent_003"}, root.Turns[1].WaitFor)
	// 228 s arrival minus agent_003's end (211.347 s).
	require.InDelta(t, 16.653, root.Turns[1].Delay.Seconds(), 0.001)
	plan := byID["trace_0277/agent_004"]
	require.Equal(t, 6, plan.ParentTurn)
	require.Equal(t, "Plan", plan.Agent)
	require.Equal(t, []string{"trace_0277/agent_004"}, root.Turns[7].WaitFor)
	require.Len(t, byID["trace_0277/agent_003"].Turns, 17)
}
