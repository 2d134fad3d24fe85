package sim

import (
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// ApplyHints answers each action with the outcome Step would count, in
// order, and counts it the same way.
func TestApplyHintsResultsPerAction(t *testing.T) {
	e, idx, _, a, now := newHintEngine(t, Config{DeviceBlocks: 8, HostBlocks: 4})
	env := &kvhint.Envelope{MessageID: "m", SessionID: "s", Actions: []kvhint.Action{
		act(kvhint.KindDemote, "", a.SeqHashes...),
		act(kvhint.KindDemote, "", 77, 78),
		{ID: "x", Kind: kvhint.Kind(99), SessionID: "s", Target: kvhint.Target{Blocks: []uint64{1}}},
		act(kvhint.KindPrefetch, "", a.SeqHashes...),
		act(kvhint.KindPin, "", a.SeqHashes[0]),
	}}
	for i := range env.Actions {
		if env.Actions[i].ID == "" {
			env.Actions[i].ID = string(rune('a' + i))
		}
	}
	got := e.ApplyHints(now, env, nil)
	want := []kvhint.Outcome{kvhint.OutcomeAccepted, kvhint.OutcomeMissing, kvhint.OutcomeRejected, kvhint.OutcomeAccepted, kvhint.OutcomeAccepted}
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d", len(got), len(want))
	}
	for i, r := range got {
		if r.Outcome != want[i] || r.ActionID != env.Actions[i].ID {
			t.Errorf("result %d = %+v, want %v", i, r, want[i])
		}
	}
	if got[0].Blocks != uint32(len(a.SeqHashes)) || got[2].Reason == "" {
		t.Errorf("blocks %d, reason %q", got[0].Blocks, got[2].Reason)
	}
	st := e.Stats().Hints
	if st.Demote != (kvhint.Counts{Accepted: 1, Missing: 1, Blocks: uint64(len(a.SeqHashes))}) || st.Invalid != 1 {
		t.Errorf("stats %+v", st)
	}
	checkIndex(t, e, idx)
}

// A Share resolves its blocks through PeerBlocks when no Peers are set
// (the mock worker fetched them over HTTP), root first, stopping at the
// first block the lookup lacks.
func TestApplyHintsSharesThroughPeerBlocks(t *testing.T) {
	src, _, _, a, now := newHintEngine(t, Config{DeviceBlocks: 8, HostBlocks: 4})
	idx := newNaiveIndex(t)
	dst, err := New(Config{Worker: flashindex.Worker{ID: 1}, BlockSize: 4, DeviceBlocks: 8, HostBlocks: 8}, idx)
	if err != nil {
		t.Fatal(err)
	}
	sh := act(kvhint.KindShare, "s", a.SeqHashes...)
	sh.ID, sh.Dest = "f", kvhint.TierDevice
	sh.Sources = []kvhint.Source{{Endpoint: "http://peer"}}
	env := &kvhint.Envelope{MessageID: "m", Actions: []kvhint.Action{sh}}
	if r := dst.ApplyHints(now, env, nil); r[0].Outcome != kvhint.OutcomeRejected {
		t.Fatalf("without a peer fabric: %+v", r)
	}
	dst.SetPeerBlocks(func(s kvhint.Source, h uint64) (PeerBlock, bool) {
		if s.Endpoint != "http://peer" || h == a.SeqHashes[2] {
			return PeerBlock{}, false
		}
		b, _, ok := src.Block(h)
		return b, ok
	})
	r := dst.ApplyHints(now, env, nil)
	if r[0].Outcome != kvhint.OutcomeAccepted || r[0].Blocks != 2 {
		t.Fatalf("share: %+v", r)
	}
	if got := dst.Cached(flashindex.Device); !slices.Equal(got, sorted(a.SeqHashes[:2]...)) {
		t.Fatalf("device holds %x", got)
	}
	checkIndex(t, dst, idx)
	if _, _, ok := dst.Block(a.SeqHashes[2]); ok {
		t.Fatal("block past the gap installed")
	}
}
