package sharedpool

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// tokenPages returns the page hashes of tokens 1..n*pageSize.
func tokenPages(n, pageSize int) []PageHash {
	tokens := make([]uint32, n*pageSize)
	for i := range tokens {
		tokens[i] = uint32(i + 1)
	}
	return PageHashes(tokens, pageSize, false, nil)
}

func newIndex(t testing.TB, cfg Config) *Index {
	t.Helper()
	if cfg.Seed == 0 {
		cfg.Seed = 12345
	}
	ix, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// storeAll returns store events for every object of the pages.
func storeAll(l Layout, medium string, pages ...PageHash) []Event {
	var evs []Event
	for _, p := range pages {
		for _, k := range l.AppendObjectKeys(nil, p) {
			evs = append(evs, Event{Kind: Store, Key: k, Medium: medium, GroupID: l.GroupID(p)})
		}
	}
	return evs
}

type batcher struct {
	ix  *Index
	seq uint64
}

func (b *batcher) apply(evs ...Event) Report {
	b.seq++
	return b.ix.Apply(&Batch{Seq: b.seq, Events: evs})
}

func hitsOf(t testing.TB, ix *Index, pages []PageHash) Hits {
	t.Helper()
	h, err := ix.Query(pages)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestDynamoScenario replays Dynamo's test_check_blocks_uses_mooncake_events.
func TestDynamoScenario(t *testing.T) {
	l := Layout{PageSize: 4}
	ix := newIndex(t, Config{Layout: l})
	pages := tokenPages(2, 4)
	if pages[0].String() != hexH {
		t.Fatalf("page 0 %s", pages[0])
	}
	b := &batcher{ix: ix}
	b.apply(
		Event{Kind: Store, Key: pages[0].String() + "_0_k", Tenant: "default"},
		Event{Kind: Store, Key: pages[0].String() + "_0_v", Tenant: "default"},
		Event{Kind: Store, Key: pages[1].String() + "_0_k", Tenant: "default"},
	)
	h := hitsOf(t, ix, pages)
	if !slices.Equal(h.Ranges, []Range{{0, 1}}) || h.Total != 1 {
		t.Fatalf("hits %+v", h)
	}
	b.apply(Event{Kind: Remove, Key: pages[0].String() + "_0_v", Tenant: "default"})
	if h := hitsOf(t, ix, pages); h.Total != 0 || len(h.Ranges) != 0 {
		t.Fatalf("after remove %+v", h)
	}
}

func TestPagePresentOnlyWhenComplete(t *testing.T) {
	l := Layout{PageSize: 4, TPSize: 2, PPSize: 2, ExtraBackendTag: "tag"}
	ix := newIndex(t, Config{Layout: l})
	b := &batcher{ix: ix}
	pages := tokenPages(3, 4)
	evs := storeAll(l, "", pages[1])
	if len(evs) != 8 {
		t.Fatalf("%d objects", len(evs))
	}
	for i, e := range evs {
		if ix.Contains(pages[1]) {
			t.Fatalf("present after %d of 8 objects", i)
		}
		b.apply(e)
	}
	if !ix.Contains(pages[1]) || ix.Len() != 1 {
		t.Fatal("not present after all objects")
	}
	// Storing the same object again changes nothing.
	b.apply(evs[3])
	if s := ix.Stats(); s.Objects != 8 || s.Pages != 1 || s.Present != 1 {
		t.Fatalf("stats %+v", s)
	}
	b.apply(Event{Kind: Remove, Key: evs[5].Key})
	if ix.Contains(pages[1]) || ix.Len() != 0 || ix.Stats().Pages != 1 {
		t.Fatalf("present with an object missing: %+v", ix.Stats())
	}
	b.apply(Event{Kind: Store, Key: evs[5].Key})
	if h := hitsOf(t, ix, pages); !slices.Equal(h.Ranges, []Range{{1, 2}}) {
		t.Fatalf("hits %+v", h)
	}
}

func TestMedia(t *testing.T) {
	l := Layout{PageSize: 4, MLA: true}
	ix := newIndex(t, Config{Layout: l})
	b := &batcher{ix: ix}
	p := tokenPages(1, 4)[0]
	key := l.AppendObjectKeys(nil, p)[0]
	b.apply(Event{Kind: Store, Key: key, Medium: "cpu"}, Event{Kind: Store, Key: key, Medium: "disk"})
	b.apply(Event{Kind: Remove, Key: key, Medium: "cpu"})
	if !ix.Contains(p) {
		t.Fatal("removing one medium removed the object")
	}
	b.apply(Event{Kind: Remove, Key: key, Medium: "nvme"}) // never stored there
	if !ix.Contains(p) || ix.Stats().RemovesUnknown != 1 {
		t.Fatalf("unknown medium: %+v", ix.Stats())
	}
	b.apply(Event{Kind: Remove, Key: key, Medium: "disk"})
	if ix.Contains(p) || ix.Stats().Pages != 0 {
		t.Fatal("object survives its last medium")
	}
	// A remove without a medium drops every medium.
	b.apply(Event{Kind: Store, Key: key, Medium: "cpu"}, Event{Kind: Store, Key: key})
	b.apply(Event{Kind: Remove, Key: key})
	if ix.Contains(p) {
		t.Fatal("medium-less remove kept the object")
	}
}

func TestManyMediaShareTheOverflowBit(t *testing.T) {
	l := Layout{PageSize: 4, MLA: true}
	ix := newIndex(t, Config{Layout: l})
	b := &batcher{ix: ix}
	p := tokenPages(1, 4)[0]
	key := l.AppendObjectKeys(nil, p)[0]
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8"} {
		b.apply(Event{Kind: Store, Key: key, Medium: m})
	}
	// m7 and m8 share one bit: removing m8 also forgets m7 (under-credit,
	// never over-credit).
	for _, m := range []string{"m1", "m2", "m3", "m4", "m5", "m6"} {
		b.apply(Event{Kind: Remove, Key: key, Medium: m})
	}
	if !ix.Contains(p) {
		t.Fatal("object gone while m7/m8 hold it")
	}
	b.apply(Event{Kind: Remove, Key: key, Medium: "m8"})
	if ix.Contains(p) {
		t.Fatal("shared overflow bit not cleared")
	}
}

func TestSequence(t *testing.T) {
	l := Layout{PageSize: 4}
	ix := newIndex(t, Config{Layout: l})
	pages := tokenPages(3, 4)
	apply := func(seq uint64, evs ...Event) Report { return ix.Apply(&Batch{Seq: seq, Events: evs}) }

	if r := apply(100, storeAll(l, "", pages[0])...); r.Gap != nil || r.Duplicate || r.Applied != 2 {
		t.Fatalf("first batch %+v", r)
	}
	// A duplicate is skipped whole, even when it would remove.
	if r := apply(100, Event{Kind: Remove, Key: l.AppendObjectKeys(nil, pages[0])[0]}); !r.Duplicate || r.Applied != 0 {
		t.Fatalf("duplicate %+v", r)
	}
	if !ix.Contains(pages[0]) {
		t.Fatal("duplicate batch was applied")
	}
	if r := apply(101, storeAll(l, "", pages[1])...); r.Gap != nil || r.Cleared() {
		t.Fatalf("next batch %+v", r)
	}
	r := apply(105, storeAll(l, "", pages[2])...)
	if r.Gap == nil || *r.Gap != (SeqGap{Last: 101, Got: 105}) || !r.Cleared() {
		t.Fatalf("gap not reported: %+v", r)
	}
	if ix.Contains(pages[0]) || ix.Contains(pages[1]) || !ix.Contains(pages[2]) {
		t.Fatal("gap did not clear, or dropped the batch after it")
	}
	// Going backwards is a gap too (publisher restart).
	if r := apply(3); r.Gap == nil || ix.Len() != 0 {
		t.Fatalf("restart %+v", r)
	}
	// After Reset any number starts a new sequence.
	apply(4, storeAll(l, "", pages[0])...)
	ix.Reset()
	if ix.Len() != 0 {
		t.Fatal("Reset kept pages")
	}
	if r := apply(900); r.Gap != nil {
		t.Fatalf("gap after Reset: %+v", r)
	}
	s := ix.Stats()
	if s.Gaps != 2 || s.Duplicates != 1 || s.Batches != 7 {
		t.Errorf("stats %+v", s)
	}
}

func TestSizeBound(t *testing.T) {
	l := Layout{PageSize: 4}
	ix := newIndex(t, Config{Layout: l, MaxPages: 2})
	b := &batcher{ix: ix}
	pages := tokenPages(3, 4)
	b.apply(storeAll(l, "", pages[0], pages[1])...)
	if ix.Len() != 2 {
		t.Fatal(ix.Stats())
	}
	r := b.apply(storeAll(l, "", pages[2])...)
	if r.Overflows != 1 || !r.Cleared() || ix.Stats().Overflows != 1 {
		t.Fatalf("overflow not reported: %+v", r)
	}
	if ix.Contains(pages[0]) || ix.Contains(pages[1]) || !ix.Contains(pages[2]) {
		t.Fatal("overflow must clear, then index the new page")
	}
}

func TestFilters(t *testing.T) {
	l := Layout{PageSize: 4, MLA: true}
	ix := newIndex(t, Config{Layout: l, Tenant: "t1", Backend: "mc"})
	b := &batcher{ix: ix}
	p := tokenPages(1, 4)[0]
	key := l.AppendObjectKeys(nil, p)[0]
	r := b.apply(
		Event{Kind: Store, Key: key, Tenant: "default"},
		Event{Kind: Store, Key: key, Backend: "other"},
		Event{Kind: Clear, Tenant: "default"},
	)
	if r.Ignored != 3 || ix.Contains(p) || ix.Stats().OtherTenant != 3 {
		t.Fatalf("filters: %+v %+v", r, ix.Stats())
	}
	b.apply(Event{Kind: Store, Key: key, Tenant: "t1", Backend: "mc"})
	b.apply(Event{Kind: Clear, Tenant: "other"})
	if !ix.Contains(p) {
		t.Fatal("tenant's object missing, or another tenant's clear applied")
	}
	if r := b.apply(Event{Kind: Clear}); r.ClearEvents != 1 || ix.Contains(p) {
		t.Fatalf("clear: %+v", r)
	}
	r = b.apply(Event{Kind: Store}, Event{Kind: Store, Key: "junk"}, Event{Kind: Kind(9), Key: key})
	if s := ix.Stats(); s.NoKey != 1 || s.Foreign != 1 || r.Rejected != 1 || s.Malformed != 1 {
		t.Fatalf("stats %+v report %+v", s, r)
	}
}

func TestRejectedEventDropsItsObject(t *testing.T) {
	l := Layout{PageSize: 4}
	ix := newIndex(t, Config{Layout: l})
	p := tokenPages(1, 4)[0]
	keys := l.AppendObjectKeys(nil, p)
	ix.Apply(&Batch{Seq: 1, Events: storeAll(l, "cpu", p)})
	r := ix.Apply(&Batch{Seq: 2, Rejected: []Rejection{{Index: 0, Key: keys[1], Err: ErrMalformedEvent}, {Index: 1}}})
	if r.Rejected != 2 || ix.Contains(p) || ix.Stats().Malformed != 2 {
		t.Fatalf("report %+v stats %+v", r, ix.Stats())
	}
}

func TestGroupMismatchCounted(t *testing.T) {
	l := Layout{PageSize: 4, ExtraBackendTag: "tag"}
	ix := newIndex(t, Config{Layout: l})
	pages := tokenPages(2, 4)
	k := l.AppendObjectKeys(nil, pages[0])
	ix.Apply(&Batch{Seq: 1, Events: []Event{
		{Kind: Store, Key: k[0], GroupID: l.GroupID(pages[0])},
		{Kind: Store, Key: k[1], GroupID: l.GroupID(pages[1])},
	}})
	if s := ix.Stats(); s.GroupMismatch != 1 || !ix.Contains(pages[0]) {
		t.Fatalf("stats %+v", s)
	}
}

func TestLayoutChanges(t *testing.T) {
	a := Layout{PageSize: 4}
	ix := newIndex(t, Config{})
	p := tokenPages(1, 4)[0]
	if _, err := ix.Query([]PageHash{p}); !errors.Is(err, ErrNoLayout) {
		t.Fatalf("query without layout: %v", err)
	}
	if r := ix.Apply(&Batch{Seq: 1, Events: storeAll(a, "", p)}); r.Ignored != 2 || ix.Stats().NoLayout != 2 {
		t.Fatalf("events without layout: %+v", r)
	}
	if changed, err := ix.SetLayout(a); !changed || err != nil {
		t.Fatal(changed, err)
	}
	ix.Apply(&Batch{Seq: 2, Events: storeAll(a, "", p)})
	if changed, _ := ix.SetLayout(Layout{PageSize: 4, TPSize: 1, Backend: "mooncake"}); changed || !ix.Contains(p) {
		t.Fatal("an equal layout cleared the index")
	}
	if _, err := ix.SetLayout(Layout{PageSize: 0}); !errors.Is(err, ErrInvalidLayout) || !ix.Contains(p) {
		t.Fatal("an invalid layout changed the index")
	}
	if changed, _ := ix.SetLayout(Layout{PageSize: 4, TPSize: 2}); !changed || ix.Len() != 0 {
		t.Fatal("a layout change kept the pages")
	}
	// Workers disagree: cleared and disabled until they agree.
	err := ix.SyncLayouts(map[uint64]Layout{1: a, 2: {PageSize: 4, TPSize: 2}})
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("mismatch: %v", err)
	}
	if _, qerr := ix.Query([]PageHash{p}); !errors.Is(qerr, ErrLayoutMismatch) {
		t.Fatalf("query during mismatch: %v", qerr)
	}
	if _, lerr := ix.Layout(); !errors.Is(lerr, ErrLayoutMismatch) {
		t.Fatal(lerr)
	}
	if err := ix.SyncLayouts(map[uint64]Layout{1: a, 2: a}); err != nil {
		t.Fatal(err)
	}
	ix.Apply(&Batch{Seq: 3, Events: storeAll(a, "", p)})
	if got, _ := ix.Layout(); !got.Equal(a) || !ix.Contains(p) {
		t.Fatal("agreement did not restore the index")
	}
	if s := ix.Stats(); s.LayoutChanges != 4 {
		t.Errorf("layout changes %d", s.LayoutChanges)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := New(Config{MaxPages: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Error(err)
	}
	if _, err := New(Config{Layout: Layout{PageSize: 4, Backend: "nixl"}}); !errors.Is(err, ErrUnsupportedBackend) {
		t.Error(err)
	}
}

func TestApplyFrames(t *testing.T) {
	l := Layout{PageSize: 4}
	ix := newIndex(t, Config{Layout: l})
	p := tokenPages(1, 4)[0]
	var evs []any
	for _, k := range l.AppendObjectKeys(nil, p) {
		evs = append(evs, objEvent("stored", k, "default", l.GroupID(p)))
	}
	if _, err := ix.ApplyFrames(frames("", 1, batchPayload(t, evs...))); err != nil || !ix.Contains(p) {
		t.Fatal(err)
	}
	if _, err := ix.ApplyFrames(frames("", 2, []byte{0xc1})); !errors.Is(err, ErrMalformedFrame) || ix.Stats().BadFrames != 1 {
		t.Fatalf("bad frame: %v", err)
	}
	// The lost batch 2 shows as a gap at batch 3.
	r, err := ix.ApplyFrames(frames("", 3, batchPayload(t)))
	if err != nil || r.Gap == nil || ix.Contains(p) {
		t.Fatalf("%+v %v", r, err)
	}
}

// TestTableChurn grows the table, deletes across wrapped probe runs and
// checks every page afterwards against the set it should hold.
func TestTableChurn(t *testing.T) {
	l := Layout{PageSize: 1, MLA: true}
	for _, seed := range []uint64{1, 2, 0xdeadbeef} {
		ix := newIndex(t, Config{Layout: l, Seed: seed, InitialPages: 4})
		b := &batcher{ix: ix}
		tokens := make([]uint32, 5000)
		for i := range tokens {
			tokens[i] = uint32(i)
		}
		pages := PageHashes(tokens, 1, false, nil)
		want := map[int]bool{}
		for round := range 6 {
			var evs []Event
			for i := range pages {
				if (i*7+round*13)%5 < 2 {
					kind := Store
					if want[i] {
						kind = Remove
					}
					want[i] = !want[i]
					evs = append(evs, Event{Kind: kind, Key: l.AppendObjectKeys(nil, pages[i])[0]})
				}
			}
			b.apply(evs...)
			h := hitsOf(t, ix, pages)
			n := 0
			for i := range pages {
				if h.Contains(i) != want[i] || ix.Contains(pages[i]) != want[i] {
					t.Fatalf("seed %d round %d page %d: got %v want %v", seed, round, i, h.Contains(i), want[i])
				}
				if want[i] {
					n++
				}
			}
			if ix.Len() != n || h.Total != n {
				t.Fatalf("len %d total %d want %d", ix.Len(), h.Total, n)
			}
		}
	}
}

// pageWithHome returns a page hash whose probe run starts at slot home of
// ix's current table (white box: it searches the first digest word).
func pageWithHome(ix *Index, home uint64, salt uint64) PageHash {
	var h PageHash
	for d0 := salt << 32; ; d0++ {
		if ix.home(d0) == home {
			for i := range 8 {
				h[i] = byte(d0 >> (8 * i))
			}
			h[8] = byte(salt)
			return h
		}
	}
}

// TestDeleteAcrossTableEnd clusters pages around the end of the table so
// probe runs wrap to slot 0, then deletes them in random orders: backward
// shift must never move an entry before its home.
func TestDeleteAcrossTableEnd(t *testing.T) {
	l := Layout{PageSize: 1, MLA: true}
	for trial := range 200 {
		ix := newIndex(t, Config{Layout: l, InitialPages: 4, Seed: uint64(trial) + 1})
		if len(ix.slots) != 16 {
			t.Fatalf("table of %d slots", len(ix.slots))
		}
		r := rand.New(rand.NewPCG(uint64(trial), 9))
		var pages []PageHash
		for i := range 10 {
			home := (14 + r.Uint64N(5)) % 16 // 14, 15, 0, 1, 2
			pages = append(pages, pageWithHome(ix, home, uint64(i+1)))
		}
		b := &batcher{ix: ix}
		b.apply(storeAll(l, "", pages...)...)
		alive := slices.Clone(pages)
		for len(alive) > 0 {
			k := r.IntN(len(alive))
			b.apply(Event{Kind: Remove, Key: l.AppendObjectKeys(nil, alive[k])[0]})
			alive = slices.Delete(alive, k, k+1)
			for _, p := range alive {
				if !ix.Contains(p) {
					t.Fatalf("trial %d: page lost after a delete", trial)
				}
			}
			if ix.Len() != len(alive) {
				t.Fatalf("trial %d: len %d want %d", trial, ix.Len(), len(alive))
			}
		}
	}
}

// TestRejectionOrder: a rejection takes effect at its place in the batch.
func TestRejectionOrder(t *testing.T) {
	l := Layout{PageSize: 4, MLA: true}
	p := tokenPages(1, 4)[0]
	key := l.AppendObjectKeys(nil, p)[0]
	store := Event{Kind: Store, Key: key}
	for _, tt := range []struct {
		name    string
		b       Batch
		present bool
	}{
		{"rejected after the store", Batch{Seq: 1, Events: []Event{store}, Rejected: []Rejection{{Index: 1, Key: key}}}, false},
		{"rejected before the store", Batch{Seq: 1, Events: []Event{store}, Rejected: []Rejection{{Index: 0, Key: key}}}, true},
	} {
		ix := newIndex(t, Config{Layout: l})
		ix.Apply(&tt.b)
		if ix.Contains(p) != tt.present {
			t.Errorf("%s: present %v", tt.name, !tt.present)
		}
	}
}
