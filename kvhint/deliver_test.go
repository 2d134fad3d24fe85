package kvhint

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestAppendToBody(t *testing.T) {
	env := &Envelope{MessageID: "m", SessionID: "s", Actions: []Action{{ID: "a", Kind: KindRelease, Target: Target{Blocks: []uint64{7}}}}}
	js, _ := env.AppendJSON(nil)
	cases := []struct{ body, want string }{
		{`{"model":"x"}`, `{"model":"x","kv_hints":` + string(js) + `}`},
		{`{}`, `{"kv_hints":` + string(js) + `}`},
		{" { \"a\":1 } \n", " { \"a\":1 ,\"kv_hints\":" + string(js) + "} \n"},
		{"{ }", "{ \"kv_hints\":" + string(js) + "}"},
	}
	for _, c := range cases {
		got, err := AppendToBody([]byte("pre:"), []byte(c.body), env)
		if err != nil || string(got) != "pre:"+c.want {
			t.Errorf("%q: got %q, %v", c.body, got, err)
			continue
		}
		body := []byte(c.body)
		if head, tail, err := AppendBodyTail(nil, body, env); err != nil || string(body[:head])+string(tail) != c.want || string(body) != c.body {
			t.Errorf("AppendBodyTail(%q) = %q + %q, %v (body now %q)", c.body, body[:head], tail, err, body)
		}
		var v map[string]json.RawMessage
		if err := json.Unmarshal(got[4:], &v); err != nil {
			t.Errorf("%q: not JSON: %v", c.body, err)
		}
		var back Envelope
		if err := DecodeJSON(v[BodyField], &back); err != nil || back.Actions[0].Target.Blocks[0] != 7 {
			t.Errorf("%q: envelope does not decode: %v", c.body, err)
		}
	}
	for _, bad := range []string{"", "[]", `"x"`, "{", "}"} {
		got, err := AppendToBody([]byte("pre:"), []byte(bad), env)
		if !errors.Is(err, ErrMalformed) || string(got) != "pre:" {
			t.Errorf("%q: %q, %v", bad, got, err)
		}
		if head, tail, err := AppendBodyTail([]byte("pre:"), []byte(bad), env); !errors.Is(err, ErrMalformed) || head != 0 || string(tail) != "pre:" {
			t.Errorf("AppendBodyTail(%q) = %d, %q, %v", bad, head, tail, err)
		}
	}
	// An envelope that does not encode leaves dst as it was.
	badEnv := &Envelope{Actions: []Action{{Kind: Kind(200)}}}
	if head, tail, err := AppendBodyTail([]byte("pre:"), []byte(`{"a":1}`), badEnv); err == nil || head != 0 || string(tail) != "pre:" {
		t.Errorf("AppendBodyTail(bad envelope) = %d, %q, %v", head, tail, err)
	}
}

// TestAppendBodyTailAllocs: the body is not copied, and the tail is one
// allocation of about its size.
func TestAppendBodyTailAllocs(t *testing.T) {
	blocks := make([]uint64, 512)
	for i := range blocks {
		blocks[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	env := &Envelope{MessageID: "m", SessionID: "s", Actions: []Action{{ID: "a", Kind: KindShare, Target: Target{Blocks: blocks},
		Sources: []Source{{Worker: WorkerID{ID: 3}, Endpoint: "http://127.0.0.1:8003", Tier: TierDevice, Blocks: 512}}}}}
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("word ", 6000) + "\"}\n")
	want, _ := AppendToBody(nil, body, env)
	head, tail, err := AppendBodyTail(nil, body, env)
	if err != nil || string(body[:head])+string(tail) != string(want) {
		t.Fatalf("AppendBodyTail differs from AppendToBody: %v", err)
	}
	if n := testing.AllocsPerRun(50, func() { _, tail, _ = AppendBodyTail(nil, body, env) }); n > 1 {
		t.Errorf("AppendBodyTail: %.1f allocations, want 1", n)
	}
	if cap(tail) > 2*len(tail) {
		t.Errorf("AppendBodyTail: cap %d for %d bytes", cap(tail), len(tail))
	}
}

type recSink struct{ got []*Envelope }

func (r *recSink) Send(_ context.Context, env *Envelope) error {
	r.got = append(r.got, env)
	return nil
}

func TestSplitByKind(t *testing.T) {
	in, ctl := &recSink{}, &recSink{}
	s := &Split{Inline: in, Control: ctl}
	env := &Envelope{MessageID: "m", Actions: []Action{{ID: "1", Kind: KindShare}, {ID: "2", Kind: KindRelease}, {ID: "3", Kind: KindPin}, {ID: "4", Kind: KindDemote}}}
	if err := s.Send(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if len(in.got) != 1 || len(ctl.got) != 1 || len(in.got[0].Actions) != 2 || len(ctl.got[0].Actions) != 2 ||
		in.got[0].Actions[1].ID != "3" || ctl.got[0].Actions[0].ID != "2" || ctl.got[0].MessageID != "m/c" {
		t.Fatalf("inline %+v control %+v", in.got, ctl.got)
	}
	only := &Envelope{MessageID: "n", Actions: []Action{{ID: "1", Kind: KindRelease}}}
	s2 := &Split{Inline: in}
	s2.Send(t.Context(), only)
	if s2.Dropped() != 1 || len(in.got) != 1 {
		t.Fatalf("dropped %d", s2.Dropped())
	}
}

func TestMailbox(t *testing.T) {
	m := NewMailbox(3)
	if m.Take() != nil {
		t.Fatal("empty mailbox gave an envelope")
	}
	m.Send(t.Context(), &Envelope{MessageID: "a", SessionID: "s", Actions: []Action{{ID: "1"}, {ID: "2"}}})
	m.Send(t.Context(), &Envelope{MessageID: "b", SessionID: "t", Actions: []Action{{ID: "3"}}})
	got := m.Take()
	if got.MessageID != "a" || got.SessionID != "" || len(got.Actions) != 3 || got.Actions[0].SessionID != "s" || got.Actions[2].SessionID != "t" {
		t.Fatalf("merged %+v", got)
	}
	m.Send(t.Context(), &Envelope{MessageID: "c", Actions: []Action{{ID: "1"}, {ID: "2"}}})
	m.Send(t.Context(), &Envelope{MessageID: "d", Actions: []Action{{ID: "3"}, {ID: "4"}}})
	if got := m.Take(); got.MessageID != "d" || m.Dropped() != 2 {
		t.Fatalf("after overflow %+v, dropped %d", got, m.Dropped())
	}
}

func TestNamedPolicies(t *testing.T) {
	for spec, n := range map[string]int{"": 0, "off": 0, "share": 1, "share,tail,pin,release": 4, "all": 4, " pin , share": 2} {
		ps, err := NamedPolicies(spec)
		if err != nil || len(ps) != n {
			t.Errorf("%q: %d policies, %v", spec, len(ps), err)
		}
	}
	if _, err := NamedPolicies("share,nope"); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown name: %v", err)
	}
}

func TestHTTPSink(t *testing.T) {
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		if r.URL.Path == "/bad" {
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"protocol_version":"0.1","message_id":"m","results":[{"action_id":"a","outcome":"missing","blocks":0}]}`)
	}))
	defer srv.Close()
	var rep *Reply
	h := &HTTPSink{URL: srv.URL + "/kv/hints", SignedHashes: true, OnReply: func(r *Reply) { rep = r }}
	env := &Envelope{MessageID: "m", SessionID: "s", Actions: []Action{{ID: "a", Kind: KindRelease, Target: Target{Blocks: []uint64{^uint64(0)}}}}}
	if err := h.Send(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	if rep == nil || rep.Counts().Missing != 1 || env.SignedHashes {
		t.Fatalf("reply %+v, caller's envelope changed: %v", rep, env.SignedHashes)
	}
	var back Envelope
	if err := DecodeJSON(body, &back); err != nil || back.Actions[0].Target.Blocks[0] != ^uint64(0) || !json.Valid(body) {
		t.Fatalf("sent %s: %v", body, err)
	}
	h.URL = srv.URL + "/bad"
	if err := h.Send(t.Context(), env); err == nil {
		t.Fatal("a 400 was not an error")
	}
}
