package vllm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/engine/enginetest"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

// streamAdapter drives a vllm.Stream for the conformance suite.
type streamAdapter struct{ s *vllm.Stream }

func (a streamAdapter) Deliver(ctx context.Context, topic []byte, seq uint64, payload []byte) error {
	return a.s.Offer(ctx, topic, seq, payload)
}

func (a streamAdapter) DeliverFrames(ctx context.Context, frames [][]byte) error {
	return a.s.Handle(ctx, frames)
}

func (a streamAdapter) Stats() enginetest.Stats {
	st := a.s.Stats()
	return enginetest.Stats{Malformed: st.Malformed, Dropped: st.Dropped, BadFrames: st.BadFrames,
		Gaps: st.Gaps, GapsRecovered: st.GapsRecovered, GapsUnrecovered: st.GapsUnrecovered,
		Restarts: st.Restarts, Rejected: st.Rejected}
}

// Wire converts suite events to vLLM wire events.
func wire(evs []enginetest.Event) []vllm.WireEvent {
	out := make([]vllm.WireEvent, len(evs))
	for i, e := range evs {
		out[i] = vllm.WireEvent{Kind: e.Kind, Tag: e.Type, Hashes: e.Hashes, Parent: e.Parent, HasParent: e.HasParent,
			Tokens: e.Tokens, BlockSize: e.BlockSize, Medium: e.Medium, LoRAName: e.LoRA}
	}
	return out
}

var vllmVariants = []vllm.Encoding{
	{},                                 // older vLLM: tagged arrays, int hashes
	{MapEvents: true, HasDPRank: true}, // newer vLLM: tagged maps
	{MapEvents: true, MapBatch: true, BytesHashes: true, HasDPRank: true, DPRank: 2}, // newest, sha256 bytes
	{BytesHashes: true, Full: true}, // arrays, every trailing field present
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, enginetest.Harness{
		Variants: len(vllmVariants),
		Encode: func(v int, evs []enginetest.Event) ([]byte, error) {
			return vllmVariants[v].Append(nil, 1.7e9, wire(evs))
		},
		New: func(t *testing.T, w flashindex.Worker, sink func(*flashindex.Event) error, replay enginetest.ReplayFunc) enginetest.Adapter {
			cfg := vllm.StreamConfig{Worker: w, Sink: vllm.SinkFunc(sink)}
			if replay != nil {
				cfg.Replayer = vllm.ReplayFunc(replay)
			}
			s, err := vllm.NewStream(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return streamAdapter{s}
		},
		Metrics: func(blocks, bs int) string {
			return fmt.Sprintf("# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"%d\",engine=\"0\",num_gpu_blocks=\"%d\"} 1.0\n", bs, blocks)
		},
		Capacity: func(text string) (int, error) {
			cs, err := vllm.ParseCacheConfigs(strings.NewReader(text))
			if err != nil {
				return 0, err
			}
			n := 0
			for _, c := range cs {
				n += c.CapacityTokens()
			}
			return n, nil
		},
	})
}
