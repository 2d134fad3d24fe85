package sglang

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// sglangName is the name SGLang gives a block: hash_str_to_int64 of the
// SHA-256 hex digest of (its parent's digest, its tokens), as SGLang's
// radix cache chains page hashes.
func sglangName(parent string, tokens []uint32) (int64, string) {
	h := sha256.New()
	h.Write([]byte(parent))
	for _, t := range tokens {
		fmt.Fprintf(h, "%d,", t)
	}
	d := hex.EncodeToString(h.Sum(nil))
	return hashStrToInt64(d), d
}

// TestNamesRoundTrip: SGLang-shaped events (tagged arrays, signed int64
// names from SHA-256 digests) go into the index and into Names; the
// router's own hashes of the same tokens find the blocks in the index, and
// Names turns them back into exactly SGLang's names, which a hint envelope
// written with SignedHashes carries in SGLang's spelling.
func TestNamesRoundTrip(t *testing.T) {
	const bs = 4
	tokens := make([]uint32, 5*bs)
	for i := range tokens {
		tokens[i] = uint32(1000 + i*7)
	}
	var names []int64
	var events []any
	parent, prevName := "", any(nil)
	for i := 0; i < len(tokens)/bs; i++ {
		blk := tokens[i*bs : (i+1)*bs]
		n, d := sglangName(parent, blk)
		names = append(names, n)
		toks := make([]any, bs)
		for j, tk := range blk {
			toks[j] = tk
		}
		events = append(events, []any{"BlockStored", []any{n}, prevName, toks, bs, nil, "GPU"})
		parent, prevName = d, n
	}
	if !slices.ContainsFunc(names, func(n int64) bool { return n < 0 }) {
		t.Fatal("test data has no negative name; pick other tokens")
	}
	ix, err := flashindex.New(flashindex.Config{BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	nm, err := NewNames(bs)
	if err != nil {
		t.Fatal(err)
	}
	w := flashindex.Worker{ID: 3}
	id := uint64(1)
	if _, err := NewDecoder(vllm.DecodeOptions{}).Decode(pack([]any{1.7e9, events, 0}), func(ev *flashindex.Event) error {
		ev.Worker, ev.EventID = w, id // the subscriber numbers events
		id++
		if err := nm.Apply(ev); err != nil {
			return err
		}
		return ix.Apply(ev)
	}); err != nil {
		t.Fatal(err)
	}

	h, _ := flashindex.NewHasher(bs, "")
	own := h.SequenceHashes(nil, tokens)
	m := ix.FindMatches(own, nil)
	if len(m) != 1 || m[0].Worker != w || m[0].Device != len(own) {
		t.Fatalf("index matches %+v", m)
	}
	eng, n := nm.EngineHashes(nil, own)
	if n != len(own) {
		t.Fatalf("translated %d of %d", n, len(own))
	}
	for i := range names {
		if eng[i] != uint64(names[i]) {
			t.Fatalf("block %d: %d, SGLang calls it %d", i, int64(eng[i]), names[i])
		}
		if o, ok := nm.Own(eng[i]); !ok || o != own[i] {
			t.Fatalf("block %d back: %x, %v", i, o, ok)
		}
	}
	env := kvhint.Envelope{MessageID: "m", SessionID: "s", SignedHashes: true, Actions: []kvhint.Action{
		{ID: "a", Kind: kvhint.KindRelease, Target: kvhint.Target{Blocks: eng}}}}
	js, err := env.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range names {
		want = append(want, fmt.Sprint(n))
	}
	if !strings.Contains(string(js), `"block_hashes":[`+strings.Join(want, ",")+`]`) {
		t.Fatalf("envelope %s does not name SGLang's blocks %v", js, want)
	}
	var back kvhint.Envelope
	if err := kvhint.DecodeJSON(js, &back); err != nil || !slices.Equal(back.Actions[0].Target.Blocks, eng) {
		t.Fatalf("decoded %v, %v", back.Actions, err)
	}

	// Removal from the last tier forgets a block; translation stops there.
	rm := pack([]any{1.7e9, []any{[]any{"BlockRemoved", []any{names[2]}, "GPU"}}, 0})
	if _, err := NewDecoder(vllm.DecodeOptions{}).Decode(rm, nm.Apply); err != nil {
		t.Fatal(err)
	}
	if _, n := nm.EngineHashes(nil, own); n != 2 {
		t.Fatalf("after removal translated %d, want 2", n)
	}
	// An unknown parent is an error that changes nothing.
	before := nm.Len()
	orphan := &flashindex.Event{Kind: flashindex.Stored, Parent: 42, HasParent: true,
		Blocks: []flashindex.StoredBlock{{EngineHash: 43, Tokens: []uint32{1, 2, 3, 4}}}}
	if err := nm.Apply(orphan); !errors.Is(err, ErrUnknownParent) || nm.Len() != before {
		t.Fatalf("orphan: %v, %d blocks", err, nm.Len())
	}
	if err := nm.Apply(&flashindex.Event{Kind: flashindex.Cleared}); err != nil || nm.Len() != 0 {
		t.Fatalf("cleared: %v, %d", err, nm.Len())
	}
}
