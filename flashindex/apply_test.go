package flashindex

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// chainEvent builds a Stored event for blocks of tokens on w, the engine
// hash of each block being 100+i+off.
func chainEvent(w Worker, id uint64, tier Tier, blocks [][]uint32, parent *uint64, off uint64) *Event {
	ev := &Event{Worker: w, EventID: id, Kind: Stored, Tier: tier}
	if parent != nil {
		ev.HasParent, ev.Parent = true, *parent
	}
	for i, b := range blocks {
		ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: 100 + off + uint64(i), Tokens: b})
	}
	return ev
}

func toks(vals ...uint32) []uint32 { return vals }

func mustNew(t *testing.T, cfg Config) *Index {
	t.Helper()
	ix, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"zero block size", Config{}, ErrBlockSize},
		{"huge block size", Config{BlockSize: MaxBlockSize + 1}, ErrBlockSize},
		{"negative capacity", Config{BlockSize: 16, MaxBlocksPerWorker: -1}, ErrConfig},
		{"negative approx bound", Config{BlockSize: 16, ApproxMaxEntries: -1}, ErrConfig},
		{"approx bound past 32-bit entry numbers", Config{BlockSize: 16, ApproxMaxEntries: MaxApproxEntries + 1}, ErrConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("New: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestApplyRejects(t *testing.T) {
	w := Worker{ID: 1}
	blocks := [][]uint32{toks(1, 2), toks(3, 4)}
	unknown := uint64(999)
	for _, tc := range []struct {
		name  string
		ev    *Event
		check func(error) bool
	}{
		{"nil", nil, func(err error) bool { return errors.Is(err, ErrNilEvent) }},
		{"kind", &Event{Worker: w, EventID: 5, Kind: 9}, func(err error) bool { return errors.Is(err, ErrKind) }},
		{"external tier", chainEvent(w, 5, External, blocks, nil, 0), func(err error) bool { return errors.Is(err, ErrTier) }},
		{"removed on bad tier", &Event{Worker: w, EventID: 5, Kind: Removed, Tier: 9}, func(err error) bool { return errors.Is(err, ErrTier) }},
		{"unknown parent", chainEvent(w, 5, Device, blocks, &unknown, 0), func(err error) bool {
			var e *UnknownParentError
			return errors.As(err, &e) && e.Parent == unknown && e.Worker == w
		}},
		{"event block size", func() *Event { ev := chainEvent(w, 5, Device, blocks, nil, 0); ev.BlockSize = 16; return ev }(),
			func(err error) bool {
				var e *BlockSizeError
				return errors.As(err, &e) && e.Block == -1 && e.Got == 16 && e.Want == 2
			}},
		{"tokens per block", chainEvent(w, 5, Device, [][]uint32{toks(1, 2), toks(3)}, nil, 0), func(err error) bool {
			var e *BlockSizeError
			return errors.As(err, &e) && e.Block == 1 && e.Got == 1
		}},
		{"no content", &Event{Worker: w, EventID: 5, Kind: Stored, Blocks: []StoredBlock{{EngineHash: 1}}},
			func(err error) bool { return errors.Is(err, ErrNoContent) }},
		{"too many extra keys", &Event{Worker: w, EventID: 5, Kind: Stored, Blocks: []StoredBlock{{EngineHash: 1, Tokens: toks(1, 2), ExtraKeys: make([]uint64, 65)}}},
			func(err error) bool { return errors.Is(err, ErrTooManyExtraKeys) }},
		{"engine hash conflict", chainEvent(w, 5, Device, [][]uint32{toks(9, 9)}, nil, 0), func(err error) bool {
			var e *HashConflictError
			return errors.As(err, &e) && e.EngineHash == 100
		}},
		{"capacity", chainEvent(w, 5, Host, [][]uint32{toks(5, 5), toks(6, 6)}, nil, 10), func(err error) bool {
			var e *CapacityError
			return errors.As(err, &e) && e.Limit == 3 && e.Would == 4
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{BlockSize: 2, MaxBlocksPerWorker: 3})
			if err := ix.Apply(chainEvent(w, 1, Device, blocks, nil, 0)); err != nil {
				t.Fatal(err)
			}
			err := ix.Apply(tc.ev)
			if err == nil || !tc.check(err) {
				t.Fatalf("Apply: %v (%T)", err, err)
			}
			st := ix.Stats()
			// Only the event id may move; residency must not.
			if st.Rejected.Total() != 1 || st.Residencies != 2 {
				t.Fatalf("stats after rejection: %+v", st)
			}
			seq := hashChain(t, 2, blocks...)
			if got := ix.FindMatches(seq, nil); len(got) != 1 || got[0].Device != 2 {
				t.Fatalf("state changed: %v", got)
			}
		})
	}
}

// hashChain returns the sequence hashes of blocks.
func hashChain(t *testing.T, bs int, blocks ...[]uint32) []uint64 {
	t.Helper()
	h, err := NewHasher(bs, "")
	if err != nil {
		t.Fatal(err)
	}
	var all []uint32
	for _, b := range blocks {
		all = append(all, b...)
	}
	_, seq := h.AppendHashes(nil, nil, all, 0, false)
	return seq
}

func TestEventIDs(t *testing.T) {
	w := Worker{ID: 3, DPRank: 1}
	var gaps []Gap
	ix := mustNew(t, Config{BlockSize: 2, OnGap: func(g Gap) { gaps = append(gaps, g) }})
	b := [][]uint32{toks(1, 2)}
	seq := hashChain(t, 2, b...)
	steps := []struct {
		ev       *Event
		wantGaps int
		device   int
	}{
		{chainEvent(w, 7, Device, b, nil, 0), 0, 1},
		{&Event{Worker: w, EventID: 8, Kind: Removed, Hashes: []uint64{100}}, 0, 0},
		{chainEvent(w, 7, Device, b, nil, 0), 0, 0},                                 // duplicate: skipped, block stays removed
		{chainEvent(w, 11, Device, b, nil, 0), 1, 1},                                // gap 9..10, still applied
		{&Event{Worker: Worker{ID: 3, DPRank: 0}, EventID: 0, Kind: Cleared}, 1, 0}, // clears every DP rank of ID 3
	}
	for i, s := range steps {
		if err := ix.Apply(s.ev); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(gaps) != s.wantGaps {
			t.Fatalf("step %d: gaps %v", i, gaps)
		}
		got := ix.FindMatches(seq, nil)
		d := 0
		if len(got) > 0 {
			d = got[0].Device
		}
		if d != s.device {
			t.Fatalf("step %d: device depth %d, want %d", i, d, s.device)
		}
	}
	if gaps[0] != (Gap{Worker: w, Expected: 9, Got: 11}) {
		t.Fatalf("gap %v", gaps[0])
	}
	st := ix.Stats()
	if st.Duplicates != 1 || st.Gaps != 1 || st.Applied != 4 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTierDepths checks Dynamo's exclusive tier counting on one worker.
func TestTierDepths(t *testing.T) {
	w := Worker{ID: 1}
	var blocks [][]uint32
	for i := uint32(0); i < 8; i++ {
		blocks = append(blocks, toks(i, i))
	}
	seq := hashChain(t, 2, blocks...)
	type placement struct {
		tier Tier
		from int
		to   int
	}
	for _, tc := range []struct {
		name            string
		place           []placement
		dev, host, disk int
		resident        int
		noMatch         bool
	}{
		{"device only", []placement{{Device, 0, 3}}, 3, 0, 0, 3, false},
		{"host continues device", []placement{{Device, 0, 2}, {Host, 0, 5}}, 2, 3, 0, 7, false},
		{"disk continues host", []placement{{Device, 0, 2}, {Host, 0, 4}, {Disk, 0, 8}}, 2, 2, 4, 14, false},
		{"host without device", []placement{{Host, 0, 3}}, 0, 3, 0, 3, false},
		{"disk only", []placement{{Disk, 0, 2}}, 0, 0, 2, 2, false},
		{"host after device gap is not counted", []placement{{Device, 0, 2}, {Host, 3, 6}}, 2, 0, 0, 5, false},
		// Block 0 is on device twice (two engine hashes); block 1 only on
		// host, so the device blocks 2..7 are beyond the host run.
		{"device beyond host run is not counted", []placement{{Device, 0, 1}, {Host, 0, 2}, {Device, 2, 8}}, 1, 1, 0, 9, false},
		{"nothing at position 0", []placement{{Device, 1, 8}}, 0, 0, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := mustNew(t, Config{BlockSize: 2})
			id := uint64(0)
			for pi, p := range tc.place {
				// Store the whole chain up to p.to on the tier, then remove
				// the blocks before p.from: parents must be known.
				off := uint64(pi) * 1000
				ev := chainEvent(w, id, p.tier, blocks[:p.to], nil, off)
				id++
				if err := ix.Apply(ev); err != nil {
					t.Fatal(err)
				}
				rm := &Event{Worker: w, EventID: id, Kind: Removed, Tier: p.tier}
				id++
				for i := 0; i < p.from; i++ {
					rm.Hashes = append(rm.Hashes, 100+off+uint64(i))
				}
				if err := ix.Apply(rm); err != nil {
					t.Fatal(err)
				}
			}
			got := ix.FindMatches(seq, nil)
			if tc.noMatch {
				if len(got) != 0 {
					t.Fatalf("got %v, want no match", got)
				}
				return
			}
			want := []Match{{Worker: w, Device: tc.dev, Host: tc.host, Disk: tc.disk, Resident: tc.resident}}
			if !matchesEqual(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
		})
	}
}

func TestApproximate(t *testing.T) {
	now := time.Unix(100, 0)
	ix := mustNew(t, Config{BlockSize: 2, ApproxMaxEntries: 4, Now: func() time.Time { return now }})
	w1, w2 := Worker{ID: 1}, Worker{ID: 2}
	blocks := [][]uint32{toks(1, 1), toks(2, 2), toks(3, 3)}
	seq := hashChain(t, 2, blocks...)
	depth := func(w Worker) int {
		for _, m := range ix.FindMatches(seq, nil) {
			if m.Worker == w {
				return m.Device
			}
		}
		return 0
	}
	ix.Record(w1, seq, 10*time.Second)
	if d := depth(w1); d != 3 {
		t.Fatalf("recorded depth %d", d)
	}
	// An event confirms the first two blocks: they no longer expire.
	if err := ix.Apply(chainEvent(w1, 0, Device, blocks[:2], nil, 0)); err != nil {
		t.Fatal(err)
	}
	if st := ix.Stats(); st.Approx != 1 || st.Workers[0].Device != 2 {
		t.Fatalf("after confirmation: %+v", st)
	}
	now = now.Add(10 * time.Second)
	ix.Expire()
	if d := depth(w1); d != 2 {
		t.Fatalf("after expiry depth %d, want 2 (confirmed blocks stay)", d)
	}
	// Size bound: 4 entries, the earliest expiring pruned first.
	ix.Record(w2, seq[:2], 5*time.Second)
	ix.Record(w2, seq, 50*time.Second)             // refreshes the two, adds one: 3 entries
	ix.Record(Worker{ID: 3}, seq, 100*time.Second) // 6 entries: prune 2
	st := ix.Stats()
	if st.Approx != 4 || st.ApproxPruned != 2 || st.ApproxExpired != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Worker 2's entries expire first (t=160 < 200); of those, blocks 0
	// and 1 were refreshed first, so they go.
	if d := depth(w2); d != 0 {
		t.Fatalf("worker 2 depth %d, want 0 (its first blocks pruned)", d)
	}
	if d := depth(Worker{ID: 3}); d != 3 {
		t.Fatalf("worker 3 depth %d, want 3", d)
	}
}

func TestRemoveWorkerAndSlotReuse(t *testing.T) {
	ix := mustNew(t, Config{BlockSize: 2})
	b := [][]uint32{toks(1, 2), toks(3, 4)}
	seq := hashChain(t, 2, b...)
	for id := uint64(1); id <= 70; id++ {
		if err := ix.Apply(chainEvent(Worker{ID: id}, 0, Device, b, nil, 0)); err != nil {
			t.Fatal(err)
		}
	}
	ix.RemoveWorker(Worker{ID: 5})
	ix.RemoveWorker(Worker{ID: 5}) // unknown now: no-op
	if got := ix.FindMatches(seq, nil); len(got) != 69 {
		t.Fatalf("%d matches, want 69", len(got))
	}
	// A new worker reuses the freed slot and starts clean.
	if err := ix.Apply(chainEvent(Worker{ID: 99}, 0, Host, b[:1], nil, 0)); err != nil {
		t.Fatal(err)
	}
	for _, m := range ix.FindMatches(seq, nil) {
		if m.Worker.ID == 99 && (m.Host != 1 || m.Device != 0 || m.Resident != 1) {
			t.Fatalf("new worker %+v", m)
		}
	}
	if n := len(ix.Workers()); n != 70 {
		t.Fatalf("%d workers", n)
	}
}

func TestSnapshotErrors(t *testing.T) {
	ix := mustNew(t, Config{BlockSize: 2})
	if err := ix.Apply(chainEvent(Worker{ID: 1}, 0, Device, [][]uint32{toks(1, 2)}, nil, 0)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	bad := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for _, tc := range []struct {
		name string
		data []byte
		cfg  Config
		want error
	}{
		{"empty", nil, Config{}, ErrSnapshotFormat},
		{"magic", bad(func(b []byte) []byte { b[0] = 'X'; return b }), Config{}, ErrSnapshotFormat},
		{"version 0", bad(func(b []byte) []byte { b[4] = 0; return b }), Config{}, ErrSnapshotVersion},
		{"version 3", bad(func(b []byte) []byte { b[4] = 3; return b }), Config{}, ErrSnapshotVersion},
		{"truncated", good[:len(good)-3], Config{}, ErrSnapshotFormat},
		{"garbage body", append(append([]byte(nil), good[:5]...), 1, 2, 3, 4, 5, 6, 7, 8), Config{}, ErrSnapshotFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Restore(bytes.NewReader(tc.data), tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("Restore: %v, want %v", err, tc.want)
			}
		})
	}
	var bse *BlockSizeError
	if _, err := Restore(bytes.NewReader(good), Config{BlockSize: 16}); !errors.As(err, &bse) {
		t.Fatalf("Restore with another block size: %v", err)
	}
	rx, err := Restore(bytes.NewReader(good), Config{})
	if err != nil || rx.BlockSize() != 2 {
		t.Fatalf("Restore: %v", err)
	}
}
