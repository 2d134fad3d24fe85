package eventplane

import (
	"bytes"
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
	layouts := []sharedpool.Layout{{}, {PageSize: 16, MLA: true},
		{Backend: "mooncake", PageSize: 64, TPSize: 2, PPSize: 2, TPLCMSize: 4, SplitHeads: true, Eagle: true, ExtraBackendTag: "tag", KeyPrefix: "tag_m"}}
	for _, l := range layouts {
		data, err := AppendPool(nil, &in, l)
		require.NoError(t, err)
		var out PoolBatch
		require.NoError(t, DecodePool(data, &out))
		require.Equal(t, in.Seq, out.Batch.Seq)
		require.Equal(t, in.TimestampMillis, out.Batch.TimestampMillis)
		require.Equal(t, in.DPRank, out.Batch.DPRank)
		require.Equal(t, in.Events[0], out.Batch.Events[0])
		require.Equal(t, sharedpool.Clear, out.Batch.Events[1].Kind)
		require.Equal(t, l, out.Layout)
		for i := range data {
			require.ErrorIs(t, DecodePool(data[:i], &out), ErrMalformed)
		}
		require.ErrorIs(t, DecodePool(append(data, 0), &out), ErrMalformed)
	}
}

// A rejected event with a key travels as a remove of that object on
// every medium, in its place; the replica's pool then equals a pool fed
// the original batch.
func TestPoolRejectionsTravelAsRemoves(t *testing.T) {
	l := sharedpool.Layout{PageSize: 4, MLA: true}
	pages := sharedpool.PageHashes(make([]uint32, 12), 4, false, nil)
	key := func(i int) string { return l.AppendObjectKeys(nil, pages[i])[0] }
	first := sharedpool.Batch{Seq: 1, Events: []sharedpool.Event{
		{Kind: sharedpool.Store, Key: key(0), Medium: "cpu"}, {Kind: sharedpool.Store, Key: key(0), Medium: "disk"},
		{Kind: sharedpool.Store, Key: key(1)}, {Kind: sharedpool.Store, Key: key(2)},
	}}
	second := sharedpool.Batch{Seq: 2,
		Events: []sharedpool.Event{{Kind: sharedpool.Store, Key: key(1)}, {Kind: sharedpool.Store, Key: key(2)}},
		Rejected: []sharedpool.Rejection{
			{Index: 0, Key: key(0), Err: sharedpool.ErrMalformedEvent}, // drops page 0 on both media
			{Index: 2, Err: sharedpool.ErrMalformedEvent},              // no key: nothing to drop
			{Index: 4, Key: key(2), Err: sharedpool.ErrMalformedEvent}, // after its re-store: page 2 goes
		}}
	ref, err := sharedpool.NewPool(sharedpool.Config{Layout: l})
	require.NoError(t, err)
	got, err := sharedpool.NewPool(sharedpool.Config{})
	require.NoError(t, err)
	for _, b := range []*sharedpool.Batch{&first, &second} {
		ref.Apply(b)
		data, err := AppendPool(nil, b, l)
		require.NoError(t, err)
		var pb PoolBatch
		require.NoError(t, DecodePool(data, &pb))
		_, err = got.SetLayout(pb.Layout)
		require.NoError(t, err)
		got.Apply(&pb.Batch)
	}
	var a, b bytes.Buffer
	require.NoError(t, ref.Snapshot(&a))
	require.NoError(t, got.Snapshot(&b))
	require.Equal(t, a.Bytes(), b.Bytes())
	require.Equal(t, 1, got.Len())
	require.True(t, got.Contains(pages[1]))
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
	seed, _ := AppendPool(nil, &sharedpool.Batch{Seq: 1, Events: []sharedpool.Event{{Kind: sharedpool.Store, Key: "x"}}}, sharedpool.Layout{})
	f.Add(seed)
	seed, _ = AppendPool(nil, &sharedpool.Batch{Seq: 2}, sharedpool.Layout{PageSize: 16, TPSize: 2})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var b PoolBatch
		if err := DecodePool(data, &b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		}
	})
}
