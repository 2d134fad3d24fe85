package sglang

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/engine/enginetest"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/vmihailenco/msgpack/v5"
)

func pack(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// hashStrToInt64 is SGLang's hash_str_to_int64, transcribed.
func hashStrToInt64(digest string) int64 {
	var v uint64
	fmt.Sscanf(digest[:16], "%x", &v)
	return int64(v) // two's complement, as Python's "- 2**64"
}

type event struct {
	kind   flashindex.EventKind
	tier   flashindex.Tier
	hashes []uint64
	parent uint64
	tokens []uint32
	lora   string
	extra  [][]uint64
}

func decode(t *testing.T, opts vllm.DecodeOptions, payload []byte) ([]event, vllm.Batch) {
	t.Helper()
	var out []event
	b, err := NewDecoder(opts).Decode(payload, func(ev *flashindex.Event) error {
		e := event{kind: ev.Kind, tier: ev.Tier, parent: ev.Parent, lora: ev.LoRA, hashes: slices.Clone(ev.Hashes)}
		for _, blk := range ev.Blocks {
			e.hashes = append(e.hashes, blk.EngineHash)
			e.tokens = append(e.tokens, blk.Tokens...)
			e.extra = append(e.extra, slices.Clone(blk.ExtraKeys))
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return out, b
}

func TestDecodeSGLangShapes(t *testing.T) {
	d1 := sha256.Sum256([]byte("block one"))
	d2 := sha256.Sum256([]byte("block two"))
	h1, h2 := hashStrToInt64(hex.EncodeToString(d1[:])), hashStrToInt64(hex.EncodeToString(d2[:]))
	payload := pack([]any{1.7e9, []any{
		// Legacy BlockStored, no medium.
		[]any{"BlockStored", []any{h1}, nil, []any{1, 2}, 2, nil},
		// With medium and the metadata map of BlockStoredWithMetadata.
		[]any{"BlockStored", []any{h2}, h1, []any{3, 4}, 2, 7, "CPU_PINNED", map[string]any{"cache_salt": "tenant-a"}},
		[]any{"BlockRemoved", []any{h1}, "DISK"},
		[]any{"BlockRemoved", []any{h2}},
		[]any{"AllBlocksCleared"},
	}, 1})
	got, b := decode(t, vllm.DecodeOptions{}, payload)
	u1, u2 := uint64(h1), uint64(h2)
	want := []event{
		{kind: flashindex.Stored, hashes: []uint64{u1}, tokens: []uint32{1, 2}, extra: [][]uint64{nil}},
		{kind: flashindex.Stored, tier: flashindex.Host, hashes: []uint64{u2}, parent: u1, tokens: []uint32{3, 4}, lora: "lora_id:7", extra: [][]uint64{nil}},
		{kind: flashindex.Removed, tier: flashindex.Disk, hashes: []uint64{u1}},
		{kind: flashindex.Removed, hashes: []uint64{u2}},
		{kind: flashindex.Cleared},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if b.DPRank != 1 {
		t.Fatalf("attn_dp_rank = %d", b.DPRank)
	}
	// The int64 hashes are the first 8 bytes of the digest: the same value
	// vLLM's decoder makes of the raw 32-byte digest.
	if u1 != vllm.HashBytes(d1[:]) {
		t.Fatalf("hash %x, HashBytes %x", u1, vllm.HashBytes(d1[:]))
	}
	// cache_salt becomes an extra key only when asked for.
	got, _ = decode(t, vllm.DecodeOptions{ExtraKeys: true}, payload)
	if len(got[1].extra[0]) != 1 || len(got[0].extra[0]) != 0 {
		t.Fatalf("salted extra keys %v, unsalted %v", got[1].extra, got[0].extra)
	}
}

func TestHashFromHex(t *testing.T) {
	d := sha256.Sum256([]byte("x"))
	s := hex.EncodeToString(d[:])
	h, err := HashFromHex(s)
	if err != nil || h != uint64(hashStrToInt64(s)) || h != vllm.HashBytes(d[:]) {
		t.Fatalf("HashFromHex = %x, %v", h, err)
	}
	for _, bad := range []string{"", "abc", "zzzzzzzzzzzzzzzz"} {
		if _, err := HashFromHex(bad); !errors.Is(err, ErrBadHash) {
			t.Errorf("HashFromHex(%q) err = %v", bad, err)
		}
	}
}

func TestEpoch(t *testing.T) {
	tests := []struct{ topic, want string }{
		{"kv", ""},
		{"kv\x00sgl-kv-epoch=abc", "abc"},
		{"kv\x00sgl-kv-epoch=abc\x00sgl-kv-snapshot=b1", "abc"},
	}
	for _, tt := range tests {
		if got := string(Epoch([]byte(tt.topic))); got != tt.want {
			t.Errorf("Epoch(%q) = %q, want %q", tt.topic, got, tt.want)
		}
	}
	// A new epoch clears the worker even though the sequence keeps rising.
	var kinds []flashindex.EventKind
	s, err := NewStream(vllm.StreamConfig{Sink: vllm.SinkFunc(func(ev *flashindex.Event) error {
		kinds = append(kinds, ev.Kind)
		return nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	p := pack([]any{1, []any{[]any{"BlockRemoved", []any{1}}}})
	ctx := context.Background()
	s.Offer(ctx, []byte("kv\x00sgl-kv-epoch=a"), 0, p)
	s.Offer(ctx, []byte("kv\x00sgl-kv-epoch=a\x00sgl-kv-snapshot=x"), 1, p)
	s.Offer(ctx, []byte("kv\x00sgl-kv-epoch=b"), 2, p)
	want := []flashindex.EventKind{flashindex.Removed, flashindex.Removed, flashindex.Cleared, flashindex.Removed}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
}

func TestParseCapacity(t *testing.T) {
	text := "# TYPE sglang:max_total_num_tokens gauge\n" +
		`sglang:max_total_num_tokens{dp_rank="0",model_name="m"} 471258.0` + "\n" +
		`sglang:max_total_num_tokens{dp_rank="1",model_name="m"} 471258.0` + "\n" +
		`sglang:page_size{model_name="m"} 64.0` + "\n"
	c, err := ParseCapacity(strings.NewReader(text))
	if err != nil || c.Tokens != 942516 || c.PageSize != 64 {
		t.Fatalf("ParseCapacity = %+v, %v", c, err)
	}
	for _, bad := range []string{"", "sglang:max_total_num_tokens 0\n", "sglang:max_total_num_tokens 1.5\n", "sglang:max_total_num_tokens{ 1\n"} {
		if _, err := ParseCapacity(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseCapacity(%q) succeeded", bad)
		}
	}
}

type adapter struct{ s *vllm.Stream }

func (a adapter) Deliver(ctx context.Context, topic []byte, seq uint64, payload []byte) error {
	return a.s.Offer(ctx, topic, seq, payload)
}
func (a adapter) DeliverFrames(ctx context.Context, frames [][]byte) error {
	return a.s.Handle(ctx, frames)
}
func (a adapter) Stats() enginetest.Stats {
	st := a.s.Stats()
	return enginetest.Stats{Malformed: st.Malformed, Dropped: st.Dropped, BadFrames: st.BadFrames,
		Gaps: st.Gaps, GapsRecovered: st.GapsRecovered, GapsUnrecovered: st.GapsUnrecovered,
		Restarts: st.Restarts, Rejected: st.Rejected}
}

// SGLang has lora_id but no lora_name: the harness publishes adapter
// "adapter-a" as id 1 and names it through DecodeOptions.LoRANames.
var loraNames = map[int64]string{1: "adapter-a"}

func TestConformance(t *testing.T) {
	enc := vllm.Encoding{Schema: Schema, SignedHashes: true, HasDPRank: true, DPRank: 2}
	enginetest.Run(t, enginetest.Harness{
		Encode: func(v int, evs []enginetest.Event) ([]byte, error) {
			w := make([]vllm.WireEvent, len(evs))
			for i, e := range evs {
				w[i] = vllm.WireEvent{Kind: e.Kind, Tag: e.Type, Hashes: e.Hashes, Parent: e.Parent, HasParent: e.HasParent,
					Tokens: e.Tokens, BlockSize: e.BlockSize, Medium: e.Medium}
				for id, name := range loraNames {
					if e.LoRA == name {
						w[i].LoRAID, w[i].HasLoRAID = id, true
					}
				}
			}
			return enc.Append(nil, 1.7e9, w)
		},
		New: func(t *testing.T, w flashindex.Worker, sink func(*flashindex.Event) error, replay enginetest.ReplayFunc) enginetest.Adapter {
			cfg := vllm.StreamConfig{Worker: w, Sink: vllm.SinkFunc(sink), Decode: vllm.DecodeOptions{LoRANames: loraNames}}
			if replay != nil {
				cfg.Replayer = vllm.ReplayFunc(replay)
			}
			s, err := NewStream(cfg)
			if err != nil {
				t.Fatal(err)
			}
			return adapter{s}
		},
		Metrics: func(blocks, bs int) string {
			return fmt.Sprintf("sglang:max_total_num_tokens{model_name=\"m\"} %d\nsglang:page_size %d\n", blocks*bs, bs)
		},
		Capacity: func(text string) (int, error) {
			c, err := ParseCapacity(strings.NewReader(text))
			return c.Tokens, err
		},
	})
}

func TestNewSubscriberUsesSGLangSchema(t *testing.T) {
	sub, err := NewSubscriber(vllm.Config{Endpoint: "tcp://127.0.0.1:1", DPRanks: 2, Sink: vllm.SinkFunc(func(*flashindex.Event) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.Stats()[1].Endpoint; got != "tcp://127.0.0.1:2" {
		t.Fatalf("rank 1 endpoint %q", got)
	}
}

// ExampleHashFromHex shows the block id SGLang publishes for a digest.
func ExampleHashFromHex() {
	h, _ := HashFromHex("ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100")
	fmt.Printf("%x %d\n", h, int64(h))
	// Output: ffeeddccbbaa9988 -4822678189205112
}

// FuzzDecode: SGLang-shaped payloads never panic the decoder, and what
// decodes is self-consistent.
func FuzzDecode(f *testing.F) {
	f.Add(pack([]any{1.7e9, []any{
		[]any{"BlockStored", []any{int64(-5)}, nil, []any{1, 2}, 2, nil, "GPU", map[string]any{"cache_salt": "s"}},
		[]any{"BlockRemoved", []any{int64(-5)}, "CPU_PINNED"},
		[]any{"AllBlocksCleared"},
	}, 0}))
	f.Add(pack([]any{1, []any{[]any{"BlockStored", []any{1}, nil, []any{1}, 1, 3, nil, nil}}}))
	f.Fuzz(func(t *testing.T, payload []byte) {
		d := NewDecoder(vllm.DecodeOptions{ExtraKeys: true})
		n := 0
		_, err := d.Decode(payload, func(ev *flashindex.Event) error {
			n++
			for _, b := range ev.Blocks {
				if len(b.Tokens) != ev.BlockSize {
					t.Fatalf("block of %d tokens, block size %d", len(b.Tokens), ev.BlockSize)
				}
			}
			return nil
		})
		if err != nil && n > 0 {
			t.Fatalf("malformed payload emitted %d events", n)
		}
	})
}

// TestDecodeBadEnvelopeEmitsNothing: issue #22 item 2. A batch whose
// dp-rank slot (after valid events) is not a rank is malformed, and none of
// its events reach the sink.
func TestDecodeBadEnvelopeEmitsNothing(t *testing.T) {
	stored := []any{"BlockStored", []any{int64(-5)}, nil, []any{1, 2}, 2, nil, "GPU", map[string]any{"cache_salt": "s"}}
	tests := []struct {
		name    string
		payload []byte
	}{
		{"rank is an array", pack([]any{1.7e9, []any{stored, []any{"BlockRemoved", []any{int64(-5)}, "CPU_PINNED"}}, []any{0}})},
		{"rank is negative", pack([]any{1.7e9, []any{stored}, -1})},
		{"rank is a map", pack([]any{1.7e9, []any{stored}, map[string]any{"r": 0}})},
		{"map form, attn_dp_rank an array", pack(map[string]any{"events": []any{stored}, "attn_dp_rank": []any{0}})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			_, err := NewDecoder(vllm.DecodeOptions{ExtraKeys: true}).Decode(tt.payload, func(*flashindex.Event) error { n++; return nil })
			if !errors.Is(err, vllm.ErrMalformed) || n != 0 {
				t.Fatalf("err %v, %d events emitted; want ErrMalformed and none", err, n)
			}
		})
	}
}
