package hftok

import (
	"math"
	"strings"
)

// bytesChar is GPT-2's byte-to-unicode map: printable Latin-1 bytes stand
// for themselves, the others for U+0100 on, in byte order.
var bytesChar = func() (m [256]rune) {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = 256 + n
			n++
		}
	}
	return m
}()

var charBytes = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range bytesChar {
		m[r] = byte(b)
	}
	return m
}()

// byteLevelDecode returns the raw bytes a byte-level token stands for, or
// false if it has a character outside the byte alphabet.
func byteLevelDecode(tok string) (string, bool) {
	var b strings.Builder
	b.Grow(len(tok))
	for _, r := range tok {
		c, ok := charBytes[r]
		if !ok {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// bpeModel is tokenizers' BPE model over the bytes of a byte-level
// pre-token. Immutable after construction.
type bpeModel struct {
	byteID       [256]int64        // id of each byte's character; -1 if not in the vocab
	merges       map[uint64]uint64 // left<<32 | right → rank<<32 | merged id
	vocabRaw     map[string]uint32 // ignore_merges: a word's raw bytes → its id
	unk          int64             // unk_token's id, or -1
	fuseUnk      bool
	ignoreMerges bool
}

const noMerge = math.MaxUint64

func newBPEModel(vocab map[string]uint32, merges [][2]string, unkToken *string, fuseUnk, ignoreMerges bool) (*bpeModel, error) {
	m := &bpeModel{merges: make(map[uint64]uint64, len(merges)), unk: -1, fuseUnk: fuseUnk, ignoreMerges: ignoreMerges}
	// Merging compares merged ids as tokenizers does; with two strings
	// sharing an id, its priority queue could take a stale entry.
	seen := make(map[uint32]string, len(vocab))
	for tok, id := range vocab {
		if other, dup := seen[id]; dup {
			return nil, errorf("BPE model: tokens %q and %q share id %d", other, tok, id)
		}
		seen[id] = tok
	}
	for b, r := range bytesChar {
		m.byteID[b] = -1
		if id, ok := vocab[string(r)]; ok {
			m.byteID[b] = int64(id)
		}
	}
	for rank, mg := range merges {
		a, ok := vocab[mg[0]]
		if !ok {
			return nil, errorf("BPE model: merge %d: %q is not in the vocab", rank, mg[0])
		}
		b, ok := vocab[mg[1]]
		if !ok {
			return nil, errorf("BPE model: merge %d: %q is not in the vocab", rank, mg[1])
		}
		c, ok := vocab[mg[0]+mg[1]]
		if !ok {
			return nil, errorf("BPE model: merge %d: %q is not in the vocab", rank, mg[0]+mg[1])
		}
		m.merges[uint64(a)<<32|uint64(b)] = uint64(rank)<<32 | uint64(c) // a later duplicate wins, as in tokenizers' map
	}
	if unkToken != nil {
		id, ok := vocab[*unkToken]
		if !ok {
			return nil, errorf("BPE model: unk_token %q is not in the vocab", *unkToken)
		}
		m.unk = int64(id)
	}
	if ignoreMerges {
		m.vocabRaw = make(map[string]uint32, len(vocab))
		for tok, id := range vocab {
			if raw, ok := byteLevelDecode(tok); ok {
				m.vocabRaw[raw] = id
			}
		}
	}
	return m, nil
}

func (m *bpeModel) merge(a, b uint32) uint64 {
	if v, ok := m.merges[uint64(a)<<32|uint64(b)]; ok {
		return v
	}
	return noMerge
}

// symbols returns the initial symbols of word w (raw bytes) as
// BPE::merge_word makes them: one per byte character, a byte not in the
// vocab becoming unk_token (runs of them one unk with fuse_unk) or
// dropped when there is no unk_token.
func (m *bpeModel) symbols(syms []uint32, w string) []uint32 {
	pending := false
	for i := 0; i < len(w); i++ {
		if id := m.byteID[w[i]]; id >= 0 {
			if pending {
				syms = append(syms, uint32(m.unk))
				pending = false
			}
			syms = append(syms, uint32(id))
		} else if m.unk >= 0 {
			if pending && !m.fuseUnk {
				syms = append(syms, uint32(m.unk))
			}
			pending = true
		}
	}
	if pending {
		syms = append(syms, uint32(m.unk))
	}
	return syms
}

// smallWord is the length up to which mergeSmall's quadratic scan beats
// the priority queue.
const smallWord = 48

// encodeWord appends the ids of word w (the raw bytes of a byte-level
// pre-token). scratch is reused storage, returned grown.
func (m *bpeModel) encodeWord(dst []uint32, w string, scratch *wordScratch) []uint32 {
	if m.ignoreMerges {
		if id, ok := m.vocabRaw[w]; ok {
			return append(dst, id)
		}
	}
	syms := m.symbols(scratch.syms[:0], w)
	scratch.syms = syms
	if len(syms) <= smallWord {
		return append(dst, m.mergeSmall(syms, scratch)...)
	}
	return m.mergeHeap(dst, syms, scratch)
}

// wordScratch is per-call reusable storage of encodeWord.
type wordScratch struct {
	syms  []uint32
	pairs []uint64
	nodes []symNode
	heap  []heapItem
}

// mergeSmall merges in place: repeatedly the adjacent pair of lowest
// rank, leftmost first, which is what tokenizers' priority queue does.
func (m *bpeModel) mergeSmall(ids []uint32, s *wordScratch) []uint32 {
	if len(ids) < 2 {
		return ids
	}
	pairs := s.pairs[:0]
	for i := 0; i+1 < len(ids); i++ {
		pairs = append(pairs, m.merge(ids[i], ids[i+1]))
	}
	s.pairs = pairs
	for {
		best, bi := uint64(noMerge), -1
		for i, p := range pairs {
			if p < best {
				best, bi = p, i
			}
		}
		if bi < 0 {
			return ids
		}
		ids[bi] = uint32(best)
		copy(ids[bi+1:], ids[bi+2:])
		ids = ids[:len(ids)-1]
		copy(pairs[bi:], pairs[bi+1:])
		pairs = pairs[:len(pairs)-1]
		if bi > 0 {
			pairs[bi-1] = m.merge(ids[bi-1], ids[bi])
		}
		if bi < len(pairs) {
			pairs[bi] = m.merge(ids[bi], ids[bi+1])
		}
	}
}

// symNode is a symbol of mergeHeap's linked list.
type symNode struct {
	id         uint32
	prev, next int32 // -1 at the ends
	gone       bool  // merged into its left neighbour
}

// heapItem is a candidate merge of the symbol at pos with its next.
type heapItem struct {
	rank, pos int32
	id        uint32
}

func (a heapItem) less(b heapItem) bool {
	return a.rank < b.rank || a.rank == b.rank && a.pos < b.pos
}

// mergeHeap is Word::merge_all: a priority queue of candidate merges by
// (rank, position), stale entries recognized by their merged id.
func (m *bpeModel) mergeHeap(dst []uint32, ids []uint32, s *wordScratch) []uint32 {
	nodes := s.nodes[:0]
	for i, id := range ids {
		nodes = append(nodes, symNode{id: id, prev: int32(i) - 1, next: int32(i) + 1})
	}
	nodes[len(nodes)-1].next = -1
	s.nodes = nodes
	h := s.heap[:0]
	push := func(it heapItem) {
		h = append(h, it)
		for i := len(h) - 1; i > 0; {
			p := (i - 1) / 2
			if !h[i].less(h[p]) {
				break
			}
			h[i], h[p] = h[p], h[i]
			i = p
		}
	}
	pop := func() heapItem {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		for i := 0; ; {
			l, r, min := 2*i+1, 2*i+2, i
			if l < len(h) && h[l].less(h[min]) {
				min = l
			}
			if r < len(h) && h[r].less(h[min]) {
				min = r
			}
			if min == i {
				break
			}
			h[i], h[min] = h[min], h[i]
			i = min
		}
		return top
	}
	for i := 0; i+1 < len(nodes); i++ {
		if v := m.merge(nodes[i].id, nodes[i+1].id); v != noMerge {
			push(heapItem{rank: int32(v >> 32), pos: int32(i), id: uint32(v)})
		}
	}
	for len(h) > 0 {
		top := pop()
		cur := &nodes[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		nx := cur.next
		right := nodes[nx]
		if v := m.merge(cur.id, right.id); v == noMerge || uint32(v) != top.id {
			continue // stale
		}
		cur.id = top.id
		cur.next = right.next
		nodes[nx].gone = true
		if right.next >= 0 {
			nodes[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if v := m.merge(nodes[cur.prev].id, cur.id); v != noMerge {
				push(heapItem{rank: int32(v >> 32), pos: cur.prev, id: uint32(v)})
			}
		}
		if cur.next >= 0 {
			if v := m.merge(cur.id, nodes[cur.next].id); v != noMerge {
				push(heapItem{rank: int32(v >> 32), pos: top.pos, id: uint32(v)})
			}
		}
	}
	s.heap = h
	for i := int32(0); i >= 0; i = nodes[i].next {
		dst = append(dst, nodes[i].id)
	}
	return dst
}

// directWordBytes: words this short are merged directly (one lookup in
// the merges), which costs no more than a cache lookup.
const directWordBytes = 2

// word BPE-encodes one byte-level pre-token through the word cache.
func (st *encodeState) word(w string) {
	m := st.t.model
	if len(w) == 1 {
		if id := m.byteID[w[0]]; id >= 0 {
			st.dst = append(st.dst, uint32(id))
		} else if m.unk >= 0 {
			st.dst = append(st.dst, uint32(m.unk))
		}
		return
	}
	c := st.t.words
	if c == nil || st.noCache || len(w) > maxCachedWordBytes || len(w) <= directWordBytes {
		st.dst = m.encodeWord(st.dst, w, &st.scratch)
		return
	}
	h := c.hash(w)
	if ids, ok := c.get(h, w); ok {
		st.dst = append(st.dst, ids...)
		return
	}
	n := len(st.dst)
	st.dst = m.encodeWord(st.dst, w, &st.scratch)
	c.put(h, strings.Clone(w), st.dst[n:])
}
