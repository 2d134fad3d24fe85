package sglang

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"net"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agentkv/agentkv/sharedpool"
)

// waitBound bounds the waits for what must happen (events delivered, a
// replica synced): only a condition that never comes reaches it, so it is
// far above what they take on a loaded 2-core machine.
const waitBound = 2 * time.Minute

var storeLayout = sharedpool.Layout{PageSize: 4, TPSize: 2}

// quietStoreZMQ keeps the test's own sockets from logging.
var quietStoreZMQ = zmq4.WithLogger(log.New(io.Discard, "", 0))

func newPool(t *testing.T) *sharedpool.Pool {
	p, err := sharedpool.NewPool(sharedpool.Config{Layout: storeLayout, Seed: 1})
	require.NoError(t, err)
	return p
}

// storeFrames encodes one Mooncake master batch in Dynamo's
// {event_type, object_key, tenant_id, group_id} shape.
func storeFrames(t *testing.T, seq uint64, kind string, keys []string) [][]byte {
	evs := make([]map[string]any, len(keys))
	for i, k := range keys {
		evs[i] = map[string]any{"event_type": kind, "object_key": k, "tenant_id": "default", "group_id": ""}
	}
	payload, err := msgpack.Marshal([]any{time.Now().UnixMilli(), evs})
	require.NoError(t, err)
	s := make([]byte, 8)
	binary.BigEndian.PutUint64(s, seq)
	return [][]byte{[]byte("mooncake"), s, payload}
}

func pageKeys(pages []sharedpool.PageHash) []string {
	var keys []string
	for _, p := range pages {
		keys = storeLayout.AppendObjectKeys(keys, p)
	}
	return keys
}

func TestStoreHandleAppliesAndCounts(t *testing.T) {
	pool := newPool(t)
	var reports []sharedpool.Report
	s, err := NewStoreSubscriber(StoreConfig{Endpoint: "tcp://127.0.0.1:1", Pool: pool,
		OnReport: func(r sharedpool.Report) { reports = append(reports, r) }})
	require.NoError(t, err)
	toks := make([]uint32, 16)
	for i := range toks {
		toks[i] = uint32(i + 1)
	}
	pages := sharedpool.PageHashes(toks, 4, false, nil)
	keys := pageKeys(pages)
	require.Len(t, keys, 4*4, "4 pages × 2 TP ranks × K and V")

	// All objects of pages 0-2, but only some of page 3's: 3 pages present.
	s.Handle(storeFrames(t, 1, "stored", keys[:14]))
	h, err := pool.Query(pages)
	require.NoError(t, err)
	require.Equal(t, 3, h.Total)
	// Removing one object of page 1 splits the hits.
	s.Handle(storeFrames(t, 2, "removed", keys[4:5]))
	h, err = pool.Query(pages)
	require.NoError(t, err)
	require.Equal(t, 2, h.Total)
	require.Equal(t, 1, h.SharedBeyondDevice(1))

	// Garbage is counted and skipped; the next good batch still applies.
	s.Handle([][]byte{[]byte("x")})
	s.Handle([][]byte{[]byte("t"), {0, 0, 0, 0, 0, 0, 0, 3}, {0xc1}})
	s.Handle(storeFrames(t, 3, "stored", keys[4:5]))
	h, _ = pool.Query(pages)
	require.Equal(t, 3, h.Total)

	// A sequence gap clears the pool and is reported.
	s.Handle(storeFrames(t, 9, "stored", keys[14:16]))
	st := s.Stats()
	require.EqualValues(t, 2, st.Malformed)
	require.EqualValues(t, 1, st.Gaps)
	require.EqualValues(t, 4, st.Batches)
	require.EqualValues(t, 14+1+1+2, st.Applied)
	require.NotNil(t, reports[len(reports)-1].Gap)
	h, _ = pool.Query(pages)
	require.Equal(t, 0, h.Total, "after the gap only page 3's last objects are known: no page complete")
}

func TestNewStoreSubscriberValidates(t *testing.T) {
	_, err := NewStoreSubscriber(StoreConfig{Pool: newPool(t)})
	require.Error(t, err)
	_, err = NewStoreSubscriber(StoreConfig{Endpoint: "tcp://127.0.0.1:1"})
	require.ErrorIs(t, err, ErrNoPool)
}

// TestStoreSubscriberOverZMQ publishes store events from a Go PUB socket
// and checks they reach the pool over a real connection.
func TestStoreSubscriberOverZMQ(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", l.Addr().(*net.TCPAddr).Port)
	l.Close()
	pub := zmq4.NewPub(context.Background(), quietStoreZMQ)
	require.NoError(t, pub.Listen(ep))
	defer pub.Close()

	pool := newPool(t)
	s, err := NewStoreSubscriber(StoreConfig{Endpoint: ep, Pool: pool, ReconnectMin: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))
	defer s.Close()

	toks := []uint32{9, 8, 7, 6, 5, 4, 3, 2}
	pages := sharedpool.PageHashes(toks, 4, false, nil)
	keys := pageKeys(pages)
	// PUB drops messages until the subscription arrives: republish (each
	// batch a new sequence number) until the pool holds both pages.
	deadline := time.Now().Add(waitBound)
	for seq := uint64(1); ; seq++ {
		require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom(storeFrames(t, seq, "stored", keys)...)))
		time.Sleep(10 * time.Millisecond) // let the network deliver; not a test clock
		if h, _ := pool.Query(pages); h.Total == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "store events never arrived")
	}
	require.True(t, s.Stats().Connected)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
}

// With OnBatch and no Pool (a relay), every decoded batch is handed on in
// order; undecodable messages are counted and skipped.
func TestStoreOnBatchForwards(t *testing.T) {
	_, err := NewStoreSubscriber(StoreConfig{Endpoint: "tcp://127.0.0.1:1"})
	require.ErrorIs(t, err, ErrNoPool)
	var got []sharedpool.Batch
	s, err := NewStoreSubscriber(StoreConfig{Endpoint: "tcp://127.0.0.1:1", OnBatch: func(b *sharedpool.Batch) {
		got = append(got, *b)
	}})
	require.NoError(t, err)
	toks := make([]uint32, 8)
	pages := sharedpool.PageHashes(toks, 4, false, nil)
	keys := pageKeys(pages)
	s.Handle(storeFrames(t, 7, "stored", keys[:3]))
	s.Handle([][]byte{[]byte("x")})
	s.Handle(storeFrames(t, 8, "removed", keys[:1]))
	require.Len(t, got, 2)
	require.Equal(t, uint64(7), got[0].Seq)
	require.Len(t, got[0].Events, 3)
	require.Equal(t, keys[1], got[0].Events[1].Key)
	require.Equal(t, sharedpool.Store, got[0].Events[1].Kind)
	require.Equal(t, sharedpool.Remove, got[1].Events[0].Kind)
	st := s.Stats()
	require.Equal(t, uint64(2), st.Batches)
	require.Equal(t, uint64(4), st.Applied)
	require.Equal(t, uint64(1), st.Malformed)

	// With a Pool as well, the pool applies what was handed on.
	pool := newPool(t)
	n := 0
	s, err = NewStoreSubscriber(StoreConfig{Endpoint: "tcp://127.0.0.1:1", Pool: pool, OnBatch: func(*sharedpool.Batch) { n++ }})
	require.NoError(t, err)
	s.Handle(storeFrames(t, 1, "stored", keys))
	require.Equal(t, 1, n)
	require.Equal(t, 2, pool.Len())
}
