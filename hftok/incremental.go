package hftok

import (
	"slices"
	"sort"
	"sync"
	"unicode/utf8"
)

// This file is incremental encoding: an agent's next turn resends its
// previous prompt plus a suffix, so the ids of the unchanged prefix are
// taken from the previous turn's Encoding and only the rest is encoded.
//
// Why it is exact. Encode cuts the text at raw added tokens (the chat
// template's special tokens, <|im_start|> and kin) and encodes the pieces
// between them independently. A cut point is the start s of an added
// token that Encode emitted at the very position it matched (no lstrip
// moved it), whose match does not depend on what precedes it (no
// single_word), and whose first byte is not white space (so no rstrip of
// an earlier token reaches past it). The matcher decides a match at a
// position from at most maxLen bytes after it, so while two texts agree
// on their first s+maxLen bytes, Encode scans both identically up to s,
// emits the same ids before s in both, and finds the same token at s;
// from s on its work depends only on the text from s. Hence
// Encode(text) = prev.ids[:n] ++ Encode(text[s:]), n being the ids
// before s. A text that is not valid UTF-8, or a tokenizer with no raw
// added tokens, is encoded whole. FuzzEncodeFrom and
// TestEncodeFromProperty check it against Encode.

// Encoding is an encoded text with the points where a text that starts
// the same may continue encoding: what EncodeFrom reuses. It is immutable
// and safe to share.
type Encoding struct {
	text string
	ids  []uint32   // a prefix of buf.ids
	cuts []cutPoint // ascending offsets
	buf  *idBuf
}

// idBuf is the array a chain of Encodings shares: a session's turns each
// extend the last one's ids, and copying a 128 K-token context's ids every
// turn cost more than encoding the turn. An Encoding's ids are a prefix of
// ids that never changes; claimed is the longest prefix any Encoding has
// taken, and ids are written only past it, under mu, before the Encoding
// that takes them exists, so a write never touches ids an Encoding holds.
type idBuf struct {
	mu      sync.Mutex
	ids     []uint32 // the whole array, len == cap
	claimed int
}

func newIDBuf(ids []uint32) *idBuf {
	return &idBuf{ids: ids[:cap(ids)], claimed: len(ids)}
}

// extend returns the ids prev.ids[:keep] ++ rest and the array they lie
// in: prev's own array when rest agrees with what the array holds after
// keep (prev's ids, then what later Encodings of the array claimed) and
// the array has room for the rest; else a new array with room for later
// turns.
func (prev *Encoding) extend(keep int, rest []uint32) ([]uint32, *idBuf) {
	n := keep + len(rest)
	if b := prev.buf; b != nil && n <= len(b.ids) {
		b.mu.Lock()
		agree := min(n, b.claimed)
		ok := slices.Equal(rest[:agree-keep], b.ids[keep:agree])
		if ok && n > b.claimed {
			copy(b.ids[b.claimed:n], rest[b.claimed-keep:])
			b.claimed = n
		}
		b.mu.Unlock()
		if ok {
			return b.ids[:n:n], b
		}
	}
	ids := append(append(roomFor(n), prev.ids[:keep]...), rest...)
	return ids[:n:n], newIDBuf(ids)
}

// roomFor is an empty array for n ids and later turns (a quarter more).
func roomFor(n int) []uint32 { return make([]uint32, 0, n+n/4+1024) }

// withRoom returns ids in an array with room for later turns, copied
// there if their own has less.
func withRoom(ids []uint32) ([]uint32, *idBuf) {
	n := len(ids)
	if cap(ids) < n+n/4 {
		ids = append(roomFor(n), ids...)
	}
	return ids[:n:n], newIDBuf(ids)
}

// cutPoint is a safe point to continue encoding from: the byte offset of
// an added token and the number of ids before it.
type cutPoint struct {
	off, n int
}

// IDs returns the token ids. The slice is shared: callers must not
// modify it.
func (e *Encoding) IDs() []uint32 {
	if e == nil {
		return nil
	}
	return e.ids[:len(e.ids):len(e.ids)]
}

// Text returns the encoded text.
func (e *Encoding) Text() string {
	if e == nil {
		return ""
	}
	return e.text
}

// Size is the bytes the Encoding holds (text, ids, cut points), for
// bounding a cache of them.
func (e *Encoding) Size() int { return len(e.text) + 4*len(e.ids) + 16*len(e.cuts) + 64 }

// EncodeFrom encodes text as Encode does, reusing prev's ids for the
// longest prefix of text it can prove encodes the same way (see above),
// and returns the result as an Encoding for the next call. prev may be nil
// or the Encoding of any earlier text of this Tokenizer. The second result
// is how many ids were reused.
func (t *Tokenizer) EncodeFrom(prev *Encoding, text string) (*Encoding, int) {
	l := 0
	if t.rawAdded != nil && prev != nil && len(prev.cuts) > 0 {
		// prev's text is valid UTF-8 (only valid text gets cut points),
		// and so is the shared prefix cut back to a rune boundary of
		// prev's text; text is valid where its part after that is: a long
		// prompt is checked only where it is new.
		l = commonPrefix(prev.text, text)
		for l > 0 && l < len(prev.text) && !utf8.RuneStart(prev.text[l]) {
			l--
		}
	}
	if t.rawAdded == nil || !utf8.ValidString(text[l:]) {
		e := &Encoding{text: text}
		e.ids, e.buf = withRoom(t.Encode(nil, text))
		return e, 0
	}
	e := &Encoding{text: text}
	from, keep := 0, 0
	if l > 0 {
		// A match decision reads up to maxLen bytes; single_word checks
		// read a rune past a token.
		window := max(t.rawAdded.maxLen, utf8.UTFMax)
		// The last cut point whose token's match window lies in the
		// common prefix.
		i := sort.Search(len(prev.cuts), func(i int) bool { return prev.cuts[i].off+window > l }) - 1
		if i >= 0 {
			c := prev.cuts[i]
			keep, from = c.n, c.off
			e.cuts = append(make([]cutPoint, 0, i+8), prev.cuts[:i]...)
		}
	}
	// The rest, at one id a byte at most (an added token is at least a
	// byte; a byte-level or byte-fallback BPE emits at most one id a
	// byte) when it follows kept ids, so it is never copied while it grows.
	var rest []uint32
	if keep > 0 {
		rest = make([]uint32, 0, len(text)-from+16)
	}
	off := from
	t.rawAdded.split(text[from:], func(id int64, piece string) {
		if id >= 0 {
			if t.rawAdded.cuttable(uint32(id), piece) {
				e.cuts = append(e.cuts, cutPoint{off: off, n: keep + len(rest)})
			}
			rest = append(rest, uint32(id))
		} else {
			rest = t.encodeSegment(rest, piece)
		}
		off += len(piece)
	})
	if keep > 0 {
		e.ids, e.buf = prev.extend(keep, rest)
	} else {
		e.ids, e.buf = withRoom(rest)
	}
	return e, keep
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	// Compare a block at a time first (the runtime's vectorised compare):
	// a prompt's prefix runs to hundreds of kilobytes.
	const chunk = 512
	n := min(len(a), len(b))
	i := 0
	for i+chunk <= n && a[i:i+chunk] == b[i:i+chunk] {
		i += chunk
	}
	for i+8 <= n && a[i:i+8] == b[i:i+8] {
		i += 8
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// cuttable reports whether an added token emitted as piece is a cut
// point: matched where it was emitted (piece starts with the token's
// text: no lstrip took white space before it), independent of what
// precedes it (no single_word), and not starting with white space.
func (m *addedMatcher) cuttable(id uint32, piece string) bool {
	ok, known := m.cut[id]
	if !known || !ok || piece == "" {
		return false
	}
	return !isSpaceByte(piece[0])
}
