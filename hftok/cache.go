package hftok

import (
	"crypto/rand"
	"encoding/binary"
	"sync"

	"github.com/zeebo/xxh3"
)

// segmentCache maps a segment (text between raw added tokens) to its ids,
// least recently used first out, within a budget of ids. Keys are 128-bit
// XXH3 hashes under a random per-cache seed, so that no input can be
// crafted to collide. Safe for concurrent use; cached id slices are never
// mutated after insertion, so readers copy them outside the lock.
type segmentCache struct {
	seed uint64

	mu     sync.Mutex // guards m, the list through head and cost
	m      map[xxh3.Uint128]*segEntry
	head   segEntry // sentinel of the LRU list: head.next is the most recently used
	cost   int      // sum over entries of len(ids) + segmentOverheadTokens
	budget int
}

type segEntry struct {
	key        xxh3.Uint128
	ids        []uint32
	prev, next *segEntry
}

func newSegmentCache(budget int) *segmentCache {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	c := &segmentCache{seed: binary.LittleEndian.Uint64(b[:]), m: map[xxh3.Uint128]*segEntry{}, budget: budget}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

func (c *segmentCache) key(seg string) xxh3.Uint128 {
	return xxh3.HashString128Seed(seg, c.seed)
}

func (c *segmentCache) unlink(e *segEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *segmentCache) pushFront(e *segEntry) {
	e.prev, e.next = &c.head, c.head.next
	c.head.next.prev = e
	c.head.next = e
}

// get returns the cached ids of key; the caller must not modify them.
func (c *segmentCache) get(key xxh3.Uint128) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return nil, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.ids, true
}

// put caches a copy of ids under key, evicting the least recently used
// entries past the budget. A segment costing more than the whole budget is
// not cached.
func (c *segmentCache) put(key xxh3.Uint128, ids []uint32) {
	cost := len(ids) + segmentOverheadTokens
	if cost > c.budget {
		return
	}
	e := &segEntry{key: key, ids: append([]uint32(nil), ids...)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return
	}
	c.m[key] = e
	c.pushFront(e)
	c.cost += cost
	for c.cost > c.budget {
		old := c.head.prev
		c.unlink(old)
		delete(c.m, old.key)
		c.cost -= len(old.ids) + segmentOverheadTokens
	}
}

// stats returns the number of entries and their cost.
func (c *segmentCache) stats() (entries, cost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.cost
}

func (c *segmentCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.head.prev, c.head.next = &c.head, &c.head
	c.cost = 0
}

// wordShards is the number of independently locked parts of a wordCache.
const wordShards = 64

// wordCache maps words (byte-level pre-tokens, at most
// maxCachedWordBytes) to their ids, in shards of bounded size: a full
// shard drops an arbitrary entry for each new one. Safe for concurrent
// use; cached id slices are never mutated.
type wordCache struct {
	seed     uint64
	perShard int
	shards   [wordShards]wordShard
}

type wordShard struct {
	mu sync.RWMutex // guards m
	m  map[string][]uint32
	_  [32]byte // keeps shards' locks on separate cache lines
}

func newWordCache(entries int) *wordCache {
	var b [8]byte
	_, _ = rand.Read(b[:])
	c := &wordCache{seed: binary.LittleEndian.Uint64(b[:]), perShard: max(1, (entries+wordShards-1)/wordShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
	}
	return c
}

func (c *wordCache) hash(w string) uint64 { return xxh3.HashStringSeed(w, c.seed) }

func (c *wordCache) get(h uint64, w string) ([]uint32, bool) {
	s := &c.shards[h%wordShards]
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

// put caches a copy of ids under w, which the cache keeps (the caller
// must not pass a slice of a larger string it would pin).
func (c *wordCache) put(h uint64, w string, ids []uint32) {
	cp := append([]uint32(nil), ids...)
	s := &c.shards[h%wordShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= c.perShard {
		if _, ok := s.m[w]; ok {
			return
		}
		for k := range s.m { // an arbitrary victim: map iteration starts at random
			delete(s.m, k)
			break
		}
	}
	s.m[w] = cp
}

func (c *wordCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

func (c *wordCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

// clearCaches empties both caches (benchmarks of cold encoding).
func (t *Tokenizer) clearCaches() {
	if t.segs != nil {
		t.segs.clear()
	}
	if t.words != nil {
		t.words.clear()
	}
}
