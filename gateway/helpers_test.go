package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/gateway/translate"
)

// chatOnly is a minimal OpenAI-compatible engine for the gateway's unit
// tests: /metrics (cache_config_info), /tokenize (one token per byte of
// the messages' JSON), /v1/models and /v1/chat/completions. A request
// offering tools gets one call of the first tool, unless its last message
// is a tool result; otherwise it answers "ok <n>" with finish_reason stop.
// Usage reports cachedTokens cached.
type chatOnly struct {
	srv          *httptest.Server
	cachedTokens int

	mu     sync.Mutex // guards the fields below
	bodies []map[string]any
	hdrs   []http.Header
	paths  []string
}

func newChatOnly(t *testing.T) *chatOnly {
	t.Helper()
	f := &chatOnly{cachedTokens: 32}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *chatOnly) last() (map[string]any, http.Header, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.bodies)
	if n == 0 {
		return nil, nil, ""
	}
	return f.bodies[n-1], f.hdrs[n-1], f.paths[n-1]
}

func (f *chatOnly) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1`)
		return
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"m1","object":"model","created":1700000000}]}`)
		return
	case "/tokenize":
		var req struct {
			Messages json.RawMessage `json:"messages"`
			Tools    json.RawMessage `json:"tools"`
		}
		if json.Unmarshal(b, &req) != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad tokenize"}}`, 400)
			return
		}
		toks := make([]int, 0, len(req.Messages)+len(req.Tools))
		for _, c := range append(append([]byte{}, req.Tools...), req.Messages...) {
			toks = append(toks, int(c))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "count": len(toks)})
		return
	case "/v1/chat/completions":
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"message":"not found","type":"NotFoundError","code":404}}`)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(b, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json"}}`, 400)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, req)
	f.hdrs = append(f.hdrs, r.Header.Clone())
	f.paths = append(f.paths, r.URL.Path)
	f.mu.Unlock()
	msgs, _ := req["messages"].([]any)
	prompt := len(b) / 4
	var call string
	if tools, _ := req["tools"].([]any); len(tools) > 0 && len(msgs) > 0 {
		lastRole, _ := msgs[len(msgs)-1].(map[string]any)["role"].(string)
		if lastRole != "tool" {
			fn := tools[0].(map[string]any)["function"].(map[string]any)
			call, _ = fn["name"].(string)
		}
	}
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3,
		"prompt_tokens_details": map[string]any{"cached_tokens": f.cachedTokens}}
	text := fmt.Sprintf("ok %d", len(msgs))
	if stream, _ := req["stream"].(bool); stream {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		send := func(v any) {
			j, _ := json.Marshal(v)
			fmt.Fprintf(w, "data: %s\n\n", j)
			fl.Flush()
		}
		chunk := func(delta map[string]any, finish any) map[string]any {
			return map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": req["model"],
				"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
		}
		send(chunk(map[string]any{"role": "assistant", "content": ""}, nil))
		if call != "" {
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_1", "type": "function",
				"function": map[string]any{"name": call, "arguments": ""}}}}, nil))
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `{"cmd":`}}}}, nil))
			send(chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": `"ls"}`}}}}, nil))
			send(chunk(map[string]any{}, "tool_calls"))
		} else {
			for _, p := range strings.SplitAfter(text, " ") {
				send(chunk(map[string]any{"content": p}, nil))
			}
			send(chunk(map[string]any{}, "stop"))
		}
		if so, _ := req["stream_options"].(map[string]any); so["include_usage"] == true {
			send(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": []any{}, "usage": usage})
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	msg := map[string]any{"role": "assistant", "content": text}
	finish := "stop"
	if call != "" {
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "call_1",
			"type": "function", "function": map[string]any{"name": call, "arguments": `{"cmd":"ls"}`}}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "model": req["model"],
		"created": 1700000000, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage": usage})
}

// testStack builds a Stack over the given workers and serves it.
func testStack(t *testing.T, cfg StackConfig, workers ...WorkerSpec) (*Stack, *httptest.Server) {
	t.Helper()
	cfg.Workers = append(cfg.Workers, workers...)
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = -1
	}
	s, err := NewStack(context.Background(), cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler("/metrics"))
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, s.Close())
	})
	return s, srv
}

func postJSON(t *testing.T, url string, hdr map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// sseEvents splits an SSE body into (event, data) pairs.
func sseEvents(t *testing.T, body []byte) (names []string, datas []map[string]any) {
	t.Helper()
	var s translate.SSEScanner
	s.On = func(ev string, data []byte) {
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m), string(data))
		names = append(names, ev)
		datas = append(datas, m)
	}
	s.Feed(body)
	s.Flush()
	return names, datas
}
