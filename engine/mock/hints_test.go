package mock

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/kvhint"
)

// envJSON encodes one envelope of actions (ids filled in).
func envJSON(t testing.TB, session string, acts ...kvhint.Action) []byte {
	t.Helper()
	env := kvhint.Envelope{MessageID: "m", SessionID: session, Actions: acts}
	for i := range env.Actions {
		if env.Actions[i].ID == "" {
			env.Actions[i].ID = fmt.Sprintf("m.%d", i)
		}
	}
	b, err := env.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// postHints sends an envelope to s's control endpoint.
func postHints(t *testing.T, s *Server, body []byte) (int, kvhint.Reply, string) {
	t.Helper()
	st, raw := post(t, s.ControlEndpoint()+HintsPath, string(body))
	var rep kvhint.Reply
	if st == http.StatusOK {
		if err := kvhint.DecodeReplyJSON(raw, &rep); err != nil {
			t.Fatalf("reply %s: %v", raw, err)
		}
	}
	return st, rep, string(raw)
}

// chatWithHints posts a chat request carrying env as kv_hints and returns
// the reply header, decoded, and the response's cached prompt tokens.
func chatWithHints(t *testing.T, s *Server, text string, env []byte) (kvhint.Reply, string, int) {
	t.Helper()
	body := chatBody(s, text, 2)
	if env != nil {
		body[HintsField] = json.RawMessage(env)
	}
	req, _ := http.NewRequest("POST", s.URL()+"/v1/chat/completions", strings.NewReader(string(mustJSON(body))))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cr apiwire.ChatResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	hdr := resp.Header.Get(ReplyHeader)
	var rep kvhint.Reply
	if hdr != "" {
		if err := kvhint.DecodeReplyJSON([]byte(hdr), &rep); err != nil {
			t.Fatalf("reply header %q: %v", hdr, err)
		}
	}
	return rep, hdr, cr.Usage.PromptTokensDetails.CachedTokens
}

func outcomes(rep kvhint.Reply) []kvhint.Outcome {
	var out []kvhint.Outcome
	for _, r := range rep.Results {
		out = append(out, r.Outcome)
	}
	return out
}

// TestHintFetchBetweenWorkers: worker B, asked inline to kv.fetch the
// prefix worker A holds, transfers it from A over HTTP before it runs the
// request, so the request hits; the transfer is counted on both sides and
// B's KV events show the blocks stored.
func TestHintFetchBetweenWorkers(t *testing.T) {
	a := start(t, Config{Engine: simConfig(4, 256, 0)})
	b := start(t, Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Engine: simConfig(4, 256, 0)})
	ts := newTierSets()
	subscribe(t, b, ts)
	text := words(40, "shared")
	if _, hdr, _ := chatWithHints(t, a, text, nil); hdr != "" {
		t.Fatalf("a request without hints got a reply header %q", hdr)
	}
	held := a.drv.cached(flashindex.Device)
	// The prompt's blocks, root first, as a router names them.
	prompt, err := a.TokenizeChat(mustJSON(chatBody(a, text, 2)))
	if err != nil {
		t.Fatal(err)
	}
	_, seq := a.drv.hasher.AppendHashes(nil, nil, prompt[:len(prompt)/4*4], 0, false)
	for _, h := range seq {
		if !slices.Contains(held, h) {
			t.Fatalf("a does not hold prompt block %x", h)
		}
	}
	share := kvhint.Action{Kind: kvhint.KindShare, Dest: kvhint.TierDevice, Target: kvhint.Target{Blocks: seq},
		Sources: []kvhint.Source{{Endpoint: a.ControlEndpoint(), Tier: kvhint.TierDevice}}}
	rep, _, cached := chatWithHints(t, b, text, envJSON(t, "s1", share))
	if got := outcomes(rep); !slices.Equal(got, []kvhint.Outcome{kvhint.OutcomeAccepted}) || rep.Results[0].Blocks != uint32(len(seq)) {
		t.Fatalf("reply %+v", rep)
	}
	if cached != len(seq)*4 {
		t.Fatalf("cached %d tokens, want the %d fetched", cached, len(seq)*4)
	}
	sb, sa := b.HintStats(), a.HintStats()
	if sb.Fetches != 1 || sb.FetchBlocks != int64(len(seq)) || sb.FetchBytes == 0 || sb.FetchTime <= 0 || sa.Exported != int64(len(seq)) {
		t.Fatalf("b %+v, a %+v", sb, sa)
	}
	if sb.Actions[kvhint.KindShare][kvhint.OutcomeAccepted] != 1 || sb.Inline != 1 {
		t.Fatalf("b counted %+v", sb)
	}
	converge(t, b, ts)
	for _, h := range seq {
		if !slices.Contains(ts.sorted(flashindex.Device), h) {
			t.Fatalf("b's events do not show fetched block %x", h)
		}
	}
	_, page := get(t, b.URL()+"/metrics")
	for _, want := range []string{`agentkv_mock_kv_hint_actions_total{engine="0",model_name="agentkv-mock",kind="share",outcome="accepted"} 1`,
		`agentkv_mock_kv_fetch_blocks_total{engine="0",model_name="agentkv-mock"} ` + fmt.Sprint(len(seq))} {
		if !strings.Contains(page, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	// Again: the blocks are present, nothing is transferred.
	rep, _, _ = chatWithHints(t, b, text, envJSON(t, "s1", share))
	if rep.Results[0].Outcome != kvhint.OutcomeAccepted || b.HintStats().Fetches != 1 {
		t.Fatalf("second fetch: %+v, %+v", rep, b.HintStats())
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestHintControlMovesTiers: over the control endpoint, demote moves a
// session's blocks to the host tier and prefetch brings them back; the
// events show each move; release, pin and retain answer per action;
// unknown blocks and sessions are missing, not errors.
func TestHintControlMovesTiers(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Engine: simConfig(4, 256, 64)})
	ts := newTierSets()
	subscribe(t, s, ts)
	chatWithHints(t, s, words(30, "tail"), nil)
	dev := s.drv.cached(flashindex.Device)
	if len(dev) == 0 {
		t.Fatal("nothing cached")
	}
	st, rep, raw := postHints(t, s, envJSON(t, "s", kvhint.Action{Kind: kvhint.KindDemote, Dest: kvhint.TierHost, Target: kvhint.Target{Blocks: dev}}))
	if st != 200 || !slices.Equal(outcomes(rep), []kvhint.Outcome{kvhint.OutcomeAccepted}) {
		t.Fatalf("demote: %d %s", st, raw)
	}
	converge(t, s, ts)
	if got := ts.sorted(flashindex.Host); !slices.Equal(got, dev) || len(ts.sorted(flashindex.Device)) != 0 {
		t.Fatalf("after demote the events show host %d, device %d blocks", len(got), len(ts.sorted(flashindex.Device)))
	}
	// Prefetch by session: the worker remembers the blocks hinted for s.
	_, rep, raw = postHints(t, s, envJSON(t, "s", kvhint.Action{Kind: kvhint.KindPrefetch, Dest: kvhint.TierDevice}))
	if !slices.Equal(outcomes(rep), []kvhint.Outcome{kvhint.OutcomeAccepted}) {
		t.Fatalf("prefetch: %s", raw)
	}
	converge(t, s, ts)
	if got := ts.sorted(flashindex.Device); len(got) == 0 {
		t.Fatal("prefetch moved nothing back")
	}
	_, rep, raw = postHints(t, s, envJSON(t, "s",
		kvhint.Action{Kind: kvhint.KindPin, TTL: 60e9, Target: kvhint.Target{Blocks: dev[:1]}},
		kvhint.Action{Kind: kvhint.KindRetain, TTL: 60e9, Priority: 90, Target: kvhint.Target{Blocks: dev}},
		kvhint.Action{Kind: kvhint.KindRelease, Target: kvhint.Target{Blocks: []uint64{12345}}},
		kvhint.Action{Kind: kvhint.KindRelease, SessionID: "never-seen"},
		kvhint.Action{Kind: kvhint.KindDemote, Dest: kvhint.TierDisk, Target: kvhint.Target{Blocks: dev}},
	))
	want := []kvhint.Outcome{kvhint.OutcomeAccepted, kvhint.OutcomeAccepted, kvhint.OutcomeMissing, kvhint.OutcomeMissing, kvhint.OutcomeRejected}
	if !slices.Equal(outcomes(rep), want) {
		t.Fatalf("got %v, want %v: %s", outcomes(rep), want, raw)
	}
	// Unknown action types are ignored (skipped by the decoder).
	unknown := `{"protocol_version":"0.1","message_id":"u","actions":[{"action_id":"x","action_type":"kv.future","action_version":"1.0","payload":{}}]}`
	if st, rep, raw := postHints(t, s, []byte(unknown)); st != 200 || len(rep.Results) != 0 {
		t.Fatalf("unknown action: %d %s", st, raw)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.bad) > 0 {
		t.Fatalf("inconsistent events: %v", ts.bad)
	}
}

// badEnvelopes are envelopes a worker must refuse whole.
var badEnvelopes = map[string]string{
	"not json":      `{"protocol_version":`,
	"not an object": `[1,2,3]`,
	"no message id": `{"protocol_version":"0.1","actions":[]}`,
	"duplicate ids": `{"protocol_version":"0.1","message_id":"m","session_id":"s","actions":[` +
		`{"action_id":"a","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[1]}},` +
		`{"action_id":"a","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[2]}}]}`,
	"no session": `{"protocol_version":"0.1","message_id":"m","actions":[{"action_id":"a","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[1]}}]}`,
	"long id":    `{"protocol_version":"0.1","message_id":"` + strings.Repeat("m", 600) + `","actions":[]}`,
	"too many actions": func() string {
		var acts []string
		for i := range 65 {
			acts = append(acts, fmt.Sprintf(`{"action_id":"a%d","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[1]}}`, i))
		}
		return `{"protocol_version":"0.1","message_id":"m","session_id":"s","actions":[` + strings.Join(acts, ",") + `]}`
	}(),
	"demote to device": `{"protocol_version":"0.1","message_id":"m","session_id":"s","actions":[{"action_id":"a","action_type":"kv.demote","action_version":"1.0","payload":{"dest_tier":"device","block_hashes":[1]}}]}`,
}

// TestHintBadEnvelopesChangeNothing: a malformed, oversized or invalid
// envelope is refused whole with a clear error, on the control endpoint
// (400/413) and inline (a rejected reply header, the request served); the
// cache is unchanged and the refusal counted.
func TestHintBadEnvelopesChangeNothing(t *testing.T) {
	s := start(t, Config{Engine: simConfig(4, 256, 64), Hints: HintConfig{MaxBytes: 8 << 10}})
	text := words(30, "keep")
	chatWithHints(t, s, text, nil)
	before := s.drv.cached(flashindex.Device)
	bad := maps.Clone(badEnvelopes)
	bad["oversized"] = `{"protocol_version":"0.1","message_id":"m","session_id":"s","actions":[{"action_id":"a","action_type":"kv.deref","action_version":"1.0","payload":{"block_hashes":[` +
		strings.Repeat("1,", 5000) + `1]}}]}`
	n := 0
	for name, body := range bad {
		st, _, raw := postHints(t, s, []byte(body))
		if st != 400 && st != 413 || !strings.Contains(raw, "kv_hints") && name != "oversized" {
			t.Errorf("%s: %d %s", name, st, raw)
		}
		if name == "not json" {
			continue // not valid JSON inside a request body either
		}
		rep, hdr, _ := chatWithHints(t, s, text, []byte(body))
		if len(rep.Results) != 1 || rep.Results[0].Outcome != kvhint.OutcomeRejected || !strings.Contains(rep.Results[0].Reason, "rejected") {
			t.Errorf("%s inline: header %q", name, hdr)
		}
		n += 2
		if got := s.drv.cached(flashindex.Device); !slices.Equal(got, before) {
			t.Fatalf("%s changed the cache", name)
		}
	}
	if got := s.HintStats().Rejected; got != int64(n+1) {
		t.Fatalf("rejected %d, want %d", got, n+1)
	}
}

// TestHintsOff: a worker without hint support serves the request, sends
// no reply header and has no control endpoint.
func TestHintsOff(t *testing.T) {
	s := start(t, Config{Engine: simConfig(4, 64, 0), Hints: HintConfig{Off: true}})
	env := envJSON(t, "s", kvhint.Action{Kind: kvhint.KindRelease, Target: kvhint.Target{Blocks: []uint64{1}}})
	if _, hdr, _ := chatWithHints(t, s, "hello there", env); hdr != "" {
		t.Fatalf("header %q", hdr)
	}
	if st, _, _ := postHints(t, s, env); st != 404 {
		t.Fatalf("control endpoint: %d", st)
	}
}

// FuzzHintEnvelope: whatever the envelope, the worker answers without
// panicking; a refused envelope changes nothing in the cache.
func FuzzHintEnvelope(f *testing.F) {
	for _, b := range badEnvelopes {
		f.Add([]byte(b), false)
	}
	f.Add(envJSON(f, "s", kvhint.Action{Kind: kvhint.KindDemote, Dest: kvhint.TierHost, Target: kvhint.Target{Blocks: []uint64{1, 2}}}), false)
	f.Add(envJSON(f, "s", kvhint.Action{Kind: kvhint.KindShare, Target: kvhint.Target{Blocks: []uint64{1}},
		Sources: []kvhint.Source{{Endpoint: "ftp://x"}}}), false)
	env := kvhint.Envelope{MessageID: "m", SessionID: "s", Actions: []kvhint.Action{{ID: "a", Kind: kvhint.KindRelease}}}
	bin, _ := env.AppendBinary(nil)
	f.Add(bin, true)
	s, err := Start(Config{Speedup: 1000, Engine: simConfig(4, 64, 16), Hints: HintConfig{FetchTimeout: 1e9}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", strings.NewReader(string(mustJSON(chatBody(s, words(20, "fz"), 1)))))
	if err != nil {
		f.Fatal(err)
	}
	resp.Body.Close()
	f.Fuzz(func(t *testing.T, b []byte, binary bool) {
		before := s.drv.cached(flashindex.Device)
		host := s.drv.cached(flashindex.Host)
		rep, err := s.decodeAndExec(t.Context(), b, binary)
		if err != nil {
			if !slices.Equal(before, s.drv.cached(flashindex.Device)) || !slices.Equal(host, s.drv.cached(flashindex.Host)) {
				t.Fatal("a refused envelope changed the cache")
			}
			return
		}
		if _, err := rep.AppendJSON(nil); err != nil {
			t.Fatalf("reply does not encode: %v", err)
		}
	})
}
