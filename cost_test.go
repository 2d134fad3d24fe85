package agentkv

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCostHandComputed(t *testing.T) {
	c := CostConfig{}.withDefaults()
	for _, tc := range []struct {
		name string
		in   costInput
		want Cost
	}{
		{
			name: "cold idle worker pays the whole prompt",
			in:   costInput{blockSize: 16, requestTokens: 160},
			want: Cost{PrefillBlocks: 10, Logit: 10},
		},
		{
			name: "device prefix credited at weight 1",
			in:   costInput{blockSize: 16, requestTokens: 160, device: 6},
			want: Cost{PrefillBlocks: 10, Credit: 6, Logit: 4},
		},
		{
			name: "host and disk beyond device at 0.75 and 0.25",
			in:   costInput{blockSize: 16, requestTokens: 160, device: 2, host: 4, disk: 4},
			want: Cost{PrefillBlocks: 10, Credit: 2 + 3 + 1, Logit: 4},
		},
		{
			name: "shared pool beyond the worker's prefix at 0.5",
			in:   costInput{blockSize: 16, requestTokens: 160, device: 2, shared: 4},
			want: Cost{PrefillBlocks: 10, Credit: 4, Logit: 6},
		},
		{
			name: "active prefill and decode load add",
			in:   costInput{blockSize: 16, requestTokens: 160, device: 10, activePrefillTokens: 320, decodeBlocks: 7, requests: 3},
			want: Cost{PrefillBlocks: 30, Credit: 10, DecodeBlocks: 7, Logit: 27},
		},
		{
			name: "prefill first: decode load only breaks ties",
			in:   costInput{blockSize: 16, requestTokens: 160, device: 10, activePrefillTokens: 320, decodeBlocks: 1024, prefillFirst: true},
			want: Cost{PrefillBlocks: 30, Credit: 10, DecodeBlocks: 1, Logit: 21},
		},
		{
			name: "credit never makes prefill negative",
			in:   costInput{blockSize: 16, requestTokens: 32, device: 2, host: 10, decodeBlocks: 1},
			want: Cost{PrefillBlocks: 2, Credit: 9.5, DecodeBlocks: 1, Logit: 1},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.InDelta(t, tc.want.PrefillBlocks, c.cost(tc.in).PrefillBlocks, 1e-9)
			require.Equal(t, tc.want, c.cost(tc.in))
		})
	}
	withReq := CostConfig{RequestWeight: 0.5}.withDefaults()
	require.InDelta(t, 1.5, withReq.cost(costInput{blockSize: 16, requests: 3}).Requests, 1e-12)
}

// TestPrefillFirstPlacement: a worker with more decoding sequences but no
// prompt queued wins a PrefillFirst request from one whose prefills are
// queued, which Dynamo's cost (the default) places the other way.
func TestPrefillFirstPlacement(t *testing.T) {
	c := CostConfig{}.withDefaults()
	busyDecode := costInput{blockSize: 16, requestTokens: 531, decodeBlocks: 130}
	queuedPrefill := costInput{blockSize: 16, requestTokens: 531, activePrefillTokens: 531, decodeBlocks: 0}
	require.Greater(t, c.cost(busyDecode).Logit, c.cost(queuedPrefill).Logit, "Dynamo's cost stacks prompts")
	busyDecode.prefillFirst, queuedPrefill.prefillFirst = true, true
	require.Less(t, c.cost(busyDecode).Logit, c.cost(queuedPrefill).Logit, "prefill first spreads them")
}

func TestCostConfigValidate(t *testing.T) {
	require.NoError(t, CostConfig{}.validate())
	require.Error(t, CostConfig{Temperature: -1}.validate())
	require.Error(t, CostConfig{OverlapWeight: math.NaN()}.validate())
	require.Error(t, CostConfig{HostWeight: math.Inf(1)}.validate())
	require.Equal(t, 0.0, CostConfig{HostWeight: -1}.withDefaults().HostWeight)
}

func TestSelectIndexArgminTiesUniform(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 4)
	logits := []float64{3, 1, 1, 2}
	for i := 0; i < 4000; i++ {
		counts[selectIndex(logits, 0, rng.Float64)]++
	}
	require.Zero(t, counts[0])
	require.Zero(t, counts[3])
	require.InDelta(t, 2000, counts[1], 200)
	require.InDelta(t, 2000, counts[2], 200)
	require.Equal(t, -1, selectIndex(nil, 0, rng.Float64))
}

func TestSelectIndexSoftmax(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := []float64{0, 10}
	// Normalised costs are 0 and 1: p0 = 1/(1+e^{-1/T}).
	for _, temp := range []float64{0.5, 1, 4} {
		n0 := 0
		const trials = 20000
		for i := 0; i < trials; i++ {
			if selectIndex(logits, temp, rng.Float64) == 0 {
				n0++
			}
		}
		want := 1 / (1 + math.Exp(-1/temp))
		require.InDelta(t, want, float64(n0)/trials, 0.02, "T=%v", temp)
	}
}
