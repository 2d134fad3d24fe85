package agentkv

import (
	"container/list"
	"sync"
	"unsafe"

	"github.com/agentkv/agentkv/flashindex"
)

// hashCache remembers each session's last prompt and its block hashes, so
// an agent turn that resends its context plus an append hashes only the
// appended blocks. The prefix is verified token for token (a memory compare,
// several times cheaper than hashing) before its hashes are reused, so an
// edited context is rehashed from the first changed block.
//
// It is bounded by the total tokens it holds (least recently used sessions
// out). It is safe for concurrent use.
type hashCache struct {
	mu       sync.Mutex // guards all fields
	max      int        // token budget
	tokens   int
	sessions map[hashKey]*list.Element
	lru      list.List // of *hashEntry, most recent at the front
}

type hashKey struct {
	session, lora string
}

type hashEntry struct {
	key    hashKey
	tokens []uint32
	seq    []uint64
}

func newHashCache(maxTokens int) *hashCache {
	return &hashCache{max: maxTokens, sessions: map[hashKey]*list.Element{}}
}

// hash returns the sequence hashes of tokens' full blocks, appended to
// dst[:0], reusing the session's previous prompt where tokens extends it.
func (c *hashCache) hash(h *flashindex.Hasher, session, lora string, tokens []uint32, dst []uint64) []uint64 {
	dst = dst[:0]
	if c == nil || session == "" || len(tokens) > c.max {
		_, dst = h.AppendHashes(nil, dst, tokens, 0, false)
		return dst
	}
	key := hashKey{session, lora}
	bs := h.BlockSize()
	c.mu.Lock()
	var e *hashEntry
	if el := c.sessions[key]; el != nil {
		e = el.Value.(*hashEntry)
		c.lru.Remove(el)
		delete(c.sessions, key)
		c.tokens -= cap(e.tokens)
	}
	c.mu.Unlock()

	reuse := 0
	if e != nil {
		reuse = commonBlocks(e.tokens, tokens, bs)
		reuse = min(reuse, len(e.seq))
		dst = append(dst, e.seq[:reuse]...)
	} else {
		e = &hashEntry{key: key}
	}
	var parent uint64
	if reuse > 0 {
		parent = dst[reuse-1]
	}
	_, dst = h.AppendHashes(nil, dst, tokens[reuse*bs:], parent, reuse > 0)

	// The verified prefix is already in place: copy only the rest.
	e.tokens = append(e.tokens[:reuse*bs], tokens[reuse*bs:]...)
	e.seq = append(e.seq[:reuse], dst[reuse:]...)
	c.mu.Lock()
	if old := c.sessions[key]; old != nil { // a concurrent request of the session
		c.tokens -= cap(old.Value.(*hashEntry).tokens)
		c.lru.Remove(old)
	}
	c.sessions[key] = c.lru.PushFront(e)
	c.tokens += cap(e.tokens)
	for c.tokens > c.max && c.lru.Len() > 0 {
		last := c.lru.Back()
		le := last.Value.(*hashEntry)
		c.lru.Remove(last)
		delete(c.sessions, le.key)
		c.tokens -= cap(le.tokens)
	}
	c.mu.Unlock()
	return dst
}

// forget drops a session's entries.
func (c *hashCache) forget(session string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.sessions {
		if k.session == session {
			c.tokens -= cap(el.Value.(*hashEntry).tokens)
			c.lru.Remove(el)
			delete(c.sessions, k)
		}
	}
}

// commonBlocks returns how many leading full blocks a and b share exactly.
// It compares in large chunks (one memory compare each) and only the first
// differing chunk block by block, so the cost is about one pass over the
// shared prefix.
func commonBlocks(a, b []uint32, bs int) int {
	n := min(len(a), len(b)) / bs * bs
	chunk := max(bs, 4096/bs*bs) // whole blocks, ~16 KiB
	i := 0
	for i < n {
		end := min(i+chunk, n)
		if asBytes(a[i:end]) != asBytes(b[i:end]) {
			break
		}
		i = end
	}
	for i < n && asBytes(a[i:i+bs]) == asBytes(b[i:i+bs]) {
		i += bs
	}
	return i / bs
}

// asBytes views tokens as a string for a fast memory compare (no copy).
func asBytes(t []uint32) string {
	if len(t) == 0 {
		return ""
	}
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(t))), 4*len(t))
}
