package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/shareddata"
)

// naiveCeiling is the reference: each turn, in plan order, hits the longest
// prefix it shares with any earlier turn.
func naiveCeiling(w *Workload, p *Plan) Ceiling {
	type ref struct {
		s, t int
		at   time.Duration
	}
	var refs []ref
	for s := range w.Sessions {
		for t := range w.Sessions[s].Turns {
			refs = append(refs, ref{s, t, p.Turns[s][t].Arrival})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].at < refs[j].at })
	var c Ceiling
	for i, r := range refs {
		t := w.Sessions[r.s].Turns[r.t]
		best := 0
		for _, q := range refs[:i] {
			best = max(best, commonPrefix(w.Sessions[q.s].Turns[q.t].HashIDs, t.HashIDs))
		}
		c.HitBlocks += int64(best)
		c.TotalBlocks += int64(len(t.HashIDs))
		c.HitTokens += int64(min(best*w.BlockTokens, t.InputTokens))
		c.TotalTokens += int64(t.InputTokens)
	}
	return c
}

func TestCeilingMatchesNaive(t *testing.T) {
	seeds := uint64(200)
	if raceEnabled {
		seeds = 20
	}
	for seed := range seeds {
		r := rand.New(rand.NewPCG(seed, 3))
		w := randWorkload(r, seed%2 == 0)
		// Reuse ids across sessions at random, without prefix chaining.
		for i := range w.Sessions {
			for j := range w.Sessions[i].Turns {
				for k := range w.Sessions[i].Turns[j].HashIDs {
					if r.IntN(3) == 0 {
						w.Sessions[i].Turns[j].HashIDs[k] = uint64(r.IntN(4))
					}
				}
			}
		}
		p, err := Schedule(&w, TimingModel{})
		require.NoError(t, err)
		require.Equal(t, naiveCeiling(&w, p), InfiniteCacheCeiling(&w, p), "seed %d", seed)
	}
}

func TestValidateRejects(t *testing.T) {
	base := func() Workload {
		return Workload{BlockTokens: 4, Sessions: []Session{
			{ID: "p", ParentTurn: -1, Turns: []Turn{{InputTokens: 4, HashIDs: []uint64{1}}, {WaitFor: []string{"c"}}}},
			{ID: "c", Parent: "p", ParentTurn: 0, Turns: []Turn{{}}},
		}}
	}
	ok := base()
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name string
		edit func(w *Workload)
		want string
	}{
		{"empty id", func(w *Workload) { w.Sessions[0].ID = "" }, "empty ID"},
		{"duplicate", func(w *Workload) { w.Sessions[1].ID = "p" }, "duplicate"},
		{"missing parent", func(w *Workload) { w.Sessions[1].Parent = "x" }, "not another session"},
		{"parent turn", func(w *Workload) { w.Sessions[1].ParentTurn = 2 }, "ParentTurn 2"},
		{"negative tokens", func(w *Workload) { w.Sessions[0].Turns[0].InputTokens = -1 }, "token counts"},
		{"negative delay", func(w *Workload) { w.Sessions[0].Turns[1].Delay = -1 }, "negative"},
		{"no block size", func(w *Workload) { w.BlockTokens = 0 }, "HashIDs without BlockTokens"},
		{"unknown wait", func(w *Workload) { w.Sessions[0].Turns[1].WaitFor = []string{"zz"} }, "waits for"},
		{"spawn-wait cycle", func(w *Workload) { w.Sessions[1].ParentTurn = 1 }, "cycle"},
		{"wait cycle", func(w *Workload) {
			w.Sessions[1].Parent, w.Sessions[1].Turns[0].WaitFor = "", []string{"p"}
		}, "cycle"},
		{"parent cycle", func(w *Workload) { w.Sessions[0].Parent, w.Sessions[0].ParentTurn = "c", -1 }, "cycle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := base()
			tc.edit(&w)
			err := w.Validate()
			require.ErrorIs(t, err, ErrInvalid)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestScheduleSemantics(t *testing.T) {
	w := Workload{BlockTokens: 10, Sessions: []Session{
		{ID: "p", ParentTurn: -1, Start: time.Second, Turns: []Turn{
			{InputTokens: 20000, OutputTokens: 50, HashIDs: make([]uint64, 2000)},
			{Delay: 2 * time.Second, InputTokens: 20100, OutputTokens: 0, WaitFor: []string{"c"}, HashIDs: make([]uint64, 2010)},
		}},
		{ID: "c", Parent: "p", ParentTurn: 0, Start: 500 * time.Millisecond, Turns: []Turn{{Delay: time.Second, OutputTokens: 500}}},
	}}
	p, err := Schedule(&w, TimingModel{PrefillTokensPerSec: 10000, DecodeTokensPerSec: 50})
	require.NoError(t, err)
	t0 := p.Turns[0][0]
	require.Equal(t, time.Second, t0.Arrival)
	require.Equal(t, 3*time.Second, t0.FirstToken) // 20k tokens at 10k/s
	require.Equal(t, 4*time.Second, t0.End)        // 50 tokens at 50/s
	c := p.Turns[1][0]
	require.Equal(t, 5500*time.Millisecond, c.Arrival) // 4 s + 0.5 s start + 1 s delay
	require.Equal(t, 15500*time.Millisecond, c.End)    // 500 tokens at 50/s
	t1 := p.Turns[0][1]
	require.Equal(t, 17500*time.Millisecond, t1.Arrival) // child end + 2 s residual
	require.Equal(t, 20000, t1.CachedTokens)
	require.Equal(t, 17510*time.Millisecond, t1.End) // 100 uncached tokens
	require.Equal(t, t1.End, p.Makespan)
}

func TestTile(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 5))
		w := Synthetic(SyntheticConfig{Sessions: 3, Seed: seed, SpawnProb: 0.3})
		copies := 1 + r.IntN(4)
		tiled, err := Tile(&w, TileConfig{Copies: copies, Stagger: time.Minute})
		require.NoError(t, err)
		require.NoError(t, tiled.Validate())
		require.Len(t, tiled.Sessions, copies*len(w.Sessions))
		// Disjoint namespaces: the ceiling is exactly copies times the original's.
		pw, _ := Schedule(&w, TimingModel{})
		pt, _ := Schedule(&tiled, TimingModel{})
		cw, ct := InfiniteCacheCeiling(&w, pw), InfiniteCacheCeiling(&tiled, pt)
		require.Equal(t, int64(copies)*cw.HitBlocks, ct.HitBlocks, "seed %d", seed)
		ids := make([]map[uint64]bool, copies)
		for k := range copies {
			ids[k] = map[uint64]bool{}
			for i, s := range w.Sessions {
				c := tiled.Sessions[k*len(w.Sessions)+i]
				require.Equal(t, s.ID+"#"+fmt.Sprint(k), c.ID)
				if s.Parent == "" {
					require.Equal(t, s.Start+time.Duration(k)*time.Minute, c.Start)
				} else {
					require.Equal(t, s.Parent+"#"+fmt.Sprint(k), c.Parent)
				}
				for j := range s.Turns {
					require.Len(t, c.Turns[j].HashIDs, len(s.Turns[j].HashIDs))
					for _, id := range c.Turns[j].HashIDs {
						ids[k][id] = true
					}
				}
			}
		}
		for a := range copies {
			for b := a + 1; b < copies; b++ {
				for id := range ids[a] {
					require.False(t, ids[b][id], "copies %d and %d share id %d", a, b, id)
				}
			}
		}
	}
	w := Synthetic(SyntheticConfig{Sessions: 2, Seed: 1})
	shared, err := Tile(&w, TileConfig{Copies: 2, SharedPrefixBlocks: 10})
	require.NoError(t, err)
	n := len(w.Sessions)
	require.Equal(t, shared.Sessions[0].Turns[0].HashIDs[:10], shared.Sessions[n].Turns[0].HashIDs[:10])
	require.NotEqual(t, shared.Sessions[0].Turns[0].HashIDs[10], shared.Sessions[n].Turns[0].HashIDs[10])
	_, err = Tile(&w, TileConfig{})
	require.Error(t, err)
}

func TestMerge(t *testing.T) {
	a := randWorkload(rand.New(rand.NewPCG(1, 1)), false)
	b := a
	b.Name = "other"
	m, err := Merge("m", a, b)
	require.NoError(t, err)
	require.NoError(t, m.Validate())
	require.Len(t, m.Sessions, 2*len(a.Sessions))
	require.True(t, strings.HasPrefix(m.Sessions[0].ID, "rand:"))
	pa, _ := Schedule(&a, TimingModel{})
	pm, _ := Schedule(&m, TimingModel{})
	require.Equal(t, 2*InfiniteCacheCeiling(&a, pa).HitBlocks, InfiniteCacheCeiling(&m, pm).HitBlocks)
	c := a
	c.BlockTokens++
	_, err = Merge("m", a, c)
	require.ErrorIs(t, err, ErrBlockSize)
}

func TestSyntheticProperties(t *testing.T) {
	w := Synthetic(SyntheticConfig{Seed: 42})
	require.NoError(t, w.Validate())
	again := Synthetic(SyntheticConfig{Seed: 42})
	require.Equal(t, w, again, "same seed, same workload")
	other := Synthetic(SyntheticConfig{Seed: 43})
	require.NotEqual(t, w.Sessions[0].Turns, other.Sessions[0].Turns)
	d := DefaultSyntheticConfig()
	s, err := Summarize(&w)
	require.NoError(t, err)
	require.Equal(t, d.Sessions, s.Sessions)
	require.Greater(t, s.Subagents, 0, "fan-out happens at the default spawn rate over 256 sessions")
	require.Less(t, s.Requests, 4000, "bounded size")
	rootPrompt := d.SystemTokens / d.BlockTokens
	var roots [][]uint64
	for _, ses := range w.Sessions {
		for k, t2 := range ses.Turns {
			require.Equal(t, (t2.InputTokens+63)/64, len(t2.HashIDs))
			require.LessOrEqual(t, t2.InputTokens, d.MaxContextTokens)
			if k > 0 {
				prev := ses.Turns[k-1]
				full := prev.InputTokens / 64
				require.Equal(t, prev.HashIDs[:full], t2.HashIDs[:full], "a turn extends its session's previous prompt")
				require.Greater(t, t2.InputTokens, prev.InputTokens+prev.OutputTokens)
			}
		}
		if ses.Parent == "" {
			roots = append(roots, ses.Turns[0].HashIDs)
		}
	}
	for _, r := range roots[1:] {
		require.Equal(t, roots[0][:rootPrompt], r[:rootPrompt], "shared system prompt")
		require.NotEqual(t, roots[0][rootPrompt], r[rootPrompt], "sessions diverge after it")
	}
	// Prefix stability: more sessions only add sessions.
	small := Synthetic(SyntheticConfig{Seed: 42, Sessions: 5})
	for _, ses := range small.Sessions {
		for _, big := range w.Sessions {
			if big.ID == ses.ID {
				require.Equal(t, len(ses.Turns), len(big.Turns))
				require.Equal(t, ses.Start, big.Start)
			}
		}
	}
}

func TestSyntheticInvalidConfig(t *testing.T) {
	bad := SyntheticConfig{Sessions: -3, StopProb: 2, Output: LogNormal{Median: -1}}
	require.Error(t, bad.Validate())
	w := Synthetic(bad)
	require.NoError(t, w.Validate())
	require.Equal(t, Synthetic(SyntheticConfig{}).Sessions[0].ID, w.Sessions[0].ID)
	require.NoError(t, SyntheticConfig{}.Validate())
}

// TestSyntheticFitRecovers checks the generator against its own fit: a
// large synthetic workload re-fitted gives back the parameters (the caps
// and the context limit bias appends and turns slightly; tolerances allow
// for that).
func TestSyntheticFitRecovers(t *testing.T) {
	if raceEnabled {
		t.Skip("single-goroutine statistics test; too slow under -race")
	}
	cfg := SyntheticConfig{Sessions: 1500, Seed: 9, SpawnProb: 0.05, MaxContextTokens: MaxTokens, MaxGap: 1000 * time.Hour, MaxTurns: 1000}
	w := Synthetic(cfg)
	got := FitClaudeCode(w)
	d := DefaultSyntheticConfig()
	rel := func(name string, want, have float64, tol float64) {
		require.InDelta(t, 1, have/want, tol, "%s: want %v, got %v", name, want, have)
	}
	rel("Output.Median", d.Output.Median, got.Output.Median, 0.05)
	rel("Output.Sigma", d.Output.Sigma, got.Output.Sigma, 0.05)
	rel("Append.Median", d.Append.Median, got.Append.Median, 0.08)
	rel("ToolGap.Median", d.ToolGap.Median, got.ToolGap.Median, 0.08)
	rel("ToolGap.Sigma", d.ToolGap.Sigma, got.ToolGap.Sigma, 0.08)
	rel("FirstPrompt.Median", d.FirstPrompt.Median, got.FirstPrompt.Median, 0.1)
	rel("StopProb", d.StopProb, got.StopProb, 0.15)
	rel("SpawnProb", 0.05, got.SpawnProb, 0.2)
	rel("SystemTokens", float64(d.SystemTokens), float64(got.SystemTokens), 0.001)
	rel("SubagentTurns.Median", d.SubagentTurns.Median, got.SubagentTurns.Median, 0.1)
}

// TestFitMatchesDefaults is the written-down fit: the defaults are the
// fit of the real Claude Code traces, rounded.
func TestFitMatchesDefaults(t *testing.T) {
	var ws []Workload
	for _, f := range claudeFiles(t) {
		w, err := ReadFile(f, ReadOptions{})
		require.NoError(t, err)
		ws = append(ws, w)
	}
	got := FitClaudeCode(ws...)
	d := DefaultSyntheticConfig()
	ln := func(name string, want, have LogNormal) {
		require.InDelta(t, want.Median, have.Median, 0.01*want.Median, name)
		require.InDelta(t, want.Sigma, have.Sigma, 0.01, name)
	}
	require.InDelta(t, d.SystemTokens, got.SystemTokens, 1)
	require.InDelta(t, d.SubagentSystemTokens, got.SubagentSystemTokens, 1)
	ln("FirstPrompt", d.FirstPrompt, got.FirstPrompt)
	ln("Turns", d.Turns, got.Turns)
	ln("Append", d.Append, got.Append)
	ln("Output", d.Output, got.Output)
	ln("ToolGap", d.ToolGap, got.ToolGap)
	ln("UserGap", d.UserGap, got.UserGap)
	ln("FanOut", d.FanOut, got.FanOut)
	ln("SubagentPrompt", d.SubagentPrompt, got.SubagentPrompt)
	ln("SubagentTurns", d.SubagentTurns, got.SubagentTurns)
	require.InDelta(t, d.StopProb, got.StopProb, 0.001)
	require.InDelta(t, d.SpawnProb, got.SpawnProb, 0.0005)
}

func TestFitLogNormal(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	want := LogNormal{Median: 300, Sigma: 0.8}
	xs := make([]float64, 20000)
	for i := range xs {
		xs[i] = want.Sample(r)
	}
	got := FitLogNormal(append(xs, 0, -1, math.Inf(1)))
	require.InDelta(t, want.Median, got.Median, 6)
	require.InDelta(t, want.Sigma, got.Sigma, 0.02)
	require.Equal(t, LogNormal{}, FitLogNormal(nil))
}

type chromeTrace struct {
	DisplayTimeUnit string `json:"displayTimeUnit"`
	TraceEvents     []struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat"`
		Ph   string         `json:"ph"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Ts   float64        `json:"ts"`
		Dur  float64        `json:"dur"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func TestChromeTraceRoundTrip(t *testing.T) {
	spans := []Span{
		{Track: "s", Kind: SpanPrefill, Start: 0, End: 1500 * time.Microsecond, RequestID: "r1", Tokens: 100},
		{Track: "s", Kind: SpanDecode, Start: 1500 * time.Microsecond, End: 3 * time.Millisecond},
		{Track: "s/a", Parent: "s", Kind: SpanTool, Name: "tool: \"grep\"", Start: time.Millisecond, End: 2*time.Millisecond + 1},
		{Track: "s", Kind: SpanPaused, Start: 2 * time.Millisecond, End: 4 * time.Millisecond}, // overlaps: lane 2
	}
	var buf bytes.Buffer
	require.NoError(t, WriteChromeTrace(&buf, spans))
	var ct chromeTrace
	require.NoError(t, json.Unmarshal(buf.Bytes(), &ct), buf.String())
	threads := map[int]string{}
	var xs []string
	for _, e := range ct.TraceEvents {
		require.Equal(t, 1, e.Pid)
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			threads[e.Tid] = e.Args["name"].(string)
		case e.Ph == "X":
			xs = append(xs, fmt.Sprintf("%s|%s|%s|%g|%g", threads[e.Tid], e.Name, e.Cat, e.Ts, e.Dur))
		}
	}
	require.Equal(t, []string{
		"s|prefill|agentkv.prefill|0|1500",
		"s/a (subagent of s)|tool: \"grep\"|agentkv.tool|1000|1000.001",
		"s|decode|agentkv.decode|1500|1500",
		"s [lane 2]|paused|agentkv.paused|2000|2000",
	}, xs)
}

func TestPlanAndRecordSpans(t *testing.T) {
	w, err := ReadClaudeCode(strings.NewReader(claudeSample), "f.json")
	require.NoError(t, err)
	p, err := Schedule(&w, TimingModel{})
	require.NoError(t, err)
	spans := PlanSpans(&w, p)
	kinds := map[SpanKind]int{}
	for _, s := range spans {
		kinds[s.Kind]++
		require.LessOrEqual(t, s.Start, s.End)
	}
	require.Equal(t, 5, kinds[SpanPrefill])
	require.Equal(t, 5, kinds[SpanDecode])
	require.Equal(t, 1, kinds[SpanThink]) // after the root's end_turn
	require.Equal(t, 2, kinds[SpanTool])  // the join and the subagent's tool gap

	recs := []Record{
		{EventTimeUnixMs: 1100, AgentContext: AgentContext{SessionID: "s"}, Request: Request{RequestID: "a", RequestReceivedMs: 1000,
			PrefillWaitTimeMs: 10, PrefillTimeMs: 20, TTFTMs: 30, TotalTimeMs: 100,
			FinishReasonMetadata: FinishMetadata{FinishReason: "tool_calls", ToolCalls: []ToolCallMeta{{Name: "bash"}}}}},
		{EventTimeUnixMs: 1600, AgentContext: AgentContext{SessionID: "s"}, Request: Request{RequestID: "b", RequestReceivedMs: 1500,
			TTFTMs: 40, TotalTimeMs: 100, Admission: Admission{Pauses: 1, PausedMs: 200}}},
	}
	got := RecordSpans(recs)
	var desc []string
	for _, s := range got {
		name := s.Name
		if name == "" {
			name = s.Kind.String()
		}
		desc = append(desc, fmt.Sprintf("%s %v-%v", name, s.Start, s.End))
	}
	require.Equal(t, []string{
		"queued 0s-10ms", "prefill 10ms-30ms", "decode 30ms-100ms",
		"tool: bash 100ms-300ms", "paused 300ms-500ms", "prefill 500ms-540ms", "decode 540ms-600ms",
	}, desc)
	var buf bytes.Buffer
	require.NoError(t, WriteChromeTrace(&buf, got))
	require.True(t, json.Valid(buf.Bytes()))
}

func BenchmarkReadMooncakeConversation(b *testing.B) {
	path := filepath.Join(shareddata.Dir(b), "mooncake_conversation_trace.jsonl")
	b.ReportAllocs()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		w, err := ReadFile(path, ReadOptions{})
		if err != nil || len(w.Sessions) != 12031 {
			b.Fatal(err)
		}
	}
	if cpu := processCPU() - cpu0; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e6, "cpu-ms/op")
	}
}

func BenchmarkSynthetic(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		Synthetic(SyntheticConfig{Seed: uint64(i)})
	}
}

// TestSyntheticRespectsMaxContext: no turn, first turns included, exceeds
// MaxContextTokens, even when the heavy-tailed first prompt draws high.
func TestSyntheticRespectsMaxContext(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		c := DefaultSyntheticConfig()
		c.Sessions, c.Seed, c.MaxContextTokens = 64, seed, 48_000
		w := Synthetic(c)
		for _, s := range w.Sessions {
			for i, tr := range s.Turns {
				if tr.InputTokens > c.MaxContextTokens {
					t.Fatalf("seed %d session %s turn %d: %d input tokens > MaxContextTokens %d", seed, s.ID, i, tr.InputTokens, c.MaxContextTokens)
				}
			}
		}
	}
}

// TestSWEBenchSynthetic: the SWE-bench-shaped workload has programs of
// 20–60 model calls with long tool gaps and no user turns.
func TestSWEBenchSynthetic(t *testing.T) {
	cfg := SWEBenchSyntheticConfig()
	cfg.Sessions = 200
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := Synthetic(cfg)
	def := DefaultSyntheticConfig()
	def.Sessions = 200
	d := Synthetic(def)
	var turns []int
	inRange := 0
	var gap, defGap time.Duration
	var gaps, defGaps int
	for _, s := range w.Sessions {
		if s.Parent != "" {
			continue
		}
		n := len(s.Turns)
		turns = append(turns, n)
		if n >= 20 && n <= 60 {
			inRange++
		}
		for _, tn := range s.Turns[1:] {
			gap += tn.Delay
			gaps++
		}
	}
	for _, s := range d.Sessions {
		for _, tn := range s.Turns[1:] {
			defGap += tn.Delay
			defGaps++
		}
	}
	sort.Ints(turns)
	if med := turns[len(turns)/2]; med < 28 || med > 44 {
		t.Fatalf("median turns %d, want about 36", med)
	}
	if inRange < len(turns)*85/100 {
		t.Fatalf("%d of %d programs have 20–60 turns", inRange, len(turns))
	}
	if gaps == 0 || gap/time.Duration(gaps) < 10*time.Second {
		t.Fatalf("mean tool gap %v, want long gaps", gap/time.Duration(max(gaps, 1)))
	}
	t.Logf("median turns %d; mean gap %v (default workload: %v, with user turns)", turns[len(turns)/2],
		gap/time.Duration(gaps), defGap/time.Duration(max(defGaps, 1)))
}
