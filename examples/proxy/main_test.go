package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeVLLM answers /metrics, /tokenize (one token per byte of the
// messages' contents) and /v1/chat/completions (JSON, or SSE with usage).
func fakeVLLM(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
			Stream   bool                       `json:"stream"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var text strings.Builder
		for _, m := range req.Messages {
			text.WriteString(m.Content + "\n")
		}
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="4096"} 1.0`)
		case "/tokenize":
			toks := []int{}
			for _, c := range []byte(text.String()) {
				toks = append(toks, int(c))
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks})
		case "/v1/chat/completions":
			usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":2}`, text.Len())
			if !req.Stream {
				fmt.Fprintf(w, `{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":%s}`, usage)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
			w.(http.Flusher).Flush()
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", usage)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestProxySmoke(t *testing.T) {
	a, b := fakeVLLM(t), fakeVLLM(t)
	h, stop, err := newProxy(context.Background(), []string{a.URL, b.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	srv := httptest.NewServer(h)
	defer srv.Close()

	system := strings.Repeat("You are a coding agent. ", 20)
	var first string
	for turn, stream := range []bool{false, true, false} {
		msgs := []map[string]string{{"role": "system", "content": system}}
		for k := 0; k <= turn; k++ {
			msgs = append(msgs, map[string]string{"role": "user", "content": fmt.Sprintf("step %d", k)})
		}
		body, _ := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream})
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("X-Claude-Code-Session-Id", "smoke")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(out), "hi") {
			t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, out)
		}
		if stream && !strings.HasSuffix(string(out), "data: [DONE]\n\n") {
			t.Fatalf("stream not passed through: %q", out)
		}
		w := resp.Header.Get("X-Agentkv-Worker")
		if turn == 0 {
			first = w
		} else if w != first {
			t.Fatalf("turn %d went to %s, turn 0 to %s: the session should stay where its prefix is", turn, w, first)
		}
		if turn > 0 && resp.Header.Get("X-Agentkv-Cached-Tokens") == "0" {
			t.Fatalf("turn %d: no cached prefix expected", turn)
		}
	}
	// The same session over Anthropic Messages, translated to chat for
	// these chat-only engines, stays on its worker too.
	body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 8, "system": system,
		"messages": []map[string]string{{"role": "user", "content": "step 0"}}})
	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("X-Claude-Code-Session-Id", "smoke")
	mresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if mresp.StatusCode != 200 || !strings.Contains(string(out), `"type":"message"`) || mresp.Header.Get("X-Agentkv-Worker") != first {
		t.Fatalf("messages: %d %s on %s", mresp.StatusCode, out, mresp.Header.Get("X-Agentkv-Worker"))
	}
	resp, _ := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":`))
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("malformed JSON: got %d", resp.StatusCode)
	}
	resp.Body.Close()
}
