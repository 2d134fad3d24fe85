package eventplane

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// BenchmarkPublishToApplied measures one event's trip from a relay's Apply
// to being applied on a replica connected separately, on loopback.
func BenchmarkPublishToApplied(b *testing.B) {
	ns := startNATS(b)
	cfg := testConfig()
	pubs := publishers(b, connect(b, ns, cfg), 1)
	rp, err := NewReplica(connect(b, ns, cfg), ReplicaConfig{Name: "lat", Router: newRouter(b, nil, 1), NoSharedLoad: true})
	require.NoError(b, err)
	rp.testApplied = make(chan uint64, 1)
	rp.Start(context.Background())
	b.Cleanup(func() { _ = rp.Close() })
	g := newEventGen(9, 1)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev := g.event()
		t0 := time.Now()
		require.NoError(b, pubs[1].Apply(&ev))
		select {
		case <-rp.testApplied:
		case <-time.After(10 * time.Second):
			b.Fatal("event not applied")
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkCatchUp measures a replica replaying a stream it missed.
func BenchmarkCatchUp(b *testing.B) {
	ns := startNATS(b)
	cfg := testConfig()
	workers := []uint64{1, 2, 3, 4}
	pubs := publishers(b, connect(b, ns, cfg), workers...)
	const n = 200_000
	feed(b, newEventGen(4, workers...), pubs, nil, n, nil)
	flush(b, slices.Collect(mapValues(pubs))...)
	p := connect(b, ns, cfg)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rp, err := NewReplica(p, ReplicaConfig{Name: "catchup", Router: newRouter(b, nil, workers...), NoSharedLoad: true})
		require.NoError(b, err)
		t0 := time.Now()
		rp.Start(context.Background())
		waitSynced(b, p, rp)
		b.ReportMetric(float64(n)/time.Since(t0).Seconds(), "events/s")
		_ = rp.Close()
	}
}

func mapValues[K comparable, V any](m map[K]V) func(func(V) bool) {
	return func(yield func(V) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// BenchmarkSnapshot measures the size of a snapshot of one million
// resident blocks and the time to restore it (what a restarting replica
// pays before replaying the stream), and the object-store round trip.
func BenchmarkSnapshot(b *testing.B) {
	ns := startNATS(b)
	cfg := testConfig()
	p := connect(b, ns, cfg)
	r := newRouter(b, nil, 1, 2, 3, 4)
	// 1M blocks: chains of 64 blocks, 4 workers, 25 % shared prefixes.
	const blocks = 1 << 20
	var id [5]uint64
	hash := uint64(1)
	for n := 0; n < blocks; {
		w := uint64(1 + (n/64)%4)
		ev := flashindex.Event{Worker: flashindex.Worker{ID: w}, Kind: flashindex.Stored, BlockSize: testBS}
		for k := 0; k < 64; k++ {
			ev.Blocks = append(ev.Blocks, flashindex.StoredBlock{EngineHash: hash, LocalHash: hash * 0x9e3779b97f4a7c15, HasLocalHash: true})
			hash++
		}
		id[w]++
		ev.EventID = id[w]
		require.NoError(b, r.ApplyEvent(&ev))
		n += 64
	}
	rp, err := NewReplica(p, ReplicaConfig{Name: "snap", Router: r, NoSharedLoad: true})
	require.NoError(b, err)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		size, err := rp.Snapshot(ctx)
		require.NoError(b, err)
		put := time.Since(t0)
		t1 := time.Now()
		snap, err := LoadSnapshot(ctx, p)
		require.NoError(b, err)
		get := time.Since(t1)
		t2 := time.Now()
		ix, err := flashindex.Restore(bytes.NewReader(snap.Data), flashindex.Config{BlockSize: testBS})
		require.NoError(b, err)
		restore := time.Since(t2)
		require.Equal(b, blocks, ix.Stats().Blocks)
		b.ReportMetric(float64(size)/(1<<20), "MiB/1M-blocks")
		b.ReportMetric(put.Seconds()*1000, "snapshot+put-ms")
		b.ReportMetric(get.Seconds()*1000, "get-ms")
		b.ReportMetric(restore.Seconds()*1000, "restore-ms")
	}
}

// BenchmarkThroughput compares a replica's event throughput with the
// event plane in the path (relay Apply → stream → replica → index, relay
// and replica in this process) against the in-process path (adapter →
// index) on the same pre-generated events.
func BenchmarkThroughput(b *testing.B) {
	workers := []uint64{1, 2, 3, 4}
	const n = 100_000
	g := newEventGen(6, workers...)
	events := make([]flashindex.Event, n)
	for k := range events {
		events[k] = g.event()
	}
	b.Run("path=in-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			r := newRouter(b, nil, workers...)
			ids := map[flashindex.Worker]uint64{}
			t0 := time.Now()
			for k := range events {
				ev := events[k]
				ids[ev.Worker]++
				ev.EventID = ids[ev.Worker]
				_ = r.ApplyEvent(&ev)
			}
			b.ReportMetric(n/time.Since(t0).Seconds(), "events/s")
		}
	})
	b.Run("path=eventplane", func(b *testing.B) {
		ns := startNATS(b)
		cfg := testConfig()
		for i := 0; i < b.N; i++ {
			cfg.Model = "tp" + itoa(i)
			pubs := publishers(b, connect(b, ns, cfg), workers...)
			p := connect(b, ns, cfg)
			rp := startReplica(b, p, ReplicaConfig{Name: "tp", Router: newRouter(b, nil, workers...), NoSharedLoad: true})
			t0 := time.Now()
			for k := range events {
				require.NoError(b, pubs[events[k].Worker.ID].Apply(&events[k]))
			}
			tApply := time.Since(t0)
			flush(b, slices.Collect(mapValues(pubs))...)
			tPub := time.Since(t0)
			waitSynced(b, p, rp)
			b.ReportMetric(n/time.Since(t0).Seconds(), "events/s")
			b.ReportMetric(tApply.Seconds()*1000, "relay-apply-ms")
			b.ReportMetric(tPub.Seconds()*1000, "stored-ms")
		}
	})
	// The replica's side alone: the events are in the stream (published
	// by relays on other hosts); a replica consumes them into its index.
	b.Run("path=stream-to-index", func(b *testing.B) {
		ns := startNATS(b)
		cfg := testConfig()
		pubs := publishers(b, connect(b, ns, cfg), workers...)
		for k := range events {
			require.NoError(b, pubs[events[k].Worker.ID].Apply(&events[k]))
		}
		flush(b, slices.Collect(mapValues(pubs))...)
		p := connect(b, ns, cfg)
		for i := 0; i < b.N; i++ {
			rp, err := NewReplica(p, ReplicaConfig{Name: "s2i", Router: newRouter(b, nil, workers...), NoSharedLoad: true})
			require.NoError(b, err)
			t0 := time.Now()
			rp.Start(context.Background())
			waitSynced(b, p, rp)
			b.ReportMetric(n/time.Since(t0).Seconds(), "events/s")
			require.Equal(b, uint64(n), rp.Stats().Events+rp.Stats().Rejected)
			_ = rp.Close()
		}
	})
}

// BenchmarkPoolThroughput compares a replica's shared-pool throughput with
// the event plane in the path (pool-only relay ApplyPool → stream →
// replica → sharedpool.Pool) against the in-process path (Pool.Apply, what
// engine/sglang's StoreSubscriber does beside one router) on the same
// pre-generated Mooncake batches.
func BenchmarkPoolThroughput(b *testing.B) {
	const n = 20_000
	pg := newPoolGen(8, 4096)
	batches := make([]sharedpool.Batch, n)
	events := 0
	for i := range batches {
		batches[i] = pg.batch()
		events += len(batches[i].Events)
	}
	b.Run("path=in-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			pool := newTestPool(b, testPoolLayout)
			t0 := time.Now()
			for k := range batches {
				pool.Apply(&batches[k])
			}
			el := time.Since(t0).Seconds()
			b.ReportMetric(n/el, "batches/s")
			b.ReportMetric(float64(events)/el, "events/s")
		}
	})
	b.Run("path=eventplane", func(b *testing.B) {
		ns := startNATS(b)
		cfg := testConfig()
		for i := 0; i < b.N; i++ {
			cfg.Model = "pool" + itoa(i)
			relay := poolRelay(b, connect(b, ns, cfg))
			p := connect(b, ns, cfg)
			pool := newTestPool(b, sharedpool.Layout{})
			rp := startReplica(b, p, ReplicaConfig{Name: "pt", Router: newRouter(b, nil, 1), Pool: pool, NoSharedLoad: true})
			t0 := time.Now()
			for k := range batches {
				require.NoError(b, relay.ApplyPool("mooncake", &batches[k]))
			}
			flush(b, relay)
			tPub := time.Since(t0)
			waitSynced(b, p, rp)
			el := time.Since(t0).Seconds()
			require.Equal(b, uint64(n), rp.Stats().PoolBatches)
			b.ReportMetric(n/el, "batches/s")
			b.ReportMetric(float64(events)/el, "events/s")
			b.ReportMetric(tPub.Seconds()*1000, "stored-ms")
		}
	})
	b.Run("path=stream-to-pool", func(b *testing.B) {
		ns := startNATS(b)
		cfg := testConfig()
		relay := poolRelay(b, connect(b, ns, cfg))
		for k := range batches {
			require.NoError(b, relay.ApplyPool("mooncake", &batches[k]))
		}
		flush(b, relay)
		p := connect(b, ns, cfg)
		for i := 0; i < b.N; i++ {
			pool := newTestPool(b, sharedpool.Layout{})
			rp, err := NewReplica(p, ReplicaConfig{Name: "s2p", Router: newRouter(b, nil, 1), Pool: pool, NoSharedLoad: true})
			require.NoError(b, err)
			t0 := time.Now()
			rp.Start(context.Background())
			waitSynced(b, p, rp)
			el := time.Since(t0).Seconds()
			b.ReportMetric(n/el, "batches/s")
			b.ReportMetric(float64(events)/el, "events/s")
			_ = rp.Close()
		}
	})
}
