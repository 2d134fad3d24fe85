package agentkv

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

// TestHashCacheMatchesFullHash: whatever sessions send (appends, edits,
// truncations, other adapters), the cached path returns exactly the hashes
// of hashing from scratch.
func TestHashCacheMatchesFullHash(t *testing.T) {
	for seed := uint64(0); seed < 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		bs := []int{1, 4, 16}[rng.IntN(3)]
		c := newHashCache(1 + rng.IntN(20000)) // small budgets force evictions
		hashers := map[string]*flashindex.Hasher{}
		for _, l := range []string{"", "lora-a"} {
			hashers[l], _ = flashindex.NewHasher(bs, l)
		}
		prompts := map[string][]uint32{}
		var dst []uint64
		for step := 0; step < 400; step++ {
			sid := []string{"a", "b", "c", ""}[rng.IntN(4)]
			p := prompts[sid]
			switch rng.IntN(6) {
			case 0: // edit inside the prompt
				if len(p) > 0 {
					p[rng.IntN(len(p))] ^= 1
				}
			case 1: // truncate
				if len(p) > 0 {
					p = p[:rng.IntN(len(p))]
				}
			case 2:
				c.forget(sid)
			}
			for i := rng.IntN(3 * bs * 10); i > 0; i-- {
				p = append(p, rng.Uint32())
			}
			prompts[sid] = p
			lora := []string{"", "lora-a"}[rng.IntN(2)]
			h := hashers[lora]
			dst = c.hash(h, sid, lora, p, dst)
			_, want := h.AppendHashes(nil, nil, p, 0, false)
			require.Equal(t, len(want), len(dst), "seed %d step %d", seed, step)
			if len(want) > 0 {
				require.Equal(t, want, dst, "seed %d step %d", seed, step)
			}
			require.LessOrEqual(t, c.tokens, c.max)
		}
	}
}

func TestCommonBlocks(t *testing.T) {
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	b := []uint32{1, 2, 3, 4, 5, 6, 0, 8}
	require.Equal(t, 1, commonBlocks(a, b, 4))
	require.Equal(t, 6, commonBlocks(a, b, 1))
	require.Equal(t, 2, commonBlocks(a, a, 4))
	require.Equal(t, 0, commonBlocks(nil, a, 4))
}
