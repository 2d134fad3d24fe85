package eventplane

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// feed publishes n generated events through one publisher per worker and
// applies each, stamped like the publisher stamps it, to ref (the
// in-process path).
func feed(t testing.TB, g *eventGen, pubs map[uint64]*Publisher, ref *flashindex.Index, n int, ids map[flashindex.Worker]uint64) {
	t.Helper()
	for i := 0; i < n; i++ {
		ev := g.event()
		require.NoError(t, pubs[ev.Worker.ID].Apply(&ev))
		if ref != nil {
			ids[ev.Worker]++
			ev.EventID = ids[ev.Worker]
			_ = ref.Apply(&ev)
		}
	}
}

func publishers(t testing.TB, p *Plane, workers ...uint64) map[uint64]*Publisher {
	t.Helper()
	out := map[uint64]*Publisher{}
	for _, id := range workers {
		pb, err := NewPublisher(p, PublisherConfig{Worker: WorkerInfo{ID: id, BlockSize: testBS}, NoAnnounce: true})
		require.NoError(t, err)
		pb.Start(context.Background())
		t.Cleanup(func() { _ = pb.Close() })
		out[id] = pb
	}
	return out
}

func refIndex(t testing.TB) *flashindex.Index {
	ix, err := flashindex.New(flashindex.Config{BlockSize: testBS})
	require.NoError(t, err)
	return ix
}

func TestTwoReplicasConverge(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3, 4}
	pubs := publishers(t, connect(t, ns, cfg), workers...)
	a := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, workers...), NoSharedLoad: true})
	b := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "b", Router: newRouter(t, nil, workers...), NoSharedLoad: true})

	ref := refIndex(t)
	ids := map[flashindex.Worker]uint64{}
	const n = 100_000
	feed(t, newEventGen(1, workers...), pubs, ref, n, ids)
	for _, pb := range pubs {
		flush(t, pb)
	}
	p := a.p
	waitSynced(t, p, a, b)

	requireSameIndex(t, a.r.Index(), b.r.Index(), "replicas diverged")
	requireSameIndex(t, ref, a.r.Index(), "replica differs from the in-process index")
	for _, rp := range []*Replica{a, b} {
		st := rp.Stats()
		require.Equal(t, uint64(n), st.Events+st.Rejected, "every event applied once: %+v", st)
		require.Zero(t, st.Malformed)
	}
	require.Equal(t, ref.Stats().Blocks, a.r.Index().Stats().Blocks)
	require.Positive(t, ref.Stats().Blocks)
}

func TestRestartFromSnapshotEqualsNeverStopped(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3}
	pubs := publishers(t, connect(t, ns, cfg), workers...)
	g := newEventGen(2, workers...)
	steady := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "steady", Router: newRouter(t, nil, workers...), NoSharedLoad: true})
	victim, err := NewReplica(connect(t, ns, cfg), ReplicaConfig{Name: "victim", Router: newRouter(t, nil, workers...), NoSharedLoad: true})
	require.NoError(t, err)
	victim.Start(context.Background())

	feed(t, g, pubs, nil, 20_000, nil)
	for _, pb := range pubs {
		flush(t, pb)
	}
	waitSynced(t, steady.p, victim)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	size, err := victim.Snapshot(ctx)
	require.NoError(t, err)
	require.Positive(t, size)
	// More events after the snapshot, while the victim is down.
	require.NoError(t, victim.Close())
	feed(t, g, pubs, nil, 20_000, nil)
	for _, pb := range pubs {
		flush(t, pb)
	}

	snap, err := LoadSnapshot(ctx, steady.p)
	require.NoError(t, err)
	require.Equal(t, "victim", snap.Replica)
	require.Positive(t, snap.Seq)
	reborn := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "victim", Router: newRouter(t, snap.Data, workers...),
		StartSeq: snap.Seq + 1, NoSharedLoad: true})
	waitSynced(t, steady.p, steady, reborn)
	requireSameIndex(t, steady.r.Index(), reborn.r.Index(), "restarted vs never stopped")
	// It replayed only what followed the snapshot.
	require.Less(t, reborn.Stats().Events+reborn.Stats().Rejected, uint64(20_001))
}

func TestNATSRestartMidStream(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2}
	pubs := publishers(t, connect(t, ns, cfg), workers...)
	a := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, workers...), NoSharedLoad: true})
	ref := refIndex(t)
	ids := map[flashindex.Worker]uint64{}
	g := newEventGen(3, workers...)

	feed(t, g, pubs, ref, 10_000, ids)
	for _, pb := range pubs {
		flush(t, pb)
	}
	ns.stop()
	// Events keep coming while NATS is down: the relays buffer them, the
	// replica keeps its index and reports degraded.
	feed(t, g, pubs, ref, 10_000, ids)
	deadline := time.Now().Add(waitBound)
	for a.Ready() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.ErrorIs(t, a.Ready(), ErrDegraded)
	ns.start()
	feed(t, g, pubs, ref, 10_000, ids)
	for _, pb := range pubs {
		flush(t, pb)
	}
	waitSynced(t, a.p, a)
	requireSameIndex(t, ref, a.r.Index(), "replica vs reference")
	st := a.Stats()
	require.Equal(t, uint64(30_000), st.Events+st.Rejected, "no event lost, none applied twice: %+v", st)
	require.NoError(t, a.Ready())
}

func TestSharedPoolEventsReachEveryReplica(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	l := sharedpool.Layout{PageSize: testBS, MLA: true}
	newPool := func() *sharedpool.Pool {
		p, err := sharedpool.NewPool(sharedpool.Config{Layout: l})
		require.NoError(t, err)
		return p
	}
	pools := []*sharedpool.Pool{newPool(), newPool()}
	for i, pool := range pools {
		startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: []string{"a", "b"}[i], Router: newRouter(t, nil, 1), Pool: pool, NoSharedLoad: true})
	}
	pb, err := NewPublisher(connect(t, ns, cfg), PublisherConfig{Worker: WorkerInfo{ID: 1, BlockSize: testBS}, NoAnnounce: true})
	require.NoError(t, err)
	pb.Start(context.Background())
	defer pb.Close()

	tokens := make([]uint32, 6*testBS)
	for i := range tokens {
		tokens[i] = uint32(100 + i)
	}
	pages := sharedpool.PageHashes(tokens, l.PageSize, l.Eagle, nil)
	ref := newPool()
	for seq, idx := range [][]int{{0, 1, 2}, {3, 5}} {
		var evs []sharedpool.Event
		for _, i := range idx {
			for _, k := range l.AppendObjectKeys(nil, pages[i]) {
				evs = append(evs, sharedpool.Event{Kind: sharedpool.Store, Key: k, Medium: "cpu"})
			}
		}
		batch := sharedpool.Batch{Seq: uint64(seq + 1), DPRank: -1, Events: evs}
		require.NoError(t, pb.ApplyPool("mooncake", &batch))
		ref.Apply(&batch)
	}
	flush(t, pb)
	want, err := ref.Query(pages)
	require.NoError(t, err)
	require.Equal(t, 5, want.Total)
	deadline := time.Now().Add(waitBound)
	for _, pool := range pools {
		for pool.Len() < ref.Len() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		got, err := pool.Query(pages)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// A server that loses its store (memory storage here) comes back with an
// empty stream: the replica clears its index, the relay starts its
// numbering over, and the replica holds exactly what follows.
func TestServerLosesItsStore(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	cfg.Memory = true
	p := connect(t, ns, cfg)
	pubs := publishers(t, p, 1, 2)
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1, 2), NoSharedLoad: true})
	g := newEventGen(12, 1, 2)
	feed(t, g, pubs, nil, 2000, nil)
	flush(t, pubs[1], pubs[2])
	waitSynced(t, p, rp)
	require.Positive(t, rp.r.Index().Stats().Blocks)

	ns.stop()
	ns.start()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(t, p.ensureLoop(ctx))
	g.resident = map[uint64][]uint64{} // the relays' engines restarted too
	ref := refIndex(t)
	feed(t, g, pubs, ref, 2000, map[flashindex.Worker]uint64{})
	flush(t, pubs[1], pubs[2])
	deadline := time.Now().Add(waitBound)
	for rp.Stats().Truncated == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	waitSynced(t, p, rp)
	requireSameIndex(t, ref, rp.r.Index(), "replica vs reference")
	require.Positive(t, rp.Stats().Truncated)
}
