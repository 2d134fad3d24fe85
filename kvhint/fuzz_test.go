package kvhint

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"
)

func seedEnvelopes(f *testing.F, add func(e *Envelope)) {
	for name, v := range goldenCases() {
		if e, ok := v.(*Envelope); ok {
			add(e)
		}
		_ = name
	}
	r := rand.New(rand.NewPCG(42, 42))
	for range 8 {
		e := randEnvelope(r, r.IntN(6), true)
		add(&e)
	}
}

func allUTF8(e *Envelope) bool {
	ok := utf8.ValidString(e.ProtocolVersion) && utf8.ValidString(e.MessageID) && utf8.ValidString(e.SessionID)
	for i := range e.Actions {
		a := &e.Actions[i]
		ok = ok && utf8.ValidString(a.ID) && utf8.ValidString(a.SessionID)
		for _, s := range a.Sources {
			ok = ok && utf8.ValidString(s.Endpoint)
		}
	}
	return ok
}

// checkReencode: a decoded envelope always re-encodes in both formats, and
// decoding that gives the same actions (the codecs are a fixed point after
// one decode), in both directions.
func checkReencode(t *testing.T, first *Envelope) {
	t.Helper()
	want := *first
	want.Skipped = nil
	js, err := first.AppendJSON(nil)
	if err != nil {
		t.Fatalf("decoded envelope does not encode to JSON: %v", err)
	}
	bin, err := first.AppendBinary(nil)
	if err != nil {
		t.Fatalf("decoded envelope does not encode to msgpack: %v", err)
	}
	var again Envelope
	if err := DecodeBinary(bin, &again); err != nil {
		t.Fatalf("re-decode msgpack: %v", err)
	}
	if d := diffEnvelopes(normalized(want), again); d != "" {
		t.Fatalf("msgpack fixed point: %s", d)
	}
	if !allUTF8(first) {
		return // JSON replaces invalid UTF-8; no exact comparison
	}
	again = Envelope{}
	if err := DecodeJSON(js, &again); err != nil {
		t.Fatalf("re-decode JSON: %v\n%s", err, js)
	}
	if d := diffEnvelopes(normalized(want), again); d != "" {
		t.Fatalf("JSON fixed point: %s\n%s", d, js)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	seedEnvelopes(f, func(e *Envelope) {
		b, _ := e.AppendJSON(nil)
		f.Add(b)
	})
	for _, s := range []string{dynamoFetch, dynamoDeref, dynamoLegacy, dynamoFuture, `{}`, `[]`, `{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a","action_type":"kv.pin","action_version":"1.0","payload":{"ttl_seconds":1e308}}]}`} {
		f.Add([]byte(s))
	}
	if files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.json")); len(files) > 0 {
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Envelope
		if err := DecodeJSON(data, &e); err != nil {
			if e.MessageID != "" || e.Actions != nil {
				t.Fatal("envelope not reset on error")
			}
			return
		}
		_ = e.Validate(Bounds{}) // must not panic
		checkReencode(t, &e)
	})
}

func FuzzDecodeBinary(f *testing.F) {
	seedEnvelopes(f, func(e *Envelope) {
		b, _ := e.AppendBinary(nil)
		f.Add(b)
	})
	f.Add([]byte{0x95, 1, 0xa0, 0xa0, 0xa0, 0x91, 0x95, 0x64, 1, 0, 0xa0, 0x91, 0x91, 0xc0})
	f.Add([]byte{0x95, 2, 0xa0, 0xa0, 0xa0, 0x90})
	f.Fuzz(func(t *testing.T, data []byte) {
		var e Envelope
		if err := DecodeBinary(data, &e); err != nil {
			if e.MessageID != "" || e.Actions != nil {
				t.Fatal("envelope not reset on error")
			}
			return
		}
		_ = e.Validate(Bounds{})
		checkReencode(t, &e)
	})
}

func FuzzDecodeReplyJSON(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 6 {
		rep := randReply(r)
		b, _ := rep.AppendJSON(nil)
		f.Add(b)
	}
	f.Add([]byte(`{"protocol_version":"0.1","message_id":"m","results":[{"action_id":"a","outcome":"x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep Reply
		if err := DecodeReplyJSON(data, &rep); err != nil {
			return
		}
		rep.Skipped = 0
		js, err := rep.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		var again Reply
		if err := DecodeReplyJSON(js, &again); err != nil || !replyEqual(rep, again) {
			t.Fatalf("fixed point: %v\n%+v\n%+v", err, rep, again)
		}
		bin, err := rep.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := DecodeBinaryReply(bin, &again); err != nil || !replyEqual(rep, again) {
			t.Fatalf("binary: %v\n%+v\n%+v", err, rep, again)
		}
	})
}

func FuzzDecodeBinaryReply(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 6 {
		rep := randReply(r)
		b, _ := rep.AppendBinary(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep Reply
		if err := DecodeBinaryReply(data, &rep); err != nil {
			return
		}
		rep.Skipped = 0
		bin, err := rep.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		var again Reply
		if err := DecodeBinaryReply(bin, &again); err != nil || !replyEqual(rep, again) {
			t.Fatalf("fixed point: %v\n%+v\n%+v", err, rep, again)
		}
	})
}
