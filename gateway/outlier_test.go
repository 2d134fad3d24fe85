package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway/failover"
	"github.com/stretchr/testify/require"
)

// TestLongWholeReplyNotCut: a whole (not streamed) reply with no
// max_tokens on a healthy worker generates far more than the thousand
// tokens a fixed output budget once assumed: its deadline allows for the
// context left after its prompt (OutlierConfig.ContextTokens), so it is
// answered whole on the first worker tried, with no retry, though it took
// longer than a 1,024-token budget's deadline.
func TestLongWholeReplyNotCut(t *testing.T) {
	fc := fastFailover()
	fc.Outlier = failover.OutlierConfig{FirstByteFloor: 50 * time.Millisecond}
	var specs []WorkerSpec
	var cfgs []mock.Config
	for range 2 {
		cfg := mockConfig(nil)
		cfg.Speedup, cfg.MinOutput, cfg.MaxOutput = 100, 10000, 10000
		m, err := mock.Start(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		cfg.Listen = m.Addr()
		cfgs = append(cfgs, cfg)
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Native: Baseline})
	}
	stack, srv := testStack(t, StackConfig{Gateway: Config{Failover: fc}}, specs...)
	f := &fleet{t: t, cfgs: cfgs, stack: stack, srv: srv}
	f.waitRoutable(0, true)
	f.waitRoutable(1, true)
	tr := stack.Gateway().Tracker()
	// Short streams teach both workers their time per output token.
	seen := map[int]int{}
	for i := 0; seen[0] < 2 || seen[1] < 2; i++ {
		require.Less(t, i, 500, "the streams did not reach both workers")
		resp, body, err := f.post(context.Background(), ChatPath, fmt.Sprint("teach", i), chatBody(longPrompt(i), true))
		require.NoError(t, err)
		require.True(t, replyComplete(ChatPath, true, resp, body), body)
		seen[f.workerOf(resp)]++
	}
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%q}]}`, longPrompt(9999))
	start := time.Now()
	resp, out, err := f.post(context.Background(), ChatPath, "long-whole", body)
	require.NoError(t, err)
	took := time.Since(start)
	require.True(t, replyComplete(ChatPath, false, resp, out), "%.300s", out)
	var reply struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &reply))
	require.Equal(t, 10000, reply.Usage.CompletionTokens)
	w := f.workerOf(resp)
	old := tr.FirstByteDeadline(uint64(w), 210, 1024)
	t.Logf("a 10,000-token whole reply took %v on worker %d; a 1,024-token budget's deadline there is %v", took, w, old)
	for id := range 2 {
		require.Zero(t, gathered(t, stack.Registry(), "agentkv_failover_retries_total", "worker", strconv.Itoa(id)))
		require.Zero(t, gathered(t, stack.Registry(), "agentkv_failover_failures_total", "worker", strconv.Itoa(id)))
	}
	if took <= old {
		t.Skipf("this run's reply (%v) came within the old deadline (%v): nothing shown", took, old)
	}
}
