package agentkv

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

const testBS = 4

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func worker(id uint64, capTokens int) Worker {
	return WorkerFunc(func() WorkerInfo {
		return WorkerInfo{ID: id, BlockSize: testBS, KVCapacityTokens: capTokens}
	})
}

func newTestRouter(t *testing.T, cfg Config, workers ...uint64) (*Router, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	cfg.BlockSize = testBS
	cfg.Now = clk.Now
	r, err := New(cfg)
	require.NoError(t, err)
	for _, id := range workers {
		require.NoError(t, r.AddWorker(worker(id, 1<<20)))
	}
	return r, clk
}

func tokens(n int, salt uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = salt*1_000_003 + uint32(i)
	}
	return t
}

// store publishes a Stored event putting tokens' full blocks on w's tier.
func store(t *testing.T, r *Router, w uint64, tier flashindex.Tier, toks []uint32, id uint64) {
	t.Helper()
	ev := &flashindex.Event{Worker: flashindex.Worker{ID: w}, EventID: id, Kind: flashindex.Stored, Tier: tier, BlockSize: testBS}
	h, err := flashindex.NewHasher(testBS, "")
	require.NoError(t, err)
	_, seq := h.AppendHashes(nil, nil, toks, 0, false)
	for i := range seq {
		// An engine hash of its own: opaque, but content-determined.
		ev.Blocks = append(ev.Blocks, flashindex.StoredBlock{EngineHash: ^seq[i], Tokens: toks[i*testBS : (i+1)*testBS]})
	}
	require.NoError(t, r.ApplyEvent(ev))
}

func TestRouteToLongestPrefix(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2, 3)
	prompt := tokens(64, 7)
	store(t, r, 1, flashindex.Device, prompt[:16], 1)
	store(t, r, 2, flashindex.Device, prompt[:40], 1)
	d, err := r.TryRoute(&Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, uint64(2), d.Worker.ID)
	require.Equal(t, 40, d.Cached.Device)
	require.Equal(t, 3, d.Candidates)
	require.InDelta(t, 64.0/testBS-10, d.Cost.Logit, 1e-9)
	d.Done(Usage{PromptTokens: 64, CompletionTokens: 3})
}

func TestHostTierCreditedAtThreeQuarters(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2)
	prompt := tokens(64, 3)
	// Worker 1: 8 blocks on host. Worker 2: 5 blocks on device.
	// Credits 6 vs 5: worker 1 wins.
	store(t, r, 1, flashindex.Host, prompt[:32], 1)
	store(t, r, 2, flashindex.Device, prompt[:20], 1)
	d, err := r.TryRoute(&Request{Tokens: prompt})
	require.NoError(t, err)
	require.Equal(t, uint64(1), d.Worker.ID)
	require.Equal(t, 32, d.Cached.Host)
	require.Equal(t, 0, d.Cached.Device)
}

// TestKVAwareMatchesNaiveReference routes random prompts against random
// cache contents and load, and checks the chosen worker's cost is the
// minimum computed by a brute-force reference from the raw residency sets.
func TestKVAwareMatchesNaiveReference(t *testing.T) {
	for seed := uint64(0); seed < 30; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		r, _ := newTestRouter(t, Config{Seed: seed}, 1, 2, 3, 4)
		// A few shared prefixes; each worker holds a random prefix of some.
		prefixes := [][]uint32{tokens(80, 1), tokens(80, 2), tokens(80, 3)}
		held := storeRandomPrefixes(t, r, rng, prefixes)
		// Load: some in-flight requests on random workers.
		var live []*Decision
		for i := 0; i < rng.IntN(6); i++ {
			d, err := r.TryRoute(&Request{Tokens: tokens(4*(1+rng.IntN(20)), uint32(100+i)), Override: &Override{AllowedWorkers: []uint64{uint64(1 + rng.IntN(4))}}})
			require.NoError(t, err)
			live = append(live, d)
		}
		p := rng.IntN(len(prefixes))
		prompt := prefixes[p][:4*(1+rng.IntN(20))]
		loads := map[uint64]Load{}
		for w := uint64(1); w <= 4; w++ {
			loads[w] = r.WorkerLoad(flashindex.Worker{ID: w})
		}
		d, err := r.TryRoute(&Request{Tokens: prompt})
		require.NoError(t, err)

		best := -1.0
		for w := uint64(1); w <= 4; w++ {
			dev, host, disk := naiveTierDepths(held[w], p, len(prompt)/testBS)
			l := loads[w]
			logit := max(0, float64(l.PrefillTokens+len(prompt))/testBS-(float64(dev)+0.75*float64(host)+0.25*float64(disk))) + float64(l.DecodeBlocks)
			if w == d.Worker.ID {
				require.InDelta(t, logit, d.Cost.Logit, 1e-9, "seed %d: chosen worker's cost", seed)
			}
			if best < 0 || logit < best {
				best = logit
			}
		}
		require.InDelta(t, best, d.Cost.Logit, 1e-9, "seed %d: router did not pick a cheapest worker", seed)
		for _, x := range live {
			x.Done(Usage{})
		}
		d.Done(Usage{})
	}
}

// storeRandomPrefixes stores on each of workers 1 to 4, on each tier, a
// random prefix (a multiple of the block size, possibly none) of some of
// prefixes, and returns the lengths held: worker -> tier -> per prefix.
func storeRandomPrefixes(t *testing.T, r *Router, rng *rand.Rand, prefixes [][]uint32) map[uint64]map[flashindex.Tier][]int {
	held := map[uint64]map[flashindex.Tier][]int{}
	evID := map[uint64]uint64{}
	for w := uint64(1); w <= 4; w++ {
		held[w] = map[flashindex.Tier][]int{}
		for tier := flashindex.Device; tier <= flashindex.Disk; tier++ {
			held[w][tier] = make([]int, len(prefixes))
			for p := range prefixes {
				if rng.IntN(2) == 0 {
					continue
				}
				n := rng.IntN(21) * testBS
				held[w][tier][p] = n
				if n > 0 {
					evID[w]++
					store(t, r, w, tier, prefixes[p][:n], evID[w])
				}
			}
		}
	}
	return held
}

// naiveTierDepths walks the first blocks of prefix p block by block over a
// worker's held lengths (tier -> per prefix) and returns its exclusive
// device, host and disk depths.
func naiveTierDepths(held map[flashindex.Tier][]int, p, blocks int) (dev, host, disk int) {
	tier := flashindex.Device
	for b := 0; b < blocks; b++ {
		for tier <= flashindex.Disk && held[tier][p] <= b*testBS {
			tier++
		}
		switch tier {
		case flashindex.Device:
			dev++
		case flashindex.Host:
			host++
		case flashindex.Disk:
			disk++
		default:
			return dev, host, disk
		}
	}
	return dev, host, disk
}

func TestLoadTrackingAndSweep(t *testing.T) {
	r, clk := newTestRouter(t, Config{RequestTTL: time.Minute}, 1)
	w := flashindex.Worker{ID: 1}
	d1, err := r.TryRoute(&Request{Tokens: tokens(40, 1), ExpectedOutputTokens: 8})
	require.NoError(t, err)
	d2, err := r.TryRoute(&Request{Tokens: tokens(16, 2)})
	require.NoError(t, err)
	require.Equal(t, Load{PrefillTokens: 56, DecodeBlocks: 12 + 4, Requests: 2}, r.WorkerLoad(w))
	d1.FirstToken()
	require.Equal(t, Load{PrefillTokens: 16, DecodeBlocks: 16, Requests: 2}, r.WorkerLoad(w))

	// d1 keeps streaming; d2 goes silent. After the TTL only d2 is swept.
	for i := 0; i < 3; i++ {
		clk.Advance(40 * time.Second)
		d1.Progress()
		r.Tick()
	}
	require.Equal(t, Load{PrefillTokens: 0, DecodeBlocks: 12, Requests: 1}, r.WorkerLoad(w))
	d1.Done(Usage{})
	d1.Done(Usage{}) // idempotent
	require.Equal(t, Load{}, r.WorkerLoad(w))
	d2.Done(Usage{}) // already swept: harmless
	require.Equal(t, Load{}, r.WorkerLoad(w))
}

func TestBlockSizeMismatchIsLoud(t *testing.T) {
	r, _ := newTestRouter(t, Config{})
	err := r.AddWorker(WorkerFunc(func() WorkerInfo { return WorkerInfo{ID: 9, BlockSize: 16, KVCapacityTokens: 100} }))
	var bm *BlockSizeMismatchError
	require.ErrorAs(t, err, &bm)
	require.Equal(t, 16, bm.Engine)
	require.Empty(t, r.Workers())
}

func TestDPRanksAreSeparateCandidates(t *testing.T) {
	r, _ := newTestRouter(t, Config{Policy: RoundRobin})
	require.NoError(t, r.AddWorker(WorkerFunc(func() WorkerInfo {
		return WorkerInfo{ID: 5, DPRanks: 3, BlockSize: testBS, KVCapacityTokens: 1000}
	})))
	seen := map[flashindex.Worker]int{}
	for i := 0; i < 6; i++ {
		d, err := r.TryRoute(&Request{Tokens: tokens(8, 1)})
		require.NoError(t, err)
		seen[d.Worker]++
	}
	require.Len(t, seen, 3)
	for _, n := range seen {
		require.Equal(t, 2, n)
	}
	r.RemoveWorker(5)
	_, err := r.TryRoute(&Request{Tokens: tokens(8, 1)})
	require.ErrorIs(t, err, ErrNoWorkers)
}

func TestAffinity(t *testing.T) {
	for _, mode := range []AffinityMode{AffinitySoft, AffinityHard} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			r, clk := newTestRouter(t, Config{Affinity: mode, AffinityTTL: time.Minute, Index: IndexExact}, 1, 2)
			ac := session.AgentContext{SessionID: "s1"}
			d, err := r.TryRoute(&Request{Tokens: tokens(8, 1), Agent: ac})
			require.NoError(t, err)
			first := d.Worker.ID
			d.Done(Usage{})
			// The other worker now holds the session's whole prompt, but the
			// binding wins.
			other := 3 - first
			store(t, r, other, flashindex.Device, tokens(64, 1), 1)
			d, err = r.TryRoute(&Request{Tokens: tokens(64, 1), Agent: ac})
			require.NoError(t, err)
			require.Equal(t, first, d.Worker.ID)
			require.True(t, d.Affinity)
			d.Done(Usage{})
			// After the TTL the cache decides again.
			clk.Advance(2 * time.Minute)
			d, err = r.TryRoute(&Request{Tokens: tokens(64, 1), Agent: ac})
			require.NoError(t, err)
			require.Equal(t, other, d.Worker.ID)
			require.False(t, d.Affinity)
		})
	}
}

func TestAllowedWorkersOverride(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2, 3)
	store(t, r, 1, flashindex.Device, tokens(32, 1), 1)
	d, err := r.TryRoute(&Request{Tokens: tokens(32, 1), Override: &Override{AllowedWorkers: []uint64{3}}})
	require.NoError(t, err)
	require.Equal(t, uint64(3), d.Worker.ID)
	_, err = r.TryRoute(&Request{Tokens: tokens(32, 1), Override: &Override{AllowedWorkers: []uint64{42}}})
	require.ErrorIs(t, err, ErrNoWorkers)
}

func TestBusyThreshold(t *testing.T) {
	r, _ := newTestRouter(t, Config{BusyThreshold: 0.5})
	require.NoError(t, r.AddWorker(worker(1, 40)))
	require.NoError(t, r.AddWorker(worker(2, 40)))
	store(t, r, 1, flashindex.Device, tokens(32, 1), 1)
	// Worker 1 holds the prefix, but once its decode load passes half its
	// capacity (5 of 10 blocks) it is skipped.
	d, err := r.TryRoute(&Request{Tokens: tokens(32, 1)})
	require.NoError(t, err)
	require.Equal(t, uint64(1), d.Worker.ID) // 8 blocks now in flight there
	d2, err := r.TryRoute(&Request{Tokens: tokens(32, 1)})
	require.NoError(t, err)
	require.Equal(t, uint64(2), d2.Worker.ID)
}

// TestAdmissionHoldAndRelease drives program-aware admission through
// TryRoute: a program on a full worker is paused at its tool boundary, its
// next turn is held, and it is released once room frees up.
func TestAdmissionHoldAndRelease(t *testing.T) {
	var released []string
	var relMu sync.Mutex
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{},
		OnRelease: func(id string, err error) {
			require.NoError(t, err)
			relMu.Lock()
			released = append(released, id)
			relMu.Unlock()
		}})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))

	// Two programs of 600 tokens each: the second does not fit under the
	// 0.85 resume ceiling and is queued.
	a := session.AgentContext{SessionID: "a"}
	b := session.AgentContext{SessionID: "b"}
	da, err := r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: a})
	require.NoError(t, err)
	require.True(t, da.Admission.Run)
	_, err = r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: b})
	require.ErrorIs(t, err, ErrHeld)
	_, err = r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: b})
	require.ErrorIs(t, err, ErrHeld, "retrying before release stays held")

	// a finishes its turn (now acting, a tool call) and then its session.
	clk.Advance(time.Second)
	da.Done(Usage{PromptTokens: 600, CompletionTokens: 10})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	res := r.Tick()
	require.Equal(t, []string{"b1"}, res.Released)
	relMu.Lock()
	require.Equal(t, []string{"b1"}, released)
	relMu.Unlock()
	db, err := r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: b})
	require.NoError(t, err)
	require.True(t, db.Admission.Run)
	require.Equal(t, 6*time.Second, db.Waited)
	db.Done(Usage{PromptTokens: 600, CompletionTokens: 5})
	st := r.AdmissionStats()
	require.EqualValues(t, 1, st.Queued)
	require.EqualValues(t, 1, st.Resumed)
}

func TestRouteBlocksAndHonoursContext(t *testing.T) {
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	da, err := r.Route(context.Background(), &Request{ID: "a1", Tokens: tokens(600, 1), Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)

	// A blocked Route returns ctx.Err() and leaves no trace.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Route(ctx, &Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
		errc <- err
	}()
	waitHeld(t, r, "b1")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	r.mu.Lock()
	require.Empty(t, r.held)
	require.Equal(t, 0, r.adm.Waiting())
	r.mu.Unlock()

	// A blocked Route returns once a tick releases it.
	done := make(chan *Decision, 1)
	go func() {
		d, err := r.Route(context.Background(), &Request{ID: "b2", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
		if err != nil {
			t.Error(err)
		}
		done <- d
	}()
	waitHeld(t, r, "b2")
	da.Done(Usage{PromptTokens: 600})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	r.Tick()
	d := <-done
	require.NotNil(t, d)
	require.Equal(t, uint64(1), d.Worker.ID)
}

func waitHeld(t *testing.T, r *Router, id string) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		r.mu.Lock()
		_, ok := r.held[id]
		r.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(100 * time.Microsecond) // waiting for another goroutine, not for time to pass
	}
	t.Fatalf("request %s never held", id)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	r, _ := newTestRouter(t, Config{Metrics: m}, 1)
	store(t, r, 1, flashindex.Device, tokens(16, 1), 1)
	require.Error(t, r.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 2, Kind: flashindex.Stored,
		HasParent: true, Parent: 999, Blocks: []flashindex.StoredBlock{{EngineHash: 5, Tokens: tokens(4, 9)}}}))
	d, err := r.TryRoute(&Request{Tokens: tokens(32, 1)})
	require.NoError(t, err)
	d.Done(Usage{})
	require.Equal(t, 1.0, testutil.ToFloat64(m.events.WithLabelValues("1/0", "applied")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.events.WithLabelValues("1/0", "unknown_parent")))
	require.Equal(t, 16.0, testutil.ToFloat64(m.cachedTokens.WithLabelValues("device")))
	require.Equal(t, 32.0, testutil.ToFloat64(m.promptTokens))
	require.Equal(t, 1.0, testutil.ToFloat64(m.finished.WithLabelValues("ok")))
	n, err := testutil.GatherAndCount(reg, "agentkv_router_overhead_seconds")
	require.NoError(t, err)
	require.Equal(t, 4, n)
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{BlockSize: -1},
		{BlockSize: 16, Policy: 99},
		{BlockSize: 16, Cost: CostConfig{Temperature: -1}},
		{BlockSize: 16, BusyThreshold: -0.5},
		{BlockSize: 16, Admission: &admission.Config{OnDecision: func(admission.Decision) {}}},
		{BlockSize: 16, Admission: &admission.Config{PauseThreshold: -1}},
	} {
		_, err := New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// TestConcurrentRouting runs routing, completions, events and ticks from
// many goroutines; run it with -race.
func TestConcurrentRouting(t *testing.T) {
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}, Affinity: AffinitySoft})
	require.NoError(t, err)
	for w := uint64(1); w <= 4; w++ {
		require.NoError(t, r.AddWorker(worker(w, 1<<16)))
	}
	var wg sync.WaitGroup
	var routed atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 200; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				d, err := r.Route(ctx, &Request{Tokens: tokens(4*(1+rng.IntN(40)), uint32(rng.IntN(5))),
					Agent: session.AgentContext{SessionID: fmt.Sprintf("s%d-%d", g, i%7)}})
				cancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					continue
				}
				routed.Add(1)
				d.FirstToken()
				d.Done(Usage{PromptTokens: 100, CompletionTokens: 10})
			}
		}(g)
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := uint64(1); i <= 300; i++ {
			w := 1 + i%4
			_ = r.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: w}, EventID: i, Kind: flashindex.Stored, BlockSize: testBS,
				Blocks: []flashindex.StoredBlock{{EngineHash: i, Tokens: tokens(4, uint32(i%5))}}})
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < 100; i++ {
			clk.Advance(time.Second)
			r.Tick()
		}
	}()
	wg.Wait()
	require.Positive(t, routed.Load())
	for w := uint64(1); w <= 4; w++ {
		require.Equal(t, Load{}, r.WorkerLoad(flashindex.Worker{ID: w}), "all requests finished")
	}
}

// TestHeldRequestCountsOnceAndDropIsReported: a request held by admission
// and later released begins its session once; a held request whose session
// ends is reported to OnRelease with ErrDropped.
func TestHeldRequestCountsOnceAndDropIsReported(t *testing.T) {
	clk := newFakeClock()
	got := map[string]error{}
	var mu sync.Mutex
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{},
		OnRelease: func(id string, err error) { mu.Lock(); got[id] = err; mu.Unlock() }})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	a := session.AgentContext{SessionID: "a"}
	da, err := r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: a})
	require.NoError(t, err)
	for _, id := range []string{"b1", "c1"} {
		_, err = r.TryRoute(&Request{ID: id, Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: id[:1]}})
		require.ErrorIs(t, err, ErrHeld)
	}
	_, err = r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
	require.ErrorIs(t, err, ErrHeld)
	_, ok := r.Sessions().Get("b")
	require.False(t, ok, "a held request has not begun its session")

	r.EndSession("c") // c's held turn will never run
	mu.Lock()
	require.ErrorIs(t, got["c1"], ErrDropped)
	mu.Unlock()

	da.Done(Usage{PromptTokens: 600})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	require.Equal(t, []string{"b1"}, r.Tick().Released)
	db, err := r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
	require.NoError(t, err)
	db.Done(Usage{PromptTokens: 600, CompletionTokens: 3})
	info, ok := r.Sessions().Get("b")
	require.True(t, ok)
	require.Equal(t, 0, info.InFlight)
	require.EqualValues(t, 1, info.Requests)
	mu.Lock()
	require.NoError(t, got["b1"])
	mu.Unlock()
}

func TestParsePolicy(t *testing.T) {
	for _, p := range []Policy{KVAware, RoundRobin, Random} {
		got, err := ParsePolicy(p.String())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	_, err := ParsePolicy("fastest")
	require.Error(t, err)
	require.Contains(t, Policy(9).String(), "9")
}

// TestCloseDropsHeldRequests: Close wakes a blocked Route with ErrDropped
// and refuses new requests.
func TestCloseDropsHeldRequests(t *testing.T) {
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	_, err = r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Route(context.Background(), &Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
		errc <- err
	}()
	waitHeld(t, r, "b1")
	require.NoError(t, r.Close())
	require.ErrorIs(t, <-errc, ErrDropped)
	_, err = r.TryRoute(&Request{Tokens: tokens(8, 3)})
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, r.AddWorker(worker(2, 1000)), ErrClosed)
	require.NoError(t, r.Close(), "a second Close is harmless")
}

// TestMetricsAdmissionAndGaps: holds, admission decisions, the queue depth
// and event-id gaps reach their metrics.
func TestMetricsAdmissionAndGaps(t *testing.T) {
	m, err := NewMetrics(nil)
	require.NoError(t, err)
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}, Metrics: m})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	da, err := r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)
	_, err = r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
	require.ErrorIs(t, err, ErrHeld)
	r.Tick()
	require.Equal(t, 1.0, testutil.ToFloat64(m.held))
	require.Equal(t, 1.0, testutil.ToFloat64(m.waiting))
	require.Equal(t, 1.0, testutil.ToFloat64(m.decisions.WithLabelValues("admit")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.decisions.WithLabelValues("queue")))
	da.Done(Usage{PromptTokens: 600, Failed: true})
	require.Equal(t, 1.0, testutil.ToFloat64(m.finished.WithLabelValues("failed")))

	store(t, r, 1, flashindex.Device, tokens(8, 5), 1)
	store(t, r, 1, flashindex.Device, tokens(8, 6), 5) // ids 2-4 never arrived
	require.Equal(t, 1.0, testutil.ToFloat64(m.gaps.WithLabelValues("1/0")))
	err = r.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 6, Kind: flashindex.Stored, BlockSize: 16,
		Blocks: []flashindex.StoredBlock{{EngineHash: 1, Tokens: tokens(16, 7)}}})
	var bse *flashindex.BlockSizeError
	require.ErrorAs(t, err, &bse)
	require.Equal(t, 1.0, testutil.ToFloat64(m.events.WithLabelValues("1/0", "block_size")))
}

// TestRebalanceMargin: with admission's Rebalance, a program's turn moves
// off its worker only when the router prices that worker at least
// RebalanceMargin tokens dearer than the cheapest; a smaller backlog there
// keeps the program home, where its cache is.
// TestRouterReportsBacklog: with Rebalance, the router reports each
// worker's prefill backlog (uncached tokens of requests without a first
// token yet) to admission before its resume pass, and it drains as the
// requests produce their first token.
func TestRouterReportsBacklog(t *testing.T) {
	r, _ := newTestRouter(t, Config{Admission: &admission.Config{Moves: &admission.Moves{Margin: 1024}}})
	require.NoError(t, r.AddWorker(worker(1, 100_000)))
	require.NoError(t, r.AddWorker(worker(2, 100_000)))
	backlog := func(w uint64) int64 {
		r.Tick()
		return admWorker(t, r, w).Backlog
	}
	d, err := r.TryRoute(&Request{ID: "x", Tokens: tokens(4096, 9), Override: &Override{AllowedWorkers: []uint64{1}}})
	require.NoError(t, err)
	require.Equal(t, int64(4096), backlog(1))
	require.Zero(t, backlog(2))
	d.FirstToken()
	require.Zero(t, backlog(1), "prefilled")
	d.Done(Usage{})
}

// admWorker returns admission's view of worker w's rank 0.
func admWorker(t *testing.T, r *Router, w uint64) admission.WorkerInfo {
	t.Helper()
	for _, ws := range r.workers {
		if ws.key.ID == w {
			info, ok := r.adm.Worker(ws.admID)
			require.True(t, ok)
			return info
		}
	}
	t.Fatalf("no worker %d", w)
	return admission.WorkerInfo{}
}

// TestRouterEngineUsage: SetEngineUsage reaches admission for the rank it
// names, and a new program then goes past a worker whose engine reports
// its KV full.
func TestRouterEngineUsage(t *testing.T) {
	r, _ := newTestRouter(t, Config{Admission: &admission.Config{}})
	require.NoError(t, r.AddWorker(worker(1, 100_000)))
	require.NoError(t, r.AddWorker(worker(2, 100_000)))
	engineUsed := func(w uint64) int64 { return admWorker(t, r, w).EngineUsed }
	prompt := tokens(640, 3)
	store(t, r, 1, flashindex.Device, prompt, 1)
	r.SetEngineUsage(flashindex.Worker{ID: 1}, 90_000)
	r.SetEngineUsage(flashindex.Worker{ID: 7}, 90_000) // unknown: ignored
	require.Equal(t, int64(90_000), engineUsed(1))
	require.Zero(t, engineUsed(2))
	d, err := r.TryRoute(&Request{ID: "a1", Tokens: prompt, Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)
	require.Equal(t, uint64(2), d.Worker.ID, "worker 1 holds the prefix, but its engine reports 90 %% of its KV in use")
	d.Done(Usage{PromptTokens: 640, CompletionTokens: 1})
	r.SetEngineUsage(flashindex.Worker{ID: 1}, -1)
	require.Zero(t, engineUsed(1), "cleared")

	plain, _ := newTestRouter(t, Config{})
	require.NoError(t, plain.AddWorker(worker(1, 100_000)))
	plain.SetEngineUsage(flashindex.Worker{ID: 1}, 5) // no admission: nothing to do
}

func TestRebalanceMargin(t *testing.T) {
	run := func(margin int64, backlog int) uint64 {
		r, _ := newTestRouter(t, Config{Admission: &admission.Config{Moves: &admission.Moves{Margin: margin}}})
		require.NoError(t, r.AddWorker(worker(1, 100_000)))
		require.NoError(t, r.AddWorker(worker(2, 100_000)))
		prompt := tokens(64, 1)
		store(t, r, 1, flashindex.Device, prompt, 1)
		a := session.AgentContext{SessionID: "a"}
		d, err := r.TryRoute(&Request{ID: "a1", Tokens: prompt, Agent: a})
		require.NoError(t, err)
		require.Equal(t, uint64(1), d.Worker.ID, "the first turn goes where its prefix is")
		d.Done(Usage{PromptTokens: 64, CompletionTokens: 1})
		// A request outside admission keeps worker 1 busy with backlog
		// tokens of prefill while a is in its tool call.
		busy, err := r.TryRoute(&Request{ID: "x", Tokens: tokens(backlog, 9), Override: &Override{AllowedWorkers: []uint64{1}}})
		require.NoError(t, err)
		defer busy.Done(Usage{})
		d, err = r.TryRoute(&Request{ID: "a2", Tokens: append(slices.Clone(prompt), tokens(8, 2)...), Agent: a})
		require.NoError(t, err)
		defer d.Done(Usage{})
		return d.Worker.ID
	}
	require.Equal(t, uint64(2), run(0, 64), "no margin: the cheaper worker takes the turn")
	require.Equal(t, uint64(1), run(1024, 64), "a backlog under the margin keeps the program home")
	require.Equal(t, uint64(2), run(1024, 4096), "a backlog over the margin moves it")
}

// TestCloseAfterARelease: Close with a held request that admission has
// released but its TryRoute caller has not come back for (its ready
// channel closed already) does not close that channel again (it panicked
// with "close of closed channel" in a Stack's Close).
func TestCloseAfterARelease(t *testing.T) {
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	da, err := r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)
	_, err = r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
	require.ErrorIs(t, err, ErrHeld)
	clk.Advance(time.Second)
	da.Done(Usage{PromptTokens: 600, CompletionTokens: 10})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	require.Equal(t, []string{"b1"}, r.Tick().Released)
	require.NotPanics(t, func() { require.NoError(t, r.Close()) })
}

// TestReleasedToAWorkerThatLeft: a held turn released to a worker that is
// removed before its TryRoute caller comes back is not refused (it was,
// with ErrNoWorkers: the removal had paused its program, so it could not
// be relocated). It waits for the program to resume, then runs on a worker
// that is still there.
func TestReleasedToAWorkerThatLeft(t *testing.T) {
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &admission.Config{}})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	require.NoError(t, r.AddWorker(worker(2, 1000)))
	route := func(id, sess string, seed uint32) (*Decision, error) {
		return r.TryRoute(&Request{ID: id, Tokens: tokens(600, seed), Agent: session.AgentContext{SessionID: sess}})
	}
	da, err := route("a1", "a", 1)
	require.NoError(t, err)
	dc, err := route("c1", "c", 3)
	require.NoError(t, err)
	require.NotEqual(t, da.Worker.ID, dc.Worker.ID)
	_, err = route("b1", "b", 2)
	require.ErrorIs(t, err, ErrHeld)

	clk.Advance(time.Second)
	da.Done(Usage{PromptTokens: 600, CompletionTokens: 10})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	require.Equal(t, []string{"b1"}, r.Tick().Released, "b1 is released to a's worker")
	r.RemoveWorker(da.Worker.ID) // before b1's caller comes back

	_, err = route("b1", "b", 2)
	require.ErrorIs(t, err, ErrHeld, "the release is void: b waits for room on the worker left")
	clk.Advance(time.Second)
	dc.Done(Usage{PromptTokens: 600, CompletionTokens: 10})
	r.EndSession("c")
	clk.Advance(5 * time.Second)
	require.Equal(t, []string{"b1"}, r.Tick().Released)
	db, err := route("b1", "b", 2)
	require.NoError(t, err)
	require.Equal(t, dc.Worker.ID, db.Worker.ID)
	db.Done(Usage{PromptTokens: 600, CompletionTokens: 10})
	require.NoError(t, r.Close())
}

// TestRouterProbe: a batch of eight sessions offered at once to a worker
// with room for five; with admission.Door.Probe, the Tick after
// Probe.After releases the first turn of the first one waiting (a probe:
// a second would take the worker past its pause threshold), which then
// routes to the worker while its program stays at the door, and the
// probe reaches its metric.
func TestRouterProbe(t *testing.T) {
	m, err := NewMetrics(nil)
	require.NoError(t, err)
	clk := newFakeClock()
	cfg := admission.Config{
		Waits: &admission.Waits{MaxWait: 3 * time.Minute},
		Door:  &admission.Door{Probe: &admission.Probe{After: 30 * time.Second, Burst: 4, Share: 0.5, Tail: 100}},
	}
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Admission: &cfg, Metrics: m})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 2000)))
	req := func(i int) *Request {
		id := fmt.Sprint("s", i)
		return &Request{ID: id + "/1", Tokens: tokens(300, uint32(i+1)), Agent: session.AgentContext{SessionID: id}}
	}
	var held []string
	for i := range 8 {
		d, err := r.TryRoute(req(i))
		if err != nil {
			require.ErrorIs(t, err, ErrHeld)
			held = append(held, req(i).ID)
			continue
		}
		require.True(t, d.Admission.Run)
	}
	require.Equal(t, []string{"s5/1", "s6/1", "s7/1"}, held)
	clk.Advance(10 * time.Second)
	require.Empty(t, r.Tick().Released, "no probe before Probe.After")
	clk.Advance(20 * time.Second)
	res := r.Tick()
	require.Equal(t, []string{"s5/1"}, res.Released)
	require.Equal(t, 1.0, testutil.ToFloat64(m.probes))
	d, err := r.TryRoute(req(5))
	require.NoError(t, err)
	require.Equal(t, admission.ReasonProbe, d.Admission.Reason)
	require.Equal(t, uint64(1), d.Worker.ID)
	d.Done(Usage{PromptTokens: 300, CompletionTokens: 10})
	require.EqualValues(t, 1, r.AdmissionStats().Probed)
	_, err = r.TryRoute(req(6))
	require.ErrorIs(t, err, ErrHeld, "s6 still waits at the door")
}
