package flashindex

import (
	"runtime"
	"sync/atomic"
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
// contents (update) swaps one pointer in place without touching seq: a
// reader sees the old or the new snapshot, each consistent.
//
// Keeping the contents pointer in the slot, rather than a node id to look
// up elsewhere, saves a query one dependent cache miss per node it enters.
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
	zero  atomic.Pointer[nodeData] // the node of key 0; nil = absent
}

type headSlot struct {
	k atomic.Uint64
	d atomic.Pointer[nodeData]
}

func newHeadTable(size int) *headTable {
	t := &headTable{slots: make([]headSlot, size), shift: 64}
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
	return t
}

func (t *headTable) home(k uint64) uint64 { return ((k ^ k>>32) * 0xd6e8feb86659fd93) >> t.shift }

// lookup probes t; under concurrent change it may answer wrong, which the
// caller's sequence check catches. It never loops more than the table size.
func (t *headTable) lookup(k uint64) *nodeData {
	if k == 0 {
		return t.zero.Load()
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(k)
	for range t.slots {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			return s.d.Load()
		case 0:
			return nil
		}
		i = (i + 1) & mask
	}
	return nil
}

// peek is get for the writer, which needs no sequence check.
func (h *headMap) peek(k uint64) *nodeData {
	if h.filter[headBucket(k)] == 0 {
		return nil
	}
	return h.tab.Load().lookup(k)
}

// get returns the contents of the node that starts with k, or nil.
// Lock-free.
func (h *headMap) get(k uint64) *nodeData {
	for {
		s := h.seq.Load()
		if s&1 == 0 {
			d := h.tab.Load().lookup(k)
			if h.seq.Load() == s {
				return d
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

// put maps k to d. Writer-only.
func (h *headMap) put(k uint64, d *nodeData) {
	h.seq.Add(1)
	defer h.seq.Add(1)
	t := h.tab.Load()
	if k == 0 {
		if t.zero.Load() == nil {
			h.n++
			h.count(k, 1)
		}
		t.zero.Store(d)
		return
	}
	if (h.n+1)*4 > len(t.slots)*3 {
		g := newHeadTable(2 * len(t.slots))
		g.zero.Store(t.zero.Load())
		for i := range t.slots {
			if sk := t.slots[i].k.Load(); sk != 0 {
				g.insert(sk, t.slots[i].d.Load())
			}
		}
		h.tab.Store(g)
		t = g
	}
	if t.insert(k, d) {
		h.n++
		h.count(k, 1)
	}
}

// update replaces the contents of k, which must be present, in place:
// no sequence change, since a reader may see either snapshot. Writer-only.
func (h *headMap) update(k uint64, d *nodeData) {
	t := h.tab.Load()
	if k == 0 {
		t.zero.Store(d)
		return
	}
	t.insert(k, d) // present: only its contents pointer is stored
}

// insert sets k to d and reports whether k is new. Writer-only.
func (t *headTable) insert(k uint64, d *nodeData) bool {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			s.d.Store(d)
			return false
		case 0:
			s.d.Store(d)
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
		t.zero.Store(nil)
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
			t.slots[i].d.Store(t.slots[j].d.Load())
			t.slots[i].k.Store(sk)
			i = j
		}
	}
	t.slots[i].k.Store(0)
	t.slots[i].d.Store(nil)
	h.n--
	h.count(k, -1)
}
