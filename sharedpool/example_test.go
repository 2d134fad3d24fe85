package sharedpool_test

import (
	"encoding/binary"
	"fmt"

	"github.com/agentkv/agentkv/sharedpool"
	"github.com/vmihailenco/msgpack/v5"
)

// A TP-2 worker with a backend tag writes each page as four objects.
func ExampleLayout_AppendObjectKeys() {
	l := sharedpool.Layout{PageSize: 4, TPSize: 2, ExtraBackendTag: "prod"}
	page := sharedpool.PageHashes([]uint32{1, 2, 3, 4}, l.PageSize, l.Eagle, nil)[0]
	for _, k := range l.AppendObjectKeys(nil, page) {
		fmt.Println(k)
	}
	mla := sharedpool.Layout{PageSize: 4, MLA: true}
	fmt.Println(mla.AppendObjectKeys(nil, page))
	// Output:
	// prod_cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_0_k
	// prod_cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_0_v
	// prod_cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_1_k
	// prod_cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_1_v
	// [cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72__k]
}

// Index the store's events, then credit a worker only for shared pages
// beyond what it holds itself.
func ExampleIndex() {
	l := sharedpool.Layout{PageSize: 4, MLA: true}
	ix, err := sharedpool.New(sharedpool.Config{Layout: l})
	if err != nil {
		panic(err)
	}
	tokens := make([]uint32, 6*4)
	for i := range tokens {
		tokens[i] = uint32(100 + i)
	}
	pages := sharedpool.PageHashes(tokens, l.PageSize, l.Eagle, nil)

	// The pool holds pages 0-3 and 5.
	var evs []sharedpool.Event
	for _, i := range []int{0, 1, 2, 3, 5} {
		for _, k := range l.AppendObjectKeys(nil, pages[i]) {
			evs = append(evs, sharedpool.Event{Kind: sharedpool.Store, Key: k, Medium: "cpu"})
		}
	}
	ix.Apply(&sharedpool.Batch{Seq: 1, Events: evs})

	hits, err := ix.Query(pages)
	if err != nil {
		panic(err)
	}
	fmt.Println("ranges:", hits.Ranges, "total:", hits.Total)
	// A worker with 1 page on device and 2 more on host.
	fmt.Println("beyond device:", hits.SharedBeyondDevice(1))
	fmt.Println("beyond device+host:", hits.SharedBeyondTiers(1, 2, 0))

	// Batch 3 arrives after batch 1: batch 2 was lost.
	rep := ix.Apply(&sharedpool.Batch{Seq: 3})
	fmt.Println(rep.Gap, "pages left:", ix.Len())
	// Output:
	// ranges: [{0 4} {5 6}] total: 5
	// beyond device: 4
	// beyond device+host: 2
	// sequence gap: 3 after 1 pages left: 0
}

// Decode one ZMQ message of the Mooncake master's event publisher.
func ExampleDecodeFrames() {
	payload, _ := msgpack.Marshal([]any{
		int64(1700000000000),
		[]any{
			map[string]any{"event_type": "stored", "object_key": "k_0_k", "tenant_id": "default", "group_id": "g"},
			map[string]any{"event_type": "moved", "object_key": "k_0_v"},
		},
		0,
	})
	seq := binary.BigEndian.AppendUint64(nil, 42)
	b, err := sharedpool.DecodeFrames([][]byte{nil, seq, payload})
	if err != nil {
		panic(err)
	}
	fmt.Println(b.Seq, b.Events[0].Kind, b.Events[0].Key, b.Events[0].GroupID)
	fmt.Println(b.Rejected[0].Key, b.Rejected[0].Err)
	// Output:
	// 42 store k_0_k g
	// k_0_v sharedpool: malformed event: event 1: unknown event_type "moved"
}

// Workers that disagree on the layout are an explicit error.
func ExampleConsensus() {
	_, err := sharedpool.Consensus(map[uint64]sharedpool.Layout{
		1: {PageSize: 64, TPSize: 2},
		2: {PageSize: 64, TPSize: 4},
	})
	fmt.Println(err)
	// Output:
	// sharedpool: layout mismatch: workers 1 and 2 differ in tp_size
}
