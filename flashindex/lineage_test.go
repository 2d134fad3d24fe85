package flashindex

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// lineage builds chains over the index for the lineage tests: each chain
// is a list of local hashes; stores use the index's own sequence hashes
// as engine hashes.
type lineage struct {
	t   *testing.T
	ix  *Index
	ids map[Worker]uint64
}

func newLineage(t *testing.T) *lineage {
	return &lineage{t: t, ix: mustNew(t, Config{BlockSize: 16}), ids: map[Worker]uint64{}}
}

// store stores blocks [from, len) of the chain locals on w's device, as one
// event whose parent is block from-1.
func (l *lineage) store(w Worker, locals []uint64, from int) {
	l.t.Helper()
	seq := AppendSequenceHashes(nil, locals)
	ev := &Event{Worker: w, EventID: l.ids[w], Kind: Stored, Tier: Device}
	l.ids[w]++
	if from > 0 {
		ev.HasParent, ev.Parent = true, seq[from-1]
	}
	for i := from; i < len(locals); i++ {
		ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i], LocalHash: locals[i], HasLocalHash: true})
	}
	if err := l.ix.Apply(ev); err != nil {
		l.t.Fatal(err)
	}
}

// remove evicts blocks [from, to) of the chain locals from w's device.
func (l *lineage) remove(w Worker, locals []uint64, from, to int) {
	l.t.Helper()
	seq := AppendSequenceHashes(nil, locals)
	ev := &Event{Worker: w, EventID: l.ids[w], Kind: Removed, Tier: Device, Hashes: slices.Clone(seq[from:to])}
	l.ids[w]++
	if err := l.ix.Apply(ev); err != nil {
		l.t.Fatal(err)
	}
}

// chain returns n local hashes: prefix, then fresh ones drawn from tag.
func chain(prefix []uint64, n int, tag uint64) []uint64 {
	out := slices.Clone(prefix[:min(len(prefix), n)])
	for len(out) < n {
		out = append(out, mix64(tag<<20|uint64(len(out))))
	}
	return out
}

// device returns each worker's device depth for the query, by worker ID.
func device(ms []Match) map[uint64]int {
	out := map[uint64]int{}
	for _, m := range ms {
		out[m.Worker.ID] = m.Device
	}
	return out
}

// TestPathUsesKids checks that a query crosses every node boundary of a
// branching tree through the kid lists, without comparing hashes, and that
// the answers are exact.
func TestPathUsesKids(t *testing.T) {
	l := newLineage(t)
	root := chain(nil, 40, 1)
	l.store(Worker{ID: 1}, root, 0)
	// Branches off the root at offsets 9, 19 and 29, a branch off a
	// branch, and one extending the root's last block (no new node).
	a := chain(root[:10], 30, 2)
	b := chain(root[:20], 50, 3)
	c := chain(root[:30], 45, 4)
	bb := chain(b[:35], 60, 5)
	ext := chain(root, 55, 6)
	l.store(Worker{ID: 2}, a, 0)
	l.store(Worker{ID: 3}, b, 0)
	l.store(Worker{ID: 4}, c, 0)
	l.store(Worker{ID: 5}, bb, 0)
	l.store(Worker{ID: 6}, ext, 0)
	if _, err := checkKids(l.ix, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		q     []uint64
		nodes int
		want  map[uint64]int
	}{
		{"a", a, 2, map[uint64]int{1: 10, 2: 30, 3: 10, 4: 10, 5: 10, 6: 10}},
		{"b", b, 2, map[uint64]int{1: 20, 2: 10, 3: 50, 4: 20, 5: 35, 6: 20}},
		{"bb", bb, 3, map[uint64]int{1: 20, 2: 10, 3: 35, 4: 20, 5: 60, 6: 20}},
		{"c", c, 2, map[uint64]int{1: 30, 2: 10, 3: 20, 4: 45, 5: 20, 6: 30}},
		{"ext", ext, 1, map[uint64]int{1: 40, 2: 10, 3: 20, 4: 30, 5: 20, 6: 55}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq := AppendSequenceHashes(nil, tc.q)
			hops := l.ix.path(seq, new(queryScratch))
			if len(hops) != tc.nodes {
				t.Fatalf("%d hops, want %d", len(hops), tc.nodes)
			}
			for j, h := range hops[:len(hops)-1] {
				if h.check < 0 {
					t.Errorf("hop %d (pos %d, m %d) compared hashes instead of using the kid list", j, h.pos, h.m)
				}
			}
			if got := device(l.ix.FindMatches(seq, nil)); !maps.Equal(got, tc.want) {
				t.Fatalf("device depths %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPathStaleKid builds an orphan: a node whose parent block was dropped
// (its parent node's tail trimmed) and stored again with other content
// after it, so that the parent's kid list names an offset at which the
// orphan's first block looks like a continuation. The query must see
// through it: the kid-list answer fails its comparison and the hashes
// decide.
func TestPathStaleKid(t *testing.T) {
	l := newLineage(t)
	w1, w2, w3, w4 := Worker{ID: 1}, Worker{ID: 2}, Worker{ID: 3}, Worker{ID: 4}
	x := chain(nil, 4, 1)    // a b c e
	y := chain(x[:3], 4, 2)  // a b c d: d is a kid of c (offset 2)
	l.store(w1, x, 0)        // node A = a b c e
	l.store(w2, y, 0)        // node B = d, linked at (A, 2)
	l.remove(w1, x, 2, 4)    // w1 drops c e
	l.remove(w2, y, 2, 3)    // w2 drops c, keeps d: A trims to a b, B is an orphan
	z := chain(x[:2], 4, 3)  // a b x' y': extends A
	z2 := chain(z[:3], 4, 4) // a b x' z: a kid of x' at offset 2
	l.store(w3, z, 0)
	l.store(w4, z2, 0)
	if _, err := checkKids(l.ix, nil); err != nil {
		t.Fatal(err)
	}
	seq := AppendSequenceHashes(nil, y)
	// Following kid lists alone walks into the orphan...
	raw := l.ix.follow(seq, 0, nil)
	if len(raw) < 2 || raw[0].check != 2 {
		t.Fatalf("the scenario does not reach the orphan through the kid list: %+v", raw)
	}
	// ...which the comparison catches.
	hops := l.ix.path(seq, new(queryScratch))
	if len(hops) != 1 || hops[0].m != 2 || hops[0].check != -1 {
		t.Fatalf("path %+v, want one hop of 2 blocks found by comparing", hops)
	}
	want := map[uint64]int{1: 2, 2: 2, 3: 2, 4: 2}
	if got := device(l.ix.FindMatches(seq, nil)); !maps.Equal(got, want) {
		t.Fatalf("device depths %v, want %v", got, want)
	}
}

// TestSnapshotLinks checks that a snapshot carries the kid lists: the
// restored index lists the same kids for every node and crosses node
// boundaries through them.
func TestSnapshotLinks(t *testing.T) {
	l := newLineage(t)
	root := chain(nil, 24, 1)
	l.store(Worker{ID: 1}, root, 0)
	var leaves [][]uint64
	for i := 0; i < 12; i++ { // more distinct offsets than a head slot lists
		leaf := chain(root[:2+i], 30, uint64(10+i))
		leaves = append(leaves, leaf)
		l.store(Worker{ID: uint64(2 + i)}, leaf, 0)
	}
	var buf bytes.Buffer
	if err := l.ix.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	rx, err := Restore(bytes.NewReader(buf.Bytes()), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkKids(rx, nil); err != nil {
		t.Fatal(err)
	}
	kids := func(ix *Index) map[uint64][]kidEntry {
		out := map[uint64][]kidEntry{}
		ix.nodes.each(func(n *node) {
			var ks []kidEntry
			for _, e := range n.kids {
				ks = append(ks, kidEntry{off: e.off, n: e.n}) // epochs are not saved
			}
			out[n.data.Load().hashes[0]] = ks
		})
		return out
	}
	before, after := kids(l.ix), kids(rx)
	if len(before) != len(after) {
		t.Fatalf("%d nodes restored, want %d", len(after), len(before))
	}
	total := 0
	for h, ks := range before {
		if !slices.Equal(ks, after[h]) {
			t.Fatalf("node %#x: kids %v restored as %v", h, ks, after[h])
		}
		total += len(ks)
	}
	if total != 12 {
		t.Fatalf("%d kid offsets, want 12", total)
	}
	for _, leaf := range leaves[:headKids] {
		hops := rx.path(AppendSequenceHashes(nil, leaf), new(queryScratch))
		if len(hops) != 2 || hops[0].check < 0 {
			t.Fatalf("restored path %+v: want two hops, the first from the kid list", hops)
		}
	}
}

// TestSnapshotV1 restores a version 1 snapshot (testdata/snapshot_v1.bin,
// written by the build before links existed, commit 46ca733, from
// buildV1Fixture's index): every query answers as on the index it was
// taken from, with no kid lists, and a new snapshot is version 2.
func TestSnapshotV1(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "snapshot_v1.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if data[len(snapshotMagic)] != 1 {
		t.Fatalf("fixture is version %d", data[len(snapshotMagic)])
	}
	rx, err := Restore(bytes.NewReader(data), Config{})
	if err != nil {
		t.Fatal(err)
	}
	l := newLineage(t)
	queries := buildV1Fixture(l)
	rx.nodes.each(func(n *node) {
		if len(n.kids) != 0 || n.parent != nil {
			t.Fatalf("node %d has lineage after a version 1 restore", n.id)
		}
	})
	for i, q := range queries {
		seq := AppendSequenceHashes(nil, q)
		got, want := rx.FindMatches(seq, nil), l.ix.FindMatches(seq, nil)
		sortMatches(got)
		sortMatches(want)
		if !matchesEqual(got, want) {
			t.Fatalf("query %d: restored %v, built %v", i, got, want)
		}
	}
	var buf bytes.Buffer
	if err := rx.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	if v := buf.Bytes()[len(snapshotMagic)]; v != snapshotVersion {
		t.Fatalf("snapshot of a restored version 1 index is version %d", v)
	}
}

// buildV1Fixture stores the index that testdata/snapshot_v1.bin holds
// (three workers, a branching tree with an evicted tail) and returns
// queries over it.
func buildV1Fixture(l *lineage) [][]uint64 {
	root := chain(nil, 30, 1)
	a := chain(root[:12], 40, 2)
	b := chain(a[:25], 50, 3)
	c := chain(root[:5], 20, 4)
	l.store(Worker{ID: 1}, root, 0)
	l.store(Worker{ID: 2}, a, 0)
	l.store(Worker{ID: 3, DPRank: 1}, b, 0)
	l.store(Worker{ID: 1}, c, 5)
	l.remove(Worker{ID: 2}, a, 30, 40)
	return [][]uint64{root, a, b, c, chain(b[:45], 60, 5), chain(nil, 10, 9)}
}
