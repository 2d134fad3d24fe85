package agentkv

import (
	"path/filepath"
	"testing"

	"github.com/agentkv/agentkv/internal/shareddata"
	"github.com/agentkv/agentkv/trace"
)

// claudeWorkload merges the public Claude Code traces, each file in its
// own hash namespace.
func claudeWorkload(t testing.TB) trace.Workload {
	files, err := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	if err != nil || len(files) == 0 {
		t.Skip("no Claude Code traces in ../shared/data/claude_code_traces")
	}
	var ws []trace.Workload
	for _, f := range files {
		w, err := trace.ReadFile(f, trace.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	m, err := trace.Merge("claude", ws...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Issue #32's bar: on the public Claude Code traces with every session id
// removed, inferred sessions against the true ones score pairwise
// precision and recall of at least 0.95 and at least 0.9 of the parent
// links right (README, "How agentkv recognises sessions").
func TestInferClaudeCodeTraces(t *testing.T) {
	w := claudeWorkload(t)
	ev, err := EvalInference(&w, InferConfig{ScopeParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(ev)
	if ev.Precision < 0.95 || ev.Recall < 0.95 || ev.ParentCorrect < 0.9 {
		t.Fatalf("below the bar: %v", ev)
	}
}
