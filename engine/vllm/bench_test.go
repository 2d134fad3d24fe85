package vllm

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// benchBatch builds a realistic batch: n events, 3 in 4 BlockStored of 1-4
// blocks of 16 tokens chained under a parent, the rest BlockRemoved of 1-2
// hashes, in the newer vLLM map layout with integer hashes.
func benchBatch(n int, enc Encoding) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 5))
	evs := make([]WireEvent, n)
	for i := range evs {
		if r.IntN(4) == 3 {
			evs[i] = WireEvent{Kind: flashindex.Removed, Medium: "GPU", Hashes: []uint64{r.Uint64(), r.Uint64()}[:1+r.IntN(2)]}
			continue
		}
		ev := WireEvent{Kind: flashindex.Stored, BlockSize: 16, Medium: "GPU", Parent: r.Uint64(), HasParent: true}
		for b := r.IntN(4); b >= 0; b-- {
			ev.Hashes = append(ev.Hashes, r.Uint64())
			for j := 0; j < 16; j++ {
				ev.Tokens = append(ev.Tokens, uint32(r.IntN(150000)))
			}
		}
		evs[i] = ev
	}
	return mustEncode(enc, 1.7e9, evs)
}

// applicableBatch is benchBatch's mix made valid for a real index when the
// same batch is applied again and again: each BlockStored starts a chain of
// its own (no parent) of 1-4 blocks, and each BlockRemoved evicts the tail
// of a chain stored earlier in the batch, so every replay stores what the
// previous one removed and removes what it stored.
func applicableBatch(n int, enc Encoding) []byte {
	r := rand.New(rand.NewPCG(uint64(n), 6))
	evs := make([]WireEvent, 0, n)
	var stored [][]uint64
	for len(evs) < n {
		if len(stored) > 0 && r.IntN(4) == 3 {
			k := r.IntN(len(stored))
			ch := stored[k]
			cut := len(ch) - 1 - r.IntN(min(2, len(ch)))
			evs = append(evs, WireEvent{Kind: flashindex.Removed, Medium: "GPU", Hashes: ch[cut:]})
			if stored[k] = ch[:cut]; cut == 0 {
				stored = append(stored[:k], stored[k+1:]...)
			}
			continue
		}
		ev := WireEvent{Kind: flashindex.Stored, BlockSize: 16, Medium: "GPU"}
		for b := r.IntN(4); b >= 0; b-- {
			ev.Hashes = append(ev.Hashes, r.Uint64())
			for j := 0; j < 16; j++ {
				ev.Tokens = append(ev.Tokens, uint32(r.IntN(150000)))
			}
		}
		stored = append(stored, ev.Hashes)
		evs = append(evs, ev)
	}
	return mustEncode(enc, 1.7e9, evs)
}

// BenchmarkDecode measures decoding alone (emit does nothing) and decoding
// plus applying into a real flashindex.Index through the Stream (the
// router's event path: frame, decode, Apply), on one goroutine. The apply
// rows replay applicableBatch, whose events the index accepts every time;
// the target is 200K events/s.
func BenchmarkDecode(b *testing.B) {
	layouts := []struct {
		name string
		enc  Encoding
	}{
		{"map", Encoding{MapEvents: true, HasDPRank: true}},
		{"array", Encoding{HasDPRank: true}},
		{"map-bytes", Encoding{MapEvents: true, BytesHashes: true, HasDPRank: true}},
	}
	for _, l := range layouts {
		for _, n := range []int{1, 16, 128} {
			payload := benchBatch(n, l.enc)
			b.Run(fmt.Sprintf("layout=%s/n=%d/decode", l.name, n), func(b *testing.B) {
				d := NewDecoder(DecodeOptions{})
				noop := func(*flashindex.Event) error { return nil }
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := d.Decode(payload, noop); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
			})
			b.Run(fmt.Sprintf("layout=%s/n=%d/apply", l.name, n), func(b *testing.B) {
				ix, err := flashindex.New(flashindex.Config{BlockSize: 16})
				if err != nil {
					b.Fatal(err)
				}
				var rejected error
				sink := SinkFunc(func(ev *flashindex.Event) error {
					err := ix.Apply(ev)
					if err != nil && rejected == nil {
						rejected = err
					}
					return err
				})
				s, _ := NewStream(StreamConfig{Sink: sink, Worker: flashindex.Worker{ID: 1}})
				payload := applicableBatch(n, l.enc)
				ctx := context.Background()
				b.SetBytes(int64(len(payload)))
				b.ReportAllocs()
				seq := uint64(0)
				for b.Loop() {
					s.Handle(ctx, frame(seq, payload))
					seq++
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
				if st := s.Stats(); st.Malformed != 0 || st.Gaps != 0 || rejected != nil {
					b.Fatalf("stats %+v, first rejection %v", st, rejected)
				}
				if ix.Stats().Applied == 0 {
					b.Fatal("nothing applied")
				}
			})
		}
	}
}
