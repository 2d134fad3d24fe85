package radix

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	goradix "github.com/armon/go-radix"
)

// BenchmarkVsGoRadix puts github.com/armon/go-radix (named in the design
// as a candidate for this package) beside Tree on the session-prefix
// workload: 256 agent sessions whose contexts share a 128-block system
// prompt and grow by 64 blocks a turn (to 2,048 blocks, then the session
// restarts), one turn per op. Each op records the session's new chain and
// asks how many blocks of it other sessions share:
//   - impl=radix: Tree.UpdateFromMatch then Tree.Split (only the appended
//     blocks are touched: hashes chain, so a prefix is found by lookup);
//   - impl=go-radix: the chain as a byte key (8 bytes a block), the old key
//     deleted and the new one inserted, then LongestPrefix of the new
//     chain minus its last block (go-radix keys are strings: every turn
//     builds and walks the whole context, and the tree answers "longest
//     stored key" rather than "shared with whom").
//
// go-radix costs O(context) per turn where Tree costs O(append); the
// figures are in BENCHMARKS.md and are why the package keeps its own tree.
func BenchmarkVsGoRadix(b *testing.B) {
	const sessions, sys, turn, maxBlocks = 256, 128, 64, 2048
	type sess struct {
		name  string
		chain []uint64
	}
	newSessions := func() []sess {
		ss := make([]sess, sessions)
		for i := range ss {
			ss[i].name = fmt.Sprintf("s%d", i)
		}
		return ss
	}
	rng := rand.New(rand.NewPCG(1, 2))
	next := func(s *sess) {
		if len(s.chain)+turn > maxBlocks || len(s.chain) == 0 {
			s.chain = s.chain[:0]
			for i := range sys {
				s.chain = append(s.chain, uint64(i+1)) // the shared prompt
			}
		}
		for range turn {
			s.chain = append(s.chain, rng.Uint64())
		}
	}
	b.Run("impl=radix", func(b *testing.B) {
		t, err := New(Config{})
		if err != nil {
			b.Fatal(err)
		}
		ss := newSessions()
		i := 0
		for b.Loop() {
			s := &ss[i%sessions]
			next(s)
			if err := t.UpdateFromMatch(s.name, s.chain); err != nil {
				b.Fatal(err)
			}
			if _, err := t.Split(s.name); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("impl=go-radix", func(b *testing.B) {
		t := goradix.New()
		ss := newSessions()
		keys := make([]string, sessions)
		var buf []byte
		i := 0
		for b.Loop() {
			k := i % sessions
			s := &ss[k]
			next(s)
			buf = buf[:0]
			for _, h := range s.chain {
				buf = binary.BigEndian.AppendUint64(buf, h)
			}
			if keys[k] != "" {
				t.Delete(keys[k])
			}
			keys[k] = string(buf)
			t.Insert(keys[k], s.name)
			t.LongestPrefix(keys[k][:len(keys[k])-8])
			i++
		}
	})
}
