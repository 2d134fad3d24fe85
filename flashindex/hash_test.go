package flashindex

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

type hashVector struct {
	Name      string              `json:"name"`
	BlockSize int                 `json:"block_size"`
	LoRA      string              `json:"lora"`
	Tokens    []uint32            `json:"tokens"`
	ExtraKeys map[string][]uint64 `json:"extra_keys"`
	Local     []string            `json:"local"`
	Sequence  []string            `json:"sequence"`
}

func loadVectors(t *testing.T) []hashVector {
	t.Helper()
	b, err := os.ReadFile("testdata/hash_vectors.json")
	require.NoError(t, err)
	var f struct {
		Cases []hashVector `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	require.NotEmpty(t, f.Cases)
	return f.Cases
}

func parseU64s(t *testing.T, s []string) []uint64 {
	if len(s) == 0 {
		return nil
	}
	out := make([]uint64, len(s))
	for i, x := range s {
		v, err := strconv.ParseUint(x, 10, 64)
		require.NoError(t, err)
		out[i] = v
	}
	return out
}

// TestGoldenVectors checks every hashing entry point against vectors made by
// Debian's python3-xxhash (see testdata/gen_hash_vectors.py).
func TestGoldenVectors(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			h, err := NewHasher(v.BlockSize, v.LoRA)
			require.NoError(t, err)
			wantLocal := parseU64s(t, v.Local)
			wantSeq := parseU64s(t, v.Sequence)
			require.Len(t, wantLocal, h.FullBlocks(len(v.Tokens)))

			if len(v.ExtraKeys) > 0 {
				bs := v.BlockSize
				var local []uint64
				for i := 0; i < len(v.Tokens)/bs; i++ {
					l, err := h.LocalHashExtra(v.Tokens[i*bs:(i+1)*bs], v.ExtraKeys[strconv.Itoa(i)])
					require.NoError(t, err)
					local = append(local, l)
				}
				require.Equal(t, wantLocal, local)
				require.Equal(t, wantSeq, AppendSequenceHashes(nil, local))
				return
			}

			require.Equal(t, wantLocal, nilIfEmpty(h.AppendLocalHashes(nil, v.Tokens)))
			local, seq := h.AppendHashes(nil, nil, v.Tokens, 0, false)
			require.Equal(t, wantLocal, nilIfEmpty(local))
			require.Equal(t, wantSeq, nilIfEmpty(seq))
			require.Equal(t, wantSeq, nilIfEmpty(AppendSequenceHashes(nil, wantLocal)))

			// Incremental: feed the tokens in ragged pieces.
			c := h.NewChain()
			rng := rand.New(rand.NewPCG(1, uint64(len(v.Tokens))))
			for i := 0; i < len(v.Tokens); {
				n := 1 + rng.IntN(2*v.BlockSize)
				n = min(n, len(v.Tokens)-i)
				c.Append(v.Tokens[i : i+n])
				i += n
			}
			require.Equal(t, len(v.Tokens), c.Tokens())
			require.Equal(t, wantLocal, nilIfEmpty(c.LocalHashes()))
			require.Equal(t, wantSeq, nilIfEmpty(c.SequenceHashes()))
		})
	}
}

func nilIfEmpty(s []uint64) []uint64 {
	if len(s) == 0 {
		return nil
	}
	return s
}

func TestLoRAChangesLocalNotChain(t *testing.T) {
	base, err := NewHasher(16, "")
	require.NoError(t, err)
	ad, err := NewHasher(16, "adapter")
	require.NoError(t, err)
	toks := make([]uint32, 16)
	require.NotEqual(t, base.LocalHash(toks), ad.LocalHash(toks))
	require.Equal(t, Seed, base.LocalSeed())
	// Sequence chaining always uses the base seed.
	require.Equal(t, NextSequenceHash(1, 2), NextSequenceHash(1, 2))
}

func TestExtraKeysOrderIndependent(t *testing.T) {
	h, _ := NewHasher(4, "")
	blk := []uint32{1, 2, 3, 4}
	a, err := h.LocalHashExtra(blk, []uint64{3, 1, 2})
	require.NoError(t, err)
	in := []uint64{2, 3, 1}
	b, err := h.LocalHashExtra(blk, in)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, []uint64{2, 3, 1}, in, "caller's slice must not be reordered")
	none, err := h.LocalHashExtra(blk, nil)
	require.NoError(t, err)
	require.Equal(t, h.LocalHash(blk), none)
	require.NotEqual(t, a, none)
	_, err = h.LocalHashExtra(blk, make([]uint64, 65))
	require.ErrorIs(t, err, ErrTooManyExtraKeys)
}

func TestNewHasherRejectsBadBlockSize(t *testing.T) {
	for _, bs := range []int{0, -1, MaxBlockSize + 1} {
		_, err := NewHasher(bs, "")
		require.ErrorIs(t, err, ErrBlockSize, "block size %d", bs)
	}
}

// TestChainExtendMatchesFullHash compares the incremental form against a
// from-scratch hash over agent-like prompts that grow turn by turn, with
// occasional edits that shorten the prompt.
func TestChainExtendMatchesFullHash(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		bs := []int{1, 4, 16, 64}[rng.IntN(4)]
		h, _ := NewHasher(bs, "")
		c := h.NewChain()
		var prompt []uint32
		for turn := 0; turn < 30; turn++ {
			if rng.IntN(8) == 0 && len(prompt) > 0 {
				prompt = prompt[:rng.IntN(len(prompt))]
				c.Extend(prompt) // the edit: the chain truncates to the kept prefix
			}
			add := rng.IntN(300)
			for i := 0; i < add; i++ {
				prompt = append(prompt, rng.Uint32())
			}
			c.Extend(prompt)
			wantL, wantS := h.AppendHashes(nil, nil, prompt, 0, false)
			require.Equal(t, nilIfEmpty(wantL), nilIfEmpty(c.LocalHashes()), "seed %d turn %d", seed, turn)
			require.Equal(t, nilIfEmpty(wantS), nilIfEmpty(c.SequenceHashes()), "seed %d turn %d", seed, turn)
			require.Equal(t, len(prompt), c.Tokens())
		}
		c.Reset()
		require.Zero(t, c.Tokens())
		require.Empty(t, c.SequenceHashes())
	}
}

func TestAppendHashesContinuesParent(t *testing.T) {
	h, _ := NewHasher(8, "")
	toks := make([]uint32, 80)
	for i := range toks {
		toks[i] = uint32(i * 31)
	}
	_, whole := h.AppendHashes(nil, nil, toks, 0, false)
	_, first := h.AppendHashes(nil, nil, toks[:40], 0, false)
	_, rest := h.AppendHashes(nil, nil, toks[40:], first[len(first)-1], true)
	require.Equal(t, whole, append(first, rest...))
}

func ExampleHasher_AppendHashes() {
	h, err := NewHasher(4, "")
	if err != nil {
		panic(err)
	}
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9} // the 9th token is a partial block
	local, seq := h.AppendHashes(nil, nil, tokens, 0, false)
	fmt.Println(len(local), len(seq), local[0] == seq[0], seq[1] == NextSequenceHash(seq[0], local[1]))
	// Output: 2 2 true true
}

func benchTokens(n int) []uint32 {
	rng := rand.New(rand.NewPCG(42, 42))
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(rng.IntN(152064))
	}
	return t
}

// BenchmarkHashPrompt hashes a 131,072-token prompt at block size 16 (8,192
// blocks) into caller-supplied slices. ns/block is the figure of merit.
func BenchmarkHashPrompt(b *testing.B) {
	for _, n := range []int{131072} {
		for _, bs := range []int{16, 64} {
			b.Run(fmt.Sprintf("n=%d/bs=%d", n, bs), func(b *testing.B) {
				h, _ := NewHasher(bs, "")
				toks := benchTokens(n)
				blocks := n / bs
				local := make([]uint64, 0, blocks)
				seq := make([]uint64, 0, blocks)
				b.SetBytes(int64(4 * n))
				b.ReportAllocs()
				for b.Loop() {
					local, seq = h.AppendHashes(local[:0], seq[:0], toks, 0, false)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(blocks), "ns/block")
			})
		}
	}
}

// BenchmarkChainExtend measures an agent turn: a 131,072-token context that
// extends the previous turn's 130,000 tokens; only the new blocks are hashed.
func BenchmarkChainExtend(b *testing.B) {
	h, _ := NewHasher(16, "")
	toks := benchTokens(131072)
	c := h.NewChain()
	c.Extend(toks[:130000])
	b.ReportAllocs()
	for b.Loop() {
		c.Extend(toks[:130000]) // truncate back (cheap: keeps full blocks)
		c.Extend(toks)
	}
}

// TestSequenceAndExtendHashes: the short forms agree with AppendHashes,
// and extending a prefix's last hash continues the same chain.
func TestSequenceAndExtendHashes(t *testing.T) {
	h, err := NewHasher(4, "")
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 30)
	for i := range toks {
		toks[i] = uint32(i * 31)
	}
	_, want := h.AppendHashes(nil, nil, toks, 0, false)
	got := h.SequenceHashes(nil, toks)
	if !slices.Equal(got, want) {
		t.Fatalf("SequenceHashes %x, want %x", got, want)
	}
	ext := h.ExtendHashes(slices.Clone(want[:3]), want[2], toks[12:])
	if !slices.Equal(ext, want) {
		t.Fatalf("ExtendHashes %x, want %x", ext, want)
	}
}

// TestSaltedHasher: a salt changes the first block's local hash (as an
// extra key), and through the chain every sequence hash; every hashing
// path agrees; an empty salt changes nothing.
func TestSaltedHasher(t *testing.T) {
	h, _ := NewHasher(4, "")
	if h.Salted("") != h {
		t.Fatal("an empty salt made a new Hasher")
	}
	s := h.Salted("t1")
	tokens := make([]uint32, 14)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	plainL, plainS := h.AppendHashes(nil, nil, tokens, 0, false)
	l, seq := s.AppendHashes(nil, nil, tokens, 0, false)
	want0, _ := h.LocalHashExtra(tokens[:4], []uint64{SaltKey("t1")})
	if l[0] != want0 || l[0] == plainL[0] {
		t.Fatalf("salted first local %x, want %x (plain %x)", l[0], want0, plainL[0])
	}
	for i := 1; i < len(l); i++ {
		if l[i] != plainL[i] || seq[i] == plainS[i] {
			t.Fatalf("block %d: local %x (plain %x), seq %x (plain %x)", i, l[i], plainL[i], seq[i], plainS[i])
		}
	}
	if got := s.AppendLocalHashes(nil, tokens); !slices.Equal(got, l) {
		t.Fatalf("AppendLocalHashes %x, want %x", got, l)
	}
	if got := s.SequenceHashes(nil, tokens); !slices.Equal(got, seq) {
		t.Fatalf("SequenceHashes %x, want %x", got, seq)
	}
	c := s.NewChain()
	c.Append(tokens[:3])
	c.Append(tokens[3:9])
	c.Extend(tokens)
	if !slices.Equal(c.SequenceHashes(), seq) {
		t.Fatalf("Chain %x, want %x", c.SequenceHashes(), seq)
	}
	// A chain continued from a parent is not salted again.
	if got := s.ExtendHashes(nil, seq[0], tokens[4:]); !slices.Equal(got, seq[1:]) {
		t.Fatalf("ExtendHashes %x, want %x", got, seq[1:])
	}
	if SaltKey("t1") == SaltKey("t2") {
		t.Fatal("two salts, one key")
	}
}
