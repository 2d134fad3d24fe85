package agentkv

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

func TestRemoteLoadSteersRouting(t *testing.T) {
	r, _ := newTestRouter(t, Config{Index: IndexExact}, 1, 2)
	w1 := flashindex.Worker{ID: 1}
	w2 := flashindex.Worker{ID: 2}
	// Another replica has four requests on worker 1: this one must pick 2.
	r.SetRemoteLoad(w1, Load{PrefillTokens: 4000, DecodeBlocks: 1000, Requests: 4})
	for i := 0; i < 5; i++ {
		d, err := r.Route(context.Background(), &Request{Tokens: make([]uint32, 64)})
		require.NoError(t, err)
		require.Equal(t, w2, d.Worker, "request %d", i)
		d.Done(Usage{})
	}
	require.Equal(t, Load{PrefillTokens: 4000, DecodeBlocks: 1000, Requests: 4}, r.WorkerLoad(w1))
	require.Equal(t, Load{}, r.OwnLoad(w1))
	// Cleared: the tie is broken either way, and worker 1 is chosen again
	// at some point.
	r.SetRemoteLoad(w1, Load{})
	require.Equal(t, Load{}, r.WorkerLoad(w1))
	seen := map[flashindex.Worker]bool{}
	for i := 0; i < 64 && len(seen) < 2; i++ {
		d, err := r.Route(context.Background(), &Request{Tokens: make([]uint32, 64)})
		require.NoError(t, err)
		seen[d.Worker] = true
		d.Done(Usage{})
	}
	require.True(t, seen[w1] && seen[w2])
}

func TestLoadObserverSeesEveryChange(t *testing.T) {
	r, clk := newTestRouter(t, Config{RequestTTL: time.Minute, Index: IndexExact}, 1)
	w1 := flashindex.Worker{ID: 1}
	var got []Load
	r.SetLoadObserver(func(w flashindex.Worker) {
		require.Equal(t, w1, w)
		got = append(got, r.OwnLoad(w)) // no router lock is held here
	})
	r.SetRemoteLoad(w1, Load{Requests: 7}) // remote load is not own load
	d, err := r.Route(context.Background(), &Request{Tokens: make([]uint32, 8), ExpectedOutputTokens: 8})
	require.NoError(t, err)
	d.FirstToken()
	d.Done(Usage{})
	require.Equal(t, []Load{{PrefillTokens: 8, DecodeBlocks: 4, Requests: 1}, {DecodeBlocks: 4, Requests: 1}, {}}, got)

	// A request swept for lack of life is a change too.
	got = nil
	_, err = r.Route(context.Background(), &Request{Tokens: make([]uint32, 8)})
	require.NoError(t, err)
	clk.Advance(2 * time.Minute)
	require.Equal(t, 1, r.Tick().SweptRequests)
	require.Equal(t, []Load{{PrefillTokens: 8, DecodeBlocks: 2, Requests: 1}, {}}, got)

	r.SetLoadObserver(nil)
	d, err = r.Route(context.Background(), &Request{Tokens: make([]uint32, 8)})
	require.NoError(t, err)
	d.Done(Usage{})
	require.Len(t, got, 2)
}

func TestAllowedRanksPinsTheRank(t *testing.T) {
	r, _ := newTestRouter(t, Config{})
	require.NoError(t, r.AddWorker(WorkerFunc(func() WorkerInfo {
		return WorkerInfo{ID: 5, DPRanks: 4, BlockSize: testBS, KVCapacityTokens: 1 << 20}
	})))
	pin := flashindex.Worker{ID: 5, DPRank: 2}
	for i := 0; i < 20; i++ {
		d, err := r.Route(context.Background(), &Request{Tokens: make([]uint32, 16),
			Override: &Override{AllowedRanks: []flashindex.Worker{pin}}})
		require.NoError(t, err)
		require.Equal(t, pin, d.Worker)
	}
	_, err := r.Route(context.Background(), &Request{Tokens: make([]uint32, 16),
		Override: &Override{AllowedRanks: []flashindex.Worker{{ID: 6}}}})
	require.ErrorIs(t, err, ErrNoWorkers)
}

func TestIndexSnapshotStartsWarm(t *testing.T) {
	a, _ := newTestRouter(t, Config{}, 1)
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	require.NoError(t, a.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 1, Kind: flashindex.Stored,
		Blocks: []flashindex.StoredBlock{{EngineHash: 10, Tokens: tokens[:4]}, {EngineHash: 11, Tokens: tokens[4:]}}}))
	var buf bytes.Buffer
	require.NoError(t, a.Index().Snapshot(&buf))
	want := buf.Bytes()

	b, err := New(Config{BlockSize: testBS, IndexSnapshot: bytes.NewReader(want)})
	require.NoError(t, err)
	require.NoError(t, b.AddWorker(worker(1, 1<<20)))
	d, err := b.Route(context.Background(), &Request{Tokens: tokens})
	require.NoError(t, err)
	require.Equal(t, 8, d.Cached.Device)
	// The restored index still drops the events it already holds.
	require.NoError(t, b.ApplyEvent(&flashindex.Event{Worker: flashindex.Worker{ID: 1}, EventID: 1, Kind: flashindex.Cleared}))
	var again bytes.Buffer
	require.NoError(t, b.Index().Snapshot(&again))
	require.Equal(t, want, again.Bytes())

	_, err = New(Config{BlockSize: testBS, IndexSnapshot: bytes.NewReader([]byte("nope"))})
	require.ErrorIs(t, err, flashindex.ErrSnapshotFormat)
}
