package eventplane

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// testPoolLayout writes a page as four objects (K and V of two TP
// ranks), so partial pages occur.
var testPoolLayout = sharedpool.Layout{PageSize: testBS, TPSize: 2}

// poolGen produces a realistic Mooncake store event stream: objects of a
// universe of pages stored and removed on two media, whole pages and
// parts, an occasional clear or malformed event; consecutive batch
// sequence numbers from seq+1.
type poolGen struct {
	rng      *rand.Rand
	l        sharedpool.Layout
	universe []sharedpool.PageHash
	seq      uint64
	ts       int64
}

func newPoolGen(seed uint64, pages int) *poolGen {
	g := &poolGen{rng: rand.New(rand.NewPCG(seed, 11)), l: testPoolLayout, ts: 1_700_000_000_000}
	tokens := make([]uint32, pages*testBS)
	for i := range tokens {
		tokens[i] = uint32(g.rng.IntN(1 << 16))
	}
	g.universe = sharedpool.PageHashes(tokens, testBS, false, nil)
	return g
}

func (g *poolGen) batch() sharedpool.Batch {
	g.seq++
	g.ts += int64(1 + g.rng.IntN(5))
	b := sharedpool.Batch{Seq: g.seq, TimestampMillis: g.ts, DPRank: -1}
	for range 1 + g.rng.IntN(8) {
		keys := g.l.AppendObjectKeys(nil, g.universe[g.rng.IntN(len(g.universe))])
		if g.rng.IntN(3) > 0 {
			keys = keys[:1+g.rng.IntN(len(keys))]
		}
		kind := sharedpool.Store
		switch x := g.rng.IntN(100); {
		case x < 30:
			kind = sharedpool.Remove
		case x == 99 && g.rng.IntN(10) == 0:
			b.Events = append(b.Events, sharedpool.Event{Kind: sharedpool.Clear})
			continue
		}
		medium := []string{"cpu", "cpu", "disk", ""}[g.rng.IntN(4)]
		for _, k := range keys {
			b.Events = append(b.Events, sharedpool.Event{Kind: kind, Key: k, Medium: medium, GroupID: sharedpool.GroupIDPrefix + k[:len(k)-4]})
		}
	}
	if g.rng.IntN(20) == 0 {
		keys := g.l.AppendObjectKeys(nil, g.universe[g.rng.IntN(len(g.universe))])
		b.Rejected = []sharedpool.Rejection{{Index: g.rng.IntN(len(b.Events) + 1), Key: keys[0], Err: sharedpool.ErrMalformedEvent}}
	}
	return b
}

func newTestPool(t testing.TB, l sharedpool.Layout) *sharedpool.Pool {
	t.Helper()
	p, err := sharedpool.NewPool(sharedpool.Config{Layout: l, Seed: rand.Uint64() | 1})
	require.NoError(t, err)
	return p
}

func poolSnapshot(t testing.TB, p *sharedpool.Pool) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, p.Snapshot(&buf))
	return buf.Bytes()
}

func requireSamePool(t testing.TB, want, got *sharedpool.Pool, msg string) {
	t.Helper()
	if !bytes.Equal(poolSnapshot(t, want), poolSnapshot(t, got)) {
		t.Fatalf("%s: shared pools differ\nwant %+v\ngot  %+v", msg, want.Stats(), got.Stats())
	}
}

// poolRelay is a pool-only relay: a Publisher without a worker.
func poolRelay(t testing.TB, p *Plane) *Publisher {
	t.Helper()
	pb, err := NewPublisher(p, PublisherConfig{PoolLayout: testPoolLayout})
	require.NoError(t, err)
	pb.Start(context.Background())
	t.Cleanup(func() { _ = pb.Close() })
	return pb
}

// feedMixed interleaves n KV events with pool batches (one every ten
// events) and applies both to the references.
func feedMixed(t testing.TB, g *eventGen, pg *poolGen, pubs map[uint64]*Publisher, relay *Publisher,
	ref *flashindex.Index, refPool *sharedpool.Pool, n int, ids map[flashindex.Worker]uint64) (batches, cleared int) {
	t.Helper()
	for i := 0; i < n; i++ {
		feed(t, g, pubs, ref, 1, ids)
		if i%10 == 0 {
			b := pg.batch()
			require.NoError(t, relay.ApplyPool("mooncake", &b))
			if refPool != nil && refPool.Apply(&b).Cleared() {
				cleared++
			}
			batches++
		}
	}
	return batches, cleared
}

// Shared-pool events go through the stream like KV events: a pool-only
// relay publishes a Mooncake store stream with its layout, and two
// replicas whose pools start without one end with pools identical to one
// fed the same batches in process, and indexes identical as before.
func TestSharedPoolConverges(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2}
	pubs := publishers(t, connect(t, ns, cfg), workers...)
	relay := poolRelay(t, connect(t, ns, cfg))
	pools := []*sharedpool.Pool{newTestPool(t, sharedpool.Layout{}), newTestPool(t, sharedpool.Layout{})}
	a := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, workers...), Pool: pools[0], NoSharedLoad: true})
	b := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "b", Router: newRouter(t, nil, workers...), Pool: pools[1], NoSharedLoad: true})

	ref, refPool := refIndex(t), newTestPool(t, testPoolLayout)
	pg := newPoolGen(1, 64)
	batches, cleared := feedMixed(t, newEventGen(21, workers...), pg, pubs, relay, ref, refPool, 30_000, map[flashindex.Worker]uint64{})
	flush(t, relay, pubs[1], pubs[2])
	waitSynced(t, a.p, a, b)

	for i, rp := range []*Replica{a, b} {
		requireSamePool(t, refPool, pools[i], "replica "+rp.cfg.Name+" vs the in-process pool")
		requireSameIndex(t, ref, rp.r.Index(), "replica "+rp.cfg.Name+" vs the in-process index")
		st := rp.Stats()
		require.Equal(t, uint64(batches), st.PoolBatches, "every batch applied once: %+v", st)
		require.Equal(t, uint64(cleared+1), st.PoolCleared, "the first batch brings the layout; then the same clears as in process: %+v", st)
		require.Zero(t, st.Malformed)
	}
	require.Positive(t, refPool.Len())
	h, err := pools[0].Query(pg.universe)
	require.NoError(t, err)
	want, _ := refPool.Query(pg.universe)
	require.Equal(t, want, h)
	require.Equal(t, uint64(batches), relay.Stats().PoolBatches)
	t.Logf("%d pool batches (%d clears in process), %d complete pages of %d on both replicas", batches, cleared, refPool.Len(), len(pg.universe))
}

// The shared pool is in the snapshot: a replica restarted from the
// newest snapshot has the pool at once (before any new pool event), and
// after replaying the stream both its index and its pool equal those of a
// replica that never stopped.
func TestSharedPoolRestartFromSnapshot(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	workers := []uint64{1, 2, 3}
	pubs := publishers(t, connect(t, ns, cfg), workers...)
	relay := poolRelay(t, connect(t, ns, cfg))
	g, pg := newEventGen(22, workers...), newPoolGen(2, 48)
	steadyPool, victimPool := newTestPool(t, sharedpool.Layout{}), newTestPool(t, sharedpool.Layout{})
	steady := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "steady", Router: newRouter(t, nil, workers...), Pool: steadyPool, NoSharedLoad: true})
	victim, err := NewReplica(connect(t, ns, cfg), ReplicaConfig{Name: "victim", Router: newRouter(t, nil, workers...), Pool: victimPool, NoSharedLoad: true})
	require.NoError(t, err)
	victim.Start(context.Background())

	feedMixed(t, g, pg, pubs, relay, nil, nil, 10_000, nil)
	flush(t, relay, pubs[1], pubs[2], pubs[3])
	waitSynced(t, steady.p, victim)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	_, err = victim.Snapshot(ctx)
	require.NoError(t, err)
	atSnapshot := poolSnapshot(t, victimPool)
	require.Positive(t, victimPool.Len())
	require.NoError(t, victim.Close())
	// More of both while the victim is down.
	feedMixed(t, g, pg, pubs, relay, nil, nil, 10_000, nil)
	flush(t, relay, pubs[1], pubs[2], pubs[3])

	snap, err := LoadSnapshot(ctx, steady.p)
	require.NoError(t, err)
	require.Equal(t, "victim", snap.Replica)
	require.NotNil(t, snap.Pool)
	pool := newTestPool(t, sharedpool.Layout{})
	require.NoError(t, pool.Restore(bytes.NewReader(snap.Pool)))
	require.Equal(t, atSnapshot, poolSnapshot(t, pool), "the restored pool is the victim's at the snapshot, before any event")
	l, err := pool.Layout()
	require.NoError(t, err)
	require.True(t, l.Equal(testPoolLayout))

	reborn := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "victim", Router: newRouter(t, snap.Data, workers...),
		Pool: pool, StartSeq: snap.Seq + 1, NoSharedLoad: true})
	waitSynced(t, steady.p, steady, reborn)
	requireSameIndex(t, steady.r.Index(), reborn.r.Index(), "restarted vs never stopped")
	requireSamePool(t, steadyPool, pool, "restarted vs never stopped")
	require.Less(t, reborn.Stats().PoolBatches, steady.Stats().PoolBatches, "it replayed only the batches after the snapshot")
}

// A snapshot written by a replica without a pool loads with Pool nil; an
// object with a broken index_bytes is an error, not a panic.
func TestSnapshotWithoutPool(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	p := connect(t, ns, cfg)
	pubs := publishers(t, p, 1)
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "nopool", Router: newRouter(t, nil, 1), NoSharedLoad: true})
	feed(t, newEventGen(5, 1), pubs, nil, 500, nil)
	flush(t, pubs[1])
	waitSynced(t, p, rp)
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	_, err := rp.Snapshot(ctx)
	require.NoError(t, err)
	snap, err := LoadSnapshot(ctx, p)
	require.NoError(t, err)
	require.Nil(t, snap.Pool)
	ix, err := flashindex.Restore(bytes.NewReader(snap.Data), flashindex.Config{BlockSize: testBS})
	require.NoError(t, err)
	requireSameIndex(t, rp.r.Index(), ix, "snapshot")

	obs, err := p.js.ObjectStore(ctx, p.names.snapshots)
	require.NoError(t, err)
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "replica.broken", Metadata: map[string]string{"seq": "999999", "index_bytes": "12345678"}},
		bytes.NewReader([]byte("short")))
	require.NoError(t, err)
	_, err = LoadSnapshot(ctx, p)
	require.ErrorContains(t, err, "index_bytes")
}

// A pool-only relay announces no worker and refuses KV events.
func TestPoolOnlyPublisher(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	p := connect(t, ns, cfg)
	pb := poolRelay(t, p)
	ev := flashindex.Event{Kind: flashindex.Cleared}
	require.ErrorIs(t, pb.Apply(&ev), ErrPoolOnly)
	b := newPoolGen(3, 4).batch()
	require.NoError(t, pb.ApplyPool("mooncake", &b))
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(t, pb.Flush(ctx))
	time.Sleep(100 * time.Millisecond)
	kv, err := p.js.KeyValue(ctx, p.names.workers)
	require.NoError(t, err)
	_, err = kv.Keys(ctx)
	require.ErrorIs(t, err, jetstream.ErrNoKeysFound)

	require.ErrorIs(t, pb.ApplyPool("", &b), ErrConfig)
	require.ErrorIs(t, pb.ApplyPool("mooncake", nil), ErrConfig)
	_, err = NewPublisher(p, PublisherConfig{PoolLayout: sharedpool.Layout{PageSize: 16, Backend: "redis"}})
	require.ErrorIs(t, err, ErrConfig)
	_, err = NewPublisher(p, PublisherConfig{MaxPendingPool: -1})
	require.ErrorIs(t, err, ErrConfig)
}

// Two relays carrying the same Mooncake master: the stream keeps one copy
// of each batch (same message id), and replicas see no gap.
func TestTwoRelaysOneMooncake(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	r1, r2 := poolRelay(t, connect(t, ns, cfg)), poolRelay(t, connect(t, ns, cfg))
	pool := newTestPool(t, sharedpool.Layout{})
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1), Pool: pool, NoSharedLoad: true})
	pg, ref := newPoolGen(4, 32), newTestPool(t, testPoolLayout)
	const n = 300
	for range n {
		b := pg.batch()
		require.NoError(t, r1.ApplyPool("mooncake", &b))
		require.NoError(t, r2.ApplyPool("mooncake", &b))
		ref.Apply(&b)
	}
	flush(t, r1, r2)
	waitSynced(t, rp.p, rp)
	last, err := rp.p.LastSeq(context.Background())
	require.NoError(t, err)
	require.Equal(t, uint64(n), last, "one message per batch in the stream")
	require.Equal(t, uint64(n), r1.Stats().Duplicates+r2.Stats().Duplicates)
	require.Equal(t, uint64(n), rp.Stats().PoolBatches)
	require.Zero(t, pool.Stats().Gaps)
	requireSamePool(t, ref, pool, "replica vs in process")
}

// While NATS is down the pool buffer is bounded: the overflow drops the
// buffered batches and the replicas, seeing the gap in the Mooncake
// sequence, clear the pool and rebuild from what follows.
func TestPoolBufferOverflow(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	pool := newTestPool(t, sharedpool.Layout{})
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1), Pool: pool, NoSharedLoad: true})
	pb, err := NewPublisher(connect(t, ns, cfg), PublisherConfig{PoolLayout: testPoolLayout, MaxPendingPool: 8})
	require.NoError(t, err)
	pb.Start(context.Background())
	t.Cleanup(func() { _ = pb.Close() })
	pg := newPoolGen(6, 16)
	for range 20 { // one at a time: the buffer holds 8
		b := pg.batch()
		require.NoError(t, pb.ApplyPool("mooncake", &b))
		flush(t, pb)
	}
	waitSynced(t, rp.p, rp)
	ns.stop()
	// Batches 21..40 while NATS is down: 21..28 buffered, dropped when 29
	// comes, 29..36 dropped when 37 comes; 37..40 stay.
	var down []sharedpool.Batch
	for range 20 {
		b := pg.batch()
		require.NoError(t, pb.ApplyPool("mooncake", &b))
		down = append(down, b)
	}
	require.Positive(t, pb.Stats().Dropped)
	ns.start()
	ref := newTestPool(t, testPoolLayout)
	for i := range down[16:] {
		ref.Apply(&down[16+i])
	}
	for range 20 {
		b := pg.batch()
		require.NoError(t, pb.ApplyPool("mooncake", &b))
		ref.Apply(&b)
		flush(t, pb)
	}
	waitSynced(t, rp.p, rp)
	require.Equal(t, uint64(1), pool.Stats().Gaps, "the gap 20 → 37 cleared the pool once")
	require.Equal(t, uint64(20+4+20), rp.Stats().PoolBatches, "%+v %+v %+v", rp.Stats(), pb.Stats(), pool.Stats())
	got, want := pool.Stats(), ref.Stats()
	require.Equal(t, [3]int{want.Pages, want.Present, want.Objects}, [3]int{got.Pages, got.Present, got.Objects})
	h, err := pool.Query(pg.universe)
	require.NoError(t, err)
	w, _ := ref.Query(pg.universe)
	require.Equal(t, w, h, "the pool holds exactly what the batches after the gap built")
}

// A server that loses its store: the replica clears its pool with its
// index (the lost batches may have removed anything) and holds exactly
// what the batches after the loss build.
func TestServerLosesItsStoreClearsThePool(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	cfg.Memory = true
	relay := poolRelay(t, connect(t, ns, cfg))
	pool := newTestPool(t, sharedpool.Layout{})
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1), Pool: pool, NoSharedLoad: true})
	pg := newPoolGen(7, 32)
	for range 200 {
		b := pg.batch()
		require.NoError(t, relay.ApplyPool("mooncake", &b))
	}
	flush(t, relay)
	waitSynced(t, rp.p, rp)
	require.Positive(t, pool.Len())

	ns.stop()
	ns.start()
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	require.NoError(t, rp.p.ensureLoop(ctx))
	pg.universe = pg.universe[:8] // the new batches touch only these pages
	ref := newTestPool(t, testPoolLayout)
	for range 50 {
		b := pg.batch()
		require.NoError(t, relay.ApplyPool("mooncake", &b))
		ref.Apply(&b)
	}
	flush(t, relay)
	deadline := time.Now().Add(waitBound)
	for rp.Stats().Truncated == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	waitSynced(t, rp.p, rp)
	got, want := pool.Stats(), ref.Stats()
	require.Equal(t, [3]int{want.Pages, want.Present, want.Objects}, [3]int{got.Pages, got.Present, got.Objects})
	require.Zero(t, got.Gaps, "reset, not a gap: the first batch after the loss starts a new sequence")
}
