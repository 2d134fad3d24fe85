package mock

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// TestBadInput: malformed JSON, an unknown model, an oversized body and an
// unknown route get each API's own error shape and status.
func TestBadInput(t *testing.T) {
	s := start(t, Config{MaxBodyBytes: 4096, MaxModelLen: 64})
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x ", 3000) + `"}]}`
	for _, tc := range []struct {
		path, body string
		status     int
		anthropic  bool
	}{
		{"/v1/chat/completions", `{"model":`, 400, false},
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`, 404, false},
		{"/v1/chat/completions", big, 413, false},
		{"/v1/chat/completions", `{"messages":[]}`, 400, false},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":7}]}`, 400, false},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + words(70, "l") + `"}]}`, 400, false},
		{"/v1/chat/completions", `{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true}`, 400, false},
		{"/v1/completions", `{"prompt":["a","b"]}`, 400, false},
		{"/v1/completions", `[]`, 400, false},
		{"/v1/responses", `{"model":"nope","input":"x"}`, 404, false},
		{"/v1/responses", `{"input":[]}`, 400, false},
		{"/v1/messages", `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`, 404, true},
		{"/v1/messages", `{"messages":[{"role":"user","content":"x"}]}`, 400, true},
		{"/v1/messages", `{"max_tokens":`, 400, true},
		{"/v1/messages", big, 413, true},
		{"/v1/messages/count_tokens", `{"messages":[]}`, 400, true},
		{"/v1/nothing", `{}`, 404, false},
		{"/v1/messages/nothing", `{}`, 404, true},
		{"/tokenize", `{}`, 400, false},
		{"/detokenize", `{"tokens":[-1]}`, 400, false},
		{"/admin/fault", `{"fail_status":200}`, 400, false},
	} {
		st, raw := post(t, s.URL()+tc.path, tc.body)
		if st != tc.status {
			t.Errorf("%s %.40s: status %d, want %d: %s", tc.path, tc.body, st, tc.status, raw)
			continue
		}
		if tc.anthropic {
			var e apiwire.AnthropicError
			if json.Unmarshal(raw, &e) != nil || e.Type != "error" || e.Error.Type != apiwire.AnthropicErrorType(st) || e.Error.Message == "" {
				t.Errorf("%s: not an Anthropic error: %s", tc.path, raw)
			}
			continue
		}
		var e apiwire.OpenAIError
		if json.Unmarshal(raw, &e) != nil || e.Error.Type != apiwire.OpenAIErrorType(st) || e.Error.Message == "" {
			t.Errorf("%s: not an OpenAI error: %s", tc.path, raw)
		}
	}
	// The server still serves.
	if st, raw := post(t, s.URL()+"/v1/chat/completions", chatBody(s, "fine", 2)); st != 200 {
		t.Fatalf("after bad input: %d %s", st, raw)
	}
}

// TestNativeAPIs: APIs left out of Config.APIs answer 404, as an older
// vLLM; the others serve.
func TestNativeAPIs(t *testing.T) {
	s := start(t, Config{APIs: []API{APIChat, APICompletions}})
	if st, _ := post(t, s.URL()+"/v1/responses", `{"input":"x"}`); st != 404 {
		t.Fatalf("responses: %d", st)
	}
	if st, _ := post(t, s.URL()+"/v1/messages", `{"max_tokens":2,"messages":[{"role":"user","content":"x"}]}`); st != 404 {
		t.Fatalf("messages: %d", st)
	}
	if st, _ := post(t, s.URL()+"/v1/chat/completions", chatBody(s, "x", 2)); st != 200 {
		t.Fatalf("chat: %d", st)
	}
	if _, err := Start(Config{APIs: []API{"grpc"}}); err == nil {
		t.Fatal("unknown API accepted")
	}
}

func stream(t *testing.T, url string, body map[string]any) (chunks int, done bool, err error) {
	t.Helper()
	body["stream"] = true
	resp, err := http.Post(url, "application/json", strings.NewReader(string(mustJSON(body))))
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, false, fmt.Errorf("status %d", resp.StatusCode)
	}
	r := apiwire.NewSSEReader(resp.Body, 0)
	for {
		ev, err := r.Next()
		if err != nil {
			return chunks, done, err
		}
		if ev.IsDone() {
			done = true
			continue
		}
		var c apiwire.ChatChunk
		if json.Unmarshal(ev.Data, &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			chunks++
		}
	}
}

// TestFaults drives each switch through the admin endpoint and the Go API.
func TestFaults(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0"})
	url := s.URL() + "/v1/chat/completions"
	admin := func(body string) {
		t.Helper()
		if st, raw := post(t, s.URL()+"/admin/fault", body); st != 200 {
			t.Fatalf("admin %s: %d %s", body, st, raw)
		}
	}
	// Fail before the first byte, for the next 2 requests.
	admin(`{"fail_status":503,"fail_count":2}`)
	for i := 0; i < 2; i++ {
		st, raw := post(t, url, chatBody(s, "x", 2))
		var e apiwire.OpenAIError
		if st != 503 || json.Unmarshal(raw, &e) != nil || e.Error.Type != "server_error" {
			t.Fatalf("request %d: %d %s", i, st, raw)
		}
	}
	if st, _ := post(t, url, chatBody(s, "x", 2)); st != 200 {
		t.Fatalf("after the count: %d", st)
	}
	// Anthropic gets its own shape.
	admin(`{"fail_status":529,"fail_count":1}`)
	st, raw := post(t, s.URL()+"/v1/messages", `{"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`)
	if ae := (apiwire.AnthropicError{}); st != 529 || json.Unmarshal(raw, &ae) != nil || ae.Error.Type != "overloaded_error" {
		t.Fatalf("messages fault: %d %s", st, raw)
	}

	// Cut a stream after 3 tokens: no terminator, the read fails.
	admin(`{"cut_after":3,"cut_count":1}`)
	n, done, err := stream(t, url, chatBody(s, "cut me", 20))
	if n != 3 || done || err == nil {
		t.Fatalf("cut stream: %d chunks, done %v, err %v", n, done, err)
	}
	if n, done, err = stream(t, url, chatBody(s, "whole", 20)); n != 20 || !done || err.Error() != "EOF" {
		t.Fatalf("next stream: %d chunks, done %v, err %v", n, done, err)
	}

	// Stall before the first byte: a client with a shorter deadline times
	// out; cleared, it is served.
	if err := s.SetFaults(Faults{StallFirst: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Timeout: 100 * time.Millisecond}
	if _, err := cl.Post(url, "application/json", strings.NewReader(string(mustJSON(chatBody(s, "x", 2))))); err == nil {
		t.Fatal("stalled request answered")
	}
	admin(`{"clear":true}`)
	if st, _ := post(t, url, chatBody(s, "x", 2)); st != 200 {
		t.Fatalf("after clearing the stall: %d", st)
	}
	// Stall mid-stream: the first tokens arrive, then nothing.
	admin(`{"stall_mid_ms":3600000,"stall_after":2}`)
	resp, err := http.Post(url, "application/json", strings.NewReader(string(mustJSON(map[string]any{"stream": true, "max_tokens": 10,
		"messages": []map[string]string{{"role": "user", "content": "mid"}}}))))
	if err != nil {
		t.Fatal(err)
	}
	r := apiwire.NewSSEReader(resp.Body, 0)
	got := 0
	for got < 3 { // role chunk + 2 tokens
		if _, err := r.Next(); err != nil {
			t.Fatalf("before the stall: %v", err)
		}
		got++
	}
	resp.Body.Close()
	admin(`{}`)

	// Refuse connections, then reopen on the same address.
	if err := s.SetFaults(Faults{Refuse: true}); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("connection accepted while refusing")
	}
	if err := s.ClearFaults(); err != nil {
		t.Fatal(err)
	}
	if st, _ := post(t, url, chatBody(s, "x", 2)); st != 200 {
		t.Fatalf("after reopening: %d", st)
	}
	// Refuse for a while, by the admin endpoint: it reopens by itself.
	admin(`{"refuse":true,"refuse_for_ms":50}`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("listener never reopened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f := s.Faults(); f.Refuse {
		t.Fatalf("switch still on: %+v", f)
	}

	// Restart: the cache empties and the second request finds nothing.
	body := chatBody(s, words(64, "z"), 2)
	post(t, url, body)
	admin(`{"restart":true}`)
	_, raw = post(t, url, body)
	var cr apiwire.ChatResponse
	if json.Unmarshal(raw, &cr) != nil || cr.Usage.CachedTokens() != 0 {
		t.Fatalf("after a restart: %s", raw)
	}
}
