package flashindex

import (
	"runtime"
	"sync/atomic"
)

// headMap maps the first sequence hash of every node to the node's id. It
// is all a query needs to find its way: a request's first block is a chain
// root, which can only start a node, and a request that leaves a node (at
// its end, or where it diverges inside it) continues with a child of the
// node's block, which cannot be inside another node (its parent would then
// be indexed twice) and so starts one too. It holds one entry per node, not
// per block, so it stays small and cache-resident, and it changes only when
// a node is created or freed.
//
// One writer (holding the Index's writer mutex) and any number of readers
// that take no lock: the writer makes seq odd, changes the table with
// atomic stores and makes seq even again; a reader probes with atomic loads
// and retries if seq was odd or moved meanwhile (a sequence lock). Readers
// write nothing shared, so they scale with cores.
type headMap struct {
	seq atomic.Uint64 // odd while the writer changes the table
	tab atomic.Pointer[headTable]
	n   int // writer-only: entries
}

// headTable is an open-addressing table with linear probing and
// backward-shift deletion. A slot whose key is 0 is empty; key 0 itself is
// kept in zero.
type headTable struct {
	slots []headSlot // power-of-two length
	shift uint
	zero  atomic.Uint64 // value+1 for key 0; 0 = absent
}

type headSlot struct{ k, v atomic.Uint64 }

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
func (t *headTable) lookup(k uint64) (uint64, bool) {
	if k == 0 {
		if z := t.zero.Load(); z != 0 {
			return z - 1, true
		}
		return 0, false
	}
	mask := uint64(len(t.slots) - 1)
	i := t.home(k)
	for range t.slots {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			return s.v.Load(), true
		case 0:
			return 0, false
		}
		i = (i + 1) & mask
	}
	return 0, false
}

// get returns the id of the node that starts with k. Lock-free.
func (h *headMap) get(k uint64) (uint32, bool) {
	for {
		s := h.seq.Load()
		if s&1 == 0 {
			v, ok := h.tab.Load().lookup(k)
			if h.seq.Load() == s {
				return uint32(v), ok
			}
		}
		runtime.Gosched() // the writer is mid-change
	}
}

// peek is get for the writer, which needs no sequence check.
func (h *headMap) peek(k uint64) (uint32, bool) {
	v, ok := h.tab.Load().lookup(k)
	return uint32(v), ok
}

func newHeadMap() *headMap {
	h := &headMap{}
	h.tab.Store(newHeadTable(64))
	return h
}

// put maps k to id. Writer-only.
func (h *headMap) put(k uint64, id uint32) {
	h.seq.Add(1)
	defer h.seq.Add(1)
	t := h.tab.Load()
	if k == 0 {
		if t.zero.Load() == 0 {
			h.n++
		}
		t.zero.Store(uint64(id) + 1)
		return
	}
	if (h.n+1)*4 > len(t.slots)*3 {
		g := newHeadTable(2 * len(t.slots))
		g.zero.Store(t.zero.Load())
		for i := range t.slots {
			if sk := t.slots[i].k.Load(); sk != 0 {
				g.insert(sk, t.slots[i].v.Load())
			}
		}
		h.tab.Store(g)
		t = g
	}
	if t.insert(k, uint64(id)) {
		h.n++
	}
}

// insert sets k to v and reports whether k is new. Writer-only.
func (t *headTable) insert(k, v uint64) bool {
	mask := uint64(len(t.slots) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		s := &t.slots[i]
		switch s.k.Load() {
		case k:
			s.v.Store(v)
			return false
		case 0:
			s.v.Store(v)
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
		if t.zero.Load() != 0 {
			h.n--
		}
		t.zero.Store(0)
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
			t.slots[i].v.Store(t.slots[j].v.Load())
			t.slots[i].k.Store(sk)
			i = j
		}
	}
	t.slots[i].k.Store(0)
	t.slots[i].v.Store(0)
	h.n--
}
