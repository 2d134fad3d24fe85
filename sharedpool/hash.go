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
