package eventplane

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// burst is a deterministic burst of long requests of heavy-tailed sizes
// with unrelated prompts (no cache overlap): only load can spread them.
func burst(n int) [][]uint32 {
	rng := rand.New(rand.NewPCG(11, 12))
	out := make([][]uint32, n)
	for i := range out {
		size := 64 + int(rng.ExpFloat64()*600)
		p := make([]uint32, size)
		for k := range p {
			p[k] = rng.Uint32()
		}
		out[i] = p
	}
	return out
}

// imbalance is the largest worker's prefill tokens over the mean.
func imbalance(rs []*agentkv.Router, workers []uint64) float64 {
	total, most := 0, 0
	for _, id := range workers {
		s := 0
		for _, r := range rs {
			s += r.OwnLoad(flashindex.Worker{ID: id}).PrefillTokens
		}
		total += s
		most = max(most, s)
	}
	return float64(most) / (float64(total) / float64(len(workers)))
}

func routeBurst(t *testing.T, rps []*Replica, rs []*agentkv.Router, prompts [][]uint32, waitShared bool) {
	t.Helper()
	for i, p := range prompts {
		r := rs[i%len(rs)]
		_, err := r.Route(context.Background(), &agentkv.Request{Tokens: p})
		require.NoError(t, err)
		if !waitShared {
			continue
		}
		// Every other replica sees this request's load before the next
		// arrives (what a burst spaced by more than one NATS hop sees).
		deadline := time.Now().Add(waitBound)
		for _, o := range rs {
			for {
				n := 0
				for _, w := range o.Workers() {
					n += o.WorkerLoad(w).Requests
				}
				if n == i+1 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
}

func TestHerding(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	prompts := burst(96)

	single := newRouter(t, nil, workers...)
	routeBurst(t, nil, []*agentkv.Router{single}, prompts, false)
	one := imbalance([]*agentkv.Router{single}, workers)

	local := []*agentkv.Router{newRouter(t, nil, workers...), newRouter(t, nil, workers...)}
	routeBurst(t, nil, local, prompts, false)
	unshared := imbalance(local, workers)

	shared := []*agentkv.Router{newRouter(t, nil, workers...), newRouter(t, nil, workers...)}
	var rps []*Replica
	for i, r := range shared {
		rps = append(rps, startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: []string{"a", "b"}[i], Router: r}))
	}
	routeBurst(t, rps, shared, prompts, true)
	both := imbalance(shared, workers)
	t.Logf("imbalance (max/mean prefill tokens, 96 requests, 8 workers): single router %.3f, two replicas with shared load %.3f, without %.3f",
		one, both, unshared)
	require.InDelta(t, one, both, 0.02, "shared load must spread like one router")
	require.Greater(t, unshared, both, "without shared load the replicas herd")
	for _, rp := range rps {
		require.Positive(t, rp.Stats().LoadReceived)
	}
}

// TestHerdingOnACachedPrefix is the herding that hurts: every request
// shares a long prefix that one worker holds, so each replica, alone,
// sends its first requests there; two replicas that do not share load
// both do, and the worker gets twice the new work.
func TestHerdingOnACachedPrefix(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3, 4}
	rng := rand.New(rand.NewPCG(3, 4))
	prefix := make([]uint32, 1024)
	for k := range prefix {
		prefix[k] = rng.Uint32()
	}
	stored := flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 1, Kind: flashindex.Stored, BlockSize: testBS}
	for k := 0; k < len(prefix); k += testBS {
		stored.Blocks = append(stored.Blocks, flashindex.StoredBlock{EngineHash: uint64(k + 1), Tokens: prefix[k : k+testBS]})
	}
	prompts := make([][]uint32, 24)
	for i := range prompts {
		p := append([]uint32(nil), prefix...)
		for k := 0; k < 64; k++ {
			p = append(p, rng.Uint32())
		}
		prompts[i] = p
	}
	mk := func() *agentkv.Router {
		r := newRouter(t, nil, workers...)
		require.NoError(t, r.ApplyEvent(&stored))
		return r
	}
	onHolder := func(rs []*agentkv.Router) int {
		n := 0
		for _, r := range rs {
			n += r.OwnLoad(flashindex.Worker{ID: 1}).Requests
		}
		return n
	}
	single := []*agentkv.Router{mk()}
	routeBurst(t, nil, single, prompts, false)
	local := []*agentkv.Router{mk(), mk()}
	routeBurst(t, nil, local, prompts, false)
	shared := []*agentkv.Router{mk(), mk()}
	for i, r := range shared {
		startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: []string{"a", "b"}[i], Router: r})
	}
	routeBurst(t, nil, shared, prompts, true)
	t.Logf("requests on the worker holding the prefix (24 requests, 4 workers): single router %d, two replicas with shared load %d, without %d; imbalance %.3f / %.3f / %.3f",
		onHolder(single), onHolder(shared), onHolder(local), imbalance(single, workers), imbalance(shared, workers), imbalance(local, workers))
	require.Equal(t, onHolder(single), onHolder(shared), "shared load herds no more than one router")
	require.Greater(t, onHolder(local), onHolder(single), "without shared load both replicas pick the holder")
}

func TestAffinityBehindRoundRobin(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3, 4}
	var rps []*Replica
	for _, name := range []string{"a", "b", "c"} {
		// A generous BindTimeout: on a loaded test machine a lookup past
		// the default 250 ms would fall back to the local table (counted,
		// degraded), which this test is not about.
		rps = append(rps, startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: name, Router: newRouter(t, nil, workers...),
			BindTimeout: 10 * time.Second}))
	}
	single := newRouter(t, nil, workers...)

	const sessions, turns = 200, 6
	rng := rand.New(rand.NewPCG(5, 6))
	prompts := make([][]uint32, sessions)
	for s := range prompts {
		prompts[s] = make([]uint32, 64)
		for k := range prompts[s] {
			prompts[s][k] = rng.Uint32()
		}
	}
	// hits counts prompt blocks the chosen worker already saw (a simulated
	// prefix cache per worker).
	type sim map[uint64]map[uint64]bool
	hitRate := func(c sim, w uint64, seq []uint64, hits, total *int) {
		if c[w] == nil {
			c[w] = map[uint64]bool{}
		}
		for _, h := range seq {
			if c[w][h] {
				*hits++
			}
			c[w][h] = true
		}
		*total += len(seq)
	}
	h, _ := flashindex.NewHasher(testBS, "")
	bound := map[int]flashindex.Worker{}
	cacheR, cacheS := sim{}, sim{}
	var hitsR, totR, hitsS, totS int
	lb := 0
	srcs := map[BindingSource]int{}
	for turn := 0; turn < turns; turn++ {
		for s := 0; s < sessions; s++ {
			prompts[s] = append(prompts[s], uint32(turn), uint32(s), 7, 9, 1, 2, 3, 4) // the turn appends
			ac := session.AgentContext{SessionID: "sess-" + string(rune('A'+s%26)) + "-" + itoa(s)}
			rp := rps[lb%len(rps)] // round-robin load balancer
			lb++
			d, src, err := rp.RouteBinding(context.Background(), &agentkv.Request{Tokens: prompts[s], Agent: ac})
			require.NoError(t, err)
			srcs[src]++
			if w, ok := bound[s]; ok {
				require.Equal(t, w, d.Worker, "session %d turn %d moved (source %v)", s, turn, src)
			}
			bound[s] = d.Worker
			_, seq := h.AppendHashes(nil, nil, prompts[s], 0, false)
			hitRate(cacheR, d.Worker.ID, seq, &hitsR, &totR)
			d.Done(agentkv.Usage{})

			ds, err := single.Route(context.Background(), &agentkv.Request{Tokens: prompts[s], Agent: ac})
			require.NoError(t, err)
			hitRate(cacheS, ds.Worker.ID, seq, &hitsS, &totS)
			ds.Done(agentkv.Usage{})
		}
	}
	t.Logf("binding sources: %v; hit rate replicas %.4f, single router %.4f", srcs, float64(hitsR)/float64(totR), float64(hitsS)/float64(totS))
	require.Equal(t, sessions, srcs[BindNew])
	require.Equal(t, sessions*(turns-1), srcs[BindShared])
	require.Equal(t, hitsS, hitsR, "same simulated hit rate as one router")

	// A subagent's first turn goes where its parent is bound.
	child := session.AgentContext{SessionID: "child-0", ParentSessionID: "sess-A-0"}
	d, src, err := rps[1].RouteBinding(context.Background(), &agentkv.Request{Tokens: []uint32{5, 5, 5, 5}, Agent: child})
	require.NoError(t, err)
	require.Equal(t, BindParent, src)
	require.Equal(t, bound[0], d.Worker)
	d.Done(agentkv.Usage{})

	// NATS down: replicas fall back to their local tables, and say so.
	ns.stop()
	for s := 0; s < 30; s++ {
		rp := rps[lb%len(rps)]
		lb++
		ac := session.AgentContext{SessionID: "sess-" + string(rune('A'+s%26)) + "-" + itoa(s)}
		d, src, err := rp.RouteBinding(context.Background(), &agentkv.Request{Tokens: prompts[s], Agent: ac})
		require.NoError(t, err)
		require.Equal(t, BindLocal, src)
		require.Equal(t, bound[s], d.Worker, "local binding kept session %d", s)
		d.Done(agentkv.Usage{})
	}
	for _, rp := range rps {
		require.ErrorIs(t, rp.Ready(), ErrDegraded)
		require.Positive(t, rp.Stats().BindFallbacks)
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
		if i == 0 {
			return string(b)
		}
	}
}

func TestWorkerGoneEverywhere(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2}
	a := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, workers...), BindTimeout: 10 * time.Second})
	b := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "b", Router: newRouter(t, nil, workers...), BindTimeout: 10 * time.Second})
	pp := connect(t, ns, cfg)
	relay := func(id uint64) *Publisher {
		pb, err := NewPublisher(pp, PublisherConfig{Worker: WorkerInfo{ID: id, BlockSize: testBS}})
		require.NoError(t, err)
		pb.Start(context.Background())
		return pb
	}
	r1, r2 := relay(1), relay(2)
	defer r2.Close()
	ev := flashindex.Event{Worker: flashindex.Worker{ID: 1}, Kind: flashindex.Stored, BlockSize: testBS,
		Blocks: []flashindex.StoredBlock{{EngineHash: 1, Tokens: []uint32{1, 2, 3, 4}}}}
	require.NoError(t, r1.Apply(&ev))
	flush(t, r1)
	waitSynced(t, a.p, a, b)
	// A session bound to worker 1.
	ac := session.AgentContext{SessionID: "s"}
	d, src, err := a.RouteBinding(context.Background(), &agentkv.Request{Tokens: []uint32{1, 2, 3, 4}, Agent: ac})
	require.NoError(t, err)
	require.Equal(t, BindNew, src)
	require.Equal(t, uint64(1), d.Worker.ID, "worker 1 holds the prefix")
	d.Done(agentkv.Usage{})

	require.NoError(t, r1.Close()) // the relay goes: its worker with it
	// Router.RemoveWorker drops the worker from its list, then from the
	// index: wait for both (under load a check between them saw the
	// blocks still indexed).
	gone := func(rp *Replica) bool {
		return len(rp.r.Workers()) == 1 && len(rp.r.Index().FindMatches(mustSeq(t, []uint32{1, 2, 3, 4}), nil)) == 0
	}
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) && (!gone(a) || !gone(b)) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, rp := range []*Replica{a, b} {
		require.Equal(t, []flashindex.Worker{{ID: 2}}, rp.r.Workers())
		require.Empty(t, rp.r.Index().FindMatches(mustSeq(t, []uint32{1, 2, 3, 4}), nil))
	}
	d, src, err = b.RouteBinding(context.Background(), &agentkv.Request{Tokens: []uint32{1, 2, 3, 4}, Agent: ac})
	require.NoError(t, err)
	require.Equal(t, BindMoved, src)
	require.Equal(t, uint64(2), d.Worker.ID)
	d.Done(agentkv.Usage{})
	d, src, err = a.RouteBinding(context.Background(), &agentkv.Request{Tokens: []uint32{1, 2, 3, 4}, Agent: ac})
	require.NoError(t, err)
	require.Equal(t, BindShared, src)
	require.Equal(t, uint64(2), d.Worker.ID)
	d.Done(agentkv.Usage{})
}

func mustSeq(t *testing.T, tokens []uint32) []uint64 {
	h, err := flashindex.NewHasher(testBS, "")
	require.NoError(t, err)
	_, seq := h.AppendHashes(nil, nil, tokens, 0, false)
	return seq
}

// TestRestartedReplicaReplacesStaleLoad: a replica killed with requests
// in flight leaves its load on the others; its successor (same name, an
// idle router) replaces it with its first report at once, not at its
// first heartbeat (an hour here). The replica process test saw the stale
// load steer the survivors' routing after a restart.
func TestRestartedReplicaReplacesStaleLoad(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	ra, rb := newRouter(t, nil, 1, 2), newRouter(t, nil, 1, 2)
	m, err := NewMetrics(nil)
	require.NoError(t, err)
	startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: ra, LoadEvery: time.Hour, Metrics: m})
	pb := connect(t, ns, cfg)
	b := startReplica(t, pb, ReplicaConfig{Name: "b", Router: rb, LoadEvery: time.Hour})
	_, err = rb.Route(context.Background(), &agentkv.Request{Tokens: burst(1)[0]})
	require.NoError(t, err)
	seen := func() int {
		n := 0
		for _, w := range ra.Workers() {
			n += ra.WorkerLoad(w).Requests
		}
		return n
	}
	require.Eventually(t, func() bool { return seen() == 1 }, waitBound, time.Millisecond, "a sees b's request")
	require.Equal(t, 1.0, testutil.ToFloat64(m.remoteReqs), "agentkv_eventplane_remote_requests")
	// b dies with its request in flight: no report says it ended.
	require.NoError(t, b.Close())
	pb.Close()
	require.Equal(t, 1, seen(), "a still counts the dead replica's request")
	startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "b", Router: newRouter(t, nil, 1, 2), LoadEvery: time.Hour})
	require.Eventually(t, func() bool { return seen() == 0 }, waitBound, time.Millisecond,
		"the restarted b's first report replaces its predecessor's load")
	require.Zero(t, testutil.ToFloat64(m.remoteReqs))
}
