package sim

// hostTier is the host (CPU) KV tier: a fixed number of slots holding
// blocks evicted from the device, least recently used out first.
type hostTier struct {
	slots []hostSlot // the last one is the list sentinel
	sent  int32
	used  int
	spare []int32 // unused slots
	index *table  // hash → slot
}

type hostSlot struct {
	hash, local, parent uint64
	hasParent           bool
	prev, next          int32
}

func newHostTier(n int) *hostTier {
	h := &hostTier{
		slots: make([]hostSlot, n+1),
		sent:  int32(n),
		index: newTable(n),
		spare: make([]int32, 0, n),
	}
	h.slots[n].prev, h.slots[n].next = h.sent, h.sent
	for i := int32(n) - 1; i >= 0; i-- {
		h.spare = append(h.spare, i)
	}
	return h
}

// touch makes hash the most recently used entry, if present.
func (h *hostTier) touch(hash uint64) {
	i, ok := h.index.get(hash)
	if !ok {
		return
	}
	h.unlink(i)
	h.linkBack(i)
}

// evictIfFull removes the least recently used entry when every slot is
// taken and returns its hash.
func (h *hostTier) evictIfFull() (uint64, bool) {
	if len(h.spare) > 0 {
		return 0, false
	}
	i := h.slots[h.sent].next
	hash := h.slots[i].hash
	h.unlink(i)
	h.index.del(hash)
	h.spare = append(h.spare, i)
	h.used--
	return hash, true
}

// insert adds an absent hash; a slot must be free.
func (h *hostTier) insert(hash, local, parent uint64, hasParent bool) {
	i := h.spare[len(h.spare)-1]
	h.spare = h.spare[:len(h.spare)-1]
	h.slots[i] = hostSlot{hash: hash, local: local, parent: parent, hasParent: hasParent}
	h.linkBack(i)
	h.index.put(hash, i)
	h.used++
}

func (h *hostTier) linkBack(i int32) {
	last := h.slots[h.sent].prev
	h.slots[i].prev, h.slots[i].next = last, h.sent
	h.slots[last].next = i
	h.slots[h.sent].prev = i
}

func (h *hostTier) unlink(i int32) {
	s := &h.slots[i]
	h.slots[s.prev].next = s.next
	h.slots[s.next].prev = s.prev
}

// toFront makes hash the least recently used entry (the next to be
// evicted), if present.
func (h *hostTier) toFront(hash uint64) bool {
	i, ok := h.index.get(hash)
	if !ok {
		return false
	}
	h.unlink(i)
	first := h.slots[h.sent].next
	h.slots[i].prev, h.slots[i].next = h.sent, first
	h.slots[first].prev = i
	h.slots[h.sent].next = i
	return true
}
