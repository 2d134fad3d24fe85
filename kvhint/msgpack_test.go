package kvhint

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// generic builds the documented binary layout of e as plain Go values, the
// reference the hand-written codec is checked against.
func generic(e *Envelope) []any {
	pv := e.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	acts := make([]any, len(e.Actions))
	for i := range e.Actions {
		a := &e.Actions[i]
		var session, blocks, rng, sources any
		if a.SessionID != e.SessionID {
			session = a.SessionID
		}
		if len(a.Target.Blocks) > 0 {
			bs := make([]any, len(a.Target.Blocks))
			for j, h := range a.Target.Blocks {
				bs[j] = h
			}
			blocks = bs
		}
		if r := a.Target.Range; r.Unit != UnitNone {
			rng = []any{uint64(r.Unit), r.Start, r.End}
		}
		if len(a.Sources) > 0 {
			ss := make([]any, len(a.Sources))
			for j, s := range a.Sources {
				ss[j] = []any{s.Worker.ID, uint64(s.Worker.DPRank), s.Endpoint, uint64(s.Tier), uint64(s.Blocks)}
			}
			sources = ss
		}
		acts[i] = []any{uint64(a.Kind), uint64(1), uint64(0), a.ID, session, blocks, rng, uint64(a.Dest), int64(a.TTL), int64(a.Priority), uint64(a.Limit), sources}
	}
	return []any{uint64(BinaryFormat), pv, e.MessageID, e.SessionID, acts}
}

// canon maps every integer to int64/uint64 so trees from different decoders
// compare equal.
func canon(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = canon(x[i])
		}
		return out
	case int8, int16, int32, int64, int:
		n := reflect.ValueOf(x).Int()
		if n >= 0 {
			return uint64(n)
		}
		return n
	case uint8, uint16, uint32, uint64, uint:
		return reflect.ValueOf(x).Uint()
	}
	return v
}

func vmEncode(t testing.TB, v any, compact bool) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compact)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestBinaryAgainstVmihailenco checks the hand-written codec against
// github.com/vmihailenco/msgpack/v5 in both directions: our bytes equal its
// compact encoding of the reference layout and decode (with it) to that
// layout; its wide-integer encoding decodes (with ours) to the envelope.
func TestBinaryAgainstVmihailenco(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		e := randEnvelope(r, r.IntN(12), true)
		ours := mustBinary(t, &e)
		ref := generic(&e)

		if theirs := vmEncode(t, ref, true); !bytes.Equal(ours, theirs) {
			t.Fatalf("seed %d: bytes differ from vmihailenco compact encoding\nours   %x\ntheirs %x", seed, ours, theirs)
		}
		var back any
		if err := msgpack.Unmarshal(ours, &back); err != nil {
			t.Fatalf("seed %d: vmihailenco cannot read ours: %v", seed, err)
		}
		if !reflect.DeepEqual(canon(back), canon(ref)) {
			t.Fatalf("seed %d: vmihailenco reads\n%v\nwant\n%v", seed, canon(back), canon(ref))
		}
		for _, compact := range []bool{false, true} {
			var got Envelope
			if err := DecodeBinary(vmEncode(t, ref, compact), &got); err != nil {
				t.Fatalf("seed %d compact=%v: DecodeBinary: %v", seed, compact, err)
			}
			if d := diffEnvelopes(normalized(e), got); d != "" {
				t.Fatalf("seed %d compact=%v: %s", seed, compact, d)
			}
		}
	}
}

// TestBinaryForwardCompat: unknown kind codes (with arbitrary nested
// content), other major versions, extra trailing fields on the envelope,
// actions and sources, and malformed actions are skipped or ignored; valid
// neighbours survive.
func TestBinaryForwardCompat(t *testing.T) {
	good := Envelope{MessageID: "m", SessionID: "s", Actions: []Action{
		{ID: "g0", Kind: KindRetain, SessionID: "s", TTL: 30e9, Priority: 5},
		{ID: "g1", Kind: KindShare, SessionID: "t", Target: Target{Blocks: []uint64{1, 2}}, Sources: []Source{{Endpoint: "e", Blocks: 2}}},
	}}
	ref := generic(&good)
	acts := ref[4].([]any)
	// A v1 action from a newer minor version: two extra fields.
	retain := append(append([]any{}, acts[0].([]any)...), "extra", map[string]any{"k": []any{1, 2}})
	retain[2] = uint64(4) // minor version 4
	// A source with an extra field.
	share := append([]any{}, acts[1].([]any)...)
	src := append(append([]any{}, share[11].([]any)[0].([]any)...), true)
	share[11] = []any{src}
	future := []any{uint64(200), uint64(1), uint64(0), "f0", map[string]any{"x": []any{[]any{nil, 1.5}}}}
	major2 := []any{uint64(KindPin), uint64(2), uint64(0), "v2", "whatever"}
	badTier := append([]any{}, acts[0].([]any)...)
	badTier[0], badTier[3], badTier[7] = uint64(KindDemote), "bad", uint64(42)
	short := []any{uint64(KindPin), uint64(1), uint64(0), "short"}
	notArray := "not an action"
	env := []any{uint64(1), "0.1", "m", "s", []any{retain, future, share, major2, badTier, short, notArray}, "trailing", 7}

	var got Envelope
	if err := DecodeBinary(vmEncode(t, env, true), &got); err != nil {
		t.Fatal(err)
	}
	want := normalized(good)
	want.ProtocolVersion = "0.1"
	want.Skipped = got.Skipped
	if d := diffEnvelopes(want, got); d != "" {
		t.Fatal(d)
	}
	wantSkips := []Skip{
		{Index: 1, ActionID: "f0", ActionType: "code:200", ActionVersion: "1.0", Reason: SkipUnknownType},
		{Index: 3, ActionID: "v2", ActionType: ActionTypePin, ActionVersion: "2.0", Reason: SkipVersion},
		{Index: 4, ActionID: "bad", ActionType: ActionTypeDemote, ActionVersion: "1.0", Reason: SkipMalformed},
		{Index: 5, ActionID: "short", ActionType: ActionTypePin, ActionVersion: "1.0", Reason: SkipMalformed},
		{Index: 6, Reason: SkipMalformed},
	}
	if len(got.Skipped) != len(wantSkips) {
		t.Fatalf("skipped %+v", got.Skipped)
	}
	for i, w := range wantSkips {
		g := got.Skipped[i]
		g.Detail = ""
		if g != w {
			t.Errorf("skip %d = %+v, want %+v (detail %q)", i, g, w, got.Skipped[i].Detail)
		}
	}
}

func TestDecodeBinaryErrors(t *testing.T) {
	valid := Envelope{MessageID: "m"}
	for _, tc := range []struct {
		name    string
		doc     []byte
		version bool
	}{
		{"empty", nil, false},
		{"not array", vmEncode(t, "x", true), false},
		{"short envelope", vmEncode(t, []any{1, "0.1", "m"}, true), false},
		{"format 2", vmEncode(t, []any{2, "0.1", "m", "", []any{}}, true), true},
		{"actions not array", vmEncode(t, []any{1, "0.1", "m", "", "x"}, true), false},
		{"message id not string", vmEncode(t, []any{1, "0.1", 5, "", []any{}}, true), false},
		{"trailing bytes", append(mustBinary(t, &valid), 0xc0), false},
		{"huge array claim", []byte{0x95, 1, 0xa0, 0xa0, 0xa0, 0xdd, 0xff, 0xff, 0xff, 0xff}, false},
		{"reserved byte", []byte{0x95, 1, 0xa0, 0xa0, 0xa0, 0x91, 0xc1}, false},
		{"deep nesting", append([]byte{0x95, 1, 0xa0, 0xa0, 0xa0, 0x91, 0x95, 0x64, 1, 0, 0xa0}, bytes.Repeat([]byte{0x91}, 100)...), false},
	} {
		var e Envelope
		err := DecodeBinary(tc.doc, &e)
		var de *DecodeError
		if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) && !tc.version {
			t.Errorf("%s: err = %v", tc.name, err)
		}
		if tc.version != errors.Is(err, ErrVersion) {
			t.Errorf("%s: ErrVersion = %v, want %v", tc.name, errors.Is(err, ErrVersion), tc.version)
		}
		if e.MessageID != "" || e.Actions != nil {
			t.Errorf("%s: envelope not reset", tc.name)
		}
	}
}

// TestMsgpackPrimitives checks each integer and string width boundary
// against vmihailenco.
func TestMsgpackPrimitives(t *testing.T) {
	for _, v := range []uint64{0, 127, 128, 255, 256, 65535, 65536, 1<<32 - 1, 1 << 32, 1<<64 - 1} {
		if got, want := mpAppendUint(nil, v), vmEncode(t, v, true); !bytes.Equal(got, want) {
			t.Errorf("uint %d: %x want %x", v, got, want)
		}
		r := mpReader{b: vmEncode(t, v, false)}
		if got := r.uint(); got != v || r.err != nil {
			t.Errorf("read uint %d: %d %v", v, got, r.err)
		}
	}
	for _, v := range []int64{-1, -32, -33, -128, -129, -32768, -32769, -1 << 31, -1<<31 - 1, -1 << 63, 5, 1<<63 - 1} {
		if got, want := mpAppendInt(nil, v), vmEncode(t, v, true); !bytes.Equal(got, want) {
			t.Errorf("int %d: %x want %x", v, got, want)
		}
		r := mpReader{b: vmEncode(t, v, false)}
		if got := r.int(); got != v || r.err != nil {
			t.Errorf("read int %d: %d %v", v, got, r.err)
		}
	}
	for _, n := range []int{0, 31, 32, 255, 256, 65535, 65536} {
		s := string(bytes.Repeat([]byte{'x'}, n))
		if got, want := mpAppendStr(nil, s), vmEncode(t, s, true); !bytes.Equal(got, want) {
			t.Errorf("str len %d: header %x want %x", n, got[:min(5, len(got))], want[:min(5, len(want))])
		}
	}
	for _, n := range []int{0, 15, 16, 65535, 65536} {
		if got, want := mpAppendArrayLen(nil, n), vmEncode(t, make([]any, n), true)[:len(mpAppendArrayLen(nil, n))]; !bytes.Equal(got, want) {
			t.Errorf("array len %d: %x want %x", n, got, want)
		}
	}
	// Negative values where unsigned ones are required are errors.
	r := mpReader{b: vmEncode(t, int64(-5), false)}
	if r.uint(); r.err == nil {
		t.Error("uint() accepted a negative int64")
	}
	// skip() walks every type vmihailenco produces.
	doc := []any{nil, true, false, 1.5, float32(2.5), "s", []byte{1, 2}, map[string]any{"a": []any{1, -1, uint64(1 << 40)}}, msgpack.RawMessage{0xd4, 1, 2}}
	b := vmEncode(t, doc, false)
	r = mpReader{b: b}
	r.skip(0)
	if r.err != nil || r.off != len(b) {
		t.Errorf("skip: off %d/%d err %v", r.off, len(b), r.err)
	}
}
