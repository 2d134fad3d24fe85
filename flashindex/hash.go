package flashindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3-64 seed Dynamo's router uses for block and sequence hashes.
const Seed uint64 = 1337

// MaxBlockSize bounds the block size a Hasher accepts. Real engines use 16 to
// 256 tokens per block; the bound only stops absurd values early.
const MaxBlockSize = 1 << 16

// maxExtraKeys bounds the extra keys mixed into one block so the per-block
// scratch buffer can live on the stack.
const maxExtraKeys = 64

// ErrBlockSize reports a block size outside [1, MaxBlockSize].
var ErrBlockSize = errors.New("flashindex: block size must be between 1 and 65536")

// ErrTooManyExtraKeys reports more than 64 extra keys for one block.
var ErrTooManyExtraKeys = errors.New("flashindex: more than 64 extra keys in one block")

// littleEndian is true when a []uint32 can be hashed in place as
// little-endian bytes.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// LoRASeed returns the local-hash seed for a LoRA adapter: Seed plus the
// unseeded XXH3-64 of the adapter name, wrapping, exactly as Dynamo computes
// it. The base model (empty name) uses Seed.
func LoRASeed(name string) uint64 {
	if name == "" {
		return Seed
	}
	return Seed + xxh3.HashString(name)
}

// Hasher computes Dynamo-compatible block hashes for one block size and one
// adapter. A Hasher is immutable and safe for concurrent use.
type Hasher struct {
	blockSize int
	seed      uint64
	lora      string
	// salt, when salted, is mixed into the first block of every chain as
	// an extra key (vLLM's cache_salt; see Salted).
	salt   uint64
	salted bool
}

// NewHasher returns a Hasher for blockSize tokens per block. lora names the
// LoRA adapter ("" for the base model); it changes the local-hash seed, so
// the same tokens under different adapters never share a block.
func NewHasher(blockSize int, lora string) (*Hasher, error) {
	if blockSize < 1 || blockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: got %d", ErrBlockSize, blockSize)
	}
	return &Hasher{blockSize: blockSize, seed: LoRASeed(lora), lora: lora}, nil
}

// Salted returns a Hasher whose chains mix the cache salt into their first
// block, as vLLM does with a request's cache_salt: the first block's local
// hash is LocalHashExtra(block, [SaltKey(salt)]), every later block chains
// onto it unchanged, so no block of a salted prompt matches one hashed
// under another salt or none. An empty salt returns h. The KV events of an
// engine that salts carry the salt in the first block's extra keys, which
// an index fed with extra keys (engine/vllm DecodeOptions.ExtraKeys) mixes
// in the same way.
func (h *Hasher) Salted(salt string) *Hasher {
	if salt == "" {
		return h
	}
	s := *h
	s.salt, s.salted = SaltKey(salt), true
	return &s
}

// SaltKey returns the extra key a cache salt contributes: XXH3-64 of the
// salt's msgpack encoding (a str), which is how an engine's KV event
// decoder reads a string extra key.
func SaltKey(salt string) uint64 {
	n := len(salt)
	b := make([]byte, 0, n+5)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return xxh3.Hash(append(b, salt...))
}

// first returns the local hash of a chain's first block: salted when the
// Hasher is.
func (h *Hasher) first(block []uint32) uint64 {
	if !h.salted {
		return hashTokens(block, h.seed)
	}
	l, _ := h.LocalHashExtra(block, []uint64{h.salt}) // one key: never too many
	return l
}

// BlockSize returns the number of tokens per block.
func (h *Hasher) BlockSize() int { return h.blockSize }

// LocalSeed returns the seed used for local block hashes.
func (h *Hasher) LocalSeed() uint64 { return h.seed }

// LoRA returns the adapter name the Hasher was built for.
func (h *Hasher) LoRA() string { return h.lora }

// FullBlocks returns how many full blocks n tokens make. A partial tail block
// is never hashed or routed.
func (h *Hasher) FullBlocks(n int) int { return n / h.blockSize }

// LocalHash returns the local hash of exactly one block of tokens: XXH3-64
// over the tokens as little-endian u32, seeded with the Hasher's seed. It
// never mixes in a salt (the first block of a salted chain is hashed by
// AppendHashes and Chain). len(block) is not checked against the block size.
func (h *Hasher) LocalHash(block []uint32) uint64 {
	return hashTokens(block, h.seed)
}

// LocalHashExtra returns the local hash of one block with extra keys (for
// example multimodal content hashes) mixed in: the keys are sorted and
// appended to the token bytes as little-endian u64, as Dynamo does. With no
// extra keys it equals LocalHash. extra is not modified.
func (h *Hasher) LocalHashExtra(block []uint32, extra []uint64) (uint64, error) {
	if len(extra) == 0 {
		return hashTokens(block, h.seed), nil
	}
	if len(extra) > maxExtraKeys {
		return 0, ErrTooManyExtraKeys
	}
	var keys [maxExtraKeys]uint64
	k := keys[:len(extra)]
	copy(k, extra)
	slices.Sort(k)
	buf := make([]byte, 0, 4*len(block)+8*len(k))
	for _, t := range block {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	for _, e := range k {
		buf = binary.LittleEndian.AppendUint64(buf, e)
	}
	return xxh3.HashSeed(buf, h.seed), nil
}

// AppendLocalHashes appends the local hash of every full block of tokens to
// dst (the first one salted when the Hasher is) and returns the extended
// slice. It allocates only when dst lacks room.
func (h *Hasher) AppendLocalHashes(dst []uint64, tokens []uint32) []uint64 {
	bs := h.blockSize
	n := len(tokens) / bs
	dst = slices.Grow(dst, n)
	for i := 0; i < n; i++ {
		if i == 0 {
			dst = append(dst, h.first(tokens[:bs]))
			continue
		}
		dst = append(dst, hashTokens(tokens[i*bs:(i+1)*bs], h.seed))
	}
	return dst
}

// SequenceHashes appends the sequence hashes of tokens' full blocks to dst,
// a chain from the first block: what a router needs of a prompt. It is
// AppendHashes without the local hashes or a parent.
func (h *Hasher) SequenceHashes(dst []uint64, tokens []uint32) []uint64 {
	_, dst = h.AppendHashes(nil, dst, tokens, 0, false)
	return dst
}

// ExtendHashes appends to dst the sequence hashes of tokens' full blocks
// chained onto parent, the sequence hash of the block before them: a
// prompt that extends a known prefix hashes only what it appended.
func (h *Hasher) ExtendHashes(dst []uint64, parent uint64, tokens []uint32) []uint64 {
	_, dst = h.AppendHashes(nil, dst, tokens, parent, true)
	return dst
}

// AppendHashes appends the local and sequence hashes of every full block of
// tokens to local and seq, continuing the chain from parent when hasParent
// is set. It returns the extended slices and allocates only when they lack
// room.
func (h *Hasher) AppendHashes(local, seq []uint64, tokens []uint32, parent uint64, hasParent bool) ([]uint64, []uint64) {
	bs := h.blockSize
	n := len(tokens) / bs
	local = slices.Grow(local, n)
	seq = slices.Grow(seq, n)
	for i := 0; i < n; i++ {
		var l uint64
		if hasParent {
			l = hashTokens(tokens[i*bs:(i+1)*bs], h.seed)
			parent = NextSequenceHash(parent, l)
		} else {
			l = h.first(tokens[i*bs : (i+1)*bs])
			parent, hasParent = l, true
		}
		local = append(local, l)
		seq = append(seq, parent)
	}
	return local, seq
}

// NextSequenceHash chains a block onto its parent's sequence hash:
// XXH3-64(le64(parent) ‖ le64(local), seed 1337). The seed is always Seed,
// whatever adapter produced the local hash.
func NextSequenceHash(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], parent)
	binary.LittleEndian.PutUint64(b[8:], local)
	return xxh3.HashSeed(b[:], Seed)
}

// AppendSequenceHashes appends the sequence hashes of a chain of local
// hashes to dst: the first equals its local hash, each next one chains onto
// the previous. It returns the extended slice.
func AppendSequenceHashes(dst, local []uint64) []uint64 {
	dst = slices.Grow(dst, len(local))
	for i, l := range local {
		if i == 0 {
			dst = append(dst, l)
			continue
		}
		dst = append(dst, NextSequenceHash(dst[len(dst)-1], l))
	}
	return dst
}

func hashTokens(block []uint32, seed uint64) uint64 {
	if littleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(block))), 4*len(block))
		return xxh3.HashSeed(b, seed)
	}
	buf := make([]byte, 4*len(block))
	for i, t := range block {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return xxh3.HashSeed(buf, seed)
}

// Chain hashes a growing token sequence incrementally: an agent's next turn
// resends the previous context plus an append, and Chain hashes only the
// blocks the append completes. The zero Chain is not usable; build one with
// Hasher.NewChain. A Chain is not safe for concurrent use.
type Chain struct {
	h       *Hasher
	pending []uint32 // tokens of the incomplete tail block, len < block size
	local   []uint64
	seq     []uint64
	tokens  int
}

// NewChain returns an empty Chain.
func (h *Hasher) NewChain() *Chain {
	return &Chain{h: h, pending: make([]uint32, 0, h.blockSize)}
}

// Append adds tokens to the end of the sequence and hashes every block they
// complete. tokens is not retained.
func (c *Chain) Append(tokens []uint32) {
	bs := c.h.blockSize
	c.tokens += len(tokens)
	if len(c.pending) > 0 {
		need := bs - len(c.pending)
		if len(tokens) < need {
			c.pending = append(c.pending, tokens...)
			return
		}
		c.pending = append(c.pending, tokens[:need]...)
		tokens = tokens[need:]
		c.push(c.local0(c.pending))
		c.pending = c.pending[:0]
	}
	n := len(tokens) / bs
	for i := 0; i < n; i++ {
		c.push(c.local0(tokens[i*bs : (i+1)*bs]))
	}
	c.pending = append(c.pending, tokens[n*bs:]...)
}

// Extend hashes a full prompt that extends the sequence seen so far: it
// appends only tokens[Tokens():]. The caller asserts that the first
// Tokens() tokens are unchanged; use Reset when a prompt was edited rather
// than extended. A prompt shorter than the chain truncates it to the full
// blocks of the shorter prompt (rehashing the tail, which is cheap).
func (c *Chain) Extend(tokens []uint32) {
	if len(tokens) >= c.tokens {
		c.Append(tokens[c.tokens:])
		return
	}
	bs := c.h.blockSize
	full := len(tokens) / bs
	c.local = c.local[:full]
	c.seq = c.seq[:full]
	c.tokens = full * bs
	c.pending = c.pending[:0]
	c.Append(tokens[full*bs:])
}

// Reset empties the chain, keeping its buffers.
func (c *Chain) Reset() {
	c.pending = c.pending[:0]
	c.local = c.local[:0]
	c.seq = c.seq[:0]
	c.tokens = 0
}

// local0 hashes the chain's next block: salted when it is the first.
func (c *Chain) local0(block []uint32) uint64 {
	if len(c.local) == 0 {
		return c.h.first(block)
	}
	return hashTokens(block, c.h.seed)
}

func (c *Chain) push(l uint64) {
	c.local = append(c.local, l)
	if n := len(c.seq); n > 0 {
		c.seq = append(c.seq, NextSequenceHash(c.seq[n-1], l))
	} else {
		c.seq = append(c.seq, l)
	}
}

// Tokens returns how many tokens the chain has seen, including the partial
// tail block.
func (c *Chain) Tokens() int { return c.tokens }

// LocalHashes returns the local hashes of the full blocks so far. The slice
// is owned by the Chain and valid until the next call that changes it.
func (c *Chain) LocalHashes() []uint64 { return c.local }

// SequenceHashes returns the sequence hashes of the full blocks so far. The
// slice is owned by the Chain and valid until the next call that changes it.
func (c *Chain) SequenceHashes() []uint64 { return c.seq }
