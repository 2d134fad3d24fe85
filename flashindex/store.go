package flashindex

import (
	"bytes"
	"math/bits"
	"slices"
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
//   - the arena: node id -> node, for the writer;
//   - the head map: first hash of a node -> its current contents, with
//     copies of what a query reads first, read without locks by queries
//     (heads.go);
//   - node lineage: where other nodes continue each node, for queries
//     (kids.go);
//   - the block map: sequence hash -> (node id, offset), for the writer.
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
	cend uint32   // end of this run's entries in nodeData.chg
	bits []uint64 // immutable once published
}

// nodeData is an immutable snapshot of a node. Blocks past len(hashes) in
// the backing array may be written by the writer (appends); readers only
// ever read hashes[:len(hashes)] of the snapshot they loaded.
type nodeData struct {
	hashes []uint64
	runs   []run // cover [0, len(hashes)) in order
	// chg lists, run by run, the slots whose residency differs from the
	// previous run of the node: run i's entries are chg[runs[i-1].cend :
	// runs[i].cend] (none for run 0), each slot<<4 | the slot's planes in
	// run i. A query that walked run i-1 needs only these to walk run i,
	// so it reads a few bytes per run instead of the whole set. Built by
	// seal; immutable once published.
	chg []uint32
	// bits0 is runs[0].bits, so that a query entering the node reads its
	// first set without first loading the runs array (one dependent cache
	// miss fewer per node).
	bits0 []uint64
	id    uint32 // the node's id, for the writer
}

// seal fills in cend of runs[from:] and returns the node's change list:
// the entries of runs[:from] are taken from old (they must describe the
// same sets as when old was built), the rest computed. old is never
// written.
func seal(runs []run, old []uint32, from int) []uint32 {
	chg := old[:0:0]
	if from > 0 {
		chg = slices.Clip(old[:runs[from-1].cend])
	} else {
		from = 1
		if len(runs) > 0 {
			runs[0].cend = 0
		}
	}
	for i := from; i < len(runs); i++ {
		chg = appendChanges(chg, runs[i-1].bits, runs[i].bits)
		runs[i].cend = uint32(len(chg))
	}
	return chg
}

// appendChanges appends slot<<4 | planes-in-cur for every slot whose
// planes differ between the sets prev and cur.
func appendChanges(chg []uint32, prev, cur []uint64) []uint32 {
	groups := (max(len(prev), len(cur)) + numPlanes - 1) / numPlanes
	for g := 0; g < groups; g++ {
		var x uint64
		for p := 0; p < numPlanes; p++ {
			x |= word(prev, g, p) ^ word(cur, g, p)
		}
		for ; x != 0; x &= x - 1 {
			b := uint(bits.TrailingZeros64(x))
			var m uint32
			for p := 0; p < numPlanes; p++ {
				m |= uint32(word(cur, g, p)>>b&1) << p
			}
			chg = append(chg, uint32(g<<6|int(b))<<4|m)
		}
	}
	return chg
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

// node is one chain segment, as the writer sees it. Readers never see a
// node: they find its current contents through the head map.
type node struct {
	id   uint32
	data atomic.Pointer[nodeData]
	// Writer-only lineage, kept for queries' sake (see kids.go): the node
	// whose block at poff this node's first block continues (nil for a
	// chain root, or once that node is gone), the epoch of the entry that
	// counts this node there, and where other nodes continue this one.
	parent *node
	poff   uint32
	pepoch uint32
	kids   []kidEntry // ascending by off
	epoch  uint32     // bumped when entries are dropped by a trim
}

// newNodeData builds a node snapshot; bits0 caches the first run's set.
// The arena fills in id when it publishes it.
func newNodeData(hashes []uint64, runs []run, chg []uint32) *nodeData {
	return &nodeData{hashes: hashes, runs: runs, chg: chg, bits0: runs[0].bits}
}

// arena holds the writer's nodes by id (the block map's values name nodes
// by id). It is writer-only (the Index's writer mutex); every node's first
// hash and current contents are registered in heads, for queries.
type arena struct {
	heads *headMap
	byID  []*node  // id -> node
	free  []uint32 // released ids for reuse
	live  int      // nodes in use
}

// get returns node id.
func (a *arena) get(id uint32) *node { return a.byID[id] }

func (a *arena) alloc(d *nodeData) *node {
	var id uint32
	if n := len(a.free); n > 0 {
		id = a.free[n-1]
		a.free = a.free[:n-1]
	} else {
		id = uint32(len(a.byID))
		a.byID = append(a.byID, nil)
	}
	n := &node{id: id}
	d.id = id
	n.data.Store(d)
	a.byID[id] = n
	a.heads.put(d.hashes[0], d, nil)
	a.live++
	return n
}

// publish makes d the contents of n for queries. A node's first hash never
// changes (appends extend it, garbage collection trims its tail), so its
// head entry stays where it is and only the slot's contents change.
func (a *arena) publish(n *node, d *nodeData) {
	d.id = n.id
	n.data.Store(d)
	kl := n.kidList()
	a.heads.update(d.hashes[0], d, &kl)
}

func (a *arena) release(n *node) {
	a.unlink(n)
	a.heads.del(n.data.Load().hashes[0])
	n.data.Store(nil)
	n.kids = nil // the kids' links to n are dead (see unlink)
	a.byID[n.id] = nil
	a.free = append(a.free, n.id)
	a.live--
}

// each calls f for every live node, in id order. Writer-only.
func (a *arena) each(f func(*node)) {
	for _, n := range a.byID {
		if n != nil {
			f(n)
		}
	}
}

const shardBits = 6

// blockMap maps every indexed sequence hash to its place (node id<<32 |
// offset). Only the writer (holding the Index's writer mutex) uses it:
// queries find nodes through the head map. It is sharded so that growing
// one table rehashes 1/64 of the blocks at a time.
type blockMap struct {
	shards [1 << shardBits]u64map
	n      int    // entries
	sink   uint64 // keeps touch's loads alive
}

func newBlockMap() *blockMap {
	b := &blockMap{}
	for i := range b.shards {
		b.shards[i].skip = shardBits
	}
	return b
}

func (b *blockMap) shard(h uint64) *u64map { return &b.shards[b.shardIndex(h)] }

// shardIndex picks a shard from the leading bits of the mixed key; each
// shard's home slots come from the bits after them, so keys of one shard
// still spread over its whole table, and touch mixes each key once.
func (b *blockMap) shardIndex(h uint64) int { return int(mix(h) >> (64 - shardBits)) }

func (b *blockMap) peek(h uint64) (uint64, bool) { return b.shard(h).get(h) }

func (b *blockMap) put(h, v uint64) {
	m := b.shard(h)
	n := m.Len()
	m.put(h, v)
	b.n += m.Len() - n
}

func (b *blockMap) del(h uint64) {
	if b.shard(h).del(h) {
		b.n--
	}
}

// touchBatch is how many keys a batched block-map operation touches ahead
// of working on them.
const touchBatch = 256

// touch loads the first probe slot of every key in keys. The loads do not
// depend on one another, so the CPU overlaps their cache misses (a
// software prefetch, which Go lacks as an intrinsic): the probes that
// follow then mostly hit the cache.
func (b *blockMap) touch(keys []uint64) {
	var acc uint64
	for _, k := range keys {
		acc += b.firstSlot(mix(k))
	}
	b.sink += acc
}

// firstSlot loads the key in the first probe slot of the mixed key h.
func (b *blockMap) firstSlot(h uint64) uint64 {
	if m := &b.shards[h>>(64-shardBits)]; len(m.slots) != 0 {
		return m.slots[h<<shardBits>>m.shift].k
	}
	return 0
}

// putMany indexes the blocks of refs at their (node, off): batch by batch,
// it mixes the keys and loads their first probe slots (the loads overlap
// their cache misses), then inserts them.
func (b *blockMap) putMany(refs []blockRef) {
	var hs [touchBatch]uint64
	for len(refs) > 0 {
		chunk := refs[:min(len(refs), touchBatch)]
		refs = refs[len(chunk):]
		var acc uint64
		for i := range chunk {
			hs[i] = mix(chunk[i].seq)
			acc += b.firstSlot(hs[i])
		}
		b.sink += acc
		for i := range chunk {
			m := &b.shards[hs[i]>>(64-shardBits)]
			if m.putMixed(hs[i], chunk[i].seq, loc(chunk[i].node.id, chunk[i].off)) {
				b.n++
			}
		}
	}
}

// delMany drops hashes.
func (b *blockMap) delMany(hashes []uint64) {
	for len(hashes) > 0 {
		chunk := hashes[:min(len(hashes), touchBatch)]
		hashes = hashes[len(chunk):]
		if len(chunk) >= 8 {
			b.touch(chunk)
		}
		for _, h := range chunk {
			b.del(h)
		}
	}
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
