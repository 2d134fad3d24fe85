package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/shareddata"
	"github.com/agentkv/agentkv/trace"
)

const mooncakeSample = `{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [0, 1]}
{"timestamp": 500, "input_length": 1100, "output_length": 20, "hash_ids": [0, 1, 2]}
`

func writeTemp(t *testing.T, name, content string) string {
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

func TestTraceInspect(t *testing.T) {
	f := writeTemp(t, "m.jsonl", mooncakeSample)
	code, out, stderr := runCLI(t, "", "trace", "inspect", f)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "m.jsonl (mooncake, open-loop, 512-token blocks)")
	require.Contains(t, out, "requests       2")
	require.Contains(t, out, "input tokens   2,100 (avg 1,050)")
	require.Contains(t, out, "cache ceiling  40.0% of blocks")

	code, out, _ = runCLI(t, mooncakeSample, "trace", "inspect", "--json", "-")
	require.Equal(t, 0, code)
	var sums []jsonSummary
	require.NoError(t, json.Unmarshal([]byte(out), &sums))
	require.Len(t, sums, 1)
	require.InDelta(t, 0.4, sums[0].CeilingBlocks, 1e-9)
	require.Equal(t, "mooncake", sums[0].Format)
}

func TestTraceInspectRealMooncake(t *testing.T) {
	path := filepath.Join(shareddata.Dir(t), "mooncake_conversation_trace.jsonl")
	code, out, stderr := runCLI(t, "", "trace", "inspect", path)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "cache ceiling  36.6% of blocks")
	require.Contains(t, out, "(avg 12,035)")
	require.Contains(t, out, "(avg 343)")
	require.Contains(t, out, "requests       12,031")
}

func TestTraceInspectClaudeAndTotal(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	require.NotEmpty(t, files)
	code, out, stderr := runCLI(t, "", append([]string{"trace", "inspect"}, files...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "trace_0277.json (claude, closed-loop, 64-token blocks)")
	require.Contains(t, out, "1 root, 4 subagents")
	require.Contains(t, out, "TOTAL (merged")
	require.Contains(t, out, "23 root, 4 subagents")
	require.Contains(t, out, "tool gaps")
}

// trace inspect --infer-sessions prints the README's numbers (issue #32).
func TestTraceInspectInferSessions(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(shareddata.Dir(t), "claude_code_traces", "trace_*.json"))
	require.NotEmpty(t, files)
	code, out, stderr := runCLI(t, "", append([]string{"trace", "inspect", "--infer-sessions"}, files...)...)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "scope parents:    requests 165, sessions 27 true / 27 inferred")
	require.Contains(t, out, "pairwise precision 1.000, recall 1.000; parent links 1.000 correct (subagents 4 of 4)")
	require.Contains(t, out, "fork parents only")
}

func TestTraceConvert(t *testing.T) {
	f := writeTemp(t, "c.json", `{"id":"s","block_size":4,"requests":[
{"t":0,"type":"n","in":10,"out":2,"hash_ids":[1,2],"stop":"tool_use","api_time":1},
{"t":5,"type":"n","in":14,"out":2,"hash_ids":[1,2,3],"stop":"end_turn","think_time":4}]}`)
	dir := t.TempDir()
	moon := filepath.Join(dir, "out.jsonl")
	code, _, stderr := runCLI(t, "", "trace", "convert", "--to", "mooncake", "--copies", "2", "--stagger", "1m", "-o", moon, f)
	require.Equal(t, 0, code, stderr)
	w, err := trace.ReadFile(moon, trace.ReadOptions{MooncakeBlockTokens: 4})
	require.NoError(t, err)
	require.Len(t, w.Sessions, 2)
	require.Equal(t, "s#0", w.Sessions[0].ID)
	require.Equal(t, "s#1", w.Sessions[1].ID)
	require.Equal(t, 60.0, (w.Sessions[1].Start - w.Sessions[0].Start).Seconds())
	require.Equal(t, 4.0, w.Sessions[0].Turns[1].Delay.Seconds())

	code, out, stderr := runCLI(t, "", "trace", "convert", "--to", "perfetto", f)
	require.Equal(t, 0, code, stderr)
	var ct struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ct))
	names := map[string]int{}
	for _, e := range ct.TraceEvents {
		names[e["name"].(string)]++
	}
	require.Equal(t, 2, names["prefill"])
	require.Equal(t, 2, names["decode"])
	require.Equal(t, 1, names["tool"])

	// A Dynamo trace is drawn from its recorded timings.
	dyn := writeTemp(t, "d.jsonl", `{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1100,"agent_context":{"session_id":"s"},"request":{"request_id":"a","request_received_ms":1000,"prefill_wait_time_ms":10,"ttft_ms":30,"total_time_ms":100,"admission":{"pauses":1,"paused_ms":50}}}
{"schema":"dynamo.request.trace.v1","event_type":"request_end","event_time_unix_ms":1300,"agent_context":{"session_id":"s"},"request":{"request_id":"b","request_received_ms":1200,"ttft_ms":30,"total_time_ms":100,"admission":{"pauses":1,"paused_ms":50}}}`)
	code, out, stderr = runCLI(t, "", "trace", "convert", "--to", "perfetto", dyn)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, `"name":"queued"`)
	require.Contains(t, out, `"name":"paused"`)
	require.Contains(t, out, `"name":"tool"`)
}

func TestTraceUsageErrors(t *testing.T) {
	f := writeTemp(t, "m.jsonl", mooncakeSample)
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"no subcommand", "want a subcommand", []string{"trace"}},
		{"unknown subcommand", `unknown subcommand "frob"`, []string{"trace", "frob"}},
		{"no files", "want at least one FILE", []string{"trace", "inspect"}},
		{"bad format", "unrecognised trace format", []string{"trace", "inspect", "--format", "xml", f}},
		{"bad to", "--to must be", []string{"trace", "convert", "--to", "csv", f}},
		{"bad copies", "--copies", []string{"trace", "convert", "--to", "mooncake", "--copies", "0", f}},
		{"bad flag", "flag provided but not defined", []string{"trace", "inspect", "--nope", f}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", tc.args...)
			require.Equal(t, 2, code, stderr)
			require.Contains(t, stderr, tc.want)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one-line error: %q", stderr)
		})
	}
}

func TestTraceDataErrors(t *testing.T) {
	bad := writeTemp(t, "bad.jsonl", "{\"input_length\":5}\n{\"input_length\":\"x\"}\n")
	code, _, stderr := runCLI(t, "", "trace", "inspect", bad)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "bad.jsonl:2: input_length")
	code, _, stderr = runCLI(t, "", "trace", "inspect", filepath.Join(t.TempDir(), "missing.jsonl"))
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no such file")
}

func TestTraceHelp(t *testing.T) {
	code, out, _ := runCLI(t, "", "trace", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "usage: agentkv trace inspect|convert")
	code, out, _ = runCLI(t, "", "trace", "inspect", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "-block-tokens")
}
