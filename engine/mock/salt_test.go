package mock

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// teeSink applies each event to its sinks in order. The index goes before
// the tier sets that converge watches, so that once they describe the
// cache the index has every event too (the other order let converge
// return between the two for the last event).
type teeSink []vllm.EventSink

func (t teeSink) Apply(ev *flashindex.Event) error {
	for _, s := range t {
		if err := s.Apply(ev); err != nil {
			return err
		}
	}
	return nil
}

// TestCacheSaltIsolates: the mock isolates prefix caches by cache_salt as
// vLLM does (a prompt cached under one salt is no hit under another or
// none), and its KV events carry the salt as the first block's extra key,
// so an index fed with extra keys credits a request hashed under the same
// salt and no other.
func TestCacheSaltIsolates(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Engine: simConfig(16, 4096, 0)})
	ix, err := flashindex.New(flashindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTierSets()
	sub, err := vllm.NewSubscriber(vllm.Config{WorkerID: 1, Endpoint: s.EventsEndpoint(), ReplayEndpoint: s.ReplayEndpoint(), Sink: teeSink{ix, ts},
		Decode: vllm.DecodeOptions{ExtraKeys: true}, CatchUp: true, ReconnectMin: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	awaitSubscribed(t, s)
	text := words(100, "s")
	cached := func(salt string) int {
		t.Helper()
		body := chatBody(s, text, 3)
		if salt != "" {
			body["cache_salt"] = salt
		}
		st, raw := post(t, s.URL()+"/v1/chat/completions", body)
		if st != 200 {
			t.Fatalf("status %d: %s", st, raw)
		}
		var r apiwire.ChatResponse
		if err := json.Unmarshal(raw, &r); err != nil || r.Usage == nil {
			t.Fatalf("reply %s: %v", raw, err)
		}
		return r.Usage.CachedTokens()
	}
	if c := cached("tenant-a"); c != 0 {
		t.Fatalf("first request cached %d", c)
	}
	if c := cached("tenant-a"); c != 96 {
		t.Fatalf("same salt: %d cached, want 96 (6 blocks of the 103-token prompt)", c)
	}
	if c := cached("tenant-b"); c != 0 {
		t.Fatalf("another salt was credited with %d cached tokens", c)
	}
	if c := cached(""); c != 0 {
		t.Fatalf("no salt was credited with %d cached tokens", c)
	}
	converge(t, s, ts)
	toks, _ := s.TokenizeChat(mustJSON(chatBody(s, text, 3)))
	h, _ := flashindex.NewHasher(16, "")
	for _, tc := range []struct {
		salt string
		want int
	}{{"tenant-a", 6}, {"tenant-b", 6}, {"", 6}, {"tenant-c", 0}} {
		got := 0
		for _, m := range ix.FindMatches(h.Salted(tc.salt).SequenceHashes(nil, toks), nil) {
			got = max(got, m.Device)
		}
		if got != tc.want {
			t.Errorf("index, salt %q: %d blocks, want %d", tc.salt, got, tc.want)
		}
	}
	if st, raw := post(t, s.URL()+"/v1/chat/completions", map[string]any{"model": s.Model(), "max_tokens": 2,
		"cache_salt": string(make([]byte, MaxCacheSaltLen+1)), "messages": []map[string]string{{"role": "user", "content": "x"}}}); st != 400 {
		t.Fatalf("an oversized cache_salt: %d %s", st, raw)
	}
}
