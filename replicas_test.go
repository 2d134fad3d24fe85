package agentkv

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

func TestRemoteLoadSteersRouting(t *testing.T) {
	r, _ := newTestRouter(t, Config{}, 1, 2)
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
	r, clk := newTestRouter(t, Config{RequestTTL: time.Minute}, 1)
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
