package sharedpool

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

func FuzzDecodeFrames(f *testing.F) {
	l := Layout{PageSize: 4, TPSize: 2}
	p := tokenPages(1, 4)[0]
	keys := l.AppendObjectKeys(nil, p)
	f.Add([]byte(""), []byte{0, 0, 0, 0, 0, 0, 0, 1}, batchPayload(f, objEvent("stored", keys[0], "default", l.GroupID(p))))
	f.Add([]byte("mooncake"), []byte{0, 0, 0, 0, 0, 0, 1, 0}, batchPayload(f,
		om{{"event_id", uint64(1)}, {"event_type", "removed"}, {"medium", "cpu"}, {"object_key", keys[1]}, {"seq_hashes", []uint64{1}}, {"type", "BlockRemoved"}},
		om{{"event_type", "cleared"}, {"tenant_id", "default"}},
		[]any{"stored", keys[2], "default", nil},
		om{{"event_type", "bogus"}},
	))
	f.Add([]byte{}, []byte{1, 2, 3}, []byte{0x92, 0xc1})
	f.Add([]byte{}, make([]byte, 8), encode(f, []any{1.5, []any{om{{1, 2}}}, nil}))
	f.Fuzz(func(t *testing.T, topic, seq, payload []byte) {
		b, err := DecodeFrames([][]byte{topic, seq, payload})
		if err != nil {
			if !errors.Is(err, ErrMalformedFrame) {
				t.Fatalf("error %v does not wrap ErrMalformedFrame", err)
			}
			return
		}
		if b.Seq != binary.BigEndian.Uint64(seq) || b.Topic != string(topic) {
			t.Fatal("envelope mismatch")
		}
		for _, e := range b.Events {
			if e.Kind < Store || e.Kind > Clear {
				t.Fatalf("event of kind %d", e.Kind)
			}
		}
		for _, r := range b.Rejected {
			if !errors.Is(r.Err, ErrMalformedEvent) {
				t.Fatalf("rejection %v", r.Err)
			}
		}
		// Re-encoding the decoded events in the map shape decodes to the
		// same events.
		var evs []any
		for _, e := range b.Events {
			m := om{{"event_type", map[Kind]string{Store: "stored", Remove: "removed", Clear: "cleared"}[e.Kind]},
				{"object_key", e.Key}, {"tenant_id", e.Tenant}, {"group_id", e.GroupID}, {"backend_id", e.Backend},
				{"medium", e.Medium}, {"event_id", e.ID}}
			if e.SeqHashes != nil {
				m = append(m, [2]any{"seq_hashes", e.SeqHashes})
			}
			evs = append(evs, m)
		}
		again, err := DecodePayload(encode(t, []any{b.TimestampMillis, evs, b.DPRank}))
		if b.DPRank < 0 {
			again, err = DecodePayload(encode(t, []any{b.TimestampMillis, evs, nil}))
		}
		if err != nil || len(again.Events) != len(b.Events) || len(again.Rejected) != 0 {
			t.Fatalf("round trip: %v %d/%d events, %d rejected", err, len(again.Events), len(b.Events), len(again.Rejected))
		}
		for i := range b.Events {
			if !eventEqual(again.Events[i], b.Events[i]) {
				t.Fatalf("round trip event %d: %+v != %+v", i, again.Events[i], b.Events[i])
			}
		}
		if again.TimestampMillis != b.TimestampMillis || again.DPRank != b.DPRank {
			t.Fatal("round trip envelope")
		}
	})
}

// FuzzParseKey: any key the schema accepts is rebuilt exactly from the page
// and slot it parses to, and nothing panics.
func FuzzParseKey(f *testing.F) {
	for _, l := range diffLayouts[:5] {
		f.Add(uint8(0), l.AppendObjectKeys(nil, tokenPages(1, 2)[0])[0])
	}
	f.Add(uint8(2), "tag_"+hexH+"_1_1_v")
	f.Add(uint8(1), hexH+"_0_k")
	f.Fuzz(func(t *testing.T, which uint8, key string) {
		l := diffLayouts[int(which)%5]
		sch, err := compile(l)
		if err != nil {
			t.Fatal(err)
		}
		h, slot, ok := sch.parse(key)
		if !ok {
			return
		}
		if got := l.AppendObjectKeys(nil, h)[slot]; got != key {
			t.Fatalf("parse(%q) = page %s slot %d, which is %q", key, h, slot, got)
		}
	})
}

// FuzzIndex drives the differential harness with fuzzer-chosen op streams.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 0, 0, 0, 1, 1, 0, 1, 0})
	f.Add([]byte{0, 1, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 2, 3, 1, 4, 5, 3, 2, 1, 7})
	f.Add([]byte{1, 2, 0, 1, 3, 0, 0, 0, 2, 9, 3, 0, 0, 1, 1, 1, 1, 1})
	// A long batch: five events repeated past two parse-ahead chunks, a
	// rejection in the middle.
	f.Add([]byte{3, 3, 5, 1, 2, 0, 1, 0, 1, 0, 2, 3, 1, 0, 0, 0, 1, 4, 0, 1, 0, 1, 1, 0, 0, 1, 2, 7, 0, 2, 0, 0, 0, 3, 1, 6, 1, 0, 0, 2, 1, 15, 10, 70})
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := opsFromBytes(data)
		if at, why := runDiff(ops, 5); at >= 0 {
			reportDiff(t, ops, 5, at, why)
		}
	})
}

// opsFromBytes interprets bytes as an op stream over the diff universe.
func opsFromBytes(data []byte) []op {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	universe := diffUniverse()
	var ops []op
	var seq uint64
	for len(data) > 0 && len(ops) < 64 {
		switch next() % 8 {
		case 0:
			ops = append(ops, op{kind: opSetLayout, layout: diffLayouts[next()%len(diffLayouts)]})
			continue
		case 1:
			w := map[uint64]Layout{1: diffLayouts[next()%3], 2: diffLayouts[next()%3]}
			ops = append(ops, op{kind: opSync, workers: w})
			continue
		case 2:
			ops = append(ops, op{kind: opReset})
			seq = uint64(next())
			continue
		}
		switch d := next() % 8; d {
		case 0:
		case 1, 2:
			seq += uint64(d + 1)
		default:
			seq++
		}
		b := Batch{Seq: seq}
		for range next() % 6 {
			l := diffLayouts[next()%(len(diffLayouts)-1)]
			keys := l.AppendObjectKeys(nil, universe[next()%len(universe)])
			key := keys[next()%len(keys)]
			if x := next(); x%16 == 0 {
				bs := []byte(key)
				bs[x%len(bs)] ^= 1
				key = string(bs)
			}
			e := Event{Kind: Kind(1 + next()%3), Key: key}
			if e.Kind == Clear && next()%4 != 0 {
				e.Kind = Store
			}
			e.Medium = []string{"", "cpu", "disk"}[next()%3]
			e.Tenant = []string{"", "default", "other"}[next()%3]
			b.Events = append(b.Events, e)
		}
		// Repeat the batch's events to make batches longer than Apply's
		// parse-ahead chunks.
		if reps := next() % 16; reps > 12 && len(b.Events) > 0 {
			one := b.Events
			for range (reps - 12) * applyChunk / len(one) {
				b.Events = append(b.Events, one...)
			}
		}
		if next()%10 == 0 {
			b.Rejected = []Rejection{{Index: next() % (len(b.Events) + 1), Key: universe[0].String() + "_0_k"}}
		}
		ops = append(ops, op{kind: opBatch, batch: b})
	}
	return slices.Clip(ops)
}
