package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/loadgen"
	"github.com/agentkv/agentkv/trace"
)

// TestReplayEachAPI drives the gateway with the live replayer speaking each
// API, with that API's harness headers, over chat-only workers: every
// request succeeds, its usage and cached tokens come back in the API's own
// fields, and the router sees each session with every request.
func TestReplayEachAPI(t *testing.T) {
	w := trace.Synthetic(trace.SyntheticConfig{Sessions: 3, Seed: 7, SystemTokens: 300, SubagentSystemTokens: 200,
		FirstPrompt: trace.LogNormal{Median: 100, Sigma: 0.5}, Append: trace.LogNormal{Median: 40, Sigma: 0.5},
		SubagentPrompt: trace.LogNormal{Median: 80, Sigma: 0.1}, Output: trace.LogNormal{Median: 8, Sigma: 0.3}, MaxOutput: 16})
	for _, api := range []loadgen.API{loadgen.Chat, loadgen.Responses, loadgen.Messages} {
		t.Run(api.String(), func(t *testing.T) {
			f := newChatOnly(t)
			s, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
			r, err := loadgen.New(loadgen.Config{Endpoint: srv.URL, API: api, Harness: api.DefaultHarness(), Model: "m",
				Concurrency: 4, Speed: 1e6, MaxRequests: 24, SkipPreflight: true})
			require.NoError(t, err)
			rep, err := r.Run(context.Background(), &w)
			require.NoError(t, err)
			require.NotEmpty(t, rep.Results)
			sessions := map[string]int{}
			for _, res := range rep.Results {
				require.True(t, res.OK(), "%s: %s %s", res.RequestID, res.Error, res.Detail)
				require.True(t, res.HasUsage, res.RequestID)
				require.Greater(t, res.PromptTokens, 0)
				require.True(t, res.HasCached, res.RequestID)
				require.Equal(t, f.cachedTokens, res.CachedTokens, res.RequestID)
				require.Greater(t, res.TTFT, 0*res.TTFT)
				sessions[res.Session]++
			}
			for id, n := range sessions {
				info, ok := s.Router().Sessions().Get(id)
				if !ok {
					continue // a final turn ended it (dynamo harness) or the table expired it
				}
				require.EqualValues(t, n, info.Requests, "session %s", id)
			}
			_, _, path := f.last()
			require.Equal(t, ChatPath, path)
		})
	}
}
