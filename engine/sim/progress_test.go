package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// TestGeneratedAndOutputHashes: a request that brings the hashes of its
// generated blocks has them registered (and published) under those
// hashes, and Generated counts one token per step after the prefill.
func TestGeneratedAndOutputHashes(t *testing.T) {
	var stored []uint64
	e, err := New(Config{BlockSize: 4, DeviceBlocks: 64}, EventSinkFunc(func(ev *flashindex.Event) error {
		for _, b := range ev.Blocks {
			stored = append(stored, b.EngineHash)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	local := []uint64{11, 12, 13}
	seq := flashindex.AppendSequenceHashes(nil, local)
	r := &Request{ID: 1, InputTokens: 8, OutputTokens: 6, LocalHashes: local, SeqHashes: seq}
	if err := e.Add(&Request{ID: 2, InputTokens: 8, OutputTokens: 4, LocalHashes: local, SeqHashes: seq}); err == nil {
		t.Fatal("hashes past the sequence's full blocks accepted")
	}
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
	var gen []int
	now := time.Duration(0)
	for e.HasWork() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		gen = append(gen, r.Generated())
	}
	if !slices.Equal(gen, []int{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("generated per step %v", gen)
	}
	if !slices.Equal(stored, seq) {
		t.Fatalf("stored %v, want the given hashes %v", stored, seq)
	}
	if (&Request{}).Generated() != 0 {
		t.Fatal("an unadded request has generated tokens")
	}
}
