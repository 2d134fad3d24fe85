package kvhint

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// TestRoundTripProperty: for random valid envelopes, decode(encode(e)) == e
// in both encodings, the envelopes validate, and JSON output is valid JSON
// that encoding/json reads back to the same field values.
func TestRoundTripProperty(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		e := randEnvelope(r, r.IntN(20), seed%2 == 0)
		if err := e.Validate(Bounds{}); err != nil {
			t.Fatalf("seed %d: generator made an invalid envelope: %v", seed, err)
		}
		want := normalized(e)

		js := mustJSON(t, &e)
		if !json.Valid(js) {
			t.Fatalf("seed %d: invalid JSON: %s", seed, js)
		}
		var got Envelope
		if err := DecodeJSON(js, &got); err != nil {
			t.Fatalf("seed %d: DecodeJSON: %v\n%s", seed, err, js)
		}
		if d := diffEnvelopes(want, got); d != "" {
			t.Fatalf("seed %d: JSON round trip: %s\n%s", seed, d, js)
		}

		bin := mustBinary(t, &e)
		got = Envelope{}
		if err := DecodeBinary(bin, &got); err != nil {
			t.Fatalf("seed %d: DecodeBinary: %v", seed, err)
		}
		if d := diffEnvelopes(want, got); d != "" {
			t.Fatalf("seed %d: binary round trip: %s", seed, d)
		}
		if len(e.Actions) > 0 && len(bin) >= len(js) {
			t.Errorf("seed %d: binary (%d bytes) not smaller than JSON (%d bytes)", seed, len(bin), len(js))
		}
	}
}

// TestTTLWireExact: every nanosecond TTL up to MaxWireTTL survives the JSON
// float-seconds encoding exactly (the claim MaxWireTTL documents).
func TestTTLWireExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	ttls := []time.Duration{1, 999, time.Millisecond, 1500 * time.Millisecond, time.Second, 2*time.Second + 1, MaxWireTTL, MaxWireTTL - 1, 123456789012345}
	for range 20000 {
		ttls = append(ttls, time.Duration(r.Int64N(int64(MaxWireTTL)+1)))
	}
	for _, ttl := range ttls {
		e := Envelope{MessageID: "m", Actions: []Action{{ID: "a", Kind: KindPin, SessionID: "s", TTL: ttl}}}
		js := mustJSON(t, &e)
		var got Envelope
		if err := DecodeJSON(js, &got); err != nil || len(got.Actions) != 1 {
			t.Fatalf("ttl %d: %v %+v\n%s", ttl, err, got.Skipped, js)
		}
		if got.Actions[0].TTL != ttl {
			t.Fatalf("ttl %d ns came back as %d ns (%s)", ttl, got.Actions[0].TTL, js)
		}
	}
}

func TestAppendSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{30 * time.Second, "30"},
		{2500 * time.Millisecond, "2.5"},
		{time.Millisecond, "0.001"},
		{1010 * time.Millisecond, "1.01"},
		{0, "0"},
		{1500, "1.5e-06"},
		{time.Second + 1, "1.000000001"},
	} {
		if got := string(appendSeconds(nil, tc.d)); got != tc.want {
			t.Errorf("appendSeconds(%v) = %s, want %s", tc.d, got, tc.want)
		}
	}
}

// Dynamo's own serialisation tests (lib/kv-router/src/kv_hints.rs and the
// earlier lib/llm kv_hints module) expect these exact documents.
const (
	dynamoFetch  = `{"protocol_version":"0.1","message_id":"msg-123","actions":[{"action_id":"a1","action_type":"kv.fetch","action_version":"1.0","payload":{"source_control_endpoint":"tcp://127.0.0.1:23280","block_hashes":[11,22]}}]}`
	dynamoDeref  = `{"protocol_version":"0.1","message_id":"msg-123","actions":[{"action_id":"deref","action_type":"kv.deref","action_version":"1.0"}]}`
	dynamoLegacy = `{"protocol_version":"0.1","message_id":"msg-123","actions":[{"action_id":"a1","action_type":"kv.source_locations","action_version":"1.0","payload":{"source_control_endpoint":"tcp://127.0.0.1:23280","block_hashes":[11,22]}}]}`
	dynamoFuture = `{"protocol_version":"0.1","message_id":"msg-future","actions":[{"action_id":"a-future","action_type":"kv.future_action","action_version":"7.3","payload":{"nested":{"enabled":true},"items":[1,2,3]}}]}`
)

func TestDynamoCompat(t *testing.T) {
	share := Action{ID: "a1", Kind: KindShare, Target: Target{Blocks: []uint64{11, 22}}, Sources: []Source{{Endpoint: "tcp://127.0.0.1:23280"}}}
	for _, tc := range []struct {
		name, doc string
		want      Envelope
	}{
		{"fetch", dynamoFetch, Envelope{ProtocolVersion: "0.1", MessageID: "msg-123", Actions: []Action{share}}},
		{"legacy source_locations", dynamoLegacy, Envelope{ProtocolVersion: "0.1", MessageID: "msg-123", Actions: []Action{share}}},
		{"deref without payload", dynamoDeref, Envelope{ProtocolVersion: "0.1", MessageID: "msg-123", Actions: []Action{{ID: "deref", Kind: KindRelease}}}},
		{"future action skipped", dynamoFuture, Envelope{ProtocolVersion: "0.1", MessageID: "msg-future",
			Skipped: []Skip{{Index: 0, ActionID: "a-future", ActionType: "kv.future_action", ActionVersion: "7.3", Reason: SkipUnknownType}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Envelope
			if err := DecodeJSON([]byte(tc.doc), &got); err != nil {
				t.Fatal(err)
			}
			if d := diffEnvelopes(tc.want, got); d != "" {
				t.Fatal(d)
			}
		})
	}

	// What we write for a Dynamo-shaped share carries every field Dynamo's
	// consumers read, with the same names and JSON types.
	e := Envelope{ProtocolVersion: "0.1", MessageID: "msg-123", Actions: []Action{share}}
	var ours, theirs map[string]any
	if err := json.Unmarshal(mustJSON(t, &e), &ours); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(dynamoFetch), &theirs); err != nil {
		t.Fatal(err)
	}
	var check func(path string, want, got any)
	check = func(path string, want, got any) {
		switch w := want.(type) {
		case map[string]any:
			g, ok := got.(map[string]any)
			if !ok {
				t.Fatalf("%s: want object, got %T", path, got)
			}
			for k, v := range w {
				check(path+"."+k, v, g[k])
			}
		case []any:
			g, ok := got.([]any)
			if !ok || len(g) != len(w) {
				t.Fatalf("%s: want %v, got %v", path, w, got)
			}
			for i := range w {
				check(path, w[i], g[i])
			}
		default:
			if want != got {
				t.Fatalf("%s: want %v, got %v", path, want, got)
			}
		}
	}
	check("$", theirs, ours)
}

// TestSkipRules: unknown types, other major versions and malformed payloads
// are skipped and counted, in input order, and do not hide valid actions.
func TestSkipRules(t *testing.T) {
	doc := `{"protocol_version":"9.9","message_id":"m","session_id":"s","actions":[
	 {"action_id":"x0","action_type":"kv.demote","action_version":"1.0","payload":{"session_id":"agent-42"}},
	 {"action_id":"x1","action_type":"kv.teleport","action_version":"1.0","payload":{}},
	 {"action_id":"x2","action_type":"kv.retain","action_version":"2.0","payload":{"priority":"high"}},
	 {"action_id":"x3","action_type":"kv.pin","action_version":"1.7","payload":{"ttl_seconds":60,"future_field":[1]}},
	 {"action_id":"x4","action_type":"kv.prefetch","action_version":"1.0","payload":{"dest_tier":"l9"}},
	 {"action_id":"x5","action_type":"kv.retain","action_version":"one","payload":{}},
	 {"action_id":"x6","action_type":"kv.pin","action_version":"1.0","payload":{"ttl_seconds":-1}},
	 {"action_id":"x7","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":["18446744073709551615",7]}},
	 {"action_id":"x8","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[1.5]}},
	 {"action_id":"x9","action_type":"kv.deref","action_version":"1.0","payload":{"block_range":{"start":1},"token_range":{"start":2}}},
	 {"action_id":"x10","action_type":"kv.deref","action_version":"1.0","payload":[]},
	 {"action_id":"x11","action_type":"kv.retain","action_version":"0.1","payload":{}}
	]}`
	var e Envelope
	if err := DecodeJSON([]byte(doc), &e); err != nil {
		t.Fatal(err)
	}
	wantActions := []Action{
		{ID: "x0", Kind: KindDemote, SessionID: "agent-42"},
		{ID: "x3", Kind: KindPin, SessionID: "s", TTL: time.Minute},
		{ID: "x7", Kind: KindRelease, SessionID: "s", Target: Target{Blocks: []uint64{1<<64 - 1, 7}}},
	}
	if d := diffEnvelopes(Envelope{ProtocolVersion: "9.9", MessageID: "m", SessionID: "s", Actions: wantActions, Skipped: e.Skipped}, e); d != "" {
		t.Fatal(d)
	}
	wantSkips := []struct {
		id     string
		reason SkipReason
	}{
		{"x1", SkipUnknownType}, {"x2", SkipVersion}, {"x4", SkipMalformed}, {"x5", SkipMalformed},
		{"x6", SkipMalformed}, {"x8", SkipMalformed}, {"x9", SkipMalformed}, {"x10", SkipMalformed}, {"x11", SkipVersion},
	}
	if len(e.Skipped) != len(wantSkips) {
		t.Fatalf("skipped %d, want %d: %+v", len(e.Skipped), len(wantSkips), e.Skipped)
	}
	for i, w := range wantSkips {
		if s := e.Skipped[i]; s.ActionID != w.id || s.Reason != w.reason {
			t.Errorf("skip %d = %+v, want %s %v", i, s, w.id, w.reason)
		}
	}
	u, v, m := e.SkipCounts()
	if u != 1 || v != 2 || m != 6 {
		t.Errorf("SkipCounts = %d,%d,%d, want 1,2,6", u, v, m)
	}
}

func TestDecodeJSONMalformed(t *testing.T) {
	for _, doc := range []string{
		``, `null`, `[]`, `"x"`, `{`, `{"message_id":"m","actions":[]}`, `{"protocol_version":"0.1","actions":[]}`,
		`{"protocol_version":1,"message_id":"m"}`, `{"protocol_version":"0.1","message_id":"m","actions":"x"}`,
		`{"protocol_version":"0.1","message_id":"m","actions":[1]}`,
		`{"protocol_version":"0.1","message_id":"m","actions":[{}]}`,
		`{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a","action_type":"kv.pin"}]}`,
		`{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":1,"action_type":"kv.pin","action_version":"1.0"}]}`,
		`{"protocol_version":"0.1","message_id":"m","session_id":5,"actions":[]}`,
		`{"protocol_version":"0.1","message_id":"m"} trailing`,
	} {
		var e Envelope
		e.MessageID = "stale"
		err := DecodeJSON([]byte(doc), &e)
		var de *DecodeError
		if !errors.As(err, &de) || !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: err = %v, want *DecodeError wrapping ErrMalformed", doc, err)
		}
		if e.MessageID != "" || e.Actions != nil {
			t.Errorf("%q: envelope not reset: %+v", doc, e)
		}
	}
}

// TestTruncation: every strict prefix of a valid encoding is an error, never
// a panic or a silently shorter envelope.
func TestTruncation(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	for range 20 {
		e := randEnvelope(r, 1+r.IntN(5), true)
		js, bin := mustJSON(t, &e), mustBinary(t, &e)
		for n := range len(bin) {
			var got Envelope
			if err := DecodeBinary(bin[:n], &got); err == nil {
				t.Fatalf("binary prefix %d/%d decoded without error", n, len(bin))
			}
		}
		for n := range len(js) {
			var got Envelope
			if err := DecodeJSON(js[:n], &got); err == nil {
				t.Fatalf("JSON prefix %d/%d decoded: %s", n, len(js), js[:n])
			}
		}
	}
}

func TestEncodeRejectsOutOfRange(t *testing.T) {
	for name, a := range map[string]Action{
		"kind":        {ID: "a", Kind: 0},
		"kind 7":      {ID: "a", Kind: 7},
		"tier":        {ID: "a", Kind: KindDemote, Dest: 9},
		"unit":        {ID: "a", Kind: KindRelease, Target: Target{Range: Range{Unit: 3}}},
		"ttl":         {ID: "a", Kind: KindPin, TTL: MaxWireTTL + 1},
		"negative":    {ID: "a", Kind: KindPin, TTL: -1},
		"source tier": {ID: "a", Kind: KindShare, Sources: []Source{{Tier: 8}}},
	} {
		e := Envelope{MessageID: "m", Actions: []Action{a}}
		if _, err := e.AppendJSON(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: AppendJSON err = %v", name, err)
		}
		if _, err := e.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: AppendBinary err = %v", name, err)
		}
	}
}

func TestJSONStringEscaping(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s", "\x00\x1f\x7f", "é→🙂", "bad\xffutf8\xc3", "\u2028", strings.Repeat("x", 1000)} {
		got := jsonenc.AppendString(nil, s)
		want, _ := json.Marshal(s) // encoding/json: the reference
		var a, b string
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("%q: our output %s is not JSON: %v", s, got, err)
		}
		_ = json.Unmarshal(want, &b)
		if a != b {
			t.Errorf("%q: decodes to %q, encoding/json's to %q", s, a, b)
		}
	}
}

func TestUnmarshalJSONInterface(t *testing.T) {
	// Envelope works inside other JSON documents (e.g. a request's
	// "kv_hints" field).
	type request struct {
		Model   string    `json:"model"`
		KvHints *Envelope `json:"kv_hints"`
	}
	in := request{Model: "m", KvHints: &Envelope{MessageID: "x", Actions: []Action{{ID: "a", Kind: KindRelease, SessionID: "s"}}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out request
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if d := diffEnvelopes(normalized(*in.KvHints), *out.KvHints); d != "" {
		t.Fatal(d)
	}
}

// SignedHashes writes SGLang's signed int64 names; the decoder reads both
// spellings into the same bits, and rejects a negative below int64.
func TestJSONSignedHashes(t *testing.T) {
	blocks := []uint64{1, 1 << 63, ^uint64(0), 1<<63 - 1}
	env := Envelope{MessageID: "m", SessionID: "s", SignedHashes: true, Actions: []Action{
		{ID: "a", Kind: KindRelease, Target: Target{Blocks: blocks}}}}
	b, err := env.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"block_hashes":[1,-9223372036854775808,-1,9223372036854775807]`; !strings.Contains(string(b), want) {
		t.Fatalf("%s lacks %s", b, want)
	}
	var got Envelope
	if err := DecodeJSON(b, &got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Actions[0].Target.Blocks, blocks) {
		t.Fatalf("decoded %v", got.Actions[0].Target.Blocks)
	}
	bad := strings.Replace(string(b), "-9223372036854775808", "-9223372036854775809", 1)
	if err := DecodeJSON([]byte(bad), &got); err != nil || len(got.Skipped) != 1 || got.Skipped[0].Reason != SkipMalformed {
		t.Fatalf("below int64: %v %+v", err, got.Skipped)
	}
}
