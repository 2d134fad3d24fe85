package agentkv

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// Tests of route's stages one at a time, in the order a request passes
// them. Each builds a routing by hand, as route does.

func newRouting(r *Router) (*routing, *scratch) {
	return &routing{start: r.cfg.Now(), t0: time.Now()}, new(scratch)
}

// identified runs the identify stage on req.
func identified(r *Router, req *Request) *routing {
	rt, _ := newRouting(r)
	r.identify(rt, req)
	return rt
}

func TestStageIdentify(t *testing.T) {
	r, _ := newTestRouter(t, Config{Affinity: AffinitySoft}, 1)
	_, err := r.Sessions().Begin(session.AgentContext{SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, r.Sessions().Bind("s", session.Worker{ID: 1}, session.Soft))
	rt := identified(r, &Request{Agent: session.AgentContext{SessionID: "s"}})
	require.Equal(t, "s", rt.program, "a session is its own program")
	require.True(t, rt.bound)
	require.Equal(t, uint64(1), rt.binding.Worker.ID)

	rt = identified(r, &Request{Agent: session.AgentContext{SessionID: "s", ProgramID: "p"}})
	require.Equal(t, "p", rt.program, "ProgramID names the program")

	off, _ := newTestRouter(t, Config{Index: IndexExact}, 1)
	_, err = off.Sessions().Begin(session.AgentContext{SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, off.Sessions().Bind("s", session.Worker{ID: 1}, session.Soft))
	rt = identified(off, &Request{Agent: session.AgentContext{SessionID: "s"}})
	require.False(t, rt.bound, "with affinity off bindings are not read")
}

func TestStageHash(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1)
	h, _ := flashindex.NewHasher(testBS, "")
	toks := tokens(42, 1) // 10 full blocks and a partial one
	_, want := h.AppendHashes(nil, nil, toks, 0, false)
	rt, sc := newRouting(r)
	require.NoError(t, r.hashPrompt(rt, &Request{Tokens: toks}, sc))
	require.Equal(t, want, rt.seq)
	require.Equal(t, 42, rt.prompt)

	rt, sc = newRouting(r)
	require.NoError(t, r.hashPrompt(rt, &Request{SequenceHashes: want, InputTokens: 7}, sc))
	require.Equal(t, want, rt.seq, "given hashes are used as they are")
	require.Equal(t, 40, rt.prompt, "the prompt covers at least its full blocks")
}

func TestStageMatch(t *testing.T) {
	for _, p := range []Policy{KVAware, RoundRobin} {
		r, _ := newTestRouter(t, Config{Policy: p}, 1, 2)
		toks := tokens(64, 2)
		store(t, r, 2, flashindex.Device, toks[:32], 1)
		req := &Request{Tokens: toks}
		rt, sc := newRouting(r)
		require.NoError(t, r.hashPrompt(rt, req, sc))
		r.matchPrompt(rt, req, sc)
		if p == KVAware {
			require.Equal(t, []flashindex.Match{{Worker: flashindex.Worker{ID: 2}, Device: 8, Resident: 8}}, sc.matches)
		} else {
			require.Empty(t, sc.matches, "only KVAware asks the index")
		}
	}
}

// priced runs the stages up to price on a request.
func priced(t *testing.T, r *Router, req *Request) (*routing, *scratch, error) {
	t.Helper()
	rt, sc := newRouting(r)
	r.identify(rt, req)
	require.NoError(t, r.hashPrompt(rt, req, sc))
	r.matchPrompt(rt, req, sc)
	r.mu.Lock()
	defer r.mu.Unlock()
	return rt, sc, r.priceLocked(rt, req, sc)
}

func TestStagePrice(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2, 3)
	toks := tokens(64, 3)
	store(t, r, 2, flashindex.Device, toks[:32], 1)
	rt, sc, err := priced(t, r, &Request{Tokens: toks, Override: &Override{AllowedWorkers: []uint64{2, 3}}})
	require.NoError(t, err)
	require.Len(t, sc.cands, 2, "the override's workers only")
	for _, c := range sc.cands {
		want := rt.cost.cost(costInput{blockSize: testBS, requestTokens: 64, device: c.match.Device})
		require.Equal(t, want, c.cost, "worker %d", c.ws.key.ID)
	}
	require.Less(t, sc.cands[0].cost.Logit, sc.cands[1].cost.Logit, "the cached worker is cheaper")
	_, _, err = priced(t, r, &Request{Tokens: toks, Override: &Override{AllowedWorkers: []uint64{9}}})
	require.ErrorIs(t, err, ErrNoWorkers)
}

func TestStageAdmit(t *testing.T) {
	r, _ := newTestRouter(t, Config{Admission: &admission.Config{}})
	require.NoError(t, r.AddWorker(worker(1, 1000)))
	require.NoError(t, r.AddWorker(worker(2, 1000)))
	admit := func(id, sid string) (*routing, *scratch, *heldRequest, error) {
		req := &Request{ID: id, Tokens: tokens(600, 4), Agent: session.AgentContext{SessionID: sid}}
		rt, sc, err := priced(t, r, req)
		require.NoError(t, err)
		r.mu.Lock()
		defer r.mu.Unlock()
		h, err := r.admitLocked(rt, req, sc, false)
		return rt, sc, h, err
	}
	for _, sid := range []string{"a", "b"} { // one program per worker
		rt, sc, h, err := admit(sid+"1", sid)
		require.NoError(t, err)
		require.Nil(t, h)
		require.True(t, rt.admitted)
		require.Len(t, sc.cands, 1, "the program runs on its admission worker")
	}
	rt, _, h, err := admit("c1", "c")
	require.ErrorIs(t, err, ErrHeld, "no room left: the new program waits")
	require.True(t, rt.heldNow)
	require.NotNil(t, h)
	rt, _, h2, err := admit("c1", "c")
	require.ErrorIs(t, err, ErrHeld)
	require.Same(t, h, h2, "a retry finds the same hold")
	require.False(t, rt.heldNow)
}

func TestStageSelectAndBook(t *testing.T) {
	r, _ := newTestRouter(t, Config{Policy: RoundRobin, Affinity: AffinitySoft}, 1, 2, 3)
	_, err := r.Sessions().Begin(session.AgentContext{SessionID: "s"})
	require.NoError(t, err)
	require.NoError(t, r.Sessions().Bind("s", session.Worker{ID: 3}, session.Soft))
	var got []uint64
	for _, sid := range []string{"", "", "s", ""} {
		req := &Request{Tokens: tokens(40, 5), ExpectedOutputTokens: 8, Agent: session.AgentContext{SessionID: sid}}
		rt, sc, err := priced(t, r, req)
		require.NoError(t, err)
		r.mu.Lock()
		r.selectLocked(rt, sc)
		r.bookLocked(rt, req)
		r.mu.Unlock()
		require.Equal(t, sid == "s", rt.viaAffinity)
		got = append(got, rt.pick.ws.key.ID)
	}
	require.Equal(t, []uint64{1, 2, 3, 3}, got, "round robin, the binding, round robin again")
	require.Equal(t, Load{PrefillTokens: 80, DecodeBlocks: 24, Requests: 2}, r.WorkerLoad(flashindex.Worker{ID: 3}),
		"each booked 40 uncached tokens and (40+8)/4 blocks")
}

func TestStageCommit(t *testing.T) {
	r, _ := newTestRouter(t, Config{Affinity: AffinityHard, Index: IndexApproximate}, 1)
	ac := session.AgentContext{SessionID: "s"}
	req := &Request{ID: "q", Tokens: tokens(40, 6), Agent: ac}
	rt, sc, err := priced(t, r, req)
	require.NoError(t, err)
	r.mu.Lock()
	r.selectLocked(rt, sc)
	r.bookLocked(rt, req)
	r.mu.Unlock()
	d := r.commit(rt, req, sc)
	require.Equal(t, "q", d.RequestID)
	require.Equal(t, flashindex.Worker{ID: 1}, d.Worker)
	require.True(t, d.boundHere)
	require.Len(t, d.recorded, 10, "the prompt's 10 blocks were recorded on the worker")
	info, ok := r.Sessions().Get("s")
	require.True(t, ok)
	require.Equal(t, 1, info.InFlight)
	b, ok := r.Sessions().Affinity("s")
	require.True(t, ok)
	require.Equal(t, session.Hard, b.Mode)
	require.Equal(t, 10, r.Index().FindMatches(rt.seq, nil)[0].Device)
}

// TestNewSessionTieBreakIsDeterministic: two routers that see the same
// costs (replicas cut off from each other) send a new session to the same
// worker, and new sessions still spread over equally cheap workers (#34).
func TestNewSessionTieBreakIsDeterministic(t *testing.T) {
	a, _ := newTestRouter(t, Config{Seed: 1}, 1, 2, 3, 4)
	b, _ := newTestRouter(t, Config{Seed: 2}, 1, 2, 3, 4)
	seen := map[uint64]bool{}
	for i := 0; i < 64; i++ {
		id := "session-" + strconv.Itoa(i)
		var picks [2]uint64
		for j, r := range []*Router{a, b} {
			req := &Request{Tokens: tokens(40, uint32(i)), Agent: session.AgentContext{SessionID: id}}
			rt, sc, err := priced(t, r, req)
			require.NoError(t, err)
			r.mu.Lock()
			rt.session = req.Agent.SessionID
			r.selectLocked(rt, sc)
			r.mu.Unlock()
			picks[j] = rt.pick.ws.key.ID
		}
		require.Equal(t, picks[0], picks[1], "session %s: the two routers disagree", id)
		seen[picks[0]] = true
	}
	require.Len(t, seen, 4, "64 new sessions over 4 idle workers used only %v", seen)
}

// TestTurnRecordsItsTail: without KV events, a session's next turn on the
// same worker records only its new blocks (the context's entries are not
// refreshed, so they expire with the turn that recorded them), until a
// quarter of ApproxTTL has passed since the context was last recorded
// whole; then the whole chain is refreshed and outlives the first turn's
// expiry. A turn on another worker, or one that does not extend the last,
// records its chain whole.
func TestTurnRecordsItsTail(t *testing.T) {
	const ttl = 100 * time.Second
	ac := session.AgentContext{SessionID: "s"}
	prompt := tokens(400, 9) // 100 blocks; each turn adds 8
	turn := func(r *Router, n int) *Decision {
		t.Helper()
		d, err := r.TryRoute(&Request{Tokens: prompt[:40+32*n], Agent: ac})
		require.NoError(t, err)
		d.Done(Usage{})
		return d
	}
	depth := func(r *Router, n int) int {
		h, err := r.hasher("")
		require.NoError(t, err)
		seq := h.SequenceHashes(nil, prompt[:40+32*n])
		for _, m := range r.Index().FindMatches(seq, nil) {
			if m.Worker.ID == 1 {
				return m.Device
			}
		}
		return 0
	}
	for _, refresh := range []bool{false, true} {
		r, clk := newTestRouter(t, Config{Affinity: AffinitySoft, Index: IndexApproximate, ApproxTTL: ttl}, 1)
		turn(r, 0) // recorded whole at 0 s
		clk.Advance(10 * time.Second)
		d := turn(r, 1) // the tail only
		require.Len(t, d.recorded, 8, "the turn's new blocks")
		if refresh {
			clk.Advance(20 * time.Second) // 30 s since the whole record: past ttl/4
			turn(r, 2)
		}
		clk.Advance(ttl - 10*time.Second) // past the first turn's expiry
		r.Index().Expire()
		if refresh {
			require.Equal(t, 10+8+8, depth(r, 2), "refreshed whole at 30 s, the context outlives the first turn's expiry")
		} else {
			require.Equal(t, 0, depth(r, 1), "the tail-only turn left the context's entries their expiry")
		}
	}
}

// TestFirstPrefixSiblings: with Door.Probe.Siblings the router tells
// admission, at a new program's first turn, the prefix its prompt shares
// with the sessions its lineage tree knows, named by that prefix's last
// block: two rollouts of one task share the system prompt and the task
// (one key), a rollout of another task the system prompt only; a
// subagent's first turn and a later turn name nothing, and without
// Siblings nothing is named.
func TestFirstPrefixSiblings(t *testing.T) {
	system, taskA, taskB := tokens(8*testBS, 1), tokens(4*testBS, 2), tokens(4*testBS, 3)
	prompt := func(parts ...[]uint32) []uint32 {
		var p []uint32
		for _, x := range parts {
			p = append(p, x...)
		}
		return p
	}
	probe := &admission.Probe{After: time.Second, Burst: 1, Share: 0.2, Siblings: time.Minute}
	for _, on := range []bool{true, false} {
		cfg := &admission.Config{Door: &admission.Door{Probe: probe}}
		if !on {
			p := *probe
			p.Siblings = 0
			cfg.Door.Probe = &p
		}
		r, clk := newTestRouter(t, Config{Admission: cfg}, 1)
		route := func(sid, parent string, toks []uint32) {
			t.Helper()
			d, err := r.TryRoute(&Request{Tokens: toks, Agent: session.AgentContext{SessionID: sid, ParentSessionID: parent}})
			require.NoError(t, err)
			clk.Advance(time.Second)
			d.Done(Usage{PromptTokens: len(toks), CompletionTokens: 4})
		}
		route("a1", "", prompt(system, taskA, tokens(2*testBS, 10)))
		route("a2", "", prompt(system, taskA, tokens(2*testBS, 11)))
		route("b1", "", prompt(system, taskB, tokens(2*testBS, 12)))
		route("a1", "", prompt(system, taskA, tokens(2*testBS, 10), tokens(3*testBS, 13))) // a later turn
		route("a1/sub", "a1", prompt(system, tokens(4*testBS, 14)))
		h, err := r.hasher("")
		require.NoError(t, err)
		_, seq := h.AppendHashes(nil, nil, prompt(system, taskA), 0, false)
		want := map[string][2]uint64{
			"a1":     {0, 0},                                              // the first session: nothing known before it
			"a2":     {uint64(len(system) + len(taskA)), seq[len(seq)-1]}, // system prompt and task A
			"b1":     {uint64(len(system)), seq[len(system)/testBS-1]},    // the system prompt only
			"a1/sub": {0, 0},                                              // a subagent: its parent's turn
		}
		r.mu.Lock()
		for id, w := range want {
			if !on {
				w = [2]uint64{}
			}
			p, ok := r.adm.Program(clk.Now(), id)
			require.True(t, ok, id)
			require.Equal(t, w, [2]uint64{uint64(p.FirstPrefix), p.SiblingKey}, "%s (Siblings on: %v)", id, on)
		}
		r.mu.Unlock()
	}
}
