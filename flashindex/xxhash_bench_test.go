package flashindex

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/xxh3"
)

// BenchmarkVsCespareXXHash puts github.com/cespare/xxhash/v2 (XXH64, named
// in the design) beside the XXH3-64 this package hashes blocks with
// (github.com/zeebo/xxh3), on one block of token ids as little-endian u32
// (16 and 64 tokens). XXH64 is another function: its hashes are not
// Dynamo's (XXH3-64, seed 1337), so it could not replace XXH3 whatever its
// speed; the figures show it would not be faster either.
func BenchmarkVsCespareXXHash(b *testing.B) {
	for _, tokens := range []int{16, 64} {
		buf := make([]byte, 4*tokens)
		for i := range tokens {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(i*7919))
		}
		b.Run(fmt.Sprintf("impl=xxh3/tokens=%d", tokens), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			var s uint64
			for b.Loop() {
				s += xxh3.HashSeed(buf, Seed)
			}
			xxhSink = s
		})
		b.Run(fmt.Sprintf("impl=cespare-xxh64/tokens=%d", tokens), func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			var s uint64
			for b.Loop() {
				d := xxhash.NewWithSeed(Seed)
				_, _ = d.Write(buf)
				s += d.Sum64()
			}
			xxhSink = s
		})
	}
}

var xxhSink uint64
