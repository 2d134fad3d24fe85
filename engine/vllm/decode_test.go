package vllm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/vmihailenco/msgpack/v5"
)

// omap is a msgpack map with keys in the given order: k1, v1, k2, v2, ...
type omap []any

func (m omap) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeMapLen(len(m) / 2); err != nil {
		return err
	}
	for _, v := range m {
		if err := e.Encode(v); err != nil {
			return err
		}
	}
	return nil
}

func pack(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func decodeAll(t *testing.T, d *Decoder, payload []byte) ([]norm, Batch, error) {
	t.Helper()
	var got []norm
	b, err := d.Decode(payload, func(ev *flashindex.Event) error {
		got = append(got, copyEvent(ev))
		return nil
	})
	return got, b, err
}

func toks(n int, base uint32) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = base + uint32(i)
	}
	return t
}

func anyTokens(t []uint32) []any {
	a := make([]any, len(t))
	for i, v := range t {
		a[i] = v
	}
	return a
}

func TestDecodeShapes(t *testing.T) {
	h32 := HashString(0xdeadbeefcafef00d)
	p32 := HashString(7)
	tests := []struct {
		name    string
		payload []byte
		opts    DecodeOptions
		want    []norm
		drops   int
		rank    int
	}{
		{
			name: "oldest positional, no medium",
			payload: pack([]any{1.5, []any{
				[]any{"BlockStored", []any{1, 2}, nil, anyTokens(toks(8, 10)), 4, nil},
				[]any{"BlockRemoved", []any{1}},
				[]any{"AllBlocksCleared"},
			}}),
			want: []norm{
				{Kind: flashindex.Stored, Hashes: []uint64{1, 2}, Tokens: [][]uint32{toks(4, 10), toks(4, 14)}, BlockSize: 4},
				{Kind: flashindex.Removed, Hashes: []uint64{1}},
				{Kind: flashindex.Cleared},
			},
			rank: -1,
		},
		{
			name: "positional with medium, lora_name, extra keys, group and unknown trailing fields",
			payload: pack([]any{2, []any{
				[]any{"BlockStored", []any{uint64(1) << 63}, int64(-5), anyTokens(toks(2, 0)), 2, 3, "CPU_PINNED", "sql-lora",
					[]any{[]any{"mm-hash", 9}}, 0, "full_attention", nil, "LOCAL", omap{"x", []any{1, 2}}},
				[]any{"BlockRemoved", []any{int64(-1)}, "DISK", 0, "extra"},
			}, 3}),
			want: []norm{
				{Kind: flashindex.Stored, Tier: flashindex.Host, Hashes: []uint64{1 << 63}, Parent: ^uint64(4), HasParent: true,
					Tokens: [][]uint32{toks(2, 0)}, BlockSize: 2, LoRA: "sql-lora"},
				{Kind: flashindex.Removed, Tier: flashindex.Disk, Hashes: []uint64{^uint64(0)}},
			},
			rank: 3,
		},
		{
			name: "map events, tag first, bytes hashes",
			payload: pack([]any{1.0, []any{
				omap{"type", "BlockStored", "block_hashes", []any{h32}, "parent_block_hash", p32, "token_ids", anyTokens(toks(3, 5)),
					"block_size", 3, "lora_id", nil, "medium", "GPU", "lora_name", nil, "group_idx", 0, "kv_cache_spec_kind", "full"},
				omap{"type", "BlockRemoved", "block_hashes", []any{h32}, "medium", "GPU"},
				omap{"type", "AllBlocksCleared"},
			}, 0}),
			want: []norm{
				{Kind: flashindex.Stored, Hashes: []uint64{0xdeadbeefcafef00d}, Parent: 7, HasParent: true,
					Tokens: [][]uint32{toks(3, 5)}, BlockSize: 3},
				{Kind: flashindex.Removed, Hashes: []uint64{0xdeadbeefcafef00d}},
				{Kind: flashindex.Cleared},
			},
			rank: 0,
		},
		{
			name: "map event with the tag last",
			payload: pack([]any{1.0, []any{
				omap{"block_hashes", []any{9}, "token_ids", []any{1}, "block_size", 1, "medium", "NVME", "type", "BlockStored"},
			}}),
			want: []norm{{Kind: flashindex.Stored, Tier: flashindex.Disk, Hashes: []uint64{9}, Tokens: [][]uint32{{1}}, BlockSize: 1}},
			rank: -1,
		},
		{
			name: "map batch, newest vLLM",
			payload: pack(omap{"ts", 3.25, "events", []any{
				omap{"type", "BlockRemoved", "block_hashes", []any{4, 5}, "medium", nil},
			}, "data_parallel_rank", 1}),
			want: []norm{{Kind: flashindex.Removed, Hashes: []uint64{4, 5}}},
			rank: 1,
		},
		{
			name: "float32 ts and lora_id without name",
			payload: pack([]any{float32(1.5), []any{
				[]any{"BlockStored", []any{1}, nil, []any{7}, 1, 12},
			}}),
			want: []norm{{Kind: flashindex.Stored, Hashes: []uint64{1}, Tokens: [][]uint32{{7}}, BlockSize: 1, LoRA: "lora_id:12"}},
			rank: -1,
		},
		{
			name: "lora_id named by options",
			opts: DecodeOptions{LoRANames: map[int64]string{12: "sql"}},
			payload: pack([]any{1, []any{
				[]any{"BlockStored", []any{1}, nil, []any{7}, 1, 12},
			}}),
			want: []norm{{Kind: flashindex.Stored, Hashes: []uint64{1}, Tokens: [][]uint32{{7}}, BlockSize: 1, LoRA: "sql"}},
			rank: -1,
		},
		{
			name: "bad events dropped, good ones kept",
			payload: pack([]any{1, []any{
				[]any{"BlockEvicted", []any{1}},                                              // unknown type
				[]any{"BlockStored", []any{1}, nil, []any{7}, 1, nil, "HBM3"},                // unknown medium
				[]any{"BlockStored", []any{1, 2}, nil, []any{7, 8, 9}, 1},                    // token count
				[]any{"BlockStored", []any{1}, nil, []any{-7}, 1},                            // negative token
				[]any{"BlockStored", []any{1}, nil, []any{1}, 0},                             // zero block size
				[]any{"BlockStored", []any{"x", 1.5}, nil, []any{1}, 1},                      // float hash
				[]any{"BlockRemoved", "notalist"},                                            // bad hashes
				[]any{},                                                                      // empty event
				"BlockStored",                                                                // not a container
				omap{"block_hashes", []any{1}},                                               // map without a tag
				[]any{"BlockRemoved", []any{3}, "CPU_TIER2"},                                 // good
				omap{"type", "BlockStored", "block_hashes", []any{1}, "token_ids", []any{1}}, // no block size
			}}),
			want:  []norm{{Kind: flashindex.Removed, Tier: flashindex.Disk, Hashes: []uint64{3}}},
			drops: 11,
			rank:  -1,
		},
		{
			name: "group filter",
			opts: DecodeOptions{FilterGroup: true, Group: 1},
			payload: pack([]any{1, []any{
				[]any{"BlockRemoved", []any{1}, nil, 0},
				[]any{"BlockRemoved", []any{2}, nil, 1},
				[]any{"BlockRemoved", []any{3}, nil},
			}}),
			want: []norm{{Kind: flashindex.Removed, Hashes: []uint64{2}}, {Kind: flashindex.Removed, Hashes: []uint64{3}}},
			rank: -1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDecoder(tt.opts)
			got, b, err := decodeAll(t, d, tt.payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %v, want %d %v", len(got), got, len(tt.want), tt.want)
			}
			for i := range got {
				if !equalNorm(got[i], tt.want[i]) {
					t.Errorf("event %d:\n got %v\nwant %v", i, got[i], tt.want[i])
				}
			}
			if b.Dropped != tt.drops {
				t.Errorf("Dropped = %d, want %d (first: %v)", b.Dropped, tt.drops, b.FirstDrop)
			}
			if b.DPRank != tt.rank {
				t.Errorf("DPRank = %d, want %d", b.DPRank, tt.rank)
			}
			if b.Events != b.Emitted+b.Dropped+b.Filtered {
				t.Errorf("Events %d != Emitted %d + Dropped %d + Filtered %d", b.Events, b.Emitted, b.Dropped, b.Filtered)
			}
		})
	}
}

func TestDecodeDropReasons(t *testing.T) {
	payload := pack([]any{1, []any{
		[]any{"BlockEvicted"},
		omap{"type", "Mystery"},
		[]any{"BlockRemoved", []any{1}, "HBM"},
		[]any{"BlockStored", []any{1}, nil, []any{1, 2}, 1},
	}})
	_, b, err := decodeAll(t, NewDecoder(DecodeOptions{}), payload)
	if err != nil {
		t.Fatal(err)
	}
	if b.UnknownType != 2 || b.UnknownMed != 1 || b.Dropped != 4 {
		t.Fatalf("UnknownType %d UnknownMed %d Dropped %d, want 2 1 4", b.UnknownType, b.UnknownMed, b.Dropped)
	}
	var ee *EventError
	if !errors.As(b.FirstDrop, &ee) || ee.Index != 0 || ee.Type != "BlockEvicted" || !errors.Is(ee, ErrUnknownEventType) {
		t.Fatalf("FirstDrop = %#v", b.FirstDrop)
	}
}

func TestDecodeExtraKeys(t *testing.T) {
	payload := pack([]any{1, []any{
		[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2}, 1, nil, nil, nil, []any{[]any{"img", 42}, nil}},
	}})
	got, _, err := decodeAll(t, NewDecoder(DecodeOptions{ExtraKeys: true}), payload)
	if err != nil || len(got) != 1 {
		t.Fatalf("got %v, %v", got, err)
	}
	e := got[0].Extra
	if len(e) != 2 || len(e[0]) != 2 || e[0][1] != 42 || len(e[1]) != 0 {
		t.Fatalf("extra keys = %v", e)
	}
	if e[0][0] == 0 {
		t.Fatalf("string key hashed to 0")
	}
	// Off by default.
	got, _, _ = decodeAll(t, NewDecoder(DecodeOptions{}), payload)
	if len(got[0].Extra[0]) != 0 {
		t.Fatalf("extra keys decoded without the option: %v", got[0].Extra)
	}
	// Wrong count of entries drops the event.
	bad := pack([]any{1, []any{
		[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2}, 1, nil, nil, nil, []any{nil}},
	}})
	_, b, _ := decodeAll(t, NewDecoder(DecodeOptions{ExtraKeys: true}), bad)
	if b.Dropped != 1 {
		t.Fatalf("Dropped = %d, want 1", b.Dropped)
	}
}

func TestDecodeMalformed(t *testing.T) {
	valid := pack([]any{1.0, []any{
		[]any{"BlockStored", []any{1, 2}, nil, anyTokens(toks(8, 10)), 4, nil, "GPU"},
		omap{"type", "BlockRemoved", "block_hashes", []any{HashString(3)}},
	}, 0})
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"not a container", pack("hello")},
		{"no events", pack([]any{1.0})},
		{"events not a list", pack([]any{1.0, "x"})},
		{"ts not a number", pack([]any{"now", []any{}})},
		{"map without events", pack(omap{"ts", 1.0})},
		{"trailing bytes", append(slices.Clone(valid), 0x01)},
		{"reserved code", []byte{0x92, 0xc1, 0x90}},
		{"huge array header", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{"huge string header", []byte{0x92, 0x01, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{"bad rank", pack([]any{1.0, []any{}, -1})},
		// Issue #22 item 2: the envelope is bad after valid events; nothing
		// may be emitted (the events used to reach the index first).
		{"rank is an array after events", pack([]any{1.0, []any{[]any{"BlockRemoved", []any{5}, nil}}, []any{1}})},
		{"rank is a string after events", pack([]any{1.0, []any{[]any{"AllBlocksCleared"}}, "0"})},
		{"rank too large after events", pack([]any{1.0, []any{[]any{"AllBlocksCleared"}}, uint64(1) << 40})},
		{"map: bad rank after events", pack(omap{"ts", 1.0, "events", []any{omap{"type", "BlockRemoved", "block_hashes", []any{5}}}, "data_parallel_rank", []any{1}})},
		{"map: bad attn_dp_rank after events", pack(omap{"events", []any{[]any{"AllBlocksCleared"}}, "attn_dp_rank", -3})},
		{"map: bad ts after events", pack(omap{"events", []any{[]any{"AllBlocksCleared"}}, "ts", "now"})},
		{"map: events twice", pack(omap{"events", []any{[]any{"AllBlocksCleared"}}, "events", []any{[]any{"AllBlocksCleared"}}})},
		{"map: events not a list after ts", pack(omap{"ts", 1.0, "events", omap{"type", "AllBlocksCleared"}})},
		{"trailing bytes after events", append(pack([]any{1.0, []any{[]any{"AllBlocksCleared"}}}), 0x90)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := decodeAll(t, NewDecoder(DecodeOptions{}), tt.payload)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("err %T is not a *MalformedError", err)
			}
			if len(got) != 0 {
				t.Fatalf("emitted %d events from a malformed batch", len(got))
			}
		})
	}
	// Every proper prefix of a valid payload is malformed and emits nothing.
	for n := 0; n < len(valid); n++ {
		got, _, err := decodeAll(t, NewDecoder(DecodeOptions{}), valid[:n])
		if !errors.Is(err, ErrMalformed) || len(got) != 0 {
			t.Fatalf("prefix %d/%d: err %v, %d events", n, len(valid), err, len(got))
		}
	}
	if got, _, err := decodeAll(t, NewDecoder(DecodeOptions{}), valid); err != nil || len(got) != 2 {
		t.Fatalf("valid payload: %v, %d events", err, len(got))
	}
}

// TestDecodeAgainstModel encodes random events in random wire shapes and
// checks that the decoder returns exactly what the reference model says.
func TestDecodeAgainstModel(t *testing.T) {
	d := NewDecoder(DecodeOptions{})
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 1))
		enc := randEncoding(r)
		events := make([]WireEvent, r.IntN(12))
		for i := range events {
			events[i] = randEvent(r)
		}
		payload := mustEncode(enc, float64(seed), events)
		got, b, err := decodeAll(t, d, payload)
		if err != nil {
			t.Fatalf("seed %d enc %+v: %v", seed, enc, err)
		}
		if b.TS != float64(seed) {
			t.Fatalf("seed %d: ts %v", seed, b.TS)
		}
		for i := range events {
			if i >= len(got) || !equalNorm(got[i], want(events[i])) {
				var g norm
				if i < len(got) {
					g = got[i]
				}
				t.Fatalf("seed %d enc %+v: first difference at event %d (minimal failing prefix: %d events)\n got %v\nwant %v\n input %+v",
					seed, enc, i, i+1, g, want(events[i]), events[i])
			}
		}
		if len(got) != len(events) {
			t.Fatalf("seed %d: %d events, want %d", seed, len(got), len(events))
		}
	}
}

// TestSkipMatchesReference checks the reader's skip against vmihailenco's
// decoder on random msgpack documents: both must consume the same bytes.
func TestSkipMatchesReference(t *testing.T) {
	for seed := uint64(0); seed < 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 2))
		v := randValue(r, 4)
		doc := pack(v)
		tail := []byte{0x07}
		in := append(slices.Clone(doc), tail...)
		var rd reader
		rd.reset(in)
		if err := rd.skip(); err != nil {
			t.Fatalf("seed %d: skip: %v (doc %x)", seed, err, doc)
		}
		dec := msgpack.NewDecoder(bytes.NewReader(in))
		if _, err := dec.DecodeInterface(); err != nil {
			t.Fatalf("seed %d: reference: %v", seed, err)
		}
		if rd.off != len(doc) {
			t.Fatalf("seed %d: skip consumed %d bytes, reference document is %d", seed, rd.off, len(doc))
		}
	}
}

func randValue(r *rand.Rand, depth int) any {
	k := r.IntN(12)
	if depth == 0 {
		k = r.IntN(8)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return int64(r.Uint64())
	case 3:
		return r.Uint64()
	case 4:
		return r.Float64()
	case 5:
		return float32(r.Float32())
	case 6:
		return string(make([]byte, []int{0, 5, 31, 32, 300, 3000}[r.IntN(6)]))
	case 7:
		return make([]byte, []int{0, 3, 300, 3000}[r.IntN(4)])
	case 8, 9:
		a := make([]any, []int{0, 1, 15, 16, 20}[r.IntN(5)])
		for i := range a {
			a[i] = randValue(r, depth-1)
		}
		return a
	}
	m := omap{}
	for i := r.IntN(18); i > 0; i-- {
		m = append(m, fmt.Sprint(i), randValue(r, depth-1))
	}
	return m
}

func TestHashBytes(t *testing.T) {
	tests := []struct {
		in   []byte
		want uint64
	}{
		{nil, 0},
		{[]byte{1}, 1},
		{[]byte{1, 2}, 0x0102},
		{[]byte{0xff, 0, 0, 0, 0, 0, 0, 1}, 0xff00000000000001},
		{HashString(0x1234), 0x1234},
	}
	for _, tt := range tests {
		if got := HashBytes(tt.in); got != tt.want {
			t.Errorf("HashBytes(%x) = %x, want %x", tt.in, got, tt.want)
		}
	}
}
