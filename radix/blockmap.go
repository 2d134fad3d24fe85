package radix

// loc is where a block lives: its node and its depth in the lineage
// (1-based: the first block of a chain has depth 1).
type loc struct {
	node  uint32 // 0 marks an empty slot
	depth uint32
}

type slot struct {
	key uint64
	loc loc
}

// blockMap maps block hashes to locations. It is an open-addressing table
// with linear probing and backward-shift deletion. Its slots hold no
// pointers, so the garbage collector never scans them, and the update path
// (a few hundred inserts per request) costs one short probe each.
type blockMap struct {
	slots []slot
	mask  uint64
	shift uint8
	n     int
	sink  uint64 // keeps touch's loads alive
}

const minMapSlots = 64

func (m *blockMap) init(size int) {
	s := minMapSlots
	for s < size {
		s <<= 1
	}
	m.slots = make([]slot, s)
	m.mask = uint64(s - 1)
	m.shift = uint8(64 - log2(s))
	m.n = 0
}

func log2(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}

// home spreads keys with Fibonacci hashing: engine hashes are random, but
// trace ids (Mooncake, tests) are small dense integers.
func (m *blockMap) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> m.shift }

// touchMin is the fewest keys worth a touch pass; touchBatch the most
// touched ahead of their use (more would evict the first from the cache).
const touchMin, touchBatch = 4, 256

// touch loads the home slot of every key. The loads do not depend on one
// another, so the CPU overlaps their cache misses (a software prefetch,
// which Go lacks as an intrinsic): the probes that follow then mostly hit
// the cache. A large tree's table is far bigger than the caches, and a
// session's blocks are spread over all of it.
func (m *blockMap) touch(keys []uint64) {
	if len(keys) < touchMin {
		return
	}
	var acc uint64
	for _, k := range keys {
		acc += m.slots[m.home(k)].key
	}
	m.sink += acc
}

// deleteAll deletes keys, touching them a batch ahead.
func (m *blockMap) deleteAll(keys []uint64) {
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), touchBatch)]
		keys = keys[len(chunk):]
		m.touch(chunk)
		for _, k := range chunk {
			m.delete(k)
		}
	}
}

func (m *blockMap) get(k uint64) (loc, bool) {
	for i := m.home(k); ; i = (i + 1) & m.mask {
		s := &m.slots[i]
		if s.loc.node == 0 {
			return loc{}, false
		}
		if s.key == k {
			return s.loc, true
		}
	}
}

// reserve grows the table so that n more keys fit under the load limit.
func (m *blockMap) reserve(n int) {
	size := len(m.slots)
	for (m.n+n)*4 > size*3 {
		size *= 2
	}
	if size != len(m.slots) {
		m.resize(size)
	}
}

// insert adds k; it returns false (and changes nothing) if k is present.
func (m *blockMap) insert(k uint64, l loc) bool {
	if (m.n+1)*4 > len(m.slots)*3 {
		m.resize(len(m.slots) * 2)
	}
	return m.insertNoGrow(k, l)
}

// insertNoGrow is insert after reserve.
func (m *blockMap) insertNoGrow(k uint64, l loc) bool {
	for i := m.home(k); ; i = (i + 1) & m.mask {
		s := &m.slots[i]
		if s.loc.node == 0 {
			s.key, s.loc = k, l
			m.n++
			return true
		}
		if s.key == k {
			return false
		}
	}
}

// set overwrites the location of a present key.
func (m *blockMap) set(k uint64, l loc) {
	for i := m.home(k); ; i = (i + 1) & m.mask {
		s := &m.slots[i]
		if s.loc.node == 0 {
			return
		}
		if s.key == k {
			s.loc = l
			return
		}
	}
}

func (m *blockMap) delete(k uint64) {
	i := m.home(k)
	for {
		s := &m.slots[i]
		if s.loc.node == 0 {
			return
		}
		if s.key == k {
			break
		}
		i = (i + 1) & m.mask
	}
	// Backward-shift: pull later members of the probe run into the hole.
	for j := (i + 1) & m.mask; ; j = (j + 1) & m.mask {
		s := m.slots[j]
		if s.loc.node == 0 {
			break
		}
		h := m.home(s.key)
		// Move s into hole i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			m.slots[i] = s
			i = j
		}
	}
	m.slots[i] = slot{}
	m.n--
	if len(m.slots) > minMapSlots && m.n*8 < len(m.slots) {
		m.resize(len(m.slots) / 2)
	}
}

func (m *blockMap) resize(size int) {
	old := m.slots
	m.init(size)
	for _, s := range old {
		if s.loc.node != 0 {
			m.insert(s.key, s.loc)
		}
	}
}

func (m *blockMap) bytes() int64 { return int64(len(m.slots)) * 16 }
