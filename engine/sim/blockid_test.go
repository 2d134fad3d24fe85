package sim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

func TestBlockHashesShareExactlyEqualPrefixes(t *testing.T) {
	type prompt struct {
		ids   []uint64
		input int
	}
	cases := []struct {
		name       string
		w, b       int
		a, c       prompt
		wantShared int // leading engine blocks with equal sequence hashes
	}{
		{"split 512/16, same ids", 512, 16, prompt{ids(0, 2), 1536}, prompt{ids(0, 2), 1536}, 96},
		{"split 512/16, diverge at id 1", 512, 16, prompt{[]uint64{0, 1, 2}, 1536}, prompt{[]uint64{0, 9, 2}, 1536}, 32},
		{"split 64/16, partial last id", 64, 16, prompt{[]uint64{5, 6}, 100}, prompt{[]uint64{5, 6}, 100}, 6},
		{"split, tail past the ids is private", 64, 16, prompt{[]uint64{5}, 128}, prompt{[]uint64{5}, 128}, 4},
		{"merge 64/128", 64, 128, prompt{ids(1, 4), 256}, prompt{ids(1, 4), 256}, 2},
		{"merge 64/128, diverge inside a block", 64, 128, prompt{ids(1, 4), 256}, prompt{[]uint64{1, 2, 3, 7}, 256}, 1},
		{"merge, odd id count: last block private", 64, 128, prompt{ids(1, 3), 256}, prompt{ids(1, 3), 256}, 1},
		{"same id at another position never matches", 64, 64, prompt{[]uint64{1, 2}, 128}, prompt{[]uint64{2, 2}, 128}, 0},
		{"no ids: all private", 64, 16, prompt{nil, 256}, prompt{nil, 256}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			la, sa, err := AppendBlockHashes(nil, nil, c.a.ids, c.w, c.b, c.a.input, 1)
			if err != nil {
				t.Fatal(err)
			}
			lc, sc, err := AppendBlockHashes(nil, nil, c.c.ids, c.w, c.b, c.c.input, 2)
			if err != nil {
				t.Fatal(err)
			}
			if len(la) != c.a.input/c.b || len(sa) != len(la) {
				t.Fatalf("%d hashes for %d tokens", len(la), c.a.input)
			}
			shared := 0
			for shared < min(len(sa), len(sc)) && sa[shared] == sc[shared] {
				shared++
			}
			if shared != c.wantShared {
				t.Fatalf("shared %d blocks, want %d", shared, c.wantShared)
			}
			for i := shared; i < min(len(sa), len(sc)); i++ {
				if sa[i] == sc[i] {
					t.Fatalf("block %d equal after divergence", i)
				}
			}
			// The chain is flashindex's chain of the local hashes.
			if !slices.Equal(flashindex.AppendSequenceHashes(nil, la), sa) {
				t.Fatal("sequence hashes are not flashindex's chain of the local hashes")
			}
			_ = lc
		})
	}
}

func TestBlockHashesAppendAndErrors(t *testing.T) {
	l, s, err := AppendBlockHashes([]uint64{7}, []uint64{8}, ids(1, 2), 64, 16, 128, 1)
	if err != nil || len(l) != 9 || l[0] != 7 || s[0] != 8 {
		t.Fatalf("append: %v %v %v", l, s, err)
	}
	for _, c := range []struct{ w, b, in int }{{48, 32, 64}, {0, 16, 64}, {64, 0, 64}} {
		if _, _, err := AppendBlockHashes(nil, nil, ids(1, 2), c.w, c.b, c.in, 1); !errors.Is(err, ErrBlockSize) && !errors.Is(err, ErrConfig) {
			t.Errorf("w %d b %d: %v", c.w, c.b, err)
		}
	}
	if _, _, err := AppendBlockHashes(nil, nil, nil, 64, 16, -1, 1); !errors.Is(err, ErrRequest) {
		t.Errorf("negative input: %v", err)
	}
}

// TestBlockHashesPrefixProperty: on random id sequences, two prompts share
// exactly the engine blocks covered by their common id prefix.
func TestBlockHashesPrefixProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := range 2000 {
		w := []int{16, 64, 512}[rng.IntN(3)]
		b := []int{16, 32, 64}[rng.IntN(3)]
		if w%b != 0 && b%w != 0 {
			continue
		}
		n := 1 + rng.IntN(6)
		a := make([]uint64, n)
		for i := range a {
			a[i] = uint64(rng.IntN(3))
		}
		c := slices.Clone(a)
		common := n
		if rng.IntN(2) == 0 {
			common = rng.IntN(n)
			c[common] += 10
		}
		in := n * w
		_, sa, _ := AppendBlockHashes(nil, nil, a, w, b, in, 1)
		_, sc, _ := AppendBlockHashes(nil, nil, c, w, b, in, 2)
		want := common * w / b // engine blocks fully inside the common ids
		got := 0
		for got < len(sa) && sa[got] == sc[got] {
			got++
		}
		if got != want {
			t.Fatalf("iter %d: w %d b %d ids %v vs %v: shared %d blocks, want %d", iter, w, b, a, c, got, want)
		}
	}
}
