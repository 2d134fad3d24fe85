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
