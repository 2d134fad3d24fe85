package sim

// table maps uint64 block hashes to int32 slots: open addressing with
// linear probing and backward-shift deletion, so heavy insert/delete churn
// (every eviction deletes, every registration inserts) never leaves
// tombstones that lengthen probes. Keys are already uniform hashes; a
// multiplicative mix guards against structured ones. It grows by doubling
// at 50 % load. Not safe for concurrent use.
type table struct {
	keys  []uint64
	vals  []int32 // -1: empty
	mask  uint64
	shift uint
	n     int
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
	t.keys = make([]uint64, size)
	t.vals = make([]int32, size)
	for i := range t.vals {
		t.vals[i] = -1
	}
	t.mask = uint64(size - 1)
	t.shift = 64
	for s := size; s > 1; s >>= 1 {
		t.shift--
	}
}

func (t *table) slot(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// get returns the value of k.
func (t *table) get(k uint64) (int32, bool) {
	for i := t.slot(k); ; i = (i + 1) & t.mask {
		v := t.vals[i]
		if v < 0 {
			return 0, false
		}
		if t.keys[i] == k {
			return v, true
		}
	}
}

// put sets k to v (v ≥ 0).
func (t *table) put(k uint64, v int32) {
	if 2*(t.n+1) > len(t.keys) {
		t.grow()
	}
	for i := t.slot(k); ; i = (i + 1) & t.mask {
		if t.vals[i] < 0 {
			t.keys[i], t.vals[i] = k, v
			t.n++
			return
		}
		if t.keys[i] == k {
			t.vals[i] = v
			return
		}
	}
}

// del removes k, shifting later entries of its probe run back.
func (t *table) del(k uint64) bool {
	i := t.slot(k)
	for {
		if t.vals[i] < 0 {
			return false
		}
		if t.keys[i] == k {
			break
		}
		i = (i + 1) & t.mask
	}
	j := i
	for {
		j = (j + 1) & t.mask
		if t.vals[j] < 0 {
			break
		}
		h := t.slot(t.keys[j])
		// Move j back to i unless its home lies cyclically in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j)) {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	t.vals[i] = -1
	t.n--
	return true
}

func (t *table) grow() {
	keys, vals := t.keys, t.vals
	t.alloc(2 * len(keys))
	t.n = 0
	for i, v := range vals {
		if v >= 0 {
			t.put(keys[i], v)
		}
	}
}

// each calls f for every entry, in slot order.
func (t *table) each(f func(k uint64, v int32)) {
	for i, v := range t.vals {
		if v >= 0 {
			f(t.keys[i], v)
		}
	}
}
