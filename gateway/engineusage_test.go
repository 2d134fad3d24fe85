package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/stretchr/testify/require"
)

// TestStackReportsEngineUsage: with admission, the stack reads each
// worker's vllm:kv_cache_usage_perc and reports it to the router in tokens
// of the worker's capacity (agentkv_admission_engine_kv_used_tokens shows
// it): the KV of a request in flight while it runs, less once it ended,
// and nothing for a worker that cannot be read.
func TestStackReportsEngineUsage(t *testing.T) {
	// At real speed, so the request is still decoding (its 400 tokens take
	// seconds) when the engine's usage is read.
	m, err := mock.Start(mock.Config{Speedup: 1, Aliases: []string{"*"}, MinOutput: 400, MaxOutput: 400})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	stack, srv := testStack(t, StackConfig{Admission: true}, WorkerSpec{URL: m.URL()})
	w := stack.Router().Workers()[0]
	label := fmt.Sprintf("%d/%d", w.ID, w.DPRank)
	capacity := float64(stack.WorkerInfo(0).KVCapacityTokens)
	require.Positive(t, capacity)
	reported := func() float64 {
		stack.RefreshUsage(context.Background(), 0)
		mfs, err := stack.Registry().Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			if mf.GetName() != "agentkv_admission_engine_kv_used_tokens" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == label {
					return m.GetGauge().GetValue()
				}
			}
		}
		t.Fatalf("no agentkv_admission_engine_kv_used_tokens{worker=%q}", label)
		return 0
	}

	req, _ := http.NewRequest(http.MethodPost, srv.URL+ChatPath, strings.NewReader(chatBody(longPrompt(1), true)))
	req.Header.Set("X-Dynamo-Session-Id", "usage")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = resp.Body.Read(make([]byte, 64))
	require.NoError(t, err)
	// The first bytes may come before the engine's next step has placed
	// the request (a loaded machine): wait until it holds blocks.
	require.Eventually(t, func() bool { return metricOn(t, m.URL(), "vllm:kv_cache_usage_perc") > 0 }, 2*time.Minute, 5*time.Millisecond,
		"the running request holds KV blocks")
	before := metricOn(t, m.URL(), "vllm:kv_cache_usage_perc")
	got := reported()
	after := metricOn(t, m.URL(), "vllm:kv_cache_usage_perc")
	require.Positive(t, before, "the running request holds KV blocks")
	// Its blocks only grow while it decodes.
	require.GreaterOrEqual(t, got, float64(int64(before*capacity)))
	require.LessOrEqual(t, got, after*capacity)

	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return runningOn(t, m.URL()) == 0 }, 2*time.Minute, 5*time.Millisecond)
	require.Zero(t, reported(), "the request ended: its blocks are only cached")

	// A worker that stops answering mid-request: its report is cleared,
	// not kept stale.
	req, _ = http.NewRequest(http.MethodPost, srv.URL+ChatPath, strings.NewReader(chatBody(longPrompt(2), true)))
	req.Header.Set("X-Dynamo-Session-Id", "usage2")
	resp2, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp2.Body.Close()
	_, err = resp2.Body.Read(make([]byte, 64))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return reported() > 0 }, 2*time.Minute, 5*time.Millisecond, "the second request's blocks are reported")
	require.NoError(t, m.Close())
	require.Zero(t, reported(), "a worker that cannot be read has no report")
}
