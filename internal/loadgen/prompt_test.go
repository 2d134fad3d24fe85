package loadgen

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPrompterAgainstReference checks, over random id sequences that share
// prefixes, the property the replay rests on: the words of two prompts are
// equal exactly over their common id prefix (to the shorter length), and
// differ in the first block whose ids differ. Word counts equal the token
// counts asked for.
func TestPrompterAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		bt := 1 + rng.IntN(16)
		p := NewPrompter(bt, seed)
		mk := func() ([]uint64, int) {
			n := 1 + rng.IntN(8)
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = uint64(rng.IntN(4)) // a small alphabet: many shared prefixes
			}
			in := (n-1)*bt + 1 + rng.IntN(bt)
			return ids, in
		}
		aIDs, aIn := mk()
		bIDs, bIn := mk()
		a := strings.Fields(string(p.Append(nil, aIDs, aIn, 1)))
		b := strings.Fields(string(p.Append(nil, bIDs, bIn, 2)))
		if len(a) != aIn || len(b) != bIn {
			t.Fatalf("seed %d: %d and %d words for %d and %d tokens", seed, len(a), len(b), aIn, bIn)
		}
		// Reference: the common prefix of the id sequences, in blocks.
		common := 0
		for common < min(len(aIDs), len(bIDs)) && aIDs[common] == bIDs[common] {
			common++
		}
		same := min(common*bt, aIn, bIn)
		for i := 0; i < same; i++ {
			if a[i] != b[i] {
				t.Fatalf("seed %d (block %d, ids %v vs %v): word %d differs inside the shared prefix", seed, bt, aIDs, bIDs, i)
			}
		}
		if common < min(len(aIDs), len(bIDs)) {
			lo, hi := common*bt, min((common+1)*bt, aIn, bIn)
			if hi-lo >= 4 && strings.Join(a[lo:hi], " ") == strings.Join(b[lo:hi], " ") {
				t.Fatalf("seed %d: block %d has ids %d and %d but the same %d words", seed, common, aIDs[common], bIDs[common], hi-lo)
			}
		}
	}
}

func TestPrompterDeterminismAndSalt(t *testing.T) {
	p := NewPrompter(8, 42)
	ids := []uint64{5, 6}
	x := p.Append(nil, ids, 13, 1)
	assert := func(cond bool, msg string) {
		t.Helper()
		if !cond {
			t.Fatal(msg)
		}
	}
	assert(string(x) == string(NewPrompter(8, 42).Append(nil, ids, 13, 99)), "same ids, same text (salt unused)")
	assert(string(x) != string(NewPrompter(8, 43).Append(nil, ids, 13, 1)), "the seed changes the text")
	noIDs1 := p.Append(nil, nil, 13, 1)
	noIDs2 := p.Append(nil, nil, 13, 2)
	assert(string(noIDs1) != string(noIDs2), "without ids the salt makes turns distinct")
	assert(string(noIDs1) != string(x), "salted text differs from id text")
	// Fewer ids than the prompt needs: the tail comes from the salt.
	short := strings.Fields(string(p.Append(nil, ids[:1], 13, 1)))
	xw := strings.Fields(string(x))
	assert(len(short) == 13 && strings.Join(short[:8], " ") == strings.Join(xw[:8], " "), "the id block is shared")
	assert(strings.Join(short[8:], " ") != strings.Join(xw[8:], " "), "the block past the ids is not id 6's")
	assert(len(strings.Fields(string(p.Append(nil, nil, 0, 1)))) == 1, "an empty prompt is one word")
	for _, w := range vocab {
		assert(len(w) > 1 && w[0] == ' ' && strings.Trim(w[1:], "abcdefghijklmnopqrstuvwxyz") == "", "vocabulary words are ' [a-z]+': "+w)
	}
	seen := map[string]bool{}
	for _, w := range vocab {
		assert(!seen[w], "duplicate word "+w)
		seen[w] = true
	}
}

func BenchmarkPrompter(b *testing.B) {
	for _, n := range []int{4096, 65536} {
		b.Run("n="+itoa(n), func(b *testing.B) {
			p := NewPrompter(64, 1)
			ids := make([]uint64, (n+63)/64)
			for i := range ids {
				ids[i] = uint64(i)
			}
			buf := make([]byte, 0, n*10)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				buf = p.Append(buf[:0], ids, n, 1)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
		})
	}
}
