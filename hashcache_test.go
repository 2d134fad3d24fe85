package agentkv

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
)

// TestHashCacheMatchesFullHash: whatever sessions send (appends, edits,
// truncations, other adapters), the cached path returns exactly the hashes
// of hashing from scratch, and a turn that only appended hashes no more
// than its new blocks plus one chunk.
func TestHashCacheMatchesFullHash(t *testing.T) {
	appends := 0
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		bs := []int{1, 4, 16}[rng.IntN(3)]
		c := newHashCache(1+rng.IntN(20000), bs) // small budgets force evictions
		c.chunkBlocks = 1 + rng.IntN(8)          // many chunk boundaries
		hashers := map[string]*flashindex.Hasher{}
		for _, l := range []string{"", "lora-a"} {
			hashers[l], _ = flashindex.NewHasher(bs, l)
		}
		prompts := map[string][]uint32{}
		last := map[hashKey][]uint32{} // what each key was last hashed with
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
				for k := range last {
					if k.session == sid {
						delete(last, k)
					}
				}
			}
			for i := rng.IntN(3 * bs * 10); i > 0; i-- {
				p = append(p, rng.Uint32())
			}
			prompts[sid] = p
			lora := []string{"", "lora-a"}[rng.IntN(2)]
			h := hashers[lora]
			key := hashKey{sid, lora}
			prev, hadPrev := last[key]
			_, inCache := c.sessions[key]
			appendOnly := hadPrev && inCache && len(p) <= c.max && len(p) >= len(prev) && slices.Equal(p[:len(prev)], prev)
			if len(p) <= c.max { // longer prompts bypass the cache
				last[key] = slices.Clone(p)
			}
			before := c.hashed.Load()
			dst = c.hash(h, sid, lora, p, dst)
			_, want := h.AppendHashes(nil, nil, p, 0, false)
			require.Equal(t, len(want), len(dst), "seed %d step %d", seed, step)
			if len(want) > 0 {
				require.Equal(t, want, dst, "seed %d step %d", seed, step)
			}
			require.LessOrEqual(t, c.tokens, c.max)
			if appendOnly && sid != "" {
				limit := (len(p)-len(prev))/bs + 1 + c.chunkBlocks
				appends++
				require.LessOrEqual(t, int(c.hashed.Load()-before), limit, "seed %d step %d: an append rehashed the prefix", seed, step)
			}
		}
	}
	require.Greater(t, appends, 500, "the append bound must be exercised")
}

// TestHashCacheReusesAcrossTurns: a 32K-token context resent with its last
// 512 tokens rewritten hashes only from the chunk that changed.
func TestHashCacheReusesAcrossTurns(t *testing.T) {
	const bs = 16
	h, _ := flashindex.NewHasher(bs, "")
	c := newHashCache(1<<20, bs)
	rng := rand.New(rand.NewPCG(1, 1))
	p := make([]uint32, 32768)
	for i := range p {
		p[i] = rng.Uint32()
	}
	c.hash(h, "s", "", p, nil)
	require.EqualValues(t, 2048, c.hashed.Load())
	for i := 32768 - 512; i < len(p); i++ {
		p[i] = rng.Uint32()
	}
	got := c.hash(h, "s", "", p, nil)
	_, want := h.AppendHashes(nil, nil, p, 0, false)
	require.Equal(t, want, got)
	require.EqualValues(t, 2048+64, c.hashed.Load(), "the last 1,024-token chunk (64 blocks) is rehashed, nothing else")
	p = append(p, make([]uint32, 100)...) // a pure append of 6 blocks and a partial one
	c.hash(h, "s", "", p, nil)
	require.EqualValues(t, 2048+64+6, c.hashed.Load())
	require.Equal(t, (32768+100)/bs*bs, c.tokens)
}
