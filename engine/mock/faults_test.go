package mock

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// waitWedged waits (on progress, not time) until n requests are held.
func waitWedged(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Wedged() != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wedged, want %d", s.Wedged(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWedge: a wedged worker answers /health, /metrics and /tokenize while
// its generations never start (or stop mid-stream with wedge_after); a
// client that leaves frees its request; clearing the switch lets held
// requests go on.
func TestWedge(t *testing.T) {
	s := start(t, Config{})
	url := s.URL() + "/v1/chat/completions"
	admin := func(body string) {
		t.Helper()
		if st, raw := post(t, s.URL()+"/admin/fault", body); st != 200 {
			t.Fatalf("admin %s: %d %s", body, st, raw)
		}
	}
	admin(`{"wedge":true}`)
	if f := s.Faults(); !f.Wedge {
		t.Fatalf("switch not set: %+v", f)
	}
	// Whole replies and streams, on every API, are held.
	done := make(chan int, 4)
	for _, p := range []struct{ path, body string }{
		{"/v1/chat/completions", string(mustJSON(chatBody(s, "held", 3)))},
		{"/v1/completions", `{"prompt":"held","max_tokens":3,"stream":true}`},
		{"/v1/responses", `{"input":"held","max_output_tokens":3}`},
		{"/v1/messages", `{"max_tokens":3,"stream":true,"messages":[{"role":"user","content":"held"}]}`},
	} {
		go func() {
			st, _ := post(t, s.URL()+p.path, p.body)
			done <- st
		}()
	}
	waitWedged(t, s, 4)
	// Health and metrics stay green: a probe cannot tell.
	for _, path := range []string{"/health", "/metrics"} {
		resp, err := http.Get(s.URL() + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s while wedged: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	if st, _ := post(t, s.URL()+"/tokenize", `{"prompt":"a b"}`); st != 200 {
		t.Fatalf("tokenize while wedged: %d", st)
	}
	// A client that gives up frees its request.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(string(mustJSON(chatBody(s, "gone", 2)))))
	gone := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		gone <- err
	}()
	waitWedged(t, s, 5)
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a wedged request answered")
	}
	waitWedged(t, s, 4)
	select {
	case st := <-done:
		t.Fatalf("a wedged request answered %d", st)
	default:
	}
	// Cleared: the held requests go on and are served.
	admin(`{}`)
	for range 4 {
		if st := <-done; st != 200 {
			t.Fatalf("after clearing: %d", st)
		}
	}
	waitWedged(t, s, 0)

	// Wedged mid-stream: K tokens, then nothing; cleared, the rest.
	admin(`{"wedge_after":2}`)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(mustJSON(map[string]any{"stream": true,
		"max_tokens": 6, "messages": []map[string]string{{"role": "user", "content": "mid"}}}))))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := apiwire.NewSSEReader(resp.Body, 0)
	var before []string
	for range 3 { // role chunk + 2 tokens
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("before the wedge: %v", err)
		}
		before = append(before, string(ev.Data))
	}
	waitWedged(t, s, 1)
	// A whole reply is not held by wedge_after.
	if st, _ := post(t, url, chatBody(s, "whole", 2)); st != 200 {
		t.Fatalf("whole reply under wedge_after: %d", st)
	}
	admin(`{"clear":true}`)
	// The stream goes on to its end: the rest of the reply (if any: its
	// length is drawn from the prompt), its finish reason and [DONE], in
	// however many chunks the engine had them ready.
	finished := false
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("after clearing: %v (before: %q)", err, before)
		}
		if strings.TrimSpace(string(ev.Data)) == "[DONE]" {
			break
		}
		var ch apiwire.ChatChunk
		if err := json.Unmarshal(ev.Data, &ch); err != nil {
			t.Fatalf("chunk %q: %v", ev.Data, err)
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil && *c.FinishReason != "" {
				finished = true
			}
		}
	}
	if !finished {
		t.Fatalf("after clearing: the stream ended without a finish reason (before: %q)", before)
	}
	// Bad switches are refused.
	if st, _ := post(t, s.URL()+"/admin/fault", `{"wedge_after":-1}`); st != 400 {
		t.Fatalf("negative wedge_after: %d", st)
	}
}

// TestWedgeClose: closing a server releases its wedged requests.
func TestWedgeClose(t *testing.T) {
	s := start(t, Config{Faults: Faults{Wedge: true}})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
			strings.NewReader(string(mustJSON(chatBody(s, "x", 2)))))
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitWedged(t, s, 1)
	s.Close()
	<-errc // answered or cut: either way not held
}
