package eventplane

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

// A relay that restarts continues its worker's event ids after the last
// stored one, behind a Cleared event: replicas drop what the worker held
// and rebuild from what follows, and never see an id twice.
func TestRelayRestartContinuesNumbering(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	p := connect(t, ns, cfg)
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1), NoSharedLoad: true})
	g := newEventGen(8, 1)
	ref := refIndex(t)
	ids := map[flashindex.Worker]uint64{}

	first := publishers(t, p, 1)
	feed(t, g, first, ref, 500, ids)
	flush(t, first[1])
	require.NoError(t, first[1].Close())

	// The restarted relay: its first message is a Cleared with the next id.
	second := publishers(t, p, 1)
	g.resident[1] = nil
	w := flashindex.Worker{ID: 1}
	ids[w]++
	require.NoError(t, ref.Apply(&flashindex.Event{Worker: w, EventID: ids[w], Kind: flashindex.Cleared}))
	feed(t, g, second, ref, 500, ids)
	flush(t, second[1])
	waitSynced(t, p, rp)
	requireSameIndex(t, ref, rp.r.Index(), "replica vs reference")
	require.Equal(t, uint64(1001), rp.Stats().Events+rp.Stats().Rejected)
	require.Zero(t, rp.r.Index().Stats().Gaps)
	require.Zero(t, rp.r.Index().Stats().Duplicates)
}

// Two relays for the same worker rank cannot interleave their events: the
// stream refuses a message that does not follow the subject's last one,
// and the relay that lost resynchronises (Cleared, then its events).
func TestSecondRelayIsDetected(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	p := connect(t, ns, cfg)
	a := publishers(t, p, 1)[1]
	b := publishers(t, connect(t, ns, cfg), 1)[1]
	g := newEventGen(9, 1)
	for i := 0; i < 50; i++ {
		ev := g.event()
		require.NoError(t, a.Apply(&ev))
		flush(t, a)
		ev = g.event()
		require.NoError(t, b.Apply(&ev))
		flush(t, b)
	}
	require.Positive(t, a.Stats().Conflicts+b.Stats().Conflicts)
	// The subject holds consecutive event ids: nothing interleaved.
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	st, err := p.js.Stream(ctx, p.names.stream)
	require.NoError(t, err)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	var want uint64 = 1
	last, err := p.LastSeq(ctx)
	require.NoError(t, err)
	for seen := uint64(0); seen < last; seen++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		require.NoError(t, err)
		var kb KVBatch
		require.NoError(t, DecodeKV(m.Data(), &kb))
		for _, ev := range kb.Events {
			require.Equal(t, want, ev.EventID)
			want++
		}
	}
}

// While NATS is down the relay buffers up to MaxPending events; beyond it
// it drops them and its next message starts with Cleared.
func TestRelayOverflowClears(t *testing.T) {
	ns := startNATS(t)
	cfg := testConfig()
	p := connect(t, ns, cfg)
	pb, err := NewPublisher(p, PublisherConfig{Worker: WorkerInfo{ID: 1, BlockSize: testBS}, NoAnnounce: true, MaxPending: 10})
	require.NoError(t, err)
	pb.Start(context.Background())
	defer pb.Close()
	rp := startReplica(t, connect(t, ns, cfg), ReplicaConfig{Name: "a", Router: newRouter(t, nil, 1), NoSharedLoad: true})
	g := newEventGen(10, 1)
	ref := refIndex(t)
	w := flashindex.Worker{ID: 1}
	var id uint64
	apply := func(ev flashindex.Event) {
		id++
		ev.EventID = id
		_ = ref.Apply(&ev)
	}
	for i := 0; i < 5; i++ {
		ev := g.event()
		require.NoError(t, pb.Apply(&ev))
		apply(ev)
	}
	flush(t, pb)
	ns.stop()
	var down []flashindex.Event
	for i := 0; i < 25; i++ {
		ev := g.event()
		require.NoError(t, pb.Apply(&ev))
		down = append(down, ev)
	}
	// 10 buffered, the 11th overflows (11 dropped), 10 more, the 22nd
	// overflows again: the last 3 remain, behind a Cleared.
	require.Equal(t, uint64(22), pb.Stats().Dropped)
	apply(flashindex.Event{Worker: w, Kind: flashindex.Cleared})
	for _, ev := range down[22:] {
		apply(ev)
	}
	ns.start()
	flush(t, pb)
	waitSynced(t, p, rp)
	requireSameIndex(t, ref, rp.r.Index(), "replica vs reference")
	require.Equal(t, uint64(9), rp.Stats().Events+rp.Stats().Rejected)
}
