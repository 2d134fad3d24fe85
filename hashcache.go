package agentkv

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/zeebo/xxh3"
)

// hashCache remembers, per session, the block hashes of its last prompt and
// a fingerprint of every chunk of that prompt's tokens, so an agent turn
// that resends its context plus an append hashes only the blocks past the
// resent prefix.
//
// A chunk is fingerprintTokens tokens rounded down to whole blocks (64
// blocks of 16 tokens). A new prompt's chunks are fingerprinted with
// XXH3-64 under a per-router random seed and compared with the stored ones;
// the prefix up to the first chunk that differs keeps its hashes, and
// hashing restarts at that chunk. The last prompt's final partial chunk has
// a fingerprint too, so a pure append reuses everything it resent. This
// reads the new prompt once at memory speed (the vectorised XXH3 runs
// faster than memory) and never the old one, which is not kept: comparing
// token for token would read both, twice the memory traffic, and keep a copy
// of every prompt. Two different chunks share a fingerprint with
// probability 2^-64 (the seed is secret, so a client cannot aim for it),
// the same odds the block hashes themselves take; a collision would only
// make the router believe a session's cache holds more than it does.
//
// It is bounded by the prompt tokens it covers (least recently used
// sessions out); an entry costs 8 bytes per block plus 8 per chunk. It is
// safe for concurrent use.
type hashCache struct {
	bs          int           // tokens per block (every hasher of the router shares it)
	seed        uint64        // fingerprint seed, random per cache
	chunkBlocks int           // blocks per fingerprinted chunk
	hashed      atomic.Uint64 // blocks hashed from tokens (not reused), for tests and stats

	mu     sync.Mutex // guards the fields below
	max    int        // token budget
	tokens int        // tokens covered by all entries
	n      int        // entries
	// sessions maps a session to its entries, one per LoRA adapter, linked
	// through hashEntry.sibling (the usual session has one): finding,
	// adding and forgetting a session's entries cost one map probe each,
	// never a walk of the cache.
	sessions   map[string]*hashEntry
	head, tail *hashEntry // LRU list, most recent at the head
}

// fingerprintTokens is the chunk size in tokens, rounded down to whole
// blocks (at least one).
const fingerprintTokens = 1024

type hashKey struct {
	session, lora string
}

type hashEntry struct {
	key hashKey
	// seq holds the sequence hashes of the last prompt's full blocks; fps
	// the fingerprint of each of its chunks of chunkBlocks blocks, the last
	// one possibly shorter (its final partial chunk).
	seq []uint64
	fps []uint64

	sibling    *hashEntry // the session's next entry (another adapter)
	prev, next *hashEntry // LRU list
}

func newHashCache(maxTokens, blockSize int) *hashCache {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return &hashCache{
		bs:          blockSize,
		seed:        binary.LittleEndian.Uint64(b[:]),
		chunkBlocks: max(1, fingerprintTokens/blockSize),
		max:         maxTokens,
		sessions:    map[string]*hashEntry{},
	}
}

// cost is the prompt tokens an entry covers, what the budget counts.
func (c *hashCache) cost(e *hashEntry) int { return len(e.seq) * c.bs }

// fingerprint hashes tokens as bytes.
func (c *hashCache) fingerprint(tokens []uint32) uint64 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), 4*len(tokens))
	return xxh3.HashSeed(b, c.seed)
}

// hash returns the sequence hashes of tokens' full blocks, appended to
// dst[:0], reusing the session's previous prompt where tokens extends it.
// h must hash blocks of the cache's block size.
func (c *hashCache) hash(h *flashindex.Hasher, session, lora string, tokens []uint32, dst []uint64) []uint64 {
	dst = dst[:0]
	if c == nil || session == "" || len(tokens) > c.max {
		dst = h.SequenceHashes(dst, tokens)
		if c != nil {
			c.hashed.Add(uint64(len(dst)))
		}
		return dst
	}
	e := c.take(hashKey{session, lora})
	reuse, kept := c.verified(e, tokens)
	rb := reuse / c.bs
	dst = append(dst, e.seq[:rb]...)
	var parent uint64
	if rb > 0 {
		parent = dst[rb-1]
	}
	_, dst = h.AppendHashes(nil, dst, tokens[reuse:], parent, rb > 0)
	c.hashed.Add(uint64(len(dst) - rb))
	c.remember(e, tokens, dst, rb, kept)
	return dst
}

// take removes key's entry from the cache and returns it (a new one when
// absent): the caller owns it until remember puts it back.
func (c *hashCache) take(key hashKey) *hashEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.findLocked(key); e != nil {
		c.removeLocked(e)
		return e
	}
	return &hashEntry{key: key}
}

// findLocked returns key's entry, or nil.
func (c *hashCache) findLocked(key hashKey) *hashEntry {
	e := c.sessions[key.session]
	for e != nil && e.key.lora != key.lora {
		e = e.sibling
	}
	return e
}

// verified checks the resent prefix chunk by chunk against e's
// fingerprints: it returns the tokens verified (reuse) and how many of e's
// fingerprints are of whole chunks still valid (kept).
func (c *hashCache) verified(e *hashEntry, tokens []uint32) (reuse, kept int) {
	ct := c.chunkBlocks * c.bs // tokens per chunk
	full := len(e.seq) * c.bs  // tokens the old prompt's full blocks cover
	for k, fp := range e.fps {
		end := min((k+1)*ct, full)
		if end > len(tokens) || c.fingerprint(tokens[k*ct:end]) != fp {
			break
		}
		reuse = end
		if end-k*ct == ct {
			kept = k + 1 // a whole chunk: its fingerprint stays valid
		}
	}
	return reuse, kept
}

// remember stores the prompt in e (its hashes seq, of which the first rb
// were reused, and fingerprints from the first chunk not known to be whole
// and unchanged) and puts e back as the most recent entry, evicting the
// least recent beyond the budget.
func (c *hashCache) remember(e *hashEntry, tokens []uint32, seq []uint64, rb, kept int) {
	e.seq = append(e.seq[:rb], seq[rb:]...)
	e.fps = e.fps[:kept]
	ct := c.chunkBlocks * c.bs
	newFull := len(seq) * c.bs
	for start := kept * ct; start < newFull; start += ct {
		e.fps = append(e.fps, c.fingerprint(tokens[start:min(start+ct, newFull)]))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.findLocked(e.key); old != nil { // a concurrent request of the session
		c.removeLocked(old)
	}
	c.insertLocked(e)
	for c.tokens > c.max && c.tail != nil {
		c.removeLocked(c.tail)
	}
}

// insertLocked adds e as the most recent entry; its key must be absent.
func (c *hashCache) insertLocked(e *hashEntry) {
	e.sibling = c.sessions[e.key.session]
	c.sessions[e.key.session] = e
	e.prev, e.next = nil, c.head
	if c.head != nil {
		c.head.prev = e
	} else {
		c.tail = e
	}
	c.head = e
	c.tokens += c.cost(e)
	c.n++
}

// unlinkLocked takes e out of the LRU list and the budget.
func (c *hashCache) unlinkLocked(e *hashEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = nil, nil
	c.tokens -= c.cost(e)
	c.n--
}

// removeLocked drops e from every index.
func (c *hashCache) removeLocked(e *hashEntry) {
	c.unlinkLocked(e)
	first := c.sessions[e.key.session]
	switch {
	case first == e && e.sibling == nil:
		delete(c.sessions, e.key.session)
	case first == e:
		c.sessions[e.key.session] = e.sibling
	default:
		p := first
		for p.sibling != e {
			p = p.sibling
		}
		p.sibling = e.sibling
	}
	e.sibling = nil
}

// forget drops a session's entries, in O(its entries).
func (c *hashCache) forget(session string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.sessions[session]
	if !ok {
		return
	}
	delete(c.sessions, session)
	for e != nil {
		next := e.sibling
		c.unlinkLocked(e)
		e.sibling = nil
		e = next
	}
}

// len returns the number of entries.
func (c *hashCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
