package sim

// table maps uint64 block hashes to int32 slots: open addressing with
// linear probing and backward-shift deletion, so heavy insert/delete churn
// (every eviction deletes, every registration inserts) never leaves
// tombstones that lengthen probes, as they do in Go's built-in map under
// this workload. Keys are already uniform hashes; a multiplicative mix
// guards against structured ones. Key and value share a slot so a probe
// touches one cache line. It grows by doubling at 50 % load. Not safe for
// concurrent use.
type table struct {
	slots []tslot
	mask  uint64
	shift uint
	n     int
}

type tslot struct {
	key uint64
	val int32 // -1: empty
}

func newTable(capacity int) *table {
	size := 16
	for size < 2*capacity {
		size <<= 1
	}
	t := &table{}
	t.alloc(size)
	return t
}

func (t *table) alloc(size int) {
	t.slots = make([]tslot, size)
	for i := range t.slots {
		t.slots[i].val = -1
	}
	t.mask = uint64(size - 1)
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
}

func (t *table) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// get returns the value of k.
func (t *table) get(k uint64) (int32, bool) {
	for i := t.home(k); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.val < 0 {
			return 0, false
		}
		if s.key == k {
			return s.val, true
		}
	}
}

// put sets k to v (v ≥ 0).
func (t *table) put(k uint64, v int32) {
	t.insert(k, v, true)
}

// putIfAbsent sets k to v unless k is present; it returns the value k has
// afterwards and whether it was inserted.
func (t *table) putIfAbsent(k uint64, v int32) (int32, bool) {
	return t.insert(k, v, false)
}

func (t *table) insert(k uint64, v int32, overwrite bool) (int32, bool) {
	if 2*(t.n+1) > len(t.slots) {
		t.grow()
	}
	for i := t.home(k); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.val < 0 {
			s.key, s.val = k, v
			t.n++
			return v, true
		}
		if s.key == k {
			if overwrite {
				s.val = v
			}
			return s.val, false
		}
	}
}

// del removes k, shifting later entries of its probe run back.
func (t *table) del(k uint64) bool {
	i := t.home(k)
	for {
		s := &t.slots[i]
		if s.val < 0 {
			return false
		}
		if s.key == k {
			break
		}
		i = (i + 1) & t.mask
	}
	j := i
	for {
		j = (j + 1) & t.mask
		s := t.slots[j]
		if s.val < 0 {
			break
		}
		h := t.home(s.key)
		// Move j back to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i].val = -1
	t.n--
	return true
}

func (t *table) grow() {
	old := t.slots
	t.alloc(2 * len(old))
	t.n = 0
	for _, s := range old {
		if s.val >= 0 {
			t.insert(s.key, s.val, true)
		}
	}
}

// each calls f for every entry, in slot order.
func (t *table) each(f func(k uint64, v int32)) {
	for _, s := range t.slots {
		if s.val >= 0 {
			f(s.key, s.val)
		}
	}
}
