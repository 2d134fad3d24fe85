package flashindex

import (
	"bytes"
	"math/bits"
	"sync"
	"sync/atomic"
	"unsafe"
)

// This file holds the storage layer shared by the write and read paths:
//
//   - residency sets: immutable bitsets over worker slots, four planes per
//     64-slot word (device, host, disk, approximate);
//   - nodes: a run of sequence hashes stored contiguously (a chain segment)
//     with its residency as runs of identical sets; a node's content is an
//     immutable nodeData swapped atomically (copy-on-write);
//   - the arena: node id -> *node, readable without locks;
//   - the block map: sequence hash -> (node id, offset), sharded, each shard
//     behind its own RWMutex.
//
// A block (sequence hash) lives at exactly one (node, offset) for as long as
// it is in the block map, and never moves: splitting residency only splits
// runs inside a node, so the block map is written only when blocks are
// created or garbage-collected.

// Residency planes. A set's word i of plane p is bits[i*numPlanes+p].
const (
	planeDevice = 0
	planeHost   = 1
	planeDisk   = 2
	planeApprox = 3 // speculative device residency from Record
	numPlanes   = 4
	eventPlanes = 3 // planes fed by events: device, host, disk
)

// hasBit reports whether slot is set in plane of bits.
func hasBit(b []uint64, slot, plane int) bool {
	i := (slot>>6)*numPlanes + plane
	return i < len(b) && b[i]>>(uint(slot)&63)&1 != 0
}

// slotMask returns the planes (bit p = plane p) in which slot is set.
func slotMask(b []uint64, slot int) uint8 {
	var m uint8
	for p := 0; p < numPlanes; p++ {
		if hasBit(b, slot, p) {
			m |= 1 << p
		}
	}
	return m
}

// trimBits drops trailing zero words so that equal sets are equal slices.
func trimBits(b []uint64) []uint64 {
	n := len(b)
	for n > 0 && b[n-1] == 0 {
		n--
	}
	if n == 0 {
		return nil
	}
	return b[:n]
}

// setOp is one change applied to every set in a range of blocks.
type setOp struct {
	slot  int
	set   uint8 // planes to set
	clear uint8 // planes to clear
}

// apply returns b with the op applied. b is never modified: an unchanged set
// is returned as is, a changed one is a fresh slice.
func (op setOp) apply(b []uint64) []uint64 {
	changed := false
	for p := 0; p < numPlanes; p++ {
		has := hasBit(b, op.slot, p)
		if (op.set>>p&1 != 0 && !has) || (op.clear>>p&1 != 0 && has) {
			changed = true
			break
		}
	}
	if !changed {
		return b
	}
	need := (op.slot>>6)*numPlanes + numPlanes
	n := max(len(b), need)
	out := make([]uint64, n)
	copy(out, b)
	base := (op.slot >> 6) * numPlanes
	bit := uint64(1) << (uint(op.slot) & 63)
	for p := 0; p < numPlanes; p++ {
		if op.set>>p&1 != 0 {
			out[base+p] |= bit
		}
		if op.clear>>p&1 != 0 {
			out[base+p] &^= bit
		}
	}
	return trimBits(out)
}

func bitsEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// run is a stretch of a node's blocks with one residency set; it ends
// (exclusive offset) at end and starts where the previous run ended.
type run struct {
	end  uint32
	bits []uint64 // immutable once published
}

// nodeData is an immutable snapshot of a node. Blocks past len(hashes) in
// the backing array may be written by the writer (appends); readers only
// ever read hashes[:len(hashes)] of the snapshot they loaded.
type nodeData struct {
	hashes []uint64
	runs   []run // cover [0, len(hashes)) in order
}

// runAt returns the index of the run holding offset off.
func (d *nodeData) runAt(off int) int {
	lo, hi := 0, len(d.runs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if int(d.runs[m].end) <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// bitsAt returns the residency set of the block at off.
func (d *nodeData) bitsAt(off int) []uint64 {
	return d.runs[d.runAt(off)].bits
}

// node is one chain segment. Only the writer stores data.
type node struct {
	id   uint32
	data atomic.Pointer[nodeData]
}

const chunkBits = 10

type nodeChunk [1 << chunkBits]atomic.Pointer[node]

// arena maps node ids to nodes. get is lock-free; alloc and release are
// writer-only (the Index's writer mutex).
type arena struct {
	chunks atomic.Pointer[[]*nodeChunk]
	free   []uint32 // writer-only: released ids for reuse
	next   uint32   // writer-only: next never-used id
	live   int      // writer-only: nodes in use
}

func (a *arena) get(id uint32) *node {
	cs := a.chunks.Load()
	if cs == nil || int(id>>chunkBits) >= len(*cs) {
		return nil
	}
	return (*cs)[id>>chunkBits][id&(1<<chunkBits-1)].Load()
}

func (a *arena) alloc(d *nodeData) *node {
	var id uint32
	if n := len(a.free); n > 0 {
		id = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		id = a.next
		a.next++
		cs := a.chunks.Load()
		var cur []*nodeChunk
		if cs != nil {
			cur = *cs
		}
		if int(id>>chunkBits) >= len(cur) {
			grown := make([]*nodeChunk, len(cur)+1)
			copy(grown, cur)
			grown[len(cur)] = new(nodeChunk)
			a.chunks.Store(&grown)
			cur = grown
		}
	}
	n := &node{id: id}
	n.data.Store(d)
	(*a.chunks.Load())[id>>chunkBits][id&(1<<chunkBits-1)].Store(n)
	a.live++
	return n
}

func (a *arena) release(n *node) {
	(*a.chunks.Load())[n.id>>chunkBits][n.id&(1<<chunkBits-1)].Store(nil)
	a.free = append(a.free, n.id)
	a.live--
}

// each calls f for every live node, in id order. Writer-only.
func (a *arena) each(f func(*node)) {
	cs := a.chunks.Load()
	if cs == nil {
		return
	}
	for _, c := range *cs {
		for i := range c {
			if n := c[i].Load(); n != nil {
				f(n)
			}
		}
	}
}

const shardBits = 6

type blockShard struct {
	mu sync.RWMutex // guards m against the writer; readers take RLock
	m  u64map       // sequence hash -> node id<<32 | offset
	_  [48]byte     // pad the shard to two 64-byte cache lines
}

// blockMap maps every indexed sequence hash to its place. Readers use get;
// the single writer (holding the Index's writer mutex) uses peek, which
// needs no shard lock because no one else writes, and put/del, which take
// the shard's write lock.
type blockMap struct {
	shards [1 << shardBits]blockShard
	n      int // writer-only: entries

	// Writer-only scratch for batched operations.
	bounds  [1<<shardBits + 1]int32
	shardOf []uint8
	order   []int32
	sink    uint64 // keeps touch's loads alive
}

func newBlockMap() *blockMap { return &blockMap{} }

func (b *blockMap) shard(h uint64) *blockShard { return &b.shards[b.shardIndex(h)] }

// shardIndex picks a shard. Sequence hashes are XXH3 outputs, uniform in
// every bit; mix anyway so test hashes with equal high bits still spread.
func (b *blockMap) shardIndex(h uint64) int { return int((h * 0x9E3779B97F4A7C15) >> (64 - shardBits)) }

func (b *blockMap) get(h uint64) (uint64, bool) {
	s := b.shard(h)
	s.mu.RLock()
	v, ok := s.m.get(h)
	s.mu.RUnlock()
	return v, ok
}

func (b *blockMap) peek(h uint64) (uint64, bool) {
	return b.shard(h).m.get(h)
}

func (b *blockMap) put(h, v uint64) {
	s := b.shard(h)
	s.mu.Lock()
	n := s.m.Len()
	s.m.put(h, v)
	b.n += s.m.Len() - n
	s.mu.Unlock()
}

// touchBatch is how many keys a batched block-map operation touches ahead
// of working on them.
const touchBatch = 256

// touch loads the first probe slot of every key in keys. The loads do not
// depend on one another, so the CPU overlaps their cache misses (a
// software prefetch, which Go lacks as an intrinsic): the probes that
// follow then mostly hit the cache. Writer-only (it reads the tables
// without a shard lock, as peek does).
func (b *blockMap) touch(keys []uint64) {
	var acc uint64
	for _, k := range keys {
		m := &b.shards[b.shardIndex(k)].m
		if len(m.slots) != 0 {
			acc += m.slots[m.home(k)&uint64(len(m.slots)-1)].k
		}
	}
	b.sink += acc
}

// groupByShard fills b.order with the indices 0..n-1 of keys grouped by
// shard; shard si's indices are b.order[b.bounds[si]:b.bounds[si+1]].
func (b *blockMap) groupByShard(n int, key func(int) uint64) {
	clear(b.bounds[:])
	if cap(b.shardOf) < n {
		b.shardOf = make([]uint8, n)
		b.order = make([]int32, n)
	}
	shardOf, order := b.shardOf[:n], b.order[:n]
	for i := range n {
		si := b.shardIndex(key(i))
		shardOf[i] = uint8(si)
		b.bounds[si+1]++
	}
	for i := 1; i < len(b.bounds); i++ {
		b.bounds[i] += b.bounds[i-1]
	}
	next := b.bounds
	for i := range n {
		si := shardOf[i]
		order[next[si]] = int32(i)
		next[si]++
	}
}

// putMany indexes the blocks of refs at their (node, off), taking each
// shard's lock once.
func (b *blockMap) putMany(refs []blockRef) {
	for len(refs) > 0 {
		chunk := refs[:min(len(refs), touchBatch)]
		refs = refs[len(chunk):]
		if len(chunk) < 8 {
			for i := range chunk {
				b.put(chunk[i].seq, loc(chunk[i].node.id, chunk[i].off))
			}
			continue
		}
		b.groupByShard(len(chunk), func(i int) uint64 { return chunk[i].seq })
		for si := range b.shards {
			lo, hi := b.bounds[si], b.bounds[si+1]
			if lo == hi {
				continue
			}
			s := &b.shards[si]
			s.mu.Lock()
			for _, i := range b.order[lo:hi] {
				r := &chunk[i]
				n := s.m.Len()
				s.m.put(r.seq, loc(r.node.id, r.off))
				b.n += s.m.Len() - n
			}
			s.mu.Unlock()
		}
	}
}

// delMany drops hashes, taking each shard's lock once per batch.
func (b *blockMap) delMany(hashes []uint64) {
	for len(hashes) > 0 {
		chunk := hashes[:min(len(hashes), touchBatch)]
		hashes = hashes[len(chunk):]
		if len(chunk) < 8 {
			for _, h := range chunk {
				b.del(h)
			}
			continue
		}
		b.touch(chunk)
		b.groupByShard(len(chunk), func(i int) uint64 { return chunk[i] })
		for si := range b.shards {
			lo, hi := b.bounds[si], b.bounds[si+1]
			if lo == hi {
				continue
			}
			s := &b.shards[si]
			s.mu.Lock()
			for _, i := range b.order[lo:hi] {
				if s.m.del(chunk[i]) {
					b.n--
				}
			}
			s.mu.Unlock()
		}
	}
}

func (b *blockMap) del(h uint64) {
	s := b.shard(h)
	s.mu.Lock()
	if s.m.del(h) {
		b.n--
	}
	s.mu.Unlock()
}

func loc(id uint32, off int) uint64 { return uint64(id)<<32 | uint64(uint32(off)) }

// matchLen returns how many leading elements a and b share.
func matchLen(a, b []uint64) int {
	n := min(len(a), len(b))
	i := 0
	const chunk = 32
	for ; i+chunk <= n; i += chunk {
		if !bytes.Equal(u64Bytes(a[i:i+chunk]), u64Bytes(b[i:i+chunk])) {
			break
		}
	}
	for ; i < n && a[i] == b[i]; i++ {
	}
	return i
}

func u64Bytes(s []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

// popcount returns the number of set bits in s.
func popcount(s []uint64) int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}
