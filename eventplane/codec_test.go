package eventplane

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

func TestKVRoundTrip(t *testing.T) {
	w := flashindex.Worker{ID: 1 << 63, DPRank: 3}
	evs := []flashindex.Event{
		{Worker: w, EventID: 7, Kind: flashindex.Stored, Tier: flashindex.Host, Parent: 99, HasParent: true, BlockSize: 4, LoRA: "ad",
			Blocks: []flashindex.StoredBlock{{EngineHash: 1, LocalHash: 11, HasLocalHash: true}, {EngineHash: 2, Tokens: []uint32{1, 2, 3}}}},
		{Worker: w, EventID: 8, Kind: flashindex.Removed, Tier: flashindex.Disk, Hashes: []uint64{1, 1<<64 - 1}},
		{Worker: w, EventID: 9, Kind: flashindex.Cleared},
	}
	data, err := AppendKV(nil, w, evs, nil)
	require.NoError(t, err)
	var b KVBatch
	require.NoError(t, DecodeKV(data, &b))
	require.Equal(t, w, b.Worker)
	require.Len(t, b.Events, 3)
	require.Equal(t, evs[0], b.Events[0])
	require.Equal(t, evs[1].Hashes, b.Events[1].Hashes)
	require.Equal(t, flashindex.Cleared, b.Events[2].Kind)
	require.Equal(t, uint64(9), b.Events[2].EventID)

	// A hasher turns tokens into local hashes.
	data2, err := AppendKV(nil, w, evs[:1], func(_ string, sb *flashindex.StoredBlock) (uint64, bool) { return 42, true })
	require.NoError(t, err)
	require.NoError(t, DecodeKV(data2, &b))
	require.Equal(t, uint64(42), b.Events[0].Blocks[1].LocalHash)
	require.True(t, b.Events[0].Blocks[1].HasLocalHash)
	require.Less(t, len(data2), len(data))

	// Every truncation is malformed, never a panic.
	for i := range data {
		err := DecodeKV(data[:i], &b)
		require.True(t, errors.Is(err, ErrMalformed), "prefix %d: %v", i, err)
	}
	require.ErrorIs(t, DecodeKV(append(data, 0), &b), ErrMalformed)
}

func TestPoolRoundTrip(t *testing.T) {
	in := sharedpool.Batch{Seq: 5, TimestampMillis: 1234, DPRank: -1, Events: []sharedpool.Event{
		{Kind: sharedpool.Store, Key: "k1", GroupID: "g", Tenant: "t", Backend: "b", Medium: "cpu", ID: 3, SeqHashes: []uint64{1, 2}},
		{Kind: sharedpool.Clear},
	}}
	data, err := AppendPool(nil, &in)
	require.NoError(t, err)
	var out sharedpool.Batch
	require.NoError(t, DecodePool(data, &out))
	require.Equal(t, in.Seq, out.Seq)
	require.Equal(t, in.DPRank, out.DPRank)
	require.Equal(t, in.Events[0], out.Events[0])
	require.Equal(t, sharedpool.Clear, out.Events[1].Kind)
	for i := range data {
		require.ErrorIs(t, DecodePool(data[:i], &out), ErrMalformed)
	}
}

func FuzzDecodeKV(f *testing.F) {
	w := flashindex.Worker{ID: 3}
	seed, _ := AppendKV(nil, w, []flashindex.Event{
		{Worker: w, EventID: 1, Kind: flashindex.Stored, BlockSize: 4, Blocks: []flashindex.StoredBlock{{EngineHash: 1, Tokens: []uint32{1, 2, 3, 4}}}},
		{Worker: w, EventID: 2, Kind: flashindex.Removed, Hashes: []uint64{1}},
	}, nil)
	f.Add(seed)
	f.Add([]byte{0x94, 0x01, 0x01, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b KVBatch
		if err := DecodeKV(data, &b); err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// What decodes re-encodes to something that decodes the same.
		again, err := AppendKV(nil, b.Worker, b.Events, nil)
		if err != nil {
			t.Fatal(err)
		}
		var b2 KVBatch
		if err := DecodeKV(again, &b2); err != nil {
			t.Fatal(err)
		}
		if len(b2.Events) != len(b.Events) {
			t.Fatal("re-encoding changed the events")
		}
		// And the index accepts or rejects it without panicking.
		ix, _ := flashindex.New(flashindex.Config{BlockSize: 4})
		for i := range b.Events {
			_ = ix.Apply(&b.Events[i])
		}
	})
}

func FuzzDecodePool(f *testing.F) {
	seed, _ := AppendPool(nil, &sharedpool.Batch{Seq: 1, Events: []sharedpool.Event{{Kind: sharedpool.Store, Key: "x"}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b sharedpool.Batch
		if err := DecodePool(data, &b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}
