package radix

import (
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
