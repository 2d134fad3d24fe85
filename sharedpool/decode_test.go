package sharedpool

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestDecodeDynamoShape(t *testing.T) {
	payload := batchPayload(t,
		objEvent("stored", "key-0", "default", "group-0"),
		objEvent("removed", "key-1", "", nil),
	)
	b, err := DecodeFrames(frames("", 7, payload))
	if err != nil {
		t.Fatal(err)
	}
	if b.Seq != 7 || b.Topic != "" || b.TimestampMillis != 1700000000123 || b.DPRank != 0 {
		t.Errorf("envelope %+v", b)
	}
	want := []Event{
		{Kind: Store, Key: "key-0", Tenant: "default", GroupID: "group-0"},
		{Kind: Remove, Key: "key-1"},
	}
	if len(b.Events) != 2 || len(b.Rejected) != 0 {
		t.Fatalf("events %+v rejected %+v", b.Events, b.Rejected)
	}
	for i := range want {
		if !eventEqual(b.Events[i], want[i]) {
			t.Errorf("event %d: %+v, want %+v", i, b.Events[i], want[i])
		}
	}
}

func eventEqual(a, b Event) bool {
	return a.Kind == b.Kind && a.Key == b.Key && a.GroupID == b.GroupID && a.Tenant == b.Tenant &&
		a.Backend == b.Backend && a.Medium == b.Medium && a.ID == b.ID && slices.Equal(a.SeqHashes, b.SeqHashes)
}

// TestDecodeRFC1527Shape uses the full field set of Mooncake's publisher
// (docs/source/design/kv-event/subscriber-guide.md), legacy aliases on.
func TestDecodeRFC1527Shape(t *testing.T) {
	stored := om{
		{"event_id", uint64(41)}, {"timestamp", int64(1700000000123)}, {"event_type", "stored"},
		{"model_name", nil}, {"block_size", nil}, {"additional_salt", nil}, {"lora_name", nil},
		{"tenant_id", "default"}, {"backend_id", "mc-0"}, {"medium", "cpu"}, {"dp_rank", 0},
		{"group_id", "sglang-hicache:" + hexH}, {"object_key", hexH + "_0_k"},
		{"connector_block_hash", "00ff"}, {"seq_hashes", []uint64{42}},
		{"base_block_idx", nil}, {"parent_hash", nil}, {"token_ids", nil},
		{"type", "BlockStored"}, {"block_hashes", []uint64{42}},
	}
	removed := om{
		{"event_id", uint64(42)}, {"event_type", "removed"}, {"tenant_id", "default"},
		{"backend_id", "mc-0"}, {"medium", "disk"}, {"group_id", nil}, {"seq_hashes", []uint64{}},
		{"type", "BlockRemoved"},
	}
	cleared := om{{"event_id", uint64(43)}, {"event_type", "cleared"}, {"medium", nil}, {"tenant_id", "default"}, {"type", "AllBlocksCleared"}}
	legacyOnly := om{{"type", "BlockRemoved"}, {"object_key", "k"}, {"block_hashes", []uint64{1, 2}}}
	b, err := DecodeFrames(frames("mooncake", 1<<40, batchPayload(t, stored, removed, cleared, legacyOnly)))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rejected) != 0 {
		t.Fatalf("rejected %+v", b.Rejected)
	}
	want := []Event{
		{Kind: Store, Key: hexH + "_0_k", GroupID: "sglang-hicache:" + hexH, Tenant: "default", Backend: "mc-0", Medium: "cpu", ID: 41, SeqHashes: []uint64{42}},
		{Kind: Remove, Tenant: "default", Backend: "mc-0", Medium: "disk", ID: 42, SeqHashes: []uint64{}},
		{Kind: Clear, Tenant: "default", ID: 43},
		{Kind: Remove, Key: "k", SeqHashes: []uint64{1, 2}},
	}
	if b.Topic != "mooncake" || b.Seq != 1<<40 {
		t.Errorf("topic %q seq %d", b.Topic, b.Seq)
	}
	for i := range want {
		if !eventEqual(b.Events[i], want[i]) {
			t.Errorf("event %d: %+v\nwant %+v", i, b.Events[i], want[i])
		}
	}
}

func TestDecodePositionalDynamoStruct(t *testing.T) {
	// rmp_serde::to_vec writes Dynamo's struct as an array.
	b, err := DecodePayload(encode(t, []any{0, []any{
		[]any{"stored", "key-0", "default", "group-0"},
		[]any{"removed", "key-1"},
		[]any{"BlockStoreEvent", "key-2", []any{}},
	}, 0}))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 2 || !eventEqual(b.Events[0], Event{Kind: Store, Key: "key-0", Tenant: "default", GroupID: "group-0"}) ||
		!eventEqual(b.Events[1], Event{Kind: Remove, Key: "key-1"}) {
		t.Errorf("events %+v", b.Events)
	}
	if len(b.Rejected) != 1 || b.Rejected[0].Index != 2 || b.Rejected[0].Key != "key-2" {
		t.Errorf("rejected %+v", b.Rejected)
	}
}

func TestDecodeEnvelopeVariants(t *testing.T) {
	tests := []struct {
		name   string
		v      any
		ts, dp int64
	}{
		{"float seconds", []any{1700000000.5, []any{}}, 1700000000500, -1},
		{"nil timestamp and dp", []any{nil, []any{}, nil}, 0, -1},
		{"dp rank 3", []any{5, []any{}, 3}, 5, 3},
	}
	for _, tt := range tests {
		b, err := DecodePayload(encode(t, tt.v))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if b.TimestampMillis != tt.ts || b.DPRank != tt.dp {
			t.Errorf("%s: ts %d dp %d", tt.name, b.TimestampMillis, b.DPRank)
		}
	}
}

func TestDecodeRejectsEvents(t *testing.T) {
	tests := []struct {
		name   string
		event  any
		key    string
		reason string
	}{
		{"unknown event_type", objEvent("updated", "k", "", nil), "k", "unknown event_type"},
		{"missing event_type", om{{"object_key", "k"}}, "k", "missing event_type"},
		{"empty event_type", om{{"event_type", ""}, {"object_key", "k"}}, "k", "empty event_type"},
		{"type conflicts", om{{"event_type", "stored"}, {"type", "BlockRemoved"}, {"object_key", "k"}}, "k", "conflicts"},
		{"unknown legacy type", om{{"type", "BlockMoved"}}, "", "unknown type"},
		{"object_key not a string", om{{"event_type", "stored"}, {"object_key", 5}}, "", "object_key"},
		{"tenant not a string", om{{"event_type", "stored"}, {"object_key", "k"}, {"tenant_id", []any{}}}, "k", "tenant_id"},
		{"event_type nil", om{{"event_type", nil}, {"object_key", "k"}}, "k", "event_type"},
		{"duplicate field", om{{"event_type", "stored"}, {"object_key", "a"}, {"object_key", "b"}}, "a", "duplicate field object_key"},
		{"non-string key", om{{1, "x"}, {"event_type", "stored"}, {"object_key", "k"}}, "k", "map key"},
		{"negative event_id", om{{"event_type", "stored"}, {"object_key", "k"}, {"event_id", -1}}, "k", "negative"},
		{"seq_hashes element", om{{"event_type", "stored"}, {"object_key", "k"}, {"seq_hashes", []any{1, "x"}}}, "k", "seq_hashes"},
		{"hashes conflict", om{{"event_type", "stored"}, {"object_key", "k"}, {"seq_hashes", []uint64{1}}, {"block_hashes", []uint64{2}}}, "k", "conflicts"},
		{"not a map", "stored", "", "want a map"},
		{"positional too long", []any{"stored", "k", "t", "g", "x"}, "k", "at most 4"},
		{"positional unknown", []any{"RemoveAllEvent"}, "", "unknown type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := objEvent("stored", "good", "", nil)
			b, err := DecodePayload(batchPayload(t, ok, tt.event, ok))
			if err != nil {
				t.Fatalf("whole batch failed: %v", err)
			}
			if len(b.Events) != 2 || len(b.Rejected) != 1 {
				t.Fatalf("events %d rejected %+v", len(b.Events), b.Rejected)
			}
			r := b.Rejected[0]
			if r.Index != 1 || r.Key != tt.key || !errors.Is(r.Err, ErrMalformedEvent) || !strings.Contains(r.Err.Error(), tt.reason) {
				t.Errorf("rejection %+v (%v), want key %q reason %q", r, r.Err, tt.key, tt.reason)
			}
		})
	}
}

func TestDecodeRejectsFrames(t *testing.T) {
	good := batchPayload(t, objEvent("stored", "k", "", nil))
	deep := []byte{0x93, 0x00, 0x91}
	deep = append(deep, 0x81, 0xa1, 'x') // map {"x": [[[[...]]]]}
	for range 40 {
		deep = append(deep, 0x91)
	}
	deep = append(deep, 0x00, 0x00)
	tests := []struct {
		name   string
		frames [][]byte
	}{
		{"two frames", [][]byte{{}, good}},
		{"four frames", [][]byte{{}, make([]byte, 8), good, {}}},
		{"short seq", [][]byte{{}, make([]byte, 7), good}},
		{"empty payload", frames("", 1, nil)},
		{"payload is a map", frames("", 1, encode(t, om{{"a", 1}}))},
		{"payload of one element", frames("", 1, encode(t, []any{1}))},
		{"payload of four elements", frames("", 1, encode(t, []any{1, []any{}, 0, 0}))},
		{"events not an array", frames("", 1, encode(t, []any{1, om{}, 0}))},
		{"string timestamp", frames("", 1, encode(t, []any{"now", []any{}, 0}))},
		{"negative timestamp", frames("", 1, encode(t, []any{-5, []any{}, 0}))},
		{"negative dp rank", frames("", 1, encode(t, []any{5, []any{}, -1}))},
		{"truncated", frames("", 1, good[:len(good)-3])},
		{"trailing bytes", frames("", 1, append(append([]byte{}, good...), 0xc0))},
		{"invalid code", frames("", 1, []byte{0x92, 0xc1, 0x90})},
		{"array length beyond payload", frames("", 1, []byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff})},
		{"nested too deep", frames("", 1, deep)},
	}
	for _, tt := range tests {
		if _, err := DecodeFrames(tt.frames); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%s: err %v", tt.name, err)
		}
	}
}
