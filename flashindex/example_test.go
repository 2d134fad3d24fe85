package flashindex_test

import (
	"fmt"

	"github.com/agentkv/agentkv/flashindex"
)

func Example() {
	ix, err := flashindex.New(flashindex.Config{BlockSize: 4})
	if err != nil {
		panic(err)
	}
	// A worker's engine stores a 3-block prompt on the GPU, then offloads
	// it to pinned host memory and drops its last block from the GPU.
	// Engine hashes are opaque; the index hashes the tokens itself.
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	w := flashindex.Worker{ID: 7}
	stored := func(id uint64, tier flashindex.Tier) *flashindex.Event {
		ev := &flashindex.Event{Worker: w, EventID: id, Kind: flashindex.Stored, Tier: tier, BlockSize: 4}
		for i := 0; i < 3; i++ {
			ev.Blocks = append(ev.Blocks, flashindex.StoredBlock{EngineHash: 0xa0 + uint64(i), Tokens: prompt[4*i : 4*i+4]})
		}
		return ev
	}
	for _, ev := range []*flashindex.Event{
		stored(0, flashindex.Device),
		stored(1, flashindex.Host),
		{Worker: w, EventID: 2, Kind: flashindex.Removed, Tier: flashindex.Device, Hashes: []uint64{0xa2}},
	} {
		if err := ix.Apply(ev); err != nil {
			panic(err)
		}
	}

	// The router hashes the next request (the prompt plus one more block)
	// and asks who holds how much of it.
	h, _ := flashindex.NewHasher(4, "")
	_, seq := h.AppendHashes(nil, nil, append(prompt, 13, 14, 15, 16), 0, false)
	for _, m := range ix.FindMatches(seq, nil) {
		fmt.Printf("worker %v: device %d, host %d, disk %d, resident %d\n", m.Worker, m.Device, m.Host, m.Disk, m.Resident)
	}

	// A block size the index was not built for is a loud error.
	bad := stored(3, flashindex.Device)
	bad.BlockSize = 16
	fmt.Println(ix.Apply(bad))
	// Output:
	// worker 7/0: device 2, host 1, disk 0, resident 5
	// flashindex: worker 7/0: event block size 16, index block size 4
}
