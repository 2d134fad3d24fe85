package radix

import "testing"

func seqChain(prefix uint64, n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = prefix<<32 | uint64(i+1)
	}
	return c
}

func TestBranch(t *testing.T) {
	tr, err := NewRawTree(Config{})
	if err != nil {
		t.Fatal(err)
	}
	sys := seqChain(1, 10) // a shared system prompt
	a := append(append([]uint64(nil), sys...), seqChain(2, 5)...)
	b := append(append([]uint64(nil), sys...), seqChain(3, 5)...)
	if err := tr.UpdateFromMatch("a", a); err != nil {
		t.Fatal(err)
	}
	if err := tr.UpdateFromMatch("b", b); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		chain   []uint64
		depth   int
		onPath  []Mark
		owners  int
		owner   string
		ownerAt int
	}{
		{"unknown", seqChain(9, 4), 0, nil, 0, "", 0},
		{"shared prefix only", append(append([]uint64(nil), sys...), seqChain(4, 3)...), 10, nil, 2, "", 0},
		{"extends a", append(append([]uint64(nil), a...), seqChain(5, 2)...), 15, []Mark{{"a", 15}}, 1, "a", 15},
		{"inside a", a[:12], 12, nil, 1, "a", 15},
		{"branches off a", append(append([]uint64(nil), a[:13]...), seqChain(6, 2)...), 13, nil, 1, "a", 15},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tr.Branch(tc.chain)
			if got.Depth != tc.depth || got.Owners != tc.owners || got.Owner != tc.owner || got.OwnerDepth != tc.ownerAt {
				t.Fatalf("got %+v", got)
			}
			if got.NOnPath != len(tc.onPath) {
				t.Fatalf("on path %v, want %v", got.OnPath[:got.NOnPath], tc.onPath)
			}
			for i, m := range tc.onPath {
				if got.OnPath[i] != m {
					t.Fatalf("on path %v, want %v", got.OnPath[:got.NOnPath], tc.onPath)
				}
			}
		})
	}
	// A subagent forked from a's frontier: a's frontier is on its path,
	// deepest first, and its junction belongs to the fork alone.
	fork := append(append([]uint64(nil), a...), seqChain(7, 3)...)
	if err := tr.UpdateFromMatch("fork", fork); err != nil {
		t.Fatal(err)
	}
	got := tr.Branch(append(append([]uint64(nil), fork...), 99))
	if got.Depth != 18 || got.NOnPath != 2 || got.OnPath[0] != (Mark{"fork", 18}) || got.OnPath[1] != (Mark{"a", 15}) || got.Owner != "fork" {
		t.Fatalf("fork: %+v", got)
	}
}
