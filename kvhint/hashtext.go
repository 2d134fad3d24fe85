package kvhint

import (
	"sync"
	"sync/atomic"
)

// HashText caches the JSON text of the block-hash lists hints name, per
// session: a hint naming a chain that an earlier hint of the same session
// named (the session's prefix, a turn later and a few blocks longer, or
// the same prefix for another worker) encodes only the blocks that are
// new, and copies the rest. Encoding 512 hashes as decimal JSON is most of
// what a kv.fetch costs on the request path; with the text cached it is a
// copy.
//
// The cache holds at most MaxBlocks hashes in all (about 33 bytes each,
// text included); beyond that it forgets whole sessions, in no particular
// order. A nil *HashText caches nothing. HashText is safe for concurrent
// use; its methods encode exactly what Envelope.AppendJSON and
// AppendBodyTail do for lists that keep Target.Blocks' contract (runs of
// one chain's sequence hashes): it finds what a list shares with the
// cached one by bisection (see commonPrefix).
type HashText struct {
	max int

	mu     sync.Mutex                   // guards the fields below
	blocks int                          // hashes cached in all
	m      [2]map[string]*hashTextEntry // by session, one map per spelling (unsigned, signed)
}

// DefaultHashTextBlocks is NewHashText's default bound: 262,144 hashes,
// about 8.5 MiB.
const DefaultHashTextBlocks = 1 << 18

// minCachedBlocks is the shortest list worth caching: shorter ones are
// formatted each time.
const minCachedBlocks = 32

type hashTextEntry struct {
	hashes []uint64
	ends   []uint32 // ends[i]: the text's length through hash i
	text   []byte   // "h0,h1,...,hn," (each hash followed by a comma)
	last   uint64   // hashes' last (they are never empty once listed)
}

// NewHashText returns a cache of at most maxBlocks hashes (0 means
// DefaultHashTextBlocks).
func NewHashText(maxBlocks int) *HashText {
	if maxBlocks <= 0 {
		maxBlocks = DefaultHashTextBlocks
	}
	return &HashText{max: maxBlocks, m: [2]map[string]*hashTextEntry{{}, {}}}
}

// AppendJSON is e.AppendJSON(dst), with block-hash lists from the cache.
func (c *HashText) AppendJSON(dst []byte, e *Envelope) ([]byte, error) {
	return e.appendJSON(dst, c, nil)
}

// AppendBodyTail is AppendBodyTail(dst, body, env), with block-hash lists
// from the cache.
func (c *HashText) AppendBodyTail(dst, body []byte, env *Envelope) (head int, tail []byte, err error) {
	return appendBodyTailSplice(dst, body, env, c, nil)
}

// Len returns how many hashes the cache holds.
func (c *HashText) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocks
}

// appendList appends hs as a JSON array: from session's cached text when
// it has one, and remembering it for the next time.
// With sp, the cached text is not copied into dst: sp records it and
// where it goes.
func (c *HashText) appendList(dst []byte, session string, hs []uint64, signed bool, sp *splices) []byte {
	if c == nil || session == "" || len(hs) < minCachedBlocks || len(hs) > c.max {
		return appendHashArray(dst, hs, signed)
	}
	m := c.m[spelling(signed)]
	c.mu.Lock()
	defer c.mu.Unlock()
	e := m[session]
	if e == nil { // sized for this list and a few turns' growth
		n := len(hs) + len(hs)/4
		e = &hashTextEntry{hashes: make([]uint64, 0, n), ends: make([]uint32, 0, n), text: make([]byte, 0, 21*n)}
		m[session] = e
	} else if len(hs) == len(e.hashes) && hs[len(hs)-1] == e.last {
		// The list the session named last (a share renewed each turn):
		// the text is all of it, found without reading the cached lists.
		return c.appendText(dst, e.text[:len(e.text)-1:len(e.text)-1], sp)
	}
	k := commonPrefix(e.hashes, hs)
	if k < len(e.hashes) && k < len(hs) { // the chain changed: keep what still holds
		c.blocks -= len(e.hashes) - k
		e.hashes, e.ends = e.hashes[:k], e.ends[:k]
		// A fresh text: views of the old one may still be read
		// (BodyTail), so its bytes are never overwritten.
		if k == 0 {
			e.text = nil
		} else {
			e.text = append([]byte(nil), e.text[:e.ends[k-1]+1]...)
		}
	}
	if grow := len(hs) - len(e.hashes); grow > 0 {
		c.evict(grow, e)
		for _, h := range hs[len(e.hashes):] {
			e.text = appendHash(e.text, h, signed)
			e.ends = append(e.ends, uint32(len(e.text)))
			e.text = append(e.text, ',')
		}
		c.blocks += len(hs) - len(e.hashes)
		e.hashes = append(e.hashes, hs[len(e.hashes):]...)
	}
	e.last = e.hashes[len(e.hashes)-1]
	end := e.ends[len(hs)-1]
	return c.appendText(dst, e.text[:end:end], sp)
}

// appendText appends cached text as a JSON array: spliced by sp when it
// has room (shared, not copied: its bytes never change), else copied.
func (c *HashText) appendText(dst, text []byte, sp *splices) []byte {
	dst = append(dst, '[')
	if sp == nil || !sp.add(len(dst), text) {
		dst = append(dst, text...)
	}
	return append(dst, ']')
}

// splices records where cached text goes in an encoding that does not
// copy it (BodyTail): up to maxSplices lists (an envelope's usual
// one or two long ones); past that, lists are copied.
type splices struct {
	n     int
	at    [maxSplices]int
	texts [maxSplices][]byte
}

const maxSplices = 4

// add records text as going at offset at, or reports false when sp is
// full (the caller copies it instead).
func (sp *splices) add(at int, text []byte) bool {
	if sp.n == maxSplices {
		return false
	}
	sp.at[sp.n], sp.texts[sp.n] = at, text
	sp.n++
	return true
}

// Tail is a request body's hint tail encoded by BodyTail: Parts, whose
// concatenation is AppendBodyTail's tail, the cached block lists shared
// (the cache never changes bytes it handed out) and the rest encoded into
// the Tail's own buffer. A Tail comes from a pool, with one hold: Hold adds
// one for each reader of Parts, and Release drops one; the last Release
// gives the Tail back, after which Parts must not be read. A Tail never
// released is collected as garbage, no more.
type Tail struct {
	Parts [][]byte
	buf   []byte
	parts [2*maxSplices + 1][]byte
	refs  atomic.Int32
}

var tailPool = sync.Pool{New: func() any { return &Tail{buf: make([]byte, 0, 1024)} }}

// Hold adds a hold on t (a reader of its Parts).
func (t *Tail) Hold() { t.refs.Add(1) }

// Release drops a hold on t; the last gives t back to its pool.
func (t *Tail) Release() {
	switch n := t.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("kvhint: Tail released more often than held")
	}
	clear(t.parts[:]) // the cached lists: not kept alive by the pool
	t.Parts = nil
	if cap(t.buf) > 64<<10 {
		t.buf = make([]byte, 0, 1024)
	}
	t.buf = t.buf[:0]
	tailPool.Put(t)
}

// BodyTail is AppendBodyTail(nil, body, env) with the block-hash lists
// from the cache, its tail returned as a Tail (see there) instead of
// copied out: the hinted request's bytes are the body up to head, then
// the Tail's Parts. t is nil when err is not.
func (c *HashText) BodyTail(body []byte, env *Envelope) (head int, t *Tail, err error) {
	var sp splices
	t = tailPool.Get().(*Tail)
	t.refs.Store(1)
	head, enc, err := appendBodyTailSplice(t.buf[:0], body, env, c, &sp)
	t.buf = enc
	if err != nil {
		t.Release()
		return 0, nil, err
	}
	parts := t.parts[:0]
	last := 0
	for i, at := range sp.at[:sp.n] {
		parts = append(parts, enc[last:at:at], sp.texts[i])
		last = at
	}
	t.Parts = append(parts, enc[last:len(enc):len(enc)])
	return head, t, nil
}

// evict forgets sessions' lists other than keep until n more hashes fit
// (they do once every other is gone: keep's list is at most c.max long).
func (c *HashText) evict(n int, keep *hashTextEntry) {
	for _, m := range c.m {
		for k, e := range m {
			if c.blocks+n <= c.max {
				return
			}
			if e == keep {
				continue
			}
			c.blocks -= len(e.hashes)
			delete(m, k)
		}
	}
}

// spelling indexes HashText.m: 1 for signed hashes, 0 for unsigned.
func spelling(signed bool) int {
	if signed {
		return 1
	}
	return 0
}

// commonPrefix is how many leading hashes a and b share, for lists that
// follow Target.Blocks' contract: consecutive sequence hashes of one
// chain, in chain order. A sequence hash fixes every block before it, so
// two such lists that agree at position i agree at every position before
// it, and the shared prefix is found by bisection, reading about 2·log2(n)
// hashes of lists that run to thousands (the cached one is seldom in the
// processor's cache). Lists that break the contract can be misencoded.
func commonPrefix(a, b []uint64) int {
	lo, hi := 0, min(len(a), len(b)) // a[:lo] == b[:lo]; a[hi] != b[hi] or hi is the end
	if hi > 0 && a[hi-1] == b[hi-1] {
		return hi // the usual turn: one list extends the other
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if a[mid] == b[mid] {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// appendHashArray appends hs as a JSON array of numbers (signed: as int64).
func appendHashArray(dst []byte, hs []uint64, signed bool) []byte {
	dst = append(dst, '[')
	for j, h := range hs {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = appendHash(dst, h, signed)
	}
	return append(dst, ']')
}

// appendHash appends one hash in decimal (signed: as int64).
func appendHash(dst []byte, h uint64, signed bool) []byte {
	if signed && int64(h) < 0 {
		dst = append(dst, '-')
		h = -h // the magnitude of int64(h); 1<<63 stays itself
	}
	return appendUint64(dst, h)
}
