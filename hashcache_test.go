package agentkv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
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
			p := nextHashPrompt(rng, c, last, sid, prompts[sid], bs)
			prompts[sid] = p
			lora := []string{"", "lora-a"}[rng.IntN(2)]
			h := hashers[lora]
			key := hashKey{sid, lora}
			prev, hadPrev := last[key]
			inCache := c.findLocked(key) != nil
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
			checkHashCache(t, c)
			if appendOnly && sid != "" {
				limit := (len(p)-len(prev))/bs + 1 + c.chunkBlocks
				appends++
				require.LessOrEqual(t, int(c.hashed.Load()-before), limit, "seed %d step %d: an append rehashed the prefix", seed, step)
			}
		}
	}
	require.Greater(t, appends, 500, "the append bound must be exercised")
}

// nextHashPrompt returns session sid's next prompt after p: p edited in
// one place, truncated, or forgotten by the cache c (and by last), or kept;
// then extended by up to 30 blocks.
func nextHashPrompt(rng *rand.Rand, c *hashCache, last map[hashKey][]uint32, sid string, p []uint32, bs int) []uint32 {
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
	return p
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

// checkHashCache asserts the cache's indexes agree: every entry is in the
// LRU list (linked both ways) and in its session's sibling chain under its
// adapter, once; every chained entry is in the list; n counts them and
// tokens is the sum of their costs.
func checkHashCache(t *testing.T, c *hashCache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	tokens, n := 0, 0
	var prev *hashEntry
	inList := map[*hashEntry]bool{}
	for e := c.head; e != nil; e = e.next {
		require.Same(t, prev, e.prev)
		require.Same(t, e, c.findLocked(e.key))
		inList[e] = true
		tokens += c.cost(e)
		n++
		prev = e
	}
	require.Same(t, prev, c.tail)
	chained := 0
	for session, e := range c.sessions {
		require.NotNil(t, e)
		loras := map[string]bool{}
		for ; e != nil; e = e.sibling {
			require.Equal(t, session, e.key.session)
			require.False(t, loras[e.key.lora], "adapter %q twice in session %q", e.key.lora, session)
			loras[e.key.lora] = true
			require.True(t, inList[e])
			chained++
		}
	}
	require.Equal(t, n, chained)
	require.Equal(t, n, c.n)
	require.Equal(t, tokens, c.tokens)
}

// TestHashCacheBounded drives the cache far past its budget with distinct
// sessions (each under two adapters): the entries, and both indexes, stay
// within what the budget holds, and forget drops all of a session's
// entries and nothing else.
func TestHashCacheBounded(t *testing.T) {
	const bs, prompt, budget = 16, 64, 64 * 100 // room for 100 entries
	c := newHashCache(budget, bs)
	h, _ := flashindex.NewHasher(bs, "")
	hl, _ := flashindex.NewHasher(bs, "lora")
	p := make([]uint32, prompt)
	for i := range 100_000 {
		p[0] = uint32(i)
		c.hash(h, "s"+strconv.Itoa(i), "", p, nil)
		c.hash(hl, "s"+strconv.Itoa(i), "lora", p, nil)
		require.LessOrEqual(t, c.len(), budget/prompt)
		require.LessOrEqual(t, len(c.sessions), budget/prompt)
	}
	checkHashCache(t, c)
	last := "s99999"
	require.NotNil(t, c.sessions[last].sibling, "both adapters")
	n := c.len()
	c.forget(last)
	c.forget("never-seen")
	require.Equal(t, n-2, c.len())
	require.NotContains(t, c.sessions, last)
	checkHashCache(t, c)
}

// BenchmarkHashCacheForget is the hash cache's part of a session eviction
// (hash a new session, forget an old one) with the cache holding entries
// sessions: the cost per eviction must not depend on how many sessions
// the cache holds (it used to walk them all: issue #22).
func BenchmarkHashCacheForget(b *testing.B) {
	for _, n := range []int{1_000, 65_536, 1_000_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			const bs = 16
			c := newHashCache(n*bs, bs)
			h, _ := flashindex.NewHasher(bs, "")
			p := make([]uint32, bs)
			id := func(i int) string { return "s" + strconv.Itoa(i) }
			for i := range n {
				p[0] = uint32(i)
				c.hash(h, id(i), "", p, nil)
			}
			i := n
			for b.Loop() {
				p[0] = uint32(i)
				c.forget(id(i - n))
				c.hash(h, id(i), "", p, nil)
				i++
			}
			if c.len() != n {
				b.Fatalf("%d entries, want %d", c.len(), n)
			}
		})
	}
}
