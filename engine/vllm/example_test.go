package vllm_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

// Decode one vLLM payload (here built with Encoding, as a test or a
// simulated engine would) into normalised flashindex events.
func ExampleDecoder() {
	payload, _ := vllm.Encoding{MapEvents: true, BytesHashes: true}.Append(nil, 1.7e9, []vllm.WireEvent{
		{Kind: flashindex.Stored, Hashes: []uint64{0xaa, 0xbb}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"},
		{Kind: flashindex.Removed, Hashes: []uint64{0xaa}, Medium: "CPU_PINNED"},
	})
	d := vllm.NewDecoder(vllm.DecodeOptions{})
	b, err := d.Decode(payload, func(ev *flashindex.Event) error {
		switch ev.Kind {
		case flashindex.Stored:
			for _, blk := range ev.Blocks {
				fmt.Printf("stored %x on %v: tokens %v\n", blk.EngineHash, ev.Tier, blk.Tokens)
			}
		case flashindex.Removed:
			fmt.Printf("removed %x from %v\n", ev.Hashes, ev.Tier)
		}
		return nil
	})
	fmt.Println(b.Events, "events,", b.Dropped, "dropped,", err)
	// Output:
	// stored aa on device: tokens [1 2]
	// stored bb on device: tokens [3 4]
	// removed [aa] from host
	// 2 events, 0 dropped, <nil>
}

// A Stream turns [topic, seq, payload] messages into events with
// consecutive EventIDs; a gap it cannot replay clears the worker.
func ExampleStream() {
	sink := vllm.SinkFunc(func(ev *flashindex.Event) error {
		fmt.Println(ev.EventID, ev.Worker, ev.Kind)
		return nil
	})
	s, _ := vllm.NewStream(vllm.StreamConfig{Worker: flashindex.Worker{ID: 3}, Sink: sink})
	batch := func(h uint64) []byte {
		p, _ := vllm.Encoding{}.Append(nil, 0, []vllm.WireEvent{{Kind: flashindex.Removed, Hashes: []uint64{h}}})
		return p
	}
	ctx := context.Background()
	s.Offer(ctx, nil, 10, batch(1))
	s.Offer(ctx, nil, 11, batch(2))
	s.Offer(ctx, nil, 14, batch(3)) // 12 and 13 lost, no replay socket
	st := s.Stats()
	fmt.Println("gaps:", st.Gaps, "unrecovered:", st.GapsUnrecovered)
	// Output:
	// 1 3/0 removed
	// 2 3/0 removed
	// 3 3/0 cleared
	// 4 3/0 removed
	// gaps: 1 unrecovered: 1
}

// KV capacity comes from vLLM's vllm:cache_config_info info gauge.
func ExampleParseCacheConfigs() {
	metrics := `vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="661"} 1.0` + "\n"
	cs, err := vllm.ParseCacheConfigs(strings.NewReader(metrics))
	fmt.Println(cs[0].BlockSize, cs[0].NumGPUBlocks, cs[0].CapacityTokens(), err)
	// Output: 16 661 10576 <nil>
}

// Without the engine's tokenizer, prompts fall back to prefix-stable
// pseudo-tokens.
func ExampleApproxTokens() {
	fmt.Printf("%x\n", vllm.ApproxTokens(nil, []byte("Hello!")))
	// Output: [ff48656c ff6c6f21]
}
