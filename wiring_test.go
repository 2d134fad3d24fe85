package agentkv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/session"
	"github.com/agentkv/agentkv/sharedpool"
	"github.com/agentkv/agentkv/trace"
)

// hintingWorker is a worker that records the hint envelopes it receives.
type hintingWorker struct {
	id  uint64
	mu  sync.Mutex
	got []kvhint.Envelope
}

func (h *hintingWorker) Info() WorkerInfo {
	return WorkerInfo{ID: h.id, BlockSize: testBS, KVCapacityTokens: 1 << 20}
}
func (h *hintingWorker) HintSink() kvhint.Sink {
	return kvhint.SinkFunc(func(_ context.Context, env *kvhint.Envelope) error {
		h.mu.Lock()
		h.got = append(h.got, *env)
		h.mu.Unlock()
		return nil
	})
}
func (h *hintingWorker) take() []kvhint.Action {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []kvhint.Action
	for _, e := range h.got {
		out = append(out, e.Actions...)
	}
	h.got = nil
	return out
}

func kinds(as []kvhint.Action) []kvhint.Kind {
	var k []kvhint.Kind
	for _, a := range as {
		k = append(k, a.Kind)
	}
	return k
}

func TestLineageFollowsSessions(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1)
	h, _ := flashindex.NewHasher(testBS, "")
	sys := tokens(32, 1)
	ctxA := append(append([]uint32{}, sys...), tokens(16, 2)...)
	ctxB := append(append([]uint32{}, sys...), tokens(24, 3)...)
	for _, x := range []struct {
		id   string
		toks []uint32
	}{{"a", ctxA}, {"b", ctxB}} {
		d, err := r.TryRoute(&Request{Tokens: x.toks, Agent: session.AgentContext{SessionID: x.id}})
		require.NoError(t, err)
		d.Done(Usage{})
		_, want := h.AppendHashes(nil, nil, x.toks, 0, false)
		got, err := r.tree.Lineage(x.id, nil)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	split, err := r.tree.Split("a")
	require.NoError(t, err)
	require.Equal(t, 8, split.Shared, "the 32-token system prompt is shared")
	require.Equal(t, 4, split.Unique)
	r.EndSession("a")
	_, err = r.tree.Lineage("a", nil)
	require.Error(t, err, "an ended session's lineage is released")
}

// TestHintPolicies drives the tail-offload and finish-release policies
// through the router: a session that acts longer than the threshold gets its
// unique tail demoted at a tick, prefetched when its next turn is routed,
// and released when it ends.
func TestHintPolicies(t *testing.T) {
	tail, err := kvhint.NewTailOffload(kvhint.TailOffloadConfig{After: 10 * time.Second})
	require.NoError(t, err)
	rel, err := kvhint.NewFinishRelease(kvhint.FinishReleaseConfig{})
	require.NoError(t, err)
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Hints: []kvhint.Policy{tail, rel}})
	require.NoError(t, err)
	w := &hintingWorker{id: 1}
	require.NoError(t, r.AddWorker(w))

	ac := session.AgentContext{SessionID: "s"}
	prompt := tokens(40, 5)
	d, err := r.TryRoute(&Request{Tokens: prompt, Agent: ac})
	require.NoError(t, err)
	store(t, r, 1, flashindex.Device, prompt, 1)
	d.Done(Usage{PromptTokens: 40, CompletionTokens: 4})
	w.take()

	clk.Advance(5 * time.Second)
	r.Tick()
	require.Empty(t, w.take(), "acting 5 s: below the threshold")
	clk.Advance(10 * time.Second)
	r.Tick()
	got := w.take()
	require.Equal(t, []kvhint.Kind{kvhint.KindDemote}, kinds(got))
	require.Equal(t, "s", got[0].SessionID)
	require.Len(t, got[0].Target.Blocks, 10, "the whole chain is this session's unique tail")

	// The engine moved the tail to host; the next turn prefetches it back.
	store(t, r, 1, flashindex.Host, prompt, 2)
	require.NoError(t, r.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 3, Kind: flashindex.Removed,
		Tier: flashindex.Device, Hashes: engineHashes(prompt)}))
	d, err = r.TryRoute(&Request{Tokens: prompt, Agent: ac})
	require.NoError(t, err)
	require.Equal(t, 40, d.Cached.Host)
	require.Positive(t, d.Hints)
	require.Positive(t, d.HintsTook, "the hint stage's time is reported with the decision")
	require.Contains(t, kinds(w.take()), kvhint.KindPrefetch)
	d.Done(Usage{})

	r.EndSession("s")
	require.Contains(t, kinds(w.take()), kvhint.KindRelease)
}

func engineHashes(toks []uint32) []uint64 {
	h, _ := flashindex.NewHasher(testBS, "")
	_, seq := h.AppendHashes(nil, nil, toks, 0, false)
	for i := range seq {
		seq[i] = ^seq[i]
	}
	return seq
}

// TestSharedPoolCredit: a worker with a short device prefix is credited for
// the shared-pool pages beyond it, and nothing is counted twice.
func TestSharedPoolCredit(t *testing.T) {
	pool, err := sharedpool.NewPool(sharedpool.Config{Layout: sharedpool.Layout{PageSize: testBS, MLA: true}, Seed: 1})
	require.NoError(t, err)
	prompt := tokens(40, 9) // 10 blocks
	l, err := pool.Layout()
	require.NoError(t, err)
	var evs []sharedpool.Event
	for _, ph := range sharedpool.PageHashes(prompt, testBS, false, nil)[:8] {
		for _, k := range l.AppendObjectKeys(nil, ph) {
			evs = append(evs, sharedpool.Event{Kind: sharedpool.Store, Key: k})
		}
	}
	pool.Apply(&sharedpool.Batch{Seq: 1, Events: evs})
	require.Equal(t, 8, pool.Len())

	r, _ := newTestRouter(t, Config{SharedPool: pool, Cost: CostConfig{SharedWeight: 1}}, 1, 2)
	store(t, r, 1, flashindex.Device, prompt[:8], 1)  // 2 device blocks
	store(t, r, 2, flashindex.Device, prompt[:20], 1) // 5 device blocks
	d, err := r.TryRoute(&Request{Tokens: prompt})
	require.NoError(t, err)
	// Worker 1: 2 device + 6 shared = 8 credit; worker 2: 5 + 3 = 8: a tie
	// on cost; either way the shared credit is pool pages beyond the device.
	switch d.Worker.ID {
	case 1:
		require.Equal(t, 6, d.SharedBlocks)
	case 2:
		require.Equal(t, 3, d.SharedBlocks)
	}
	require.InDelta(t, 2.0, d.Cost.Logit, 1e-9)
}

type recordSink struct {
	mu   sync.Mutex
	recs []trace.Record
}

func (s *recordSink) Write(r *trace.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, *r)
	return nil
}

func TestTraceRecords(t *testing.T) {
	sink := &recordSink{}
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Trace: sink})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(3, 1000)))
	prompt := tokens(10, 4) // two full blocks and a 2-token tail
	d, err := r.TryRoute(&Request{ID: "req-1", Tokens: prompt, Agent: session.AgentContext{SessionID: "s", ParentSessionID: "p"}})
	require.NoError(t, err)
	clk.Advance(200 * time.Millisecond)
	d.FirstToken()
	clk.Advance(800 * time.Millisecond)
	d.Done(Usage{PromptTokens: 10, CompletionTokens: 7, CachedTokens: 4, FinishReason: "tool_calls", ToolCalls: []string{"bash", "read"}})
	require.Len(t, sink.recs, 1)
	rec := sink.recs[0]
	require.Equal(t, "request_end", rec.EventType)
	require.Equal(t, "s", rec.AgentContext.SessionID)
	require.Equal(t, "p", rec.AgentContext.ParentSessionID)
	require.Equal(t, "req-1", rec.Request.RequestID)
	require.EqualValues(t, 10, rec.Request.InputTokens)
	require.EqualValues(t, 7, rec.Request.OutputTokens)
	require.InDelta(t, 0.4, rec.Request.KVHitRate, 1e-9)
	require.InDelta(t, 200, rec.Request.TTFTMs, 1e-6)
	require.InDelta(t, 1000, rec.Request.TotalTimeMs, 1e-6)
	require.EqualValues(t, 3, rec.Request.Worker.DecodeWorkerID)
	require.Equal(t, "tool_calls", rec.Request.FinishReasonMetadata.FinishReason)
	require.Len(t, rec.Request.FinishReasonMetadata.ToolCalls, 2)
	// Replay hashes: ceil(10/4) = 3, the partial block chained on.
	h, _ := flashindex.NewHasher(testBS, "")
	_, seq := h.AppendHashes(nil, nil, prompt, 0, false)
	require.Len(t, rec.Request.Replay.InputSequenceHashes, 3)
	require.Equal(t, seq, rec.Request.Replay.InputSequenceHashes[:2])
	require.Equal(t, flashindex.NextSequenceHash(seq[1], h.LocalHash(prompt[8:])), rec.Request.Replay.InputSequenceHashes[2])
	require.Equal(t, testBS, rec.Request.Replay.TraceBlockSize)
	require.Nil(t, rec.Payload, "content-free")
}

// TestPrefixPinSeesSharedRefs: once enough live sessions share a system
// prompt, the lineage view reports how many reference each shared block and
// the prefix-pin policy pins it on the chosen worker.
func TestPrefixPinSeesSharedRefs(t *testing.T) {
	pin, err := kvhint.NewPrefixPin(kvhint.PrefixPinConfig{MinSessions: 3})
	require.NoError(t, err)
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Hints: []kvhint.Policy{pin}})
	require.NoError(t, err)
	w := &hintingWorker{id: 1}
	require.NoError(t, r.AddWorker(w))
	sys := tokens(32, 1) // 8 shared blocks
	var pinned []kvhint.Action
	for i := 0; i < 4; i++ {
		prompt := append(append([]uint32{}, sys...), tokens(8, uint32(10+i))...)
		d, err := r.TryRoute(&Request{Tokens: prompt, Agent: session.AgentContext{SessionID: fmt.Sprintf("s%d", i)}})
		require.NoError(t, err)
		d.Done(Usage{})
		for _, a := range w.take() {
			if a.Kind == kvhint.KindPin {
				pinned = append(pinned, a)
			}
		}
		var refs []int32
		view, _ := r.sessionView(fmt.Sprintf("s%d", i), "", flashindex.Worker{ID: 1}, nil, &refs)
		require.Len(t, view.Shared, min(i, 1)*8, "session %d", i)
		for _, n := range view.SharedRefs {
			// Counted up to the pin's MinSessions (kvhint.RefsBound).
			require.EqualValues(t, min(i+1, 3), n, "every shared block is referenced by all live sessions")
		}
	}
	require.NotEmpty(t, pinned, "the shared prompt was pinned once 3 sessions referenced it")
	require.Len(t, pinned[0].Target.Blocks, 8)
}

// endpointWorker is a hintingWorker with a control endpoint (a share
// source must have one).
type endpointWorker struct{ hintingWorker }

func (w *endpointWorker) Info() WorkerInfo {
	i := w.hintingWorker.Info()
	i.Endpoint = fmt.Sprintf("http://w%d", w.id)
	return i
}

// TestSharePreviousWorker: a session's next turn moves worker before the
// previous worker's KV events reached the index; the router names the
// previous worker, which it routed the last turn to, as the kv.fetch
// source for the blocks the turns share. Once the window has passed (the
// index has heard everything there is) it names none; and a turn on the
// same worker or with a chain that does not extend the last gets none.
func TestSharePreviousWorker(t *testing.T) {
	share, err := kvhint.NewPeerShare(kvhint.PeerShareConfig{MinGain: 4})
	require.NoError(t, err)
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, Index: IndexExact, Hints: []kvhint.Policy{share}})
	require.NoError(t, err)
	w0, w1 := &endpointWorker{hintingWorker{id: 0}}, &endpointWorker{hintingWorker{id: 1}}
	require.NoError(t, r.AddWorker(w0))
	require.NoError(t, r.AddWorker(w1))
	on := func(w uint64) *Override { return &Override{AllowedWorkers: []uint64{w}} }

	ac := session.AgentContext{SessionID: "s"}
	first := tokens(160, 7)
	d, err := r.TryRoute(&Request{Tokens: first, Agent: ac, Override: on(0)})
	require.NoError(t, err)
	d.Done(Usage{PromptTokens: 160})
	require.Empty(t, w0.take())

	next := append(append([]uint32{}, first...), tokens(64, 8)...)
	d, err = r.TryRoute(&Request{Tokens: next, Agent: ac, Override: on(1)})
	require.NoError(t, err)
	got := w1.take()
	require.Len(t, got, 1, "no event reached the index, yet the previous worker is named")
	a := got[0]
	require.Equal(t, kvhint.KindShare, a.Kind)
	require.Len(t, a.Target.Blocks, len(first)/testBS)
	require.Equal(t, "http://w0", a.Sources[0].Endpoint)
	d.Done(Usage{PromptTokens: 224})

	// Same worker again: nothing to fetch.
	d, err = r.TryRoute(&Request{Tokens: next, Agent: ac, Override: on(1)})
	require.NoError(t, err)
	require.Empty(t, w1.take())
	d.Done(Usage{})

	// A chain that does not extend the last turn's: no source.
	d, err = r.TryRoute(&Request{Tokens: tokens(224, 9), Agent: ac, Override: on(0)})
	require.NoError(t, err)
	require.Empty(t, w0.take())
	d.Done(Usage{})

	// Past the window the index is trusted, and it holds nothing.
	d, err = r.TryRoute(&Request{Tokens: next, Agent: ac, Override: on(0)})
	require.NoError(t, err)
	w0.take()
	d.Done(Usage{})
	clk.Advance(2 * previousSourceWindow)
	d, err = r.TryRoute(&Request{Tokens: append(next, tokens(32, 10)...), Agent: ac, Override: on(1)})
	require.NoError(t, err)
	require.Empty(t, w1.take())
	d.Done(Usage{})
}

// TestPrefixPinRenewedEveryQuarterTTL: with the shared prompt pinned on a
// worker that holds it, later turns of any session send no pin until a
// quarter of the lease has passed; a second router with the same policy
// keeps its own memory and pins on its first turn.
func TestPrefixPinRenewedEveryQuarterTTL(t *testing.T) {
	pin, err := kvhint.NewPrefixPin(kvhint.PrefixPinConfig{MinSessions: 2, TTL: 4 * time.Minute})
	require.NoError(t, err)
	sys := tokens(32, 1) // 8 shared blocks
	turns := func(r *Router, w *hintingWorker, clk *fakeClock, from, n int) (pins int) {
		for i := from; i < from+n; i++ {
			prompt := append(append([]uint32{}, sys...), tokens(8, uint32(10+i))...)
			d, err := r.TryRoute(&Request{Tokens: prompt, Agent: session.AgentContext{SessionID: fmt.Sprintf("s%d", i%4)}})
			require.NoError(t, err)
			d.Done(Usage{PromptTokens: len(prompt)})
			for _, a := range w.take() {
				if a.Kind == kvhint.KindPin {
					pins++
				}
			}
			clk.Advance(10 * time.Second)
		}
		return pins
	}
	newRouter := func() (*Router, *hintingWorker, *fakeClock) {
		clk := newFakeClock()
		r, err := New(Config{BlockSize: testBS, Now: clk.Now, Hints: []kvhint.Policy{pin}})
		require.NoError(t, err)
		w := &hintingWorker{id: 1}
		require.NoError(t, r.AddWorker(w))
		return r, w, clk
	}
	r, w, clk := newRouter()
	// Turn 0 has no shared prefix; turn 1 pins; turns 2-5 (up to 50 s
	// after it) send none.
	require.Equal(t, 1, turns(r, w, clk, 0, 6))
	clk.Advance(time.Minute - 50*time.Second) // a quarter of the lease since the pin
	require.Equal(t, 1, turns(r, w, clk, 6, 6), "renewed once a quarter of the lease had passed, then not")

	r2, w2, clk2 := newRouter()
	require.Equal(t, 1, turns(r2, w2, clk2, 0, 3), "another router's memory is its own")
}
