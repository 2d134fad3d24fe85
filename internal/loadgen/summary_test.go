package loadgen

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nearestRank is the reference percentile: the ceil(p·n)-th smallest.
func nearestRank(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(k, 0)]
}

func randomResults(rng *rand.Rand, n int) []Result {
	kinds := []ErrorKind{KindHTTP, KindTimeout, KindMalformed, KindCanceled, KindConnect}
	rs := make([]Result, n)
	for i := range rs {
		r := &rs[i]
		r.InputTokens, r.OutputTokens, r.Words = 1+rng.IntN(5000), 1+rng.IntN(500), 1+rng.IntN(5000)
		r.E2E = time.Duration(1+rng.IntN(5000)) * time.Millisecond
		if rng.IntN(5) > 0 {
			r.TTFT = time.Duration(rng.Int64N(int64(r.E2E)))
		}
		if rng.IntN(3) == 0 {
			r.Lag = time.Duration(rng.IntN(100)) * time.Millisecond
		}
		r.Malformed = rng.IntN(2) * rng.IntN(3)
		if rng.IntN(4) == 0 {
			r.Error = kinds[rng.IntN(len(kinds))]
			r.Status = []int{500, 429, 503}[rng.IntN(3)]
			continue
		}
		r.HasUsage = rng.IntN(6) > 0
		r.PromptTokens, r.CompletionTokens = r.InputTokens+rng.IntN(20), rng.IntN(600)
		if r.HasUsage && rng.IntN(2) == 0 {
			r.HasCached, r.CachedTokens = true, rng.IntN(r.PromptTokens+1)
		}
	}
	return rs
}

// TestSummarizeAgainstReference recomputes every field of Summarize from
// scratch on random results.
func TestSummarizeAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		rs := randomResults(rng, rng.IntN(300))
		wall := time.Duration(1+rng.IntN(100)) * time.Second
		s := Summarize(rs, wall)

		var ok, failed, canceled, noUsage, malformed, cachedN int
		var prompt, compl, cached, cachedPrompt int64
		var ttft, e2e, lag []time.Duration
		errs := map[string]int{}
		anyLag := false
		for _, r := range rs {
			malformed += r.Malformed
			if r.Lag > 0 {
				anyLag = true
			}
			lag = append(lag, r.Lag)
			switch {
			case r.Error == KindCanceled:
				canceled++
			case r.Error == KindHTTP:
				failed++
				errs["http_"+itoa(r.Status)]++
			case r.Error != "":
				failed++
				errs[string(r.Error)]++
			default:
				ok++
				prompt += int64(r.PromptTokens)
				compl += int64(r.CompletionTokens)
				if !r.HasUsage {
					noUsage++
				}
				if r.HasCached {
					cachedN++
					cached += int64(r.CachedTokens)
					cachedPrompt += int64(r.PromptTokens)
				}
				if r.TTFT > 0 {
					ttft = append(ttft, r.TTFT)
				}
				e2e = append(e2e, r.E2E)
			}
		}
		msg := func(what string) string { return "seed " + itoa(int(seed)) + ": " + what }
		require.Equal(t, len(rs), s.Sent, msg("sent"))
		assert.Equal(t, []int{ok, failed, canceled, ok + failed}, []int{s.OK, s.Failed, s.Canceled, s.Requests}, msg("counts"))
		assert.Equal(t, errs, s.Errors, msg("errors"))
		assert.Equal(t, []int{noUsage, malformed, cachedN}, []int{s.NoUsage, s.MalformedEvents, s.CachedReported}, msg("usage"))
		assert.Equal(t, []int64{prompt, compl, cached, cachedPrompt}, []int64{s.PromptTokens, s.CompletionTokens, s.CachedTokens, s.CachedPromptTokens}, msg("tokens"))
		for _, p := range []struct {
			name     string
			xs       []time.Duration
			p50, p99 time.Duration
		}{{"ttft", ttft, s.TTFT.P50, s.TTFT.P99}, {"e2e", e2e, s.E2E.P50, s.E2E.P99}} {
			assert.Equal(t, nearestRank(p.xs, 0.50), p.p50, msg(p.name+" p50"))
			assert.Equal(t, nearestRank(p.xs, 0.99), p.p99, msg(p.name+" p99"))
		}
		if anyLag {
			assert.Equal(t, nearestRank(lag, 0.99), s.Lag.P99, msg("lag p99"))
			assert.Equal(t, len(rs), s.Lag.N)
		} else {
			assert.Equal(t, 0, s.Lag.N)
		}
		hr, has := s.HitRate()
		assert.Equal(t, cachedPrompt > 0, has, msg("hit rate reported"))
		if has {
			assert.InDelta(t, float64(cached)/float64(cachedPrompt), hr, 1e-12)
		}
		assert.InDelta(t, float64(compl)/wall.Seconds(), s.OutputThroughput(), 1e-9)
		assert.InDelta(t, float64(ok+failed)/wall.Seconds(), s.RequestRate(), 1e-9)
	}
}

func TestSummaryZero(t *testing.T) {
	s := Summarize(nil, 0)
	assert.Equal(t, 0.0, s.OutputThroughput())
	_, ok := s.HitRate()
	assert.False(t, ok)
	assert.Equal(t, "", s.ErrorList())
	var b stringsBuilder
	require.NoError(t, s.WriteText(&b))
	assert.Contains(t, b.String(), "cache hits  not reported")
}

type stringsBuilder struct{ b []byte }

func (s *stringsBuilder) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }
func (s *stringsBuilder) String() string              { return string(s.b) }
