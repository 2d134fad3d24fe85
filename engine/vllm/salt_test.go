package vllm

import (
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// TestCacheSaltRoundTrip: a block stored under a cache salt (the salt in
// the first block's extra keys, as vLLM publishes it) is found by a
// request hashed with the same salt, and by no request hashed with another
// salt or none: the router never credits one tenant with another's blocks.
func TestCacheSaltRoundTrip(t *testing.T) {
	const bs = 4
	tokens := toks(3*bs, 100)
	h, err := flashindex.NewHasher(bs, "")
	if err != nil {
		t.Fatal(err)
	}
	salted := h.Salted("tenant-a")
	_, engine := salted.AppendHashes(nil, nil, tokens, 0, false) // the engine's own hashes (opaque)
	payload, err := Encoding{}.Append(nil, 1, []WireEvent{{
		Kind: flashindex.Stored, Hashes: engine, Tokens: tokens, BlockSize: bs,
		ExtraKeys: [][]string{{"tenant-a"}, nil, nil},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := flashindex.New(flashindex.Config{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	d := NewDecoder(DecodeOptions{ExtraKeys: true})
	if _, err := d.Decode(payload, func(ev *flashindex.Event) error {
		ev.Worker = flashindex.Worker{ID: 1}
		if len(ev.Blocks[0].ExtraKeys) != 1 || ev.Blocks[0].ExtraKeys[0] != flashindex.SaltKey("tenant-a") {
			t.Fatalf("first block's extra keys %v, want [SaltKey(tenant-a)]", ev.Blocks[0].ExtraKeys)
		}
		return ix.Apply(ev)
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    *flashindex.Hasher
		want int
	}{
		{"same salt", h.Salted("tenant-a"), 3},
		{"other salt", h.Salted("tenant-b"), 0},
		{"no salt", h, 0},
	} {
		m := ix.FindMatches(tc.h.SequenceHashes(nil, tokens), nil)
		got := 0
		for _, x := range m {
			got = max(got, x.Device)
		}
		if got != tc.want {
			t.Errorf("%s: %d blocks matched, want %d", tc.name, got, tc.want)
		}
	}
}

// TestExtraKeysDoNotLeakIntoTheNextEvent: a reused decoder kept the last
// event's extra_keys buffer, so an event with extra keys followed by one
// without dropped the second ("field extra_keys: bad event field").
func TestExtraKeysDoNotLeakIntoTheNextEvent(t *testing.T) {
	d := NewDecoder(DecodeOptions{ExtraKeys: true})
	for i, ev := range []WireEvent{
		{Kind: flashindex.Stored, Hashes: []uint64{1, 2}, Tokens: toks(8, 0), BlockSize: 4, ExtraKeys: [][]string{{"salt"}, nil}},
		{Kind: flashindex.Stored, Hashes: []uint64{3}, Tokens: toks(4, 9), BlockSize: 4},
	} {
		p, err := Encoding{}.Append(nil, 1, []WireEvent{ev})
		if err != nil {
			t.Fatal(err)
		}
		b, err := d.Decode(p, func(*flashindex.Event) error { return nil })
		if err != nil || b.Emitted != 1 || b.Dropped != 0 {
			t.Fatalf("event %d: %+v %v", i, b, err)
		}
	}
}
