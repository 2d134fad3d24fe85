package loadgen

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/trace"
)

// ids returns n hash ids base, base+1, ...
func ids(base uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

// turn is a closed-loop turn of in tokens (blocks of 4) with the given ids.
func turn(in, out int, delay time.Duration, hash []uint64, wait ...string) trace.Turn {
	return trace.Turn{InputTokens: in, OutputTokens: out, Delay: delay, HashIDs: hash, WaitFor: wait}
}

// agentWorkload is a root with a subagent spawned after turn 0, which
// itself spawns a nested subagent; the root's turn 1 waits for the first.
func agentWorkload() trace.Workload {
	return trace.Workload{Name: "agents", BlockTokens: 4, Sessions: []trace.Session{
		{ID: "s1", ParentTurn: -1, Turns: []trace.Turn{
			turn(8, 2, 0, ids(1, 2)),
			turn(12, 2, time.Second, ids(1, 3), "s1/a"),
		}},
		{ID: "s1/a", Parent: "s1", ParentTurn: 0, Agent: "Explore", Turns: []trace.Turn{
			turn(6, 3, 0, ids(100, 2)),
			turn(9, 1, 0, ids(100, 3)),
		}},
		{ID: "s1/a/b", Parent: "s1/a", ParentTurn: 0, Turns: []trace.Turn{turn(4, 1, 0, ids(200, 1))}},
	}}
}

func newRunner(t *testing.T, cfg Config) *Runner {
	t.Helper()
	r, err := New(cfg)
	require.NoError(t, err)
	return r
}

func TestHeadersPerHarness(t *testing.T) {
	type want struct{ id, parent string }
	wants := map[string]want{
		"p:s1": {"p:s1", ""}, "p:s1/a": {"p:s1/a", "p:s1"}, "p:s1/a/b": {"p:s1/a/b", "p:s1/a"},
	}
	for _, h := range []Harness{Dynamo, ClaudeCode, Codex, OpenCode} {
		t.Run(h.String(), func(t *testing.T) {
			f := newFake(t)
			w := agentWorkload()
			rep, err := newRunner(t, Config{Endpoint: f.URL(), Harness: h, SessionPrefix: "p:", Sleep: noSleep}).Run(context.Background(), &w)
			require.NoError(t, err)
			require.Equal(t, 5, rep.Summary.OK)
			reqs := f.requests()
			require.Len(t, reqs, 5)
			for _, s := range reqs {
				wt, ok := wants[s.Session]
				require.True(t, ok, "request id %q", s.RequestID)
				// The session package (what agentkv proxy reads) sees the
				// workload's own session tree.
				assert.Equal(t, wt.id, s.Ctx.SessionID, s.RequestID)
				assert.Equal(t, wt.parent, s.Ctx.ParentSessionID, s.RequestID)
				final := s.Session == "p:s1/a/b" || s.Turn == 1
				switch h {
				case Dynamo:
					assert.Equal(t, session_harness(h), s.Ctx.Harness)
					assert.Equal(t, final, s.Ctx.Final, s.RequestID)
					assert.Equal(t, s.Session, s.Header.Get("X-Dynamo-Session-Id"))
				case ClaudeCode:
					assert.Equal(t, "p:s1", s.Header.Get("X-Claude-Code-Session-Id"), "every request names the root")
					switch s.Session {
					case "p:s1":
						assert.Empty(t, s.Header.Get("X-Claude-Code-Agent-Id"))
					case "p:s1/a":
						assert.Equal(t, "a", s.Header.Get("X-Claude-Code-Agent-Id"))
						assert.Empty(t, s.Header.Get("X-Claude-Code-Parent-Agent-Id"))
					case "p:s1/a/b":
						assert.Equal(t, "a/b", s.Header.Get("X-Claude-Code-Agent-Id"))
						assert.Equal(t, "a", s.Header.Get("X-Claude-Code-Parent-Agent-Id"))
					}
					assert.False(t, s.Ctx.Final)
				case Codex:
					assert.Equal(t, "p:s1", s.Header.Get("Session-Id"))
					assert.Equal(t, s.Session, s.Header.Get("Thread-Id"))
					assert.Contains(t, s.Header.Get("X-Codex-Turn-Metadata"), `"turn_id":"`)
					if s.Session == "p:s1/a" {
						assert.Equal(t, "Explore", s.Ctx.AgentID)
					}
				case OpenCode:
					assert.Equal(t, s.Session, s.Header.Get("X-Session-Id"))
					assert.Equal(t, s.Session, s.Header.Get("X-Session-Affinity"))
				}
				if h != Dynamo {
					assert.Empty(t, s.Header.Get("X-Dynamo-Session-Id"), "only the chosen harness's headers")
				}
			}
		})
	}
}

func session_harness(h Harness) string { return h.String() }

func TestRequestBody(t *testing.T) {
	for _, tc := range []struct {
		name     string
		api      API
		endpoint string
		eos      bool
	}{
		{"chat", Chat, "", true},
		{"completions", Completions, "", false},
		{"path wins", Chat, "/v1/completions", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{{ID: "a", ParentTurn: -1,
				Turns: []trace.Turn{turn(10, 37, 0, ids(1, 3))}}}}
			rep, err := newRunner(t, Config{Endpoint: f.URL() + tc.endpoint, API: tc.api, Model: "m \"q\"", IgnoreEOS: tc.eos, Sleep: noSleep}).Run(context.Background(), &w)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Summary.OK)
			b := f.requests()[0].Body
			assert.Equal(t, "m \"q\"", b["model"])
			assert.Equal(t, 37.0, b["max_tokens"])
			assert.Equal(t, true, b["stream"])
			assert.Equal(t, map[string]any{"include_usage": true}, b["stream_options"])
			if tc.eos {
				assert.Equal(t, true, b["ignore_eos"])
			} else {
				assert.NotContains(t, b, "ignore_eos")
			}
			chat := tc.api == Chat && tc.endpoint == ""
			assert.Equal(t, chat, b["messages"] != nil)
			assert.Equal(t, !chat, b["prompt"] != nil)
			assert.Len(t, strings.Fields(f.requests()[0].Prompt), 10)
			assert.Equal(t, 10, rep.Results[0].PromptTokens, "the server's count is reported")
		})
	}
}

func TestSequentialTurnsHonourScaledDelays(t *testing.T) {
	f := newFake(t)
	clk := newClock()
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{{ID: "solo", ParentTurn: -1, Start: 3 * time.Second,
		Turns: []trace.Turn{
			turn(4, 1, 0, ids(1, 1)),
			turn(8, 1, 2*time.Second, ids(1, 2)),
			turn(12, 1, 4*time.Second, ids(1, 3)),
			turn(16, 1, 500*time.Millisecond, ids(1, 4)),
		}}}}
	rep, err := newRunner(t, Config{Endpoint: f.URL(), Speed: 2, Now: clk.Now, Sleep: clk.Sleep}).Run(context.Background(), &w)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, time.Second, 2 * time.Second, 250 * time.Millisecond}, clk.Sleeps())
	offsets := make([]time.Duration, len(rep.Results))
	for i, r := range rep.Results {
		offsets[i] = r.Offset
	}
	assert.Equal(t, []time.Duration{1500 * time.Millisecond, 2500 * time.Millisecond, 4500 * time.Millisecond, 4750 * time.Millisecond}, offsets)
	reqs := f.requests()
	require.Len(t, reqs, 4)
	for k, s := range reqs {
		assert.Equal(t, k, s.Turn, "turns in order")
	}
	assert.Empty(t, f.overlaps, "a session never has two requests in flight")
}

func TestDelaysInRealTime(t *testing.T) {
	// Real time, a few milliseconds: the gap between a reply's end and the
	// next request is at least the scaled delay.
	f := newFake(t)
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{{ID: "rt", ParentTurn: -1, Turns: []trace.Turn{
		turn(4, 2, 0, nil), turn(4, 2, 2*time.Second, nil), turn(4, 2, 3*time.Second, nil)}}}}
	_, err := newRunner(t, Config{Endpoint: f.URL(), Speed: 200}).Run(context.Background(), &w)
	require.NoError(t, err)
	reqs := f.requests()
	require.Len(t, reqs, 3)
	for k, want := range []time.Duration{10 * time.Millisecond, 15 * time.Millisecond} {
		gap := reqs[k+1].Arrive.Sub(reqs[k].End)
		assert.GreaterOrEqual(t, gap, want, "gap before turn %d", k+1)
	}
}

func TestSharedPrefixesGiveIdenticalText(t *testing.T) {
	f := newFake(t)
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{
		{ID: "a", ParentTurn: -1, Turns: []trace.Turn{turn(12, 1, 0, []uint64{1, 2, 3}), turn(16, 1, 0, []uint64{1, 2, 3, 4})}},
		{ID: "b", ParentTurn: -1, Turns: []trace.Turn{turn(10, 1, 0, []uint64{1, 2, 9})}},
		{ID: "c", ParentTurn: -1, Turns: []trace.Turn{turn(6, 1, 0, nil)}},
		{ID: "d", ParentTurn: -1, Turns: []trace.Turn{turn(6, 1, 0, nil)}},
	}}
	_, err := newRunner(t, Config{Endpoint: f.URL(), Sleep: noSleep}).Run(context.Background(), &w)
	require.NoError(t, err)
	prompts := map[string][]string{}
	for _, s := range f.requests() {
		prompts[s.RequestID] = strings.Fields(s.Prompt)
	}
	a0, a1, b0 := prompts["a/0"], prompts["a/1"], prompts["b/0"]
	require.Len(t, a0, 12)
	require.Len(t, a1, 16)
	require.Len(t, b0, 10)
	assert.Equal(t, a0, a1[:12], "a turn extending its predecessor's ids extends its text")
	assert.Equal(t, a0[:8], b0[:8], "shared ids [1 2] give identical text across sessions")
	assert.NotEqual(t, a0[8:10], b0[8:10], "ids 3 and 9 differ")
	assert.NotEqual(t, prompts["c/0"], prompts["d/0"], "turns without ids share nothing")
}

func TestSubagentsRunConcurrentlyAndWaitForIsHonoured(t *testing.T) {
	f := newFake(t)
	const fan = 3
	bar := newBarrier(fan)
	f.before = func(s *seen) {
		if strings.HasPrefix(s.Session, "r/") && s.Turn == 0 {
			bar.wait(t, "subagents") // all three first turns are in flight together
		}
	}
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{{ID: "r", ParentTurn: -1, Turns: []trace.Turn{
		turn(4, 1, 0, ids(1, 1)), turn(8, 1, time.Second, ids(1, 2), "r/0", "r/1", "r/2"), turn(12, 1, 0, ids(1, 3))}}}}
	for i := 0; i < fan; i++ {
		w.Sessions = append(w.Sessions, trace.Session{ID: "r/" + string(rune('0'+i)), Parent: "r", ParentTurn: 0,
			Start: 100 * time.Millisecond, Turns: []trace.Turn{turn(4, 1, 0, ids(50, 1)), turn(8, 1, time.Second, ids(50, 2))}})
	}
	clk := newClock()
	rep, err := newRunner(t, Config{Endpoint: f.URL(), Harness: ClaudeCode, Now: clk.Now, Sleep: clk.Sleep}).Run(context.Background(), &w)
	require.NoError(t, err)
	assert.Equal(t, 3+2*fan, rep.Summary.OK)
	var lastChild time.Time
	var root1 *seen
	for _, s := range f.requests() {
		switch {
		case s.Session == "r" && s.Turn == 1:
			root1 = s
		case s.Session != "r" && s.End.After(lastChild):
			lastChild = s.End
		}
	}
	require.NotNil(t, root1)
	assert.True(t, root1.Arrive.After(lastChild), "the join turn waits for every subagent's last reply")
	assert.Empty(t, f.overlaps)
}

func TestConcurrencyBoundsPrograms(t *testing.T) {
	for _, tc := range []struct{ conc, roots, want int }{{2, 6, 2}, {1, 3, 1}, {0, 4, 4}} {
		t.Run(strings.Join([]string{"conc", string(rune('0' + tc.conc))}, "="), func(t *testing.T) {
			f := newFake(t)
			var mu sync.Mutex
			active, peak := map[string]bool{}, 0
			bar := newBarrier(tc.want)
			first := 0
			f.before = func(s *seen) {
				mu.Lock()
				active[s.Session] = true
				peak = max(peak, len(active))
				first++
				n := first
				mu.Unlock()
				if n <= tc.want {
					bar.wait(t, "first programs") // reach the bound for sure
				}
			}
			f.mode = func(s *seen) string {
				if s.Turn == 1 {
					mu.Lock()
					delete(active, s.Session) // ends before the client sees the reply end
					mu.Unlock()
				}
				return ""
			}
			var w trace.Workload
			w.BlockTokens = 4
			for i := 0; i < tc.roots; i++ {
				w.Sessions = append(w.Sessions, trace.Session{ID: string(rune('a' + i)), ParentTurn: -1,
					Turns: []trace.Turn{turn(4, 1, 0, nil), turn(4, 1, time.Second, nil)}})
			}
			rep, err := newRunner(t, Config{Endpoint: f.URL(), Concurrency: tc.conc, Sleep: noSleep}).Run(context.Background(), &w)
			require.NoError(t, err)
			assert.Equal(t, 2*tc.roots, rep.Summary.OK)
			assert.Equal(t, tc.want, peak, "programs at once")
		})
	}
}

func TestProgramsGroupWaitForAcrossRoots(t *testing.T) {
	// Root b's second turn waits for root a: with concurrency 1 they must
	// run as one program, or b would wait for a forever.
	f := newFake(t)
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{
		{ID: "b", ParentTurn: -1, Turns: []trace.Turn{turn(4, 1, 0, nil), turn(4, 1, 0, nil, "a")}},
		{ID: "c", ParentTurn: -1, Turns: []trace.Turn{turn(4, 1, 0, nil)}},
		{ID: "a", ParentTurn: -1, Start: time.Second, Turns: []trace.Turn{turn(4, 1, 0, nil)}},
	}}
	r := newRunner(t, Config{Endpoint: f.URL(), Concurrency: 1, Sleep: noSleep})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := r.Run(ctx, &w)
	require.NoError(t, err)
	assert.Equal(t, 4, rep.Summary.OK)
	order := []string{}
	for _, s := range f.requests() {
		order = append(order, s.RequestID)
	}
	// a and b start together (a 1 s later, instantly here); c waits for
	// their program to end.
	require.Len(t, order, 4)
	assert.ElementsMatch(t, []string{"a/0", "b/0"}, order[:2])
	assert.Equal(t, []string{"b/1", "c/0"}, order[2:])
}

func TestErrorsAreCountedByKind(t *testing.T) {
	cases := []struct {
		mode      string
		kind      string
		malformed int
	}{
		{"500", "http_500", 0},
		{"429", "http_429", 0},
		{"malformed", "malformed_sse", 1},
		{"hang", "timeout", 0},
		{"hang-mid", "timeout", 0},
		{"cut", "stream", 0},
		{"streamerr", "stream_error", 0},
	}
	f := newFake(t)
	byID := map[string]string{}
	w := trace.Workload{BlockTokens: 4}
	for i, c := range cases {
		id := "e" + string(rune('a'+i))
		byID[id] = c.mode
		w.Sessions = append(w.Sessions, trace.Session{ID: id, ParentTurn: -1, Turns: []trace.Turn{turn(4, 3, 0, nil), turn(4, 3, 0, nil)}})
	}
	w.Sessions = append(w.Sessions, trace.Session{ID: "good", ParentTurn: -1, Turns: []trace.Turn{turn(4, 3, 0, nil)}},
		trace.Session{ID: "nousage", ParentTurn: -1, Turns: []trace.Turn{turn(4, 3, 0, nil)}},
		trace.Session{ID: "json", ParentTurn: -1, Turns: []trace.Turn{turn(4, 3, 0, nil)}})
	byID["nousage"], byID["json"] = "nousage", "json"
	f.mode = func(s *seen) string { return byID[s.Session] }
	var got []*Result
	var mu sync.Mutex
	// The hanging requests end only by the 100 ms timeout: without it
	// Run would never return (the bound below is for that failure, far
	// above what the run takes on a loaded machine; no wall-clock window).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := newRunner(t, Config{Endpoint: f.URL(), Timeout: 100 * time.Millisecond, Sleep: noSleep, OnResult: func(r *Result) {
		mu.Lock()
		got = append(got, r)
		mu.Unlock()
	}}).Run(ctx, &w)
	require.NoError(t, err)
	require.NoError(t, ctx.Err(), "timeouts bound every request")
	s := rep.Summary
	want := map[string]int{}
	for _, c := range cases {
		want[c.kind] += 2 // a failed turn does not stop its session
	}
	assert.Equal(t, want, s.Errors)
	assert.Equal(t, 2*len(cases), s.Failed)
	assert.Equal(t, 3, s.OK)
	assert.Equal(t, 2, s.MalformedEvents)
	assert.Equal(t, 1, s.NoUsage)
	assert.Len(t, got, s.Requests, "OnResult sees every finished request")
	for _, r := range rep.Results {
		switch byID[strings.Split(r.RequestID, "/")[0]] {
		case "500":
			assert.Equal(t, 500, r.Status)
			assert.Contains(t, r.Detail, "fake failure")
		case "nousage":
			assert.Equal(t, 3, r.CompletionTokens, "counted from the events")
		case "json":
			assert.Equal(t, 3, r.CompletionTokens)
			assert.Equal(t, r.E2E, r.TTFT)
		}
	}
	assert.Contains(t, s.ErrorList(), "http_500 ×2")
}

func TestUnreachableAndModels(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	w := agentWorkload()

	_, err = newRunner(t, Config{Endpoint: dead}).Run(context.Background(), &w)
	assert.ErrorIs(t, err, ErrUnreachable)
	assert.Contains(t, err.Error(), ln.Addr().String())

	// Without the preflight, every request fails as a connect error.
	rep, err := newRunner(t, Config{Endpoint: dead, Model: "m", SkipPreflight: true, Sleep: noSleep}).Run(context.Background(), &w)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"connect": 5}, rep.Summary.Errors)

	f := newFake(t)
	f.models = []string{"first", "second"}
	rep, err = newRunner(t, Config{Endpoint: f.URL(), Sleep: noSleep}).Run(context.Background(), &w)
	require.NoError(t, err)
	assert.Equal(t, "first", rep.Model)
	assert.Equal(t, "first", f.requests()[0].Body["model"])

	f.models = nil // 404
	_, err = newRunner(t, Config{Endpoint: f.URL()}).Run(context.Background(), &w)
	assert.ErrorIs(t, err, ErrNoModel)
	rep, err = newRunner(t, Config{Endpoint: f.URL(), Model: "mine", Sleep: noSleep}).Run(context.Background(), &w)
	require.NoError(t, err, "a named model needs no listing")
	assert.Equal(t, 5, rep.Summary.OK)
}

func TestCancelReturnsPartialReport(t *testing.T) {
	f := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	var once sync.Once
	f.mode = func(s *seen) string {
		if s.Session == "slow" {
			once.Do(cancel) // Ctrl-C while this request is in flight
			return "hang"
		}
		return ""
	}
	w := trace.Workload{BlockTokens: 4, Sessions: []trace.Session{
		{ID: "fast", ParentTurn: -1, Turns: []trace.Turn{turn(4, 1, 0, nil)}},
		{ID: "slow", ParentTurn: -1, Start: time.Second, Turns: []trace.Turn{turn(4, 1, 0, nil), turn(4, 1, 0, nil)}},
	}}
	rep, err := newRunner(t, Config{Endpoint: f.URL(), Concurrency: 1, Sleep: noSleep}).Run(ctx, &w)
	require.ErrorIs(t, err, context.Canceled)
	require.NotNil(t, rep)
	assert.Equal(t, 1, rep.Summary.OK)
	assert.Equal(t, 1, rep.Summary.Canceled)
	assert.Equal(t, 0, rep.Summary.Failed, "a cancelled request is not an error")
	assert.Equal(t, 3, rep.Summary.Planned)
}

func TestMaxRequests(t *testing.T) {
	f := newFake(t)
	w := trace.Synthetic(trace.SyntheticConfig{Sessions: 6, Seed: 3, FirstPrompt: trace.LogNormal{Median: 100},
		SystemTokens: 64, Append: trace.LogNormal{Median: 50}})
	r := newRunner(t, Config{Endpoint: f.URL(), MaxRequests: 7, Concurrency: 3, Sleep: noSleep})
	rep, err := r.Run(context.Background(), &w)
	require.NoError(t, err)
	assert.Equal(t, 7, rep.Summary.Sent)
	assert.Equal(t, 7, rep.Summary.Planned)
	assert.Len(t, f.requests(), 7)
	p := r.Progress()
	assert.Equal(t, Progress{Planned: 7, Sent: 7, Finished: 7, OutputTokens: rep.Summary.CompletionTokens, Elapsed: p.Elapsed}, p)
}

func TestOpenLoop(t *testing.T) {
	t.Run("arrivals", func(t *testing.T) {
		f := newFake(t)
		clk := newClock()
		w := trace.Workload{BlockTokens: 4, OpenLoop: true, Sessions: []trace.Session{
			{ID: "#1", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 4, OutputTokens: 1, Arrival: 300 * time.Millisecond}}},
			{ID: "#2", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 4, OutputTokens: 1, Arrival: 100 * time.Millisecond}}},
			{ID: "#3", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 4, OutputTokens: 1, Arrival: 200 * time.Millisecond},
				{InputTokens: 4, OutputTokens: 1, Arrival: 200 * time.Millisecond}}},
		}}
		rep, err := newRunner(t, Config{Endpoint: f.URL(), Speed: 0.5, Now: clk.Now, Sleep: clk.Sleep}).Run(context.Background(), &w)
		require.NoError(t, err)
		var got []string
		for _, r := range rep.Results {
			got = append(got, r.RequestID+"@"+r.Offset.String())
		}
		assert.Equal(t, []string{"#2/0@200ms", "#3/0@400ms", "#3/1@400ms", "#1/0@600ms"}, got)
		assert.Equal(t, 0, rep.Summary.Lag.N, "nothing was late")
	})
	t.Run("lag under a concurrency bound", func(t *testing.T) {
		f := newFake(t)
		clk := newClock()
		f.before = func(*seen) { clk.Advance(100 * time.Millisecond) } // service time
		w := trace.Workload{BlockTokens: 4, OpenLoop: true}
		for i := 0; i < 3; i++ {
			w.Sessions = append(w.Sessions, trace.Session{ID: string(rune('a' + i)), ParentTurn: -1,
				Turns: []trace.Turn{{InputTokens: 4, OutputTokens: 1}}})
		}
		rep, err := newRunner(t, Config{Endpoint: f.URL(), Concurrency: 1, Now: clk.Now, Sleep: clk.Sleep}).Run(context.Background(), &w)
		require.NoError(t, err)
		var lags []time.Duration
		for _, r := range rep.Results {
			lags = append(lags, r.Lag)
		}
		assert.Equal(t, []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, lags)
		assert.Equal(t, 200*time.Millisecond, rep.Summary.Lag.Max)
		assert.Equal(t, 3, rep.Summary.Lag.N)
	})
}

func TestTraceOutputReadsBack(t *testing.T) {
	f := newFake(t)
	f.cached = func(s *seen) int { return 4 * s.Turn }
	w := agentWorkload()
	path := t.TempDir() + "/run"
	tw, err := trace.NewWriter(trace.WriterConfig{Path: path, Compression: trace.Gzip})
	require.NoError(t, err)
	rep, err := newRunner(t, Config{Endpoint: f.URL(), Sleep: noSleep, OnResult: func(r *Result) {
		rec := r.Record()
		assert.NoError(t, tw.Write(&rec))
	}}).Run(context.Background(), &w)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	recs, err := trace.ReadRecordFiles(path + ".000000.jsonl.gz")
	require.NoError(t, err)
	require.Len(t, recs, 5)
	byID := map[string]trace.Record{}
	for _, rec := range recs {
		byID[rec.Request.RequestID] = rec
	}
	rec := byID["s1/a/1"]
	assert.Equal(t, trace.AgentContext{SessionID: "s1/a", ParentSessionID: "s1", SessionFinal: true}, rec.AgentContext)
	assert.Equal(t, []uint64{100, 101, 102}, rec.Request.Replay.InputSequenceHashes)
	assert.Equal(t, 9, rec.Request.Replay.InputLength)
	assert.Equal(t, 4, rec.Request.Replay.TraceBlockSize)
	assert.EqualValues(t, 9, rec.Request.InputTokens)
	assert.EqualValues(t, 4, rec.Request.CachedTokens)
	assert.InDelta(t, 4.0/9, rec.Request.KVHitRate, 1e-9)
	assert.EqualValues(t, 1, rec.Request.OutputTokens)
	assert.Equal(t, "fake-model", rec.Request.Model)

	// The capture is itself a workload with the original tree and blocks.
	back, err := trace.DynamoWorkload("capture", recs)
	require.NoError(t, err)
	require.Len(t, back.Sessions, 3)
	got := map[string]trace.Session{}
	for _, s := range back.Sessions {
		got[s.ID] = s
	}
	for _, s := range w.Sessions {
		b := got[s.ID]
		assert.Equal(t, s.Parent, b.Parent, s.ID)
		require.Len(t, b.Turns, len(s.Turns), s.ID)
		for k := range s.Turns {
			assert.Equal(t, s.Turns[k].HashIDs, b.Turns[k].HashIDs)
			assert.Equal(t, s.Turns[k].InputTokens, b.Turns[k].InputTokens)
		}
	}
	hr, ok := rep.Summary.HitRate()
	require.True(t, ok)
	assert.InDelta(t, float64(rep.Summary.CachedTokens)/float64(rep.Summary.PromptTokens), hr, 1e-12)
}

func TestConfigValidation(t *testing.T) {
	bad := []Config{
		{},
		{Endpoint: "localhost:8000"},
		{Endpoint: "ftp://x"},
		{Endpoint: "http://"},
		{Endpoint: "http://x", Speed: -1},
		{Endpoint: "http://x", Timeout: -1},
		{Endpoint: "http://x", Concurrency: -1},
		{Endpoint: "http://x", MaxRequests: -2},
		{Endpoint: "http://x", Harness: 9},
		{Endpoint: "http://x", API: 7},
		{Endpoint: "http://x", SkipPreflight: true},
	}
	for i, c := range bad {
		_, err := New(c)
		assert.ErrorIs(t, err, ErrConfig, "case %d", i)
	}
	r, err := New(Config{Endpoint: "http://x"})
	require.NoError(t, err)
	assert.Equal(t, DefaultTimeout, r.cfg.Timeout)
	assert.Equal(t, DefaultSpeed, r.cfg.Speed)

	_, err = r.Run(context.Background(), &trace.Workload{})
	assert.ErrorIs(t, err, ErrWorkload)
	_, err = r.Run(context.Background(), &trace.Workload{Sessions: []trace.Session{{ID: "x", Parent: "nope"}}})
	assert.ErrorIs(t, err, ErrWorkload)
}

func TestEndpointURLs(t *testing.T) {
	for _, tc := range []struct {
		in          string
		api         API
		url, models string
		gotAPI      API
	}{
		{"http://h:8000", Chat, "http://h:8000/v1/chat/completions", "http://h:8000/v1/models", Chat},
		{"http://h:8000/", Completions, "http://h:8000/v1/completions", "http://h:8000/v1/models", Completions},
		{"http://h/v1", Chat, "http://h/v1/chat/completions", "http://h/v1/models", Chat},
		{"https://h/api/v1/", Chat, "https://h/api/v1/chat/completions", "https://h/api/v1/models", Chat},
		{"http://h/v1/chat/completions", Completions, "http://h/v1/chat/completions", "http://h/v1/models", Chat},
		{"http://h/v1/completions", Chat, "http://h/v1/completions", "http://h/v1/models", Completions},
		{"http://h/x?k=1", Chat, "http://h/x/v1/chat/completions?k=1", "http://h/x/v1/models?k=1", Chat},
		{"http://h:8000", Responses, "http://h:8000/v1/responses", "http://h:8000/v1/models", Responses},
		{"http://h:8000/v1", Messages, "http://h:8000/v1/messages", "http://h:8000/v1/models", Messages},
		{"http://h/v1/messages", Chat, "http://h/v1/messages", "http://h/v1/models", Messages},
		{"http://h/v1/responses", Chat, "http://h/v1/responses", "http://h/v1/models", Responses},
	} {
		u, m, a, err := endpointURLs(tc.in, tc.api)
		require.NoError(t, err, tc.in)
		assert.Equal(t, []any{tc.url, tc.models, tc.gotAPI}, []any{u, m, a}, tc.in)
	}
}

func TestParseNames(t *testing.T) {
	for _, h := range []Harness{Dynamo, ClaudeCode, Codex, OpenCode} {
		got, err := ParseHarness(h.String())
		require.NoError(t, err)
		assert.Equal(t, h, got)
	}
	_, err := ParseHarness("cursor")
	assert.ErrorIs(t, err, ErrConfig)
	for _, a := range []API{Chat, Completions, Responses, Messages} {
		got, err := ParseAPI(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	assert.Equal(t, Codex, Responses.DefaultHarness())
	assert.Equal(t, ClaudeCode, Messages.DefaultHarness())
	assert.Equal(t, Dynamo, Chat.DefaultHarness())
	_, err = ParseAPI("embeddings")
	assert.ErrorIs(t, err, ErrConfig)
}

func TestErrorsSentinel(t *testing.T) {
	assert.False(t, errors.Is(ErrConfig, ErrUnreachable))
	assert.True(t, slices.Contains([]ErrorKind{KindHTTP, KindTimeout}, KindTimeout))
}
