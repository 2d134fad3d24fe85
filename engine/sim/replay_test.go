package sim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/trace"
)

func engines(t testing.TB, n int, cfg Config, sink func(i int) EventSink) []*Engine {
	t.Helper()
	out := make([]*Engine, n)
	for i := range out {
		c := cfg
		c.Worker = flashindex.Worker{ID: uint64(i)}
		var s EventSink
		if sink != nil {
			s = sink(i)
		}
		e, err := New(c, s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = e
	}
	return out
}

func run(t testing.TB, w *trace.Workload, es []*Engine, r Router, cfg ReplayConfig) (*Result, []*Request) {
	t.Helper()
	rp, err := NewReplay(w, es, r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := rp.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res, rp.Requests()
}

func ids(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// find returns the request of session s, turn k.
func find(t *testing.T, reqs []*Request, s string, k int) *Request {
	t.Helper()
	for _, r := range reqs {
		if r.Session == s && r.Turn == k {
			return r
		}
	}
	t.Fatalf("no request for %s turn %d", s, k)
	return nil
}

func TestClosedLoopSession(t *testing.T) {
	w := &trace.Workload{BlockTokens: 64, Sessions: []trace.Session{{
		ID: "s", ParentTurn: -1, Start: 500 * time.Millisecond,
		Turns: []trace.Turn{
			{Delay: time.Second, InputTokens: 128, OutputTokens: 4, HashIDs: ids(1, 2)},
			{Delay: 2 * time.Second, InputTokens: 192, OutputTokens: 4, HashIDs: ids(1, 3)},
			{InputTokens: 250, OutputTokens: 4, HashIDs: ids(1, 4)},
		},
	}}}
	res, reqs := run(t, w, engines(t, 1, Config{}, nil), &rrRouter{n: 1}, ReplayConfig{})
	r0, r1, r2 := reqs[0], reqs[1], reqs[2]
	if r0.Arrival != 1500*time.Millisecond || r1.Arrival != r0.Finished+2*time.Second || r2.Arrival != r1.Finished {
		t.Fatalf("arrivals %v %v %v, finishes %v %v", r0.Arrival, r1.Arrival, r2.Arrival, r0.Finished, r1.Finished)
	}
	// Each turn finds the previous turn's prompt: 8 then 12 blocks of 16.
	if r0.CachedTokens != 0 || r1.CachedTokens != 128 || r2.CachedTokens != 192 {
		t.Fatalf("cached %d %d %d", r0.CachedTokens, r1.CachedTokens, r2.CachedTokens)
	}
	if res.Finished != 3 || res.Makespan != r2.Finished || res.RePrefillTokens != 0 || res.PromptTokens != 570 || res.OutputTokens != 12 {
		t.Fatalf("result %+v", res)
	}
	if want := float64(320) / 570; res.HitRate != want {
		t.Fatalf("hit rate %v, want %v", res.HitRate, want)
	}
}

func TestSubagentsWaitFor(t *testing.T) {
	w := &trace.Workload{BlockTokens: 64, Sessions: []trace.Session{
		{ID: "p", ParentTurn: -1, Turns: []trace.Turn{
			{InputTokens: 640, OutputTokens: 8, HashIDs: ids(1, 10)},
			{Delay: 3 * time.Second, InputTokens: 800, OutputTokens: 8, HashIDs: ids(1, 13), WaitFor: []string{"a", "b"}},
		}},
		{ID: "a", Parent: "p", ParentTurn: 0, Start: time.Second, Turns: []trace.Turn{
			{InputTokens: 1000, OutputTokens: 200, HashIDs: append(ids(1, 5), ids(100, 110)...)},
			{Delay: 500 * time.Millisecond, InputTokens: 1200, OutputTokens: 50, HashIDs: append(ids(1, 5), ids(100, 113)...)},
		}},
		{ID: "b", Parent: "p", ParentTurn: 0, Start: 2 * time.Second, Turns: []trace.Turn{
			{InputTokens: 3000, OutputTokens: 300, HashIDs: append(ids(1, 5), ids(200, 242)...)},
		}},
	}}
	res, reqs := run(t, w, engines(t, 2, Config{}, nil), &rrRouter{n: 2}, ReplayConfig{})
	p0, p1 := find(t, reqs, "p", 0), find(t, reqs, "p", 1)
	a0, a1, b0 := find(t, reqs, "a", 0), find(t, reqs, "a", 1), find(t, reqs, "b", 0)
	if a0.Arrival != p0.Finished+time.Second || b0.Arrival != p0.Finished+2*time.Second {
		t.Fatalf("children arrive at %v and %v after the parent turn ends at %v", a0.Arrival, b0.Arrival, p0.Finished)
	}
	if a1.Arrival != a0.Finished+500*time.Millisecond {
		t.Fatalf("a1 at %v, want %v", a1.Arrival, a0.Finished+500*time.Millisecond)
	}
	last := max(a1.Finished, b0.Finished)
	if p1.Arrival != last+3*time.Second {
		t.Fatalf("p1 at %v, want 3 s after its last child (%v)", p1.Arrival, last)
	}
	// The two subagents ran in parallel on the two workers.
	if a0.Worker == b0.Worker || b0.Arrival >= a1.Finished || a0.Arrival >= b0.Finished {
		t.Fatalf("subagents did not overlap: a %v-%v on %d, b %v-%v on %d", a0.Arrival, a1.Finished, a0.Worker, b0.Arrival, b0.Finished, b0.Worker)
	}
	if res.Finished != 5 || a0.Root != "p" || a0.Parent != "p" {
		t.Fatalf("finished %d, root %q parent %q", res.Finished, a0.Root, a0.Parent)
	}
}

func TestOpenLoopFollowsArrivals(t *testing.T) {
	w := &trace.Workload{BlockTokens: 512, OpenLoop: true}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		s := trace.Session{ID: fmt.Sprint(i), ParentTurn: -1}
		for k := range 3 {
			s.Turns = append(s.Turns, trace.Turn{
				Arrival:     time.Duration(rng.IntN(10_000)) * time.Millisecond,
				InputTokens: 1 + rng.IntN(5000), OutputTokens: rng.IntN(100),
				HashIDs: ids(0, uint64(k)),
			})
			s.Turns[k].HashIDs = s.Turns[k].HashIDs[:min(len(s.Turns[k].HashIDs), (s.Turns[k].InputTokens+511)/512)]
		}
		w.Sessions = append(w.Sessions, s)
	}
	res, reqs := run(t, w, engines(t, 2, Config{DeviceBlocks: 2000}, nil), &rrRouter{n: 2}, ReplayConfig{})
	if res.Finished != 60 || len(reqs) != 60 {
		t.Fatalf("finished %d of %d", res.Finished, len(reqs))
	}
	for _, r := range reqs {
		var s trace.Session
		for _, x := range w.Sessions {
			if x.ID == r.Session {
				s = x
			}
		}
		if want := s.Turns[r.Turn].Arrival; r.Arrival != want {
			t.Fatalf("request %d arrived at %v, want %v", r.ID, r.Arrival, want)
		}
		if r.Finished < r.FirstToken || r.FirstToken <= r.Arrival {
			t.Fatalf("request %d: arrival %v first token %v finished %v", r.ID, r.Arrival, r.FirstToken, r.Finished)
		}
	}
	if !slices.IsSortedFunc(reqs, func(a, b *Request) int { return int(a.Arrival - b.Arrival) }) {
		t.Fatal("requests are not numbered in arrival order")
	}
}

// holdRouter holds every request of one session until the next tick.
type holdRouter struct {
	rrRouter
	session string
	held    []uint64
	ticks   []time.Duration
}

func (h *holdRouter) Route(now time.Duration, r *Request) (Decision, error) {
	if r.Session == h.session && !slices.Contains(h.ticks, now) {
		h.held = append(h.held, r.ID)
		return Decision{Hold: true}, nil
	}
	return h.rrRouter.Route(now, r)
}

func (h *holdRouter) Tick(now time.Duration) []uint64 {
	h.ticks = append(h.ticks, now)
	out := h.held
	h.held = nil
	return out
}

func TestHoldAndRelease(t *testing.T) {
	w := &trace.Workload{BlockTokens: 64, Sessions: []trace.Session{
		{ID: "a", ParentTurn: -1, Turns: []trace.Turn{{Delay: 200 * time.Millisecond, InputTokens: 100, OutputTokens: 2}}},
		{ID: "b", ParentTurn: -1, Turns: []trace.Turn{
			{Delay: 200 * time.Millisecond, InputTokens: 100, OutputTokens: 2},
			{Delay: 100 * time.Millisecond, InputTokens: 200, OutputTokens: 2},
		}},
	}}
	res, reqs := run(t, w, engines(t, 1, Config{}, nil), &holdRouter{rrRouter: rrRouter{n: 1}, session: "b"}, ReplayConfig{TickInterval: time.Second})
	a, b0, b1 := find(t, reqs, "a", 0), find(t, reqs, "b", 0), find(t, reqs, "b", 1)
	if a.Held != 0 || a.Dispatched != 200*time.Millisecond {
		t.Fatalf("a held %v dispatched %v", a.Held, a.Dispatched)
	}
	if b0.Dispatched != time.Second || b0.Held != 800*time.Millisecond {
		t.Fatalf("b0 dispatched %v held %v", b0.Dispatched, b0.Held)
	}
	if b1.Arrival != b0.Finished+100*time.Millisecond || b1.Dispatched != 2*time.Second {
		t.Fatalf("b1 arrived %v dispatched %v", b1.Arrival, b1.Dispatched)
	}
	if res.Pauses != 2 || res.Resumes != 2 || res.HeldTime != b0.Held+b1.Held {
		t.Fatalf("pauses %d resumes %d held %v", res.Pauses, res.Resumes, res.HeldTime)
	}
	if b0.FirstToken-b0.Arrival < time.Second-200*time.Millisecond {
		t.Fatalf("TTFT must include the hold: %v", b0.FirstToken-b0.Arrival)
	}
}

type holdAll struct{ rrRouter }

func (holdAll) Route(time.Duration, *Request) (Decision, error) { return Decision{Hold: true}, nil }

func TestStalledRouter(t *testing.T) {
	w := &trace.Workload{BlockTokens: 64, Sessions: []trace.Session{
		{ID: "a", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 100, OutputTokens: 2}}},
	}}
	for _, tick := range []time.Duration{time.Second, -1} {
		rp, err := NewReplay(w, engines(t, 1, Config{}, nil), &holdAll{}, ReplayConfig{TickInterval: tick, StallTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rp.Run(); !errors.Is(err, ErrStalled) {
			t.Fatalf("tick %v: Run = %v, want ErrStalled", tick, err)
		}
	}
}

func TestMaxActiveSessions(t *testing.T) {
	w := &trace.Workload{BlockTokens: 64}
	for i := range 3 {
		w.Sessions = append(w.Sessions, trace.Session{ID: fmt.Sprint(i), ParentTurn: -1, Turns: []trace.Turn{
			{Delay: 10 * time.Millisecond, InputTokens: 500, OutputTokens: 20},
			{Delay: 10 * time.Millisecond, InputTokens: 600, OutputTokens: 20},
		}})
	}
	w.Sessions = append(w.Sessions, trace.Session{ID: "child", Parent: "0", ParentTurn: 0, Start: time.Hour, Turns: []trace.Turn{{InputTokens: 100, OutputTokens: 1}}})
	_, reqs := run(t, w, engines(t, 2, Config{}, nil), &rrRouter{n: 2}, ReplayConfig{MaxActiveSessions: 1})
	// Program 0 lasts until its subagent finishes, an hour later.
	child := find(t, reqs, "child", 0)
	if s1 := find(t, reqs, "1", 0); s1.Arrival != child.Finished+10*time.Millisecond {
		t.Fatalf("program 1 starts at %v, want after program 0 and its subagent (%v)", s1.Arrival, child.Finished)
	}
	if s2, s1 := find(t, reqs, "2", 0), find(t, reqs, "1", 1); s2.Arrival != s1.Finished+10*time.Millisecond {
		t.Fatalf("program 2 starts at %v, want after program 1 (%v)", s2.Arrival, s1.Finished)
	}
}

func TestRePrefillTokens(t *testing.T) {
	w := &trace.Workload{BlockTokens: 16, Sessions: []trace.Session{
		{ID: "s", ParentTurn: -1, Turns: []trace.Turn{
			{InputTokens: 64, OutputTokens: 1, HashIDs: ids(1, 4)},
			{Delay: 10 * time.Second, InputTokens: 80, OutputTokens: 1, HashIDs: ids(1, 5)},
		}},
		{ID: "x", ParentTurn: -1, Start: 5 * time.Second, Turns: []trace.Turn{
			{InputTokens: 128, OutputTokens: 1, HashIDs: ids(100, 107)},
		}},
		{ID: "y", ParentTurn: -1, Turns: []trace.Turn{
			{InputTokens: 32, OutputTokens: 1, HashIDs: ids(50, 51)},
			{Delay: time.Second, InputTokens: 48, OutputTokens: 1, HashIDs: ids(50, 52)},
		}},
	}}
	// 8 device blocks: x's 8 blocks evict all of s's; y's second turn (1 s
	// later, long before x) still finds its first.
	res, reqs := run(t, w, engines(t, 1, Config{DeviceBlocks: 8}, nil), &rrRouter{n: 1}, ReplayConfig{})
	if s1 := find(t, reqs, "s", 1); s1.CachedTokens != 0 {
		t.Fatalf("s1 cached %d", s1.CachedTokens)
	}
	if y1 := find(t, reqs, "y", 1); y1.CachedTokens != 32 {
		t.Fatalf("y1 cached %d", y1.CachedTokens)
	}
	if res.RePrefillTokens != 64 {
		t.Fatalf("re-prefill %d tokens, want 64 (s's whole previous prompt)", res.RePrefillTokens)
	}
}

func TestWorkloadErrors(t *testing.T) {
	turn := trace.Turn{InputTokens: 64, OutputTokens: 1}
	cases := []struct {
		name string
		w    trace.Workload
		want any
	}{
		{"unknown parent", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", Parent: "z", Turns: []trace.Turn{turn}}}}, &WorkloadError{}},
		{"parent turn out of range", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{
			{ID: "p", ParentTurn: -1, Turns: []trace.Turn{turn}}, {ID: "c", Parent: "p", ParentTurn: 1, Turns: []trace.Turn{turn}}}}, &WorkloadError{}},
		{"unknown wait", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 1, WaitFor: []string{"q"}}}}}}, &WorkloadError{}},
		{"empty prompt", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", ParentTurn: -1, Turns: []trace.Turn{{}}}}}, &WorkloadError{}},
		{"duplicate id", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", ParentTurn: -1}, {ID: "a", ParentTurn: -1}}}, &WorkloadError{}},
		{"parent cycle", trace.Workload{BlockTokens: 16, Sessions: []trace.Session{
			{ID: "a", Parent: "b", ParentTurn: -1}, {ID: "b", Parent: "a", ParentTurn: -1}}}, &WorkloadError{}},
		{"block sizes", trace.Workload{BlockTokens: 40, Sessions: []trace.Session{{ID: "a", ParentTurn: -1, Turns: []trace.Turn{{InputTokens: 64, HashIDs: []uint64{1, 2}}}}}}, ErrBlockSize},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReplay(&c.w, engines(t, 1, Config{}, nil), &rrRouter{n: 1}, ReplayConfig{})
			switch want := c.want.(type) {
			case *WorkloadError:
				var we *WorkloadError
				if !errors.As(err, &we) {
					t.Fatalf("err = %v, want a WorkloadError", err)
				}
			case error:
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
		})
	}
	// A decision naming a worker that does not exist.
	w := &trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", ParentTurn: -1, Turns: []trace.Turn{turn}}}}
	rp, err := NewReplay(w, engines(t, 1, Config{}, nil), &rrRouter{n: 3, next: 2}, ReplayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.Run(); !errors.Is(err, ErrDecision) {
		t.Fatalf("Run = %v, want ErrDecision", err)
	}
	if _, err := rp.Run(); !errors.Is(err, ErrConfig) {
		t.Fatalf("second Run = %v, want ErrConfig", err)
	}
	// Engines of different block sizes.
	es := append(engines(t, 1, Config{}, nil), engines(t, 1, Config{BlockSize: 32}, nil)...)
	if _, err := NewReplay(w, es, &rrRouter{n: 2}, ReplayConfig{}); !errors.Is(err, ErrBlockSize) {
		t.Fatalf("mixed block sizes: %v", err)
	}
}

func TestRejectedRequestFinishesSession(t *testing.T) {
	w := &trace.Workload{BlockTokens: 16, Sessions: []trace.Session{{ID: "a", ParentTurn: -1, Turns: []trace.Turn{
		{InputTokens: 10_000, OutputTokens: 1}, {Delay: time.Second, InputTokens: 64, OutputTokens: 1},
	}}}}
	res, reqs := run(t, w, engines(t, 1, Config{DeviceBlocks: 100}, nil), &rrRouter{n: 1}, ReplayConfig{})
	if res.Rejected != 1 || res.Finished != 1 || !reqs[0].Rejected || reqs[1].Arrival != time.Second {
		t.Fatalf("rejected %d finished %d, second turn at %v", res.Rejected, res.Finished, reqs[1].Arrival)
	}
}

// genAgentic builds a random closed-loop agentic workload: programs share a
// system prompt, each turn extends its session's context, some turns spawn
// subagents the next turn waits for.
func genAgentic(seed uint64, programs int) *trace.Workload {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &trace.Workload{Name: fmt.Sprintf("gen-%d", seed), BlockTokens: 64}
	next := uint64(1000)
	fresh := func(n int) []uint64 {
		out := make([]uint64, n)
		for i := range out {
			out[i] = next
			next++
		}
		return out
	}
	system := ids(1, 20)
	for p := range programs {
		root := trace.Session{ID: fmt.Sprintf("p%d", p), ParentTurn: -1, Start: time.Duration(rng.IntN(20_000)) * time.Millisecond}
		ctx := slices.Clone(system)
		turns := 2 + rng.IntN(5)
		var kids []trace.Session
		for k := range turns {
			ctx = append(ctx, fresh(1+rng.IntN(8))...)
			in := len(ctx)*64 - rng.IntN(64)
			tr := trace.Turn{Delay: time.Duration(rng.IntN(3000)) * time.Millisecond, InputTokens: in, OutputTokens: 1 + rng.IntN(300), HashIDs: slices.Clone(ctx)}
			if k > 0 && len(kids) > 0 && kids[len(kids)-1].ParentTurn == k-1 {
				tr.WaitFor = []string{kids[len(kids)-1].ID}
			}
			root.Turns = append(root.Turns, tr)
			if k < turns-1 && rng.IntN(3) == 0 {
				kid := trace.Session{ID: fmt.Sprintf("p%d.%d", p, k), Parent: root.ID, ParentTurn: k, Start: time.Duration(rng.IntN(500)) * time.Millisecond}
				kctx := slices.Clone(system)
				for range 1 + rng.IntN(3) {
					kctx = append(kctx, fresh(1+rng.IntN(10))...)
					kid.Turns = append(kid.Turns, trace.Turn{Delay: time.Duration(rng.IntN(1000)) * time.Millisecond, InputTokens: len(kctx) * 64, OutputTokens: 1 + rng.IntN(100), HashIDs: slices.Clone(kctx)})
				}
				kids = append(kids, kid)
			}
		}
		w.Sessions = append(w.Sessions, root)
		w.Sessions = append(w.Sessions, kids...)
	}
	return w
}

// tee feeds one event to several sinks.
type tee []EventSink

func (t tee) Apply(ev *flashindex.Event) error {
	for _, s := range t {
		if err := s.Apply(ev); err != nil {
			return err
		}
	}
	return nil
}

func TestDeterminism(t *testing.T) {
	once := func(seed uint64) (*Result, []Request, []flashindex.Event) {
		w := genAgentic(seed, 30)
		p := newPrefixRouter(3, 16)
		rec := &recorder{}
		es := engines(t, 3, Config{DeviceBlocks: 350, HostBlocks: 300, MaxBatchedTokens: 2048}, func(i int) EventSink { return tee{p.sink(i), rec} })
		res, reqs := run(t, w, es, p, ReplayConfig{})
		var flat []Request
		for _, r := range reqs {
			flat = append(flat, *r)
		}
		return res, flat, rec.evs
	}
	r1, q1, e1 := once(7)
	r2, q2, e2 := once(7)
	if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(q1, q2) || !reflect.DeepEqual(e1, e2) {
		t.Fatal("same seed, different runs")
	}
	if r1.Preemptions == 0 || r1.HostCachedTokens == 0 || r1.CachedTokens == 0 || r1.Workers[0].Evictions == 0 {
		t.Fatalf("the determinism workload should exercise preemption, eviction and the host tier: %+v", r1)
	}
	r3, _, _ := once(8)
	if reflect.DeepEqual(r1, r3) {
		t.Fatal("different seeds gave identical results")
	}
}

// TestEventStreamMatchesCache replays every engine's event stream into a
// naive index and compares it with the engine's cache after every run, on
// random agentic workloads with small pools (evictions, host tier,
// preemptions).
func TestEventStreamMatchesCache(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		w := genAgentic(seed, 20)
		cfg := Config{DeviceBlocks: 300 + int(seed)*50, HostBlocks: int(seed%3) * 200, MaxBatchedTokens: 512 << (seed % 3), MaxBatch: 4 + int(seed)}
		idx := make([]*naiveIndex, 2)
		es := engines(t, 2, cfg, func(i int) EventSink { idx[i] = newNaiveIndex(t); return idx[i] })
		res, _ := run(t, w, es, &rrRouter{n: 2}, ReplayConfig{})
		for i, e := range es {
			for _, tier := range []flashindex.Tier{flashindex.Device, flashindex.Host} {
				if got, want := e.Cached(tier), idx[i].hashes(tier); !slices.Equal(got, want) {
					t.Fatalf("seed %d worker %d %v: engine has %d blocks, events say %d", seed, i, tier, len(got), len(want))
				}
			}
		}
		if res.Finished != res.Requests {
			t.Fatalf("seed %d: %d of %d finished", seed, res.Finished, res.Requests)
		}
	}
}
