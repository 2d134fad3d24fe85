package flashindex

// u64map is an open-addressing hash map from uint64 to uint64 with linear
// probing and backward-shift deletion, so heavy insert/delete churn (blocks
// stored and evicted all day) leaves no tombstones behind to lengthen
// probes. Keys are hashes already; they are scrambled once more by a
// multiply so that structured keys spread too. Key 0 lives outside the
// table. A u64map is not safe for concurrent use on its own.
type u64map struct {
	slots   []u64slot // power-of-two length; k == 0 means empty
	n       int       // entries in slots
	shift   uint      // 64 - log2(len(slots))
	skip    uint      // leading bits of the mixed key taken by a caller (blockMap's shard)
	double  bool      // grow by two, not four (see grow)
	hasZero bool
	zero    uint64
}

type u64slot struct{ k, v uint64 }

// home is the key's first slot: the leading bits of the mixed key after the
// skip bits.
func (m *u64map) home(k uint64) uint64 { return mix(k) << m.skip >> m.shift }

// mix scrambles a key for home slots (and blockMap's shard choice, which
// takes its leading bits).
func mix(k uint64) uint64 { return (k ^ k>>32) * 0xd6e8feb86659fd93 }

// Len returns the number of entries.
func (m *u64map) Len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// touch loads k's home slot and returns its key, for a caller that sums
// the keys to keep the loads (see blockMap.touch).
func (m *u64map) touch(k uint64) uint64 {
	if len(m.slots) == 0 {
		return 0
	}
	return m.slots[m.home(k)].k
}

func (m *u64map) get(k uint64) (uint64, bool) {
	if k == 0 {
		return m.zero, m.hasZero
	}
	if m.n == 0 {
		return 0, false
	}
	mask := uint64(len(m.slots) - 1)
	for i := m.home(k); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			return s.v, true
		}
		if s.k == 0 {
			return 0, false
		}
	}
}

func (m *u64map) put(k, v uint64) { m.putMixed(mix(k), k, v) }

// putMixed is put for a caller that has mix(k) at hand already. It reports
// whether k is new.
func (m *u64map) putMixed(h, k, v uint64) bool {
	if k == 0 {
		had := m.hasZero
		m.zero, m.hasZero = v, true
		return !had
	}
	if (m.n+1)*4 > len(m.slots)*3 {
		m.grow()
	}
	mask := uint64(len(m.slots) - 1)
	for i := h << m.skip >> m.shift; ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.k == k {
			s.v = v
			return false
		}
		if s.k == 0 {
			s.k, s.v = k, v
			m.n++
			return true
		}
	}
}

// grow quadruples the table. Rehashing is most of what inserts into a
// large table cost (every entry moves, into memory the kernel has never
// mapped), so growing by four moves each entry a third as often as
// doubling would, for a table between 19 % and 75 % full rather than 37 %
// and 75 % (16 to 85 bytes per entry). A map that is small next to the
// block map and mostly steady in size (a worker's approximate entries) sets
// double: 37 % to 75 % full, 21 to 43 bytes per entry.
func (m *u64map) grow() {
	size := 8
	if len(m.slots) > 0 {
		size = 4 * len(m.slots)
		if m.double {
			size = 2 * len(m.slots)
		}
	}
	old := m.slots
	m.slots = make([]u64slot, size)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	mask := uint64(size - 1)
	for _, s := range old {
		if s.k == 0 {
			continue
		}
		i := m.home(s.k)
		for m.slots[i].k != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = s
	}
}

// del removes k and reports whether it was present.
func (m *u64map) del(k uint64) bool {
	if k == 0 {
		had := m.hasZero
		m.hasZero, m.zero = false, 0
		return had
	}
	if m.n == 0 {
		return false
	}
	mask := uint64(len(m.slots) - 1)
	i := m.home(k)
	for {
		if m.slots[i].k == k {
			break
		}
		if m.slots[i].k == 0 {
			return false
		}
		i = (i + 1) & mask
	}
	// Backward shift: pull later entries of the probe run into the hole
	// unless they already sit at or after their home.
	j := i
	for {
		j = (j + 1) & mask
		s := m.slots[j]
		if s.k == 0 {
			break
		}
		h := m.home(s.k)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			m.slots[i] = s
			i = j
		}
	}
	m.slots[i] = u64slot{}
	m.n--
	if m.n == 0 && len(m.slots) > 1024 {
		*m = u64map{hasZero: m.hasZero, zero: m.zero, skip: m.skip, double: m.double}
	}
	return true
}

// each calls f for every entry, in no particular order. f must not modify
// the map.
func (m *u64map) each(f func(k, v uint64)) {
	if m.hasZero {
		f(0, m.zero)
	}
	for _, s := range m.slots {
		if s.k != 0 {
			f(s.k, s.v)
		}
	}
}

// clear empties the map, keeping its table.
func (m *u64map) clear() {
	clear(m.slots)
	m.n, m.hasZero, m.zero = 0, false, 0
}
