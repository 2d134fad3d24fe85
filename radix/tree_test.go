package radix

import (
	"errors"
	"slices"
	"testing"
)

func mustRaw(t *testing.T, cfg Config) *RawTree {
	t.Helper()
	tr, err := NewRawTree(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func seq(from, n uint64) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = from + uint64(i)
	}
	return c
}

func TestSplitAtFrontier(t *testing.T) {
	tr := mustRaw(t, Config{})
	parent := seq(1, 10)
	if err := tr.UpdateFromMatch("p", chainOf(parent)); err != nil {
		t.Fatal(err)
	}
	// The child takes the parent's whole context and extends it in place:
	// the parent's frontier is now inside the node.
	if err := tr.UpdateFromMatch("c", chainOf(append(slices.Clone(parent), seq(100, 5)...))); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Nodes != 1 {
		t.Fatalf("nodes %d, want 1 (in-place extension)", st.Nodes)
	}
	// The parent's next turn diverges exactly at its frontier.
	if err := tr.UpdateFromMatch("p", chainOf(append(slices.Clone(parent), seq(200, 3)...))); err != nil {
		t.Fatal(err)
	}
	if err := tr.check(); err != nil {
		t.Fatal(err)
	}
	if st := tr.Stats(); st.Nodes != 3 || st.Blocks != 18 {
		t.Fatalf("stats %+v, want 3 nodes, 18 blocks", st)
	}
	for s, want := range map[string]Share{"p": {10, 3}, "c": {10, 5}} {
		if got, _ := tr.Split(s); got != want {
			t.Errorf("Split(%s) = %+v, want %+v", s, got, want)
		}
	}
}

func TestErrors(t *testing.T) {
	tr := mustRaw(t, Config{})
	a := chainOf(seq(1, 6))
	if err := tr.UpdateFromMatch("a", a); err != nil {
		t.Fatal(err)
	}
	b := chainOf(seq(50, 4))
	if err := tr.UpdateFromMatch("b", b); err != nil {
		t.Fatal(err)
	}
	before := tr.Stats()
	var ce *CycleError
	var pe *ParentConflictError
	for _, tc := range []struct {
		name  string
		chain []uint64
		check func(error) bool
	}{
		{"block repeats its own ancestor", append(slices.Clone(a), a[2]),
			func(err error) bool { return errors.As(err, &ce) && ce.Block == a[2] && ce.Depth == 7 }},
		{"block repeated in the new tail", append(slices.Clone(a), 900, 901, 900),
			func(err error) bool { return errors.As(err, &ce) && ce.Block == 900 && ce.Depth == 9 }},
		{"block held under another parent", append(slices.Clone(a), b[1]),
			func(err error) bool {
				return errors.As(err, &pe) && pe.Block == b[1] && pe.Depth == 7 && pe.HaveDepth == 2
			}},
	} {
		err := tr.UpdateFromMatch("a", tc.chain)
		if !tc.check(err) || !errors.Is(err, ErrLineage) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
		if err := tr.check(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if st := tr.Stats(); st.Blocks != before.Blocks || st.Nodes != before.Nodes {
			t.Fatalf("%s: failed update changed the tree: %+v → %+v", tc.name, before, st)
		}
	}
	if err := tr.UpdateFromMatch("", a); !errors.Is(err, ErrNoSession) {
		t.Errorf("empty session: %v", err)
	}
	if err := tr.Stored("a", 0xdead, true, []uint64{1}); !errors.Is(err, ErrUnknownBlock) {
		t.Errorf("unknown parent: %v", err)
	}
	if _, err := tr.Lineage("zz", nil); !errors.Is(err, ErrUnknownSession) {
		t.Errorf("unknown session: %v", err)
	}
	if _, err := tr.Sessions(0xdead, nil); !errors.Is(err, ErrUnknownBlock) {
		t.Errorf("unknown block: %v", err)
	}
	if _, err := NewRawTree(Config{MaxSessions: -1}); !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
}

// Stored events are attributed to the session whose request caused them,
// and extend its lineage like a routed match.
func TestStoredAttribution(t *testing.T) {
	tr := mustRaw(t, Config{})
	ch := chainOf(seq(1, 12))
	if err := tr.UpdateFromMatch("s", ch[:4]); err != nil {
		t.Fatal(err)
	}
	// The engine stores blocks 5..8 under block 4, then 1..8 again (a
	// re-store of what it holds is shared, not duplicated).
	if err := tr.Stored("s", ch[3], true, ch[4:8]); err != nil {
		t.Fatal(err)
	}
	if err := tr.Stored("s", 0, false, ch[:8]); err != nil {
		t.Fatal(err)
	}
	got, _ := tr.Lineage("s", nil)
	if !slices.Equal(got, ch[:8]) {
		t.Fatalf("lineage %d blocks, want 8", len(got))
	}
	// Another session's event under s's block forks from it.
	if err := tr.Stored("sub", ch[5], true, chainFrom(ch[5], seq(77, 3))); err != nil {
		t.Fatal(err)
	}
	if under, _ := tr.Under("sub", nil); len(under) != 0 {
		t.Fatalf("Under(sub) = %v", under)
	}
	if ss, _ := tr.Sessions(ch[5], nil); len(ss) != 2 {
		t.Fatalf("Sessions(block 6) = %v, want s and sub", ss)
	}
	if sh, _ := tr.Split("sub"); sh != (Share{Shared: 6, Unique: 3}) {
		t.Fatalf("Split(sub) = %+v", sh)
	}
	if err := tr.check(); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveReleasesOnlyOwnBlocks(t *testing.T) {
	tr := mustRaw(t, Config{})
	parent := chainOf(seq(1, 10))
	child := append(parent[:6:6], chainFrom(parent[5], seq(100, 4))...)
	tr.UpdateFromMatch("parent", parent)
	tr.UpdateFromMatch("child", child)
	if st := tr.Stats(); st.Blocks != 14 || st.Nodes != 3 {
		t.Fatalf("stats %+v", st)
	}
	if under, _ := tr.Under("parent", nil); len(under) != 0 {
		t.Fatalf("Under(parent) = %v (the child forks mid-lineage, not below its frontier)", under)
	}
	if !tr.RemoveSession("parent") || tr.RemoveSession("parent") {
		t.Fatal("RemoveSession result")
	}
	st := tr.Stats()
	if st.Blocks != 10 || st.Nodes != 1 || st.Sessions != 1 {
		t.Fatalf("after removing the parent: %+v, want the child's 10 blocks re-compressed into 1 node", st)
	}
	for _, b := range parent[6:] {
		if tr.Contains(b) {
			t.Fatalf("parent-only block %#x not released", b)
		}
	}
	got, _ := tr.Lineage("child", nil)
	if !slices.Equal(got, child) {
		t.Fatal("child lineage damaged")
	}
	tr.RemoveSession("child")
	if st := tr.Stats(); st.Blocks != 0 || st.Nodes != 0 || st.Frontiers != 0 {
		t.Fatalf("empty tree holds %+v", st)
	}
}

func TestFrontiers(t *testing.T) {
	tr := mustRaw(t, Config{MaxFrontiers: 2})
	main := chainOf(seq(1, 8))
	tr.UpdateFromMatch("s", main)
	side := chainOf(append(seq(1, 1), 500)) // shares only the first block
	tr.UpdateFromMatch("s", side)
	fr, _ := tr.Frontiers("s", nil)
	if want := []Frontier{{main[7], 8}, {side[1], 2}}; !slices.Equal(fr, want) {
		t.Fatalf("Frontiers = %v, want %v", fr, want)
	}
	// A resend of the main context makes it current again, unchanged.
	tr.UpdateFromMatch("s", main[:5])
	if fr, _ = tr.Frontiers("s", fr[:0]); fr[1].Depth != 8 {
		t.Fatalf("Frontiers after resend = %v", fr)
	}
	// A third branch pushes out the least recent (the side request).
	tr.UpdateFromMatch("s", chainOf(seq(900, 3)))
	if fr, _ = tr.Frontiers("s", fr[:0]); len(fr) != 2 || fr[0].Depth != 8 || tr.Contains(side[1]) {
		t.Fatalf("Frontiers after a third branch = %v", fr)
	}
	if sh, _ := tr.Split("s"); sh != (Share{0, 3}) {
		t.Fatalf("own frontiers count as shared: %+v", sh)
	}
}

func TestLRUEviction(t *testing.T) {
	var evicted []string
	tr, err := New(Config{MaxSessions: 2, OnEvict: func(s string) { evicted = append(evicted, s) }})
	if err != nil {
		t.Fatal(err)
	}
	tr.UpdateFromMatch("a", chainOf(seq(1, 3)))
	tr.UpdateFromMatch("b", chainOf(seq(10, 3)))
	tr.UpdateFromMatch("a", chainOf(seq(1, 4))) // a is now the most recent
	tr.UpdateFromMatch("c", chainOf(seq(20, 3)))
	if !slices.Equal(evicted, []string{"b"}) || tr.Len() != 2 {
		t.Fatalf("evicted %v, len %d", evicted, tr.Len())
	}
	if tr.Contains(chainOf(seq(10, 3))[0]) {
		t.Fatal("evicted session's blocks kept")
	}
	if st := tr.Stats(); st.Bytes <= 0 || st.Blocks != 7 {
		t.Fatalf("stats %+v", st)
	}
}
