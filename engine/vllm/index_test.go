package vllm_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

var _ vllm.EventSink = (*flashindex.Index)(nil)

// TestIntoFlashIndex runs vLLM-format batches through a Stream into a real
// flashindex.Index and checks what a request then matches: the index
// computes its own hashes from the events' token ids, so opaque engine
// hashes (here 32-byte strings) still yield routable overlap.
func TestIntoFlashIndex(t *testing.T) {
	ix, err := flashindex.New(flashindex.Config{BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	w := flashindex.Worker{ID: 5, DPRank: 1}
	s, err := vllm.NewStream(vllm.StreamConfig{Worker: w, Sink: ix})
	if err != nil {
		t.Fatal(err)
	}
	enc := vllm.Encoding{MapEvents: true, BytesHashes: true, HasDPRank: true, DPRank: 1}
	seq := uint64(0)
	publish := func(evs ...vllm.WireEvent) {
		t.Helper()
		p, err := enc.Append(nil, 1.7e9, evs)
		if err != nil {
			t.Fatal(err)
		}
		sb := make([]byte, 8)
		binary.BigEndian.PutUint64(sb, seq)
		seq++
		if err := s.Handle(context.Background(), [][]byte{[]byte("kv"), sb, p}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	publish(vllm.WireEvent{Kind: flashindex.Stored, Hashes: []uint64{0xa1, 0xb2}, Tokens: tokens[:8], BlockSize: 4, Medium: "GPU"})
	publish(vllm.WireEvent{Kind: flashindex.Stored, Hashes: []uint64{0xc3}, Parent: 0xb2, HasParent: true,
		Tokens: tokens[8:], BlockSize: 4, Medium: "CPU_PINNED"})

	h, _ := flashindex.NewHasher(4, "")
	_, req := h.AppendHashes(nil, nil, tokens, 0, false)
	match := func() flashindex.Match {
		for _, m := range ix.FindMatches(req, nil) {
			if m.Worker == w {
				return m
			}
		}
		return flashindex.Match{}
	}
	if m := match(); m.Device != 2 || m.Host != 1 {
		t.Fatalf("match %+v, want device 2 host 1", m)
	}
	publish(vllm.WireEvent{Kind: flashindex.Removed, Hashes: []uint64{0xb2}, Medium: "GPU"})
	if m := match(); m.Device != 1 {
		t.Fatalf("after removing block 2 from the GPU: %+v, want device 1", m)
	}
	// A block size the index was not built for is rejected loudly, and
	// the stream counts it and carries on.
	publish(vllm.WireEvent{Kind: flashindex.Stored, Hashes: []uint64{0xd4}, Tokens: tokens[:8], BlockSize: 8})
	if st := s.Stats(); st.Rejected != 1 || s.LastError() == nil {
		t.Fatalf("stats %+v, last error %v", st, s.LastError())
	}
	// AllBlocksCleared empties the worker.
	publish(vllm.WireEvent{Kind: flashindex.Cleared})
	if m := match(); m.Total() != 0 {
		t.Fatalf("after clear: %+v", m)
	}
}
