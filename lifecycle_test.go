package agentkv

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// manualTicker is a Config.Ticker the test drives tick by tick.
type manualTicker struct {
	c        chan time.Time
	interval time.Duration
	stopped  bool
	mu       sync.Mutex
}

func (m *manualTicker) ticker(d time.Duration) (<-chan time.Time, func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.interval = d
	return m.c, func() { m.mu.Lock(); m.stopped = true; m.mu.Unlock() }
}

// TestRunTicksUntilCancelled: Run calls Tick on every tick of its ticker
// (made at admission's interval), passes each result to OnTick, and stops
// its ticker and returns ctx's error once ctx ends.
func TestRunTicksUntilCancelled(t *testing.T) {
	mt := &manualTicker{c: make(chan time.Time)}
	results := make(chan TickResult)
	r, clk := newTestRouter(t, Config{Ticker: mt.ticker, Admission: &admission.Config{Interval: 3 * time.Second},
		RequestTTL: time.Minute, OnTick: func(res TickResult) { results <- res }}, 1)
	d, err := r.TryRoute(&Request{Tokens: tokens(64, 1), Agent: session.AgentContext{SessionID: "s"}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.Run(ctx) }()

	mt.c <- time.Time{}
	require.Zero(t, (<-results).SweptRequests, "a request routed just now is not swept")
	clk.Advance(2 * time.Minute) // the request shows no sign of life past RequestTTL
	mt.c <- time.Time{}
	require.Equal(t, 1, (<-results).SweptRequests, "the second tick ran the sweep")
	require.Zero(t, r.WorkerLoad(d.Worker).Requests)

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	mt.mu.Lock()
	defer mt.mu.Unlock()
	require.True(t, mt.stopped)
	require.Equal(t, 3*time.Second, mt.interval)
}

func TestLifecycleDefaults(t *testing.T) {
	r, _ := newTestRouter(t, Config{})
	require.Equal(t, DefaultTickInterval, r.cfg.TickInterval)
	require.Equal(t, DefaultHeldTTL, r.cfg.HeldTTL)
	require.Equal(t, DefaultMaxHeld, r.cfg.MaxHeld)
	for _, cfg := range []Config{{BlockSize: 4, TickInterval: -1}, {BlockSize: 4, HeldTTL: -1}, {BlockSize: 4, MaxHeld: -1}} {
		_, err := New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// TestFailedRequestUndoesRouting: a request that fails takes back its load,
// its approximate index entries and the session binding it made, so the
// next turn of the session is not drawn to the worker for a cache it never
// got. A request that succeeds keeps them (the control).
func TestFailedRequestUndoesRouting(t *testing.T) {
	r, _ := newTestRouter(t, Config{Index: IndexApproximate, Affinity: AffinitySoft}, 1, 2)
	h, err := flashindex.NewHasher(testBS, "")
	require.NoError(t, err)
	prompt := tokens(64, 7)
	_, seq := h.AppendHashes(nil, nil, prompt, 0, false)
	depth := func(w flashindex.Worker) int {
		for _, m := range r.Index().FindMatches(seq, nil) {
			if m.Worker == w {
				return m.Device
			}
		}
		return 0
	}
	for _, failed := range []bool{false, true} {
		sid := "s-" + strconv.FormatBool(failed)
		d, err := r.TryRoute(&Request{Tokens: prompt, ExpectedOutputTokens: 8, Agent: session.AgentContext{SessionID: sid}})
		require.NoError(t, err)
		require.Equal(t, 1, r.WorkerLoad(d.Worker).Requests)
		require.Equal(t, len(seq), depth(d.Worker), "routing recorded the prompt on its worker")
		_, bound := r.Sessions().Affinity(sid)
		require.True(t, bound)

		d.Done(Usage{Failed: failed})
		require.Equal(t, Load{}, r.WorkerLoad(d.Worker))
		_, bound = r.Sessions().Affinity(sid)
		if failed {
			require.Zero(t, depth(d.Worker), "a failed request's records are undone")
			require.False(t, bound, "a failed request's binding is undone")
		} else {
			require.Equal(t, len(seq), depth(d.Worker), "a finished request's records stay")
			require.True(t, bound)
			r.Index().Unrecord(d.Worker, seq) // start the failed case clean
		}
	}
}

// TestFailedTurnKeepsEarlierRecords: undoing a failed turn removes only
// the blocks it added beyond what its worker already held, not the
// session's earlier, successful turn.
func TestFailedTurnKeepsEarlierRecords(t *testing.T) {
	r, _ := newTestRouter(t, Config{Index: IndexApproximate, Affinity: AffinitySoft}, 1, 2)
	ac := session.AgentContext{SessionID: "s"}
	first := tokens(64, 3)
	d1, err := r.TryRoute(&Request{Tokens: first, Agent: ac})
	require.NoError(t, err)
	d1.Done(Usage{PromptTokens: 64})
	second := append(append([]uint32(nil), first...), tokens(32, 4)...)
	d2, err := r.TryRoute(&Request{Tokens: second, Agent: ac})
	require.NoError(t, err)
	require.Equal(t, d1.Worker, d2.Worker)
	require.True(t, d2.Affinity)
	d2.Done(Usage{Failed: true})
	h, _ := flashindex.NewHasher(testBS, "")
	_, seq := h.AppendHashes(nil, nil, second, 0, false)
	m := r.Index().FindMatches(seq, nil)
	require.Len(t, m, 1)
	require.Equal(t, 64/testBS, m[0].Device, "the first turn's blocks stay, the failed turn's go")
	_, bound := r.Sessions().Affinity("s")
	require.True(t, bound, "the binding the first turn made stays: the failed turn did not make it")
}

// heldSetup returns a router with one 1,000-token worker and admission, a
// running 600-token program "a", and OnRelease results by request ID.
func heldSetup(t *testing.T, cfg Config) (*Router, *fakeClock, *Decision, func() map[string]error) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]error{}
	cfg.Admission = &admission.Config{}
	cfg.OnRelease = func(id string, err error) { mu.Lock(); got[id] = err; mu.Unlock() }
	r, clk := newTestRouter(t, cfg)
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	da, err := r.TryRoute(&Request{ID: "a1", Tokens: tokens(600, 1), Agent: session.AgentContext{SessionID: "a"}})
	require.NoError(t, err)
	return r, clk, da, func() map[string]error {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]error{}
		for k, v := range got {
			out[k] = v
		}
		return out
	}
}

// TestAbandonedHeldRequestExpires: a request held for a TryRoute caller
// that never retries after its release is dropped HeldTTL later: its turn
// ends (admission no longer counts it as running) and OnRelease hears
// ErrDropped; a retry after that is a new request.
func TestAbandonedHeldRequestExpires(t *testing.T) {
	r, clk, da, got := heldSetup(t, Config{HeldTTL: 30 * time.Second})
	b := session.AgentContext{SessionID: "b"}
	_, err := r.TryRoute(&Request{ID: "b1", Tokens: tokens(600, 2), Agent: b})
	require.ErrorIs(t, err, ErrHeld)
	da.Done(Usage{PromptTokens: 600})
	r.EndSession("a")
	clk.Advance(5 * time.Second)
	require.Equal(t, []string{"b1"}, r.Tick().Released)
	require.NoError(t, got()["b1"])

	clk.Advance(29 * time.Second)
	require.Zero(t, r.Tick().ExpiredHeld, "within HeldTTL the release waits")
	clk.Advance(time.Second)
	require.Equal(t, 1, r.Tick().ExpiredHeld)
	require.ErrorIs(t, got()["b1"], ErrDropped)
	r.mu.Lock()
	require.Empty(t, r.held)
	r.mu.Unlock()
	p, ok := r.adm.Program(clk.Now(), "b")
	require.True(t, ok)
	require.Zero(t, p.Inflight, "the abandoned turn ended")
}

// TestRouteHeldRequestNeverExpires: a Route call blocked on admission is
// alive; HeldTTL does not apply to it.
func TestRouteHeldRequestNeverExpires(t *testing.T) {
	r, clk, _, _ := heldSetup(t, Config{HeldTTL: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error)
	go func() {
		_, err := r.Route(ctx, &Request{ID: "b1", Tokens: tokens(600, 2), Agent: session.AgentContext{SessionID: "b"}})
		res <- err
	}()
	require.Eventually(t, func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.held["b1"] != nil }, 5*time.Second, time.Millisecond)
	r.mu.Lock()
	r.held["b1"].released, r.held["b1"].releasedAt = true, clk.Now() // as if released, its waiter not yet run
	r.mu.Unlock()
	clk.Advance(time.Minute)
	require.Zero(t, r.Tick().ExpiredHeld)
	cancel()
	require.ErrorIs(t, <-res, context.Canceled)
}

// TestHeldRequestsBounded: a client sending ever new request IDs for a
// session that admission holds cannot grow the held set past MaxHeld; the
// excess is refused with ErrTooManyHeld and leaves nothing behind.
func TestHeldRequestsBounded(t *testing.T) {
	const max = 64
	r, clk, _, _ := heldSetup(t, Config{MaxHeld: max})
	b := session.AgentContext{SessionID: "b"}
	refused := 0
	for i := range 10 * max {
		_, err := r.TryRoute(&Request{ID: "b" + strconv.Itoa(i), Tokens: tokens(600, 2), Agent: b})
		if i < max {
			require.ErrorIs(t, err, ErrHeld)
			continue
		}
		require.ErrorIs(t, err, ErrTooManyHeld)
		refused++
		r.mu.Lock()
		require.Len(t, r.held, max)
		require.Len(t, r.heldByPg["b"], max)
		r.mu.Unlock()
	}
	p, ok := r.adm.Program(clk.Now(), "b")
	require.True(t, ok)
	require.Equal(t, max, p.Inflight, "refused requests were withdrawn from admission")
	require.Equal(t, 9*max, refused)
}

// TestReAddWorkerAllOrNothing: re-adding a worker with capacity 0 (a
// refresh that could not read it) under admission updates the router and
// admission alike, and a capacity admission cannot take changes nothing.
func TestReAddWorkerAllOrNothing(t *testing.T) {
	r, _ := newTestRouter(t, Config{Admission: &admission.Config{}})
	two := func(capTokens int) Worker {
		return WorkerFunc(func() WorkerInfo {
			return WorkerInfo{ID: 1, DPRanks: 2, BlockSize: testBS, KVCapacityTokens: capTokens}
		})
	}
	require.NoError(t, r.AddWorker(two(1000)))
	require.NoError(t, r.AddWorker(two(0)))
	check := func(capTokens int, admCap int64) {
		t.Helper()
		r.mu.Lock()
		defer r.mu.Unlock()
		require.Len(t, r.workers, 2)
		for _, ws := range r.workers {
			require.Equal(t, capTokens, ws.info.KVCapacityTokens)
			require.Equal(t, capTokens/testBS, ws.capBlock)
			wi, ok := r.adm.Worker(ws.admID)
			require.True(t, ok)
			require.Equal(t, admCap, wi.Capacity)
		}
	}
	check(0, 1)
	require.Error(t, r.AddWorker(two(int(admission.MaxTokens)+1)))
	check(0, 1)
	require.NoError(t, r.AddWorker(two(2000)))
	check(2000, 2000)
}

// TestCancelOneHeldKeepsSiblings: cancelling one of a session's held
// requests leaves its other held requests held.
func TestCancelOneHeldKeepsSiblings(t *testing.T) {
	r, _, _, got := heldSetup(t, Config{})
	b := session.AgentContext{SessionID: "b"}
	for _, id := range []string{"b1", "b2"} {
		_, err := r.TryRoute(&Request{ID: id, Tokens: tokens(600, 2), Agent: b})
		require.ErrorIs(t, err, ErrHeld)
	}
	r.Cancel("b1")
	_, err := r.TryRoute(&Request{ID: "b2", Tokens: tokens(600, 2), Agent: b})
	require.ErrorIs(t, err, ErrHeld, "b2 is still held")
	require.NotContains(t, got(), "b2")
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, []string{"b2"}, r.heldByPg["b"])
}

// TestZeroConfigIsAutoIndex: with the zero Config, a worker that sends no
// KV events gets approximate records and keeps a session's turns (soft
// affinity); once a worker's events reach the router, routing to it is
// exact: nothing recorded, no binding, the cache decides.
func TestZeroConfigIsAutoIndex(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2)
	h, _ := flashindex.NewHasher(testBS, "")
	ac := session.AgentContext{SessionID: "s"}
	prompt := tokens(32, 9)
	d, err := r.TryRoute(&Request{Tokens: prompt, Agent: ac})
	require.NoError(t, err)
	d.Done(Usage{})
	first := d.Worker
	_, seq := h.AppendHashes(nil, nil, prompt, 0, false)
	require.Len(t, d.recorded, len(seq), "no events from the worker: the decision is recorded")
	require.True(t, d.boundHere, "and the session bound softly")
	for range 3 {
		d, err = r.TryRoute(&Request{Tokens: append(prompt, tokens(8, 10)...), Agent: ac})
		require.NoError(t, err)
		d.Done(Usage{})
		require.Equal(t, first, d.Worker, "the session stays")
	}

	other := 3 - first.ID
	store(t, r, other, flashindex.Device, tokens(64, 11), 1) // the other worker has an event source
	d, err = r.TryRoute(&Request{Tokens: tokens(64, 11), Agent: session.AgentContext{SessionID: "t"}})
	require.NoError(t, err)
	require.Equal(t, other, d.Worker.ID, "the cache decides")
	require.Nil(t, d.recorded, "an evented worker's decisions are not recorded")
	require.False(t, d.boundHere)
	_, bound := r.Sessions().Affinity("t")
	require.False(t, bound)
}
