package sharedpool

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// PageHash is the SHA-256 digest that names one logical HiCache page. SGLang
// writes it as 64 lowercase hex characters inside every object key of the
// page ([PageHash.String]).
type PageHash [32]byte

// String returns the digest as SGLang's hexdigest() does: 64 lowercase hex
// characters.
func (h PageHash) String() string { return hex.EncodeToString(h[:]) }

// ParsePageHash parses 64 lowercase hex characters. Uppercase is rejected:
// SGLang never writes it, so an uppercase key names a different object.
func ParsePageHash(s string) (PageHash, error) {
	var h PageHash
	if len(s) != 2*len(h) {
		return h, fmt.Errorf("%w: page hash %q has %d characters, want 64", ErrInvalidPageHash, s, len(s))
	}
	if !decodeLowerHex(&h, s) {
		return h, fmt.Errorf("%w: page hash %q is not lowercase hex", ErrInvalidPageHash, s)
	}
	return h, nil
}

// words returns the digest as four little-endian words, the form the index
// compares and hashes.
func (h *PageHash) words() [4]uint64 {
	return [4]uint64{
		binary.LittleEndian.Uint64(h[0:8]),
		binary.LittleEndian.Uint64(h[8:16]),
		binary.LittleEndian.Uint64(h[16:24]),
		binary.LittleEndian.Uint64(h[24:32]),
	}
}

// hexVal maps a byte to its lowercase-hex value, or 0xff.
var hexVal = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
	}
	return t
}()

// decodeLowerHex decodes exactly 64 lowercase hex characters into h.
func decodeLowerHex(h *PageHash, s string) bool {
	if len(s) != 64 {
		return false
	}
	var bad byte
	for i := range h {
		hi, lo := hexVal[s[2*i]], hexVal[s[2*i+1]]
		bad |= hi | lo
		h[i] = hi<<4 | lo
	}
	return bad&0xf0 == 0
}

// hexWords decodes 64 lowercase hex characters straight into the four
// little-endian digest words the index keys on (the words of the PageHash
// decodeLowerHex would produce), eight characters at a time.
func hexWords(s string) (d [4]uint64, ok bool) {
	if len(s) != 64 {
		return d, false
	}
	bad := uint64(0)
	for w := range d {
		lo, b0 := hex8(s[16*w:])
		hi, b1 := hex8(s[16*w+8:])
		d[w] = uint64(lo) | uint64(hi)<<32
		bad |= b0 | b1
	}
	return d, bad == 0
}

// hex8 decodes s[:8], lowercase hex, into four digest bytes (the first
// pair of characters in the low byte); bad is non-zero when a character is
// not lowercase hex.
func hex8(s string) (v uint32, bad uint64) {
	_ = s[7]
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	const ones, high = 0x0101010101010101, 0x8080808080808080
	// Per byte below 0x80 (others are rejected, whatever the carries do):
	// the high bit of b+(0x80-lo) is set iff b >= lo, with no carry out.
	ge30 := (x + 0x50*ones) & high
	ge3a := (x + 0x46*ones) & high
	ge61 := (x + 0x1f*ones) & high
	ge67 := (x + 0x19*ones) & high
	bad = (x & high) | (high &^ (ge30&^ge3a | ge61&^ge67))
	// Nibble values: the low four bits, plus 9 for letters (bit 6 set).
	n := x&(0x0f*ones) + 9*(x>>6&ones)
	// Pair the nibbles (first character high), then pack the four bytes.
	t := (n<<4 | n>>8) & 0x00ff00ff00ff00ff
	t = (t | t>>8) & 0x0000ffff0000ffff
	t = (t | t>>16) & 0xffffffff
	return uint32(t), bad
}

// HashPage returns the hash of one page: SHA-256 over the previous page's
// digest (omitted for the first page, prev == nil) followed by the page's
// token ids as little-endian u32. This is SGLang's get_hash_str for a page
// of plain tokens.
func HashPage(prev *PageHash, tokens []uint32) PageHash {
	buf := make([]byte, 0, 32+4*len(tokens))
	if prev != nil {
		buf = append(buf, prev[:]...)
	}
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	return sha256.Sum256(buf)
}

// PageHashes appends to dst the chained hashes of every full page of tokens
// and returns the extended slice. A partial tail page is not hashed (SGLang
// only stores full pages).
//
// With eagle set the page unit is a bigram: tokens are first turned into the
// len(tokens)-1 pairs (t[i], t[i+1]), each hashed as two little-endian u32,
// and pages are cut from that bigram sequence. That is how SGLang keys
// HiCache pages for EAGLE speculative decoding, and how Dynamo recomputes
// them (logical_page_hashes in shared_cache.rs).
//
// pageSize <= 0 yields no pages. dst may be nil; the function allocates only
// when dst lacks capacity, plus one scratch buffer per call.
func PageHashes(tokens []uint32, pageSize int, eagle bool, dst []PageHash) []PageHash {
	if pageSize <= 0 {
		return dst
	}
	units := len(tokens)
	perUnit := 4
	if eagle {
		units = max(len(tokens)-1, 0)
		perUnit = 8
	}
	pages := units / pageSize
	if pages == 0 {
		return dst
	}
	buf := make([]byte, 32+perUnit*pageSize)
	var prev PageHash
	for p := range pages {
		b := buf[:0]
		if p > 0 {
			b = append(b, prev[:]...)
		}
		start := p * pageSize
		for u := start; u < start+pageSize; u++ {
			b = binary.LittleEndian.AppendUint32(b, tokens[u])
			if eagle {
				b = binary.LittleEndian.AppendUint32(b, tokens[u+1])
			}
		}
		prev = sha256.Sum256(b)
		dst = append(dst, prev)
	}
	return dst
}
