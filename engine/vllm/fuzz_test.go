package vllm

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// seedPayloads returns real-shaped payloads in every layout.
func seedPayloads() [][]byte {
	var out [][]byte
	for seed := uint64(0); seed < 12; seed++ {
		r := rand.New(rand.NewPCG(seed, 9))
		evs := make([]WireEvent, 1+r.IntN(4))
		for i := range evs {
			evs[i] = randEvent(r)
		}
		out = append(out, mustEncode(randEncoding(r), 1.7e9, evs))
	}
	out = append(out,
		pack([]any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{7}, 1, 12, "GPU", "x", []any{[]any{"a", 1}}, 0}}}),
		pack(omap{"ts", 1, "events", []any{omap{"type", "BlockRemoved", "block_hashes", []any{HashString(5)}}}}),
		pack([]any{1, []any{[]any{"AllBlocksCleared"}, []any{"Unknown", 1}}}),
	)
	return out
}

// FuzzDecode: arbitrary bytes never panic; when a batch decodes, every
// emitted Stored block holds exactly BlockSize tokens, and decoding the same
// bytes twice gives the same events.
func FuzzDecode(f *testing.F) {
	for _, p := range seedPayloads() {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		for _, opts := range []DecodeOptions{{}, {ExtraKeys: true, FilterGroup: true}} {
			d := NewDecoder(opts)
			var first []norm
			b, err := d.Decode(payload, func(ev *flashindex.Event) error {
				if ev.Kind == flashindex.Stored {
					for _, blk := range ev.Blocks {
						if len(blk.Tokens) != ev.BlockSize || ev.BlockSize < 1 {
							t.Fatalf("block of %d tokens, block size %d", len(blk.Tokens), ev.BlockSize)
						}
					}
				}
				first = append(first, copyEvent(ev))
				return nil
			})
			if err != nil && len(first) != 0 {
				t.Fatalf("malformed batch emitted %d events: %v", len(first), err)
			}
			if b.Events != b.Emitted+b.Dropped+b.Filtered && err == nil {
				t.Fatalf("counts do not add up: %+v", b)
			}
			var second []norm
			d.Decode(payload, func(ev *flashindex.Event) error { second = append(second, copyEvent(ev)); return nil })
			if len(first) != len(second) {
				t.Fatalf("nondeterministic: %d then %d events", len(first), len(second))
			}
			for i := range first {
				if !equalNorm(first[i], second[i]) {
					t.Fatalf("nondeterministic event %d", i)
				}
			}
		}
	})
}

// FuzzStream feeds arbitrary frames: no panic, and the EventIDs the sink
// sees are consecutive from 1 whatever arrives.
func FuzzStream(f *testing.F) {
	for i, p := range seedPayloads() {
		f.Add([]byte("kv"), uint64(i), p, uint64(i+2), p)
	}
	f.Add([]byte(""), EndSeq, []byte{}, uint64(0), []byte{0xc1})
	f.Fuzz(func(t *testing.T, topic []byte, s1 uint64, p1 []byte, s2 uint64, p2 []byte) {
		next := uint64(1)
		sink := SinkFunc(func(ev *flashindex.Event) error {
			if ev.EventID != next {
				t.Fatalf("event id %d, want %d", ev.EventID, next)
			}
			next++
			return nil
		})
		rp := ReplayFunc(func(ctx context.Context, from uint64, fn func(uint64, []byte)) error {
			fn(from, p1)
			fn(from+2, p2)
			return nil
		})
		s, _ := NewStream(StreamConfig{Sink: sink, Replayer: rp, CatchUp: s1%2 == 0, Epoch: func(t []byte) []byte { return t }})
		ctx := context.Background()
		s.Handle(ctx, frame(s1, p1))
		s.Handle(ctx, [][]byte{topic, p1, p2})
		s.Offer(ctx, topic, s2, p2)
		s.Offer(ctx, topic, s1, p2)
	})
}

// FuzzParseSamples: the metrics parser never panics and what it parses
// survives a second parse of the same text.
func FuzzParseSamples(f *testing.F) {
	f.Add(vllmMetrics)
	f.Add(`vllm:cache_config_info{a="\"",b="\\"} 1e3 17`)
	f.Add("vllm:cache_config_info{")
	f.Fuzz(func(t *testing.T, text string) {
		a, errA := ParseSamples(strings.NewReader(text), CacheConfigMetric)
		b, errB := ParseSamples(strings.NewReader(text), CacheConfigMetric)
		if (errA == nil) != (errB == nil) || len(a) != len(b) {
			t.Fatalf("nondeterministic parse")
		}
		ParseCacheConfigs(strings.NewReader(text))
	})
}

// FuzzSSE: the stream parser never panics, and splitting the same bytes at
// any point yields the same usage.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("data: {\"choices\":[{\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3}}\n\ndata: [DONE]\n"), 7)
	f.Add([]byte("data:{\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"x\"}}]}}]}\r\n"), 1)
	f.Fuzz(func(t *testing.T, stream []byte, cut int) {
		var whole, split Usage
		var p1, p2 sseParser
		p1.feed(stream, &whole)
		p1.flush(&whole)
		if cut < 0 {
			cut = -cut
		}
		if len(stream) > 0 {
			cut %= len(stream) + 1
		} else {
			cut = 0
		}
		p2.feed(stream[:cut], &split)
		p2.feed(stream[cut:], &split)
		p2.flush(&split)
		if whole.PromptTokens != split.PromptTokens || whole.FinishReason != split.FinishReason ||
			len(whole.ToolCalls) != len(split.ToolCalls) || !bytes.Equal([]byte(whole.FinishReason), []byte(split.FinishReason)) {
			t.Fatalf("split at %d changed the result: %+v vs %+v", cut, whole, split)
		}
	})
}
