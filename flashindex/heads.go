package flashindex

import (
	"runtime"
	"sync/atomic"
	"unsafe"
)

// headMap maps the first sequence hash of every node to the node's current
// contents (the snapshot the writer last published for it). It is all a
// query needs to find its way: a request's first block is a chain
// root, which can only start a node, and a request that leaves a node (at
// its end, or where it diverges inside it) continues with a child of the
// node's block, which cannot be inside another node (its parent would then
// be indexed twice) and so starts one too. It holds one entry per node, not
// per block, so it stays small and cache-resident; its layout changes only
// when a node is created or freed.
//
// One writer (holding the Index's writer mutex) and any number of readers
// that take no lock: the writer makes seq odd, changes the table with
// atomic stores and makes seq even again; a reader probes with atomic loads
// and retries if seq was odd or moved meanwhile (a sequence lock). Readers
// write nothing shared, so they scale with cores. Publishing a node's new
// contents or kids (update) rewrites its slot in place without touching
// seq, under the slot's own sequence counter: a reader sees the old or the
// new slot, each whole, and never pairs the hashes of one snapshot with
// the sets of another.
//
// Keeping the contents pointer in the slot, rather than a node id to look
// up elsewhere, saves a query one dependent cache miss per node it enters;
// keeping copies of the contents' hashes, first run and kids there too
// (see headSlot) lets a query cross a node on the slot alone.
type headMap struct {
	seq atomic.Uint64 // odd while the writer changes the table
	tab atomic.Pointer[headTable]
	n   int // writer-only: entries
	// filter counts the keys per bucket (saturating: a full counter is
	// never decremented), for the writer: most blocks it asks about are
	// no node's head, and a zero counter says so from 64 KB that stay in
	// cache, without probing the table.
	filter [1 << headFilterBits]uint8
}

const headFilterBits = 16

func headBucket(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> (64 - headFilterBits) }

func (h *headMap) count(k uint64, d int) {
	c := &h.filter[headBucket(k)]
	if *c != 255 {
		*c = uint8(int(*c) + d)
	}
}

// headTable is an open-addressing table with linear probing and
// backward-shift deletion. A slot whose key is 0 is empty; key 0 itself is
// kept in zero.
type headTable struct {
	slots []headSlot // power-of-two length
	shift uint
	zero  atomic.Pointer[view] // the node of key 0; nil = absent
}

// headKids is how many child offsets a head slot lists.
const headKids = 3

// kidList lists the smallest n distinct offsets of a node at which other
// nodes continue its chain (see node.kids), ascending.
type kidList struct {
	n   uint32
	off [headKids]uint32
}

// headSlot is one entry, 64 bytes (one cache line): the node's first hash,
// its contents d, and copies of what a query needs before d itself: the
// node's hashes, to compare; where other nodes continue it (kids), to find
// the node the request continues into without comparing; and its first
// run (set and end), to walk a node of one run without loading d at all.
// ver is odd while the writer rewrites the slot (a per-slot sequence lock:
// see load).
type headSlot struct {
	ver  atomic.Uint32
	n    atomic.Uint32 // len(d.hashes)
	k    atomic.Uint64
	h    atomic.Pointer[uint64] // d.hashes
	d    atomic.Pointer[nodeData]
	b    atomic.Pointer[uint64] // d.bits0
	nb   atomic.Uint32          // len(d.bits0)
	end0 atomic.Uint32          // d.runs[0].end
	nk   atomic.Uint32
	kids [headKids]atomic.Uint32
}

// view is what a query reads of a node through its head slot, all from one
// snapshot: the contents d, copies of d.hashes, d.bits0 and d.runs[0].end,
// and the node's kid list.
type view struct {
	d      *nodeData
	hashes []uint64
	bits0  []uint64
	end0   uint32
	kids   kidList
}

// newView returns the view of d with kids (nil: none).
func newView(d *nodeData, kids *kidList) view {
	var v view
	if d == nil {
		return v
	}
	v.d, v.hashes, v.bits0 = d, d.hashes, d.bits0
	if len(d.runs) > 0 {
		v.end0 = d.runs[0].end
	}
	if kids != nil {
		v.kids = *kids
		v.kids.n = min(v.kids.n, headKids)
	}
	return v
}

// set stores the view of d and kids in s. Writer-only. It stores only the
// fields that change (an atomic store is a locked instruction, and most
// publishes change a node's hashes or its first set, not both).
func (s *headSlot) set(d *nodeData, kids *kidList) {
	v := newView(d, kids)
	s.store(&v)
}

// store stores v in s. Writer-only. Moving a slot's view (load, then
// store) reads nothing of its node's contents, which a table shifting
// slots on every delete would otherwise fetch from memory for each.
func (s *headSlot) store(v *view) {
	s.ver.Add(1)
	s.d.Store(v.d)
	if h, n := unsafe.SliceData(v.hashes), uint32(len(v.hashes)); s.h.Load() != h || s.n.Load() != n {
		s.h.Store(h)
		s.n.Store(n)
	}
	if b, nb := unsafe.SliceData(v.bits0), uint32(len(v.bits0)); s.b.Load() != b || s.nb.Load() != nb {
		s.b.Store(b)
		s.nb.Store(nb)
	}
	if s.end0.Load() != v.end0 {
		s.end0.Store(v.end0)
	}
	for i := uint32(0); i < v.kids.n; i++ {
		if s.kids[i].Load() != v.kids.off[i] {
			s.kids[i].Store(v.kids.off[i])
		}
	}
	if s.nk.Load() != v.kids.n {
		s.nk.Store(v.kids.n)
	}
	s.ver.Add(1)
}

// load reads the view of s into v, from one snapshot. The slices are
// built only once the fields are known to be one snapshot's: a pointer
// and a length from two snapshots need not describe memory at all.
func (s *headSlot) load(v *view) {
	for {
		ver := s.ver.Load()
		d, h, n, b, nb := s.d.Load(), s.h.Load(), s.n.Load(), s.b.Load(), s.nb.Load()
		v.end0 = s.end0.Load()
		v.kids = kidList{n: min(s.nk.Load(), headKids)}
		for i := uint32(0); i < v.kids.n; i++ {
			v.kids.off[i] = s.kids[i].Load()
		}
		if ver&1 == 0 && s.ver.Load() == ver {
			v.d, v.hashes, v.bits0 = d, unsafe.Slice(h, n), unsafe.Slice(b, nb)
			return
		}
		runtime.Gosched() // the writer is rewriting this slot
	}
}

func newHeadTable(size int) *headTable {
	t := &headTable{slots: make([]headSlot, size), shift: 64}
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	return t
}

func (t *headTable) home(k uint64) uint64 { return ((k ^ k>>32) * 0xd6e8feb86659fd93) >> t.shift }

// find returns the slot of k, or nil (and for key 0, nil and whether it is
// present). Under concurrent structural change it may answer wrong, which
// the caller's sequence check catches. It never loops more than the table
// size.
func (t *headTable) find(k uint64) *headSlot {
	mask := uint64(len(t.slots) - 1)
	i := t.home(k)
	for range t.slots {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			return s
		case 0:
			return nil
		}
		i = (i + 1) & mask
	}
	return nil
}

// lookup reads the view of the node that starts with k into v (v.d nil if
// there is none); see find.
func (t *headTable) lookup(k uint64, v *view) {
	if k == 0 {
		if z := t.zero.Load(); z != nil {
			*v = *z
		} else {
			v.d = nil
		}
		return
	}
	if s := t.find(k); s != nil {
		s.load(v)
		return
	}
	v.d = nil
}

// peek is get for the writer, which needs no sequence check.
func (h *headMap) peek(k uint64) *nodeData {
	if h.filter[headBucket(k)] == 0 {
		return nil
	}
	t := h.tab.Load()
	if k == 0 {
		if v := t.zero.Load(); v != nil {
			return v.d
		}
		return nil
	}
	if s := t.find(k); s != nil {
		return s.d.Load()
	}
	return nil
}

// get reads the view of the node that starts with k into v (v.d nil if
// there is none), reporting whether there is one. Lock-free.
func (h *headMap) get(k uint64, v *view) bool {
	for {
		s := h.seq.Load()
		if s&1 == 0 {
			h.tab.Load().lookup(k, v)
			if h.seq.Load() == s {
				return v.d != nil
			}
		}
		runtime.Gosched() // the writer is mid-change
	}
}

func newHeadMap() *headMap {
	h := &headMap{}
	h.tab.Store(newHeadTable(64))
	return h
}

// put maps k to d with kids (nil: none). Writer-only.
func (h *headMap) put(k uint64, d *nodeData, kids *kidList) {
	h.seq.Add(1)
	defer h.seq.Add(1)
	t := h.tab.Load()
	if k == 0 {
		if t.zero.Load() == nil {
			h.n++
			h.count(k, 1)
		}
		t.setZero(d, kids)
		return
	}
	if (h.n+1)*4 > len(t.slots)*3 {
		g := newHeadTable(2 * len(t.slots))
		g.zero.Store(t.zero.Load())
		for i := range t.slots {
			if sk := t.slots[i].k.Load(); sk != 0 {
				var v view
				t.slots[i].load(&v)
				g.insertView(sk, &v)
			}
		}
		h.tab.Store(g)
		t = g
	}
	if t.insert(k, d, kids) {
		h.n++
		h.count(k, 1)
	}
}

// update replaces the contents and kids of k, which must be present, in
// place: no sequence change, since a reader may see either snapshot (the
// slot's own counter keeps each one whole). Writer-only.
func (h *headMap) update(k uint64, d *nodeData, kids *kidList) {
	t := h.tab.Load()
	if k == 0 {
		t.setZero(d, kids)
		return
	}
	t.insert(k, d, kids) // present: only the slot's contents change
}

// setZero stores the entry of key 0 (nil d: absent).
func (t *headTable) setZero(d *nodeData, kids *kidList) {
	if d == nil {
		t.zero.Store(nil)
		return
	}
	v := newView(d, kids)
	t.zero.Store(&v)
}

// insert sets k to d and kids and reports whether k is new. Writer-only.
func (t *headTable) insert(k uint64, d *nodeData, kids *kidList) bool {
	v := newView(d, kids)
	return t.insertView(k, &v)
}

// insertView sets k to v and reports whether k is new. Writer-only.
func (t *headTable) insertView(k uint64, v *view) bool {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			s.store(v)
			return false
		case 0:
			s.store(v)
			s.k.Store(k)
			return true
		}
	}
}

// del removes k. Writer-only.
func (h *headMap) del(k uint64) {
	h.seq.Add(1)
	defer h.seq.Add(1)
	t := h.tab.Load()
	if k == 0 {
		if t.zero.Load() != nil {
			h.n--
			h.count(k, -1)
		}
		t.setZero(nil, nil)
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(k)
	for {
		switch t.slots[i].k.Load() {
		case k:
		case 0:
			return
		default:
			i = (i + 1) & mask
			continue
		}
		break
	}
	// Backward shift, as u64map.del.
	j := i
	for {
		j = (j + 1) & mask
		sk := t.slots[j].k.Load()
		if sk == 0 {
			break
		}
		hm := t.home(sk)
		if (j > i && (hm <= i || hm > j)) || (j < i && hm <= i && hm > j) {
			var v view
			t.slots[j].load(&v)
			t.slots[i].store(&v)
			t.slots[i].k.Store(sk)
			i = j
		}
	}
	t.slots[i].k.Store(0)
	t.slots[i].set(nil, nil)
	h.n--
	h.count(k, -1)
}
