package loadgen

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// Summary aggregates the results of a run.
type Summary struct {
	// Planned is the number of requests the workload holds (capped by
	// MaxRequests); Sent how many were sent.
	Planned, Sent int
	// Requests counts the finished requests: OK + Failed. Cancelled
	// requests (the run was interrupted) are counted apart.
	Requests, OK, Failed, Canceled int
	// Errors counts failed requests by kind: "http_500", "timeout",
	// "malformed_sse", ... (see ErrorKind).
	Errors map[string]int
	// MalformedEvents counts stream data that was not a JSON object, over
	// all requests.
	MalformedEvents int
	// NoUsage counts successful requests whose reply had no usage (their
	// completion tokens are counted from the events).
	NoUsage int
	// PromptTokens, CompletionTokens and CachedTokens sum the server's
	// usage over successful requests. CachedReported counts those that
	// reported cached_tokens, and CachedPromptTokens sums their prompt
	// tokens (the hit rate's denominator).
	PromptTokens, CompletionTokens, CachedTokens int64
	CachedReported                               int
	CachedPromptTokens                           int64
	// TraceInputTokens and TraceOutputTokens sum the trace's counts over
	// the successful requests; Words the prompt words sent (≈ tokens).
	TraceInputTokens, TraceOutputTokens, Words int64
	// Wall is the run's length, from its start to the last reply.
	Wall time.Duration
	// TTFT and E2E are over successful requests (TTFT over those that
	// received a token); Lag over all sent requests of an open-loop run.
	TTFT, E2E, Lag trace.Dist
}

// Summarize aggregates results of a run that lasted wall. It does not
// modify results.
func Summarize(results []Result, wall time.Duration) Summary {
	s := Summary{Errors: map[string]int{}, Wall: wall}
	var ttft, e2e, lag []time.Duration
	for i := range results {
		r := &results[i]
		s.Sent++
		s.MalformedEvents += r.Malformed
		if r.Lag > 0 {
			lag = append(lag, r.Lag)
		}
		switch {
		case r.Error == KindCanceled:
			s.Canceled++
			continue
		case !r.OK():
			s.Requests++
			s.Failed++
			s.Errors[r.errorKey()]++
			continue
		}
		s.Requests++
		s.OK++
		s.PromptTokens += int64(r.PromptTokens)
		s.CompletionTokens += int64(r.CompletionTokens)
		s.TraceInputTokens += int64(r.InputTokens)
		s.TraceOutputTokens += int64(r.OutputTokens)
		s.Words += int64(r.Words)
		if !r.HasUsage {
			s.NoUsage++
		}
		if r.HasCached {
			s.CachedReported++
			s.CachedTokens += int64(r.CachedTokens)
			s.CachedPromptTokens += int64(r.PromptTokens)
		}
		if r.TTFT > 0 {
			ttft = append(ttft, r.TTFT)
		}
		e2e = append(e2e, r.E2E)
	}
	s.TTFT, s.E2E = trace.NewDist(ttft), trace.NewDist(e2e)
	if len(lag) > 0 {
		// Lag's distribution is over every sent request, on time or not.
		for len(lag) < s.Sent {
			lag = append(lag, 0)
		}
		s.Lag = trace.NewDist(lag)
	}
	return s
}

// HitRate is CachedTokens / CachedPromptTokens, as the server reported it;
// ok is false when no request reported cached tokens.
func (s Summary) HitRate() (rate float64, ok bool) {
	if s.CachedReported == 0 || s.CachedPromptTokens == 0 {
		return 0, false
	}
	return float64(s.CachedTokens) / float64(s.CachedPromptTokens), true
}

// OutputThroughput is completion tokens per second of wall time.
func (s Summary) OutputThroughput() float64 { return perSec(float64(s.CompletionTokens), s.Wall) }

// InputThroughput is prompt tokens per second of wall time.
func (s Summary) InputThroughput() float64 { return perSec(float64(s.PromptTokens), s.Wall) }

// RequestRate is finished requests per second of wall time.
func (s Summary) RequestRate() float64 { return perSec(float64(s.Requests), s.Wall) }

func perSec(x float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return x / d.Seconds()
}

// ErrorList renders Errors as "http_500 ×3, timeout ×1", largest first
// (ties by name); "" when there are none.
func (s Summary) ErrorList() string {
	keys := make([]string, 0, len(s.Errors))
	for k := range s.Errors {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if d := s.Errors[b] - s.Errors[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, s.Errors[k])
	}
	return strings.Join(parts, ", ")
}

// WriteText prints the summary as the CLI shows it.
func (s Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "requests    %d finished of %d planned (%d ok, %d failed", s.Requests, s.Planned, s.OK, s.Failed)
	if s.Canceled > 0 {
		fmt.Fprintf(&b, ", %d cancelled", s.Canceled)
	}
	fmt.Fprintf(&b, ") in %s\n", fmtDur(s.Wall))
	if s.Failed > 0 {
		fmt.Fprintf(&b, "errors      %s\n", s.ErrorList())
	}
	if s.MalformedEvents > 0 {
		fmt.Fprintf(&b, "malformed   %d stream events\n", s.MalformedEvents)
	}
	fmt.Fprintf(&b, "throughput  %.1f req/s, %.0f output tok/s, %.0f prompt tok/s\n",
		s.RequestRate(), s.OutputThroughput(), s.InputThroughput())
	fmt.Fprintf(&b, "tokens      %d prompt (server) for %d in the trace (%d words sent), %d output for %d in the trace\n",
		s.PromptTokens, s.TraceInputTokens, s.Words, s.CompletionTokens, s.TraceOutputTokens)
	if s.NoUsage > 0 {
		fmt.Fprintf(&b, "            %d replies without usage: their output counted by events\n", s.NoUsage)
	}
	fmt.Fprintf(&b, "TTFT        p50 %s  p99 %s  max %s\n", fmtDur(s.TTFT.P50), fmtDur(s.TTFT.P99), fmtDur(s.TTFT.Max))
	fmt.Fprintf(&b, "E2E         p50 %s  p99 %s  max %s\n", fmtDur(s.E2E.P50), fmtDur(s.E2E.P99), fmtDur(s.E2E.Max))
	if s.Lag.N > 0 {
		fmt.Fprintf(&b, "send lag    p50 %s  p99 %s  max %s (open loop: sent after the scheduled arrival)\n",
			fmtDur(s.Lag.P50), fmtDur(s.Lag.P99), fmtDur(s.Lag.Max))
	}
	if r, ok := s.HitRate(); ok {
		fmt.Fprintf(&b, "cache hits  %.1f%% of prompt tokens (%d cached, reported by %d of %d requests)\n",
			100*r, s.CachedTokens, s.CachedReported, s.OK)
	} else {
		fmt.Fprintf(&b, "cache hits  not reported by the server\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return fmt.Sprintf("%.1fm", d.Minutes())
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}
