package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// fakeEngine is an httptest stand-in for a vLLM server.
func fakeEngine(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, vllmMetrics)
	})
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		// A fake chat template: one token per message plus one per tool,
		// and 100+len(prompt) for completions.
		var toks []int
		if msgs, ok := req["messages"].([]any); ok {
			for i := range msgs {
				toks = append(toks, 10+i)
			}
			if tools, ok := req["tools"].([]any); ok {
				toks = append(toks, 900+len(tools))
			}
		} else if p, ok := req["prompt"].(string); ok {
			toks = append(toks, 100+len(p))
		}
		json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "count": len(toks), "max_model_len": 4096})
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Test") != "1" {
			http.Error(w, "missing header", http.StatusBadRequest)
			return
		}
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c1","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant",`+
				`"tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}}],`+
				`"usage":{"prompt_tokens":120,"completion_tokens":7,"total_tokens":127,"prompt_tokens_details":{"cached_tokens":96}}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		chunks := []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t1","function":{"name":"search","arguments":""}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":1}"}}]},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"t2","function":{"name":"fetch","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
			`{"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":12,"total_tokens":62}}`,
		}
		for _, c := range chunks {
			// Split each event across writes to exercise line reassembly.
			ev := "data: " + c + "\n\n"
			io.WriteString(w, ev[:len(ev)/2])
			fl.Flush()
			io.WriteString(w, ev[len(ev)/2:])
			fl.Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"message":"busy"}}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestForward(t *testing.T) {
	srv := fakeEngine(t)
	c, err := NewClient(srv.URL+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := http.Header{"X-Test": {"1"}, "Connection": {"close"}}
	tests := []struct {
		name string
		path string
		body string
		want Usage
		err  error
		out  string // substring of what the client receives
	}{
		{
			name: "chat, JSON reply",
			path: ChatPath, body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			want: Usage{PromptTokens: 120, CompletionTokens: 7, CachedTokens: 96, HasUsage: true,
				FinishReason: "tool_calls", ToolCalls: []string{"get_weather"}, Status: 200},
			out: `"get_weather"`,
		},
		{
			name: "chat, SSE stream split across reads",
			path: ChatPath, body: `{"model":"m","stream":true,"messages":[]}`,
			want: Usage{PromptTokens: 50, CompletionTokens: 12, HasUsage: true, FinishReason: "tool_calls",
				ToolCalls: []string{"search", "fetch"}, Status: 200, Stream: true},
			out: "data: [DONE]",
		},
		{
			name: "engine error passed through",
			path: CompletionPath, body: `{"model":"m","prompt":"x"}`,
			want: Usage{Status: 429}, err: ErrStatus, out: "busy",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			u, err := c.Forward(context.Background(), rec, tt.path, hdr, []byte(tt.body))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if fmt.Sprint(u) != fmt.Sprint(tt.want) {
				t.Fatalf("usage\n got %+v\nwant %+v", u, tt.want)
			}
			if rec.Code != tt.want.Status || !strings.Contains(rec.Body.String(), tt.out) {
				t.Fatalf("client got %d %q", rec.Code, rec.Body.String())
			}
		})
	}
}

func TestTokenize(t *testing.T) {
	srv := fakeEngine(t)
	c, _ := NewClient(srv.URL, nil)
	ctx := context.Background()
	tests := []struct {
		name  string
		path  string
		body  string
		want  []uint32
		exact bool
	}{
		{"chat applies the template", ChatPath, `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"tools":[{"type":"function"}]}`, []uint32{10, 11, 901}, true},
		{"completion string", CompletionPath, `{"model":"m","prompt":"hello"}`, []uint32{105}, true},
		{"completion token ids need no request", CompletionPath, `{"prompt":[5,6,7]}`, []uint32{5, 6, 7}, true},
		{"batch prompt falls back", CompletionPath, `{"prompt":["a","b"]}`, ApproxTokens(nil, []byte(`["a","b"]`)), false},
		{"unknown path falls back", "/v1/embeddings", `{"messages":[{"role":"user","content":"hi"}]}`,
			ApproxTokens(nil, []byte("user\nhi\n")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, exact, err := c.Tokens(ctx, tt.path, []byte(tt.body))
			if err != nil || exact != tt.exact || !slices.Equal(got, tt.want) {
				t.Fatalf("got %v exact=%v err=%v, want %v exact=%v", got, exact, err, tt.want, tt.exact)
			}
		})
	}
	// Engine unreachable: the fallback.
	srv.Close()
	got, exact, err := c.Tokens(ctx, CompletionPath, []byte(`{"prompt":"abcd"}`))
	if err != nil || exact || !slices.Equal(got, ApproxTokens(nil, []byte("abcd"))) {
		t.Fatalf("fallback: %v %v %v", got, exact, err)
	}
	if _, _, err := c.Tokens(ctx, ChatPath, []byte(`not json`)); err == nil {
		t.Fatal("bad body accepted")
	}
}

func TestApproxTokens(t *testing.T) {
	got := ApproxTokens(nil, []byte("abcdefg"))
	want := []uint32{0xff616263, 0xff646566, 0xff670000}
	if !slices.Equal(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	// Prefix stability: a chat that appends messages extends its tokens.
	a, _ := PromptText(ChatPath, []byte(`{"messages":[{"role":"user","content":"find the bug"}]}`))
	b, _ := PromptText(ChatPath, []byte(`{"messages":[{"role":"user","content":"find the bug"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"grep"}}]},`+
		`{"role":"tool","content":[{"type":"text","text":"main.go:3"}]}]}`))
	ta, tb := ApproxTokens(nil, a), ApproxTokens(nil, b)
	full := len(a) / 3 // tokens made of whole bytes of a
	if !slices.Equal(ta[:full], tb[:full]) {
		t.Fatalf("appending messages changed the earlier pseudo-tokens:\n%x\n%x", ta, tb)
	}
	if !bytes.Contains(b, []byte("grep")) || !bytes.Contains(b, []byte("main.go:3")) {
		t.Fatalf("rendered %q", b)
	}
	for _, v := range tb {
		if v>>24 != 0xff {
			t.Fatalf("pseudo-token %x lacks the 0xff tag", v)
		}
	}
}

func TestEnsureStreamUsage(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"stream":true,"model":"m"}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":false}}`},
		{`{"stream":true,"stream_options":{"continuous_usage_stats":true}}`, `{"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`},
		{`{"stream":false}`, `{"stream":false}`},
		{`{"model":"m"}`, `{"model":"m"}`},
	}
	for _, tt := range tests {
		got, err := EnsureStreamUsage([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("EnsureStreamUsage(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if _, err := EnsureStreamUsage([]byte("[")); err == nil {
		t.Error("bad JSON accepted")
	}
}

func TestNewWorker(t *testing.T) {
	srv := fakeEngine(t)
	ctx := context.Background()
	w, err := NewWorker(ctx, WorkerConfig{ID: 9, URL: srv.URL, DPRanks: 2})
	if err != nil {
		t.Fatal(err)
	}
	if w.ID() != 9 || w.DPRanks() != 2 || w.BlockSize() != 16 || w.KVCapacityTokens() != (661+700)*16 {
		t.Fatalf("worker %d ranks %d bs %d capacity %d", w.ID(), w.DPRanks(), w.BlockSize(), w.KVCapacityTokens())
	}
	if w.Subscriber() != nil {
		t.Fatal("subscriber without Events config")
	}
	if _, err := NewWorker(ctx, WorkerConfig{URL: srv.URL, BlockSize: 32}); !errors.Is(err, ErrBlockSizeMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	w, err = NewWorker(ctx, WorkerConfig{URL: "http://127.0.0.1:1", BlockSize: 16, KVCapacityTokens: 1000,
		Events: &Config{Endpoint: "tcp://127.0.0.1:1", Sink: &recorder{}}})
	if err != nil {
		t.Fatalf("configured worker needs no metrics: %v", err)
	}
	if w.Subscriber() == nil || w.Subscriber().DPRanks() != 1 {
		t.Fatal("no subscriber")
	}
	if _, err := NewWorker(ctx, WorkerConfig{URL: "http://127.0.0.1:1"}); err == nil {
		t.Fatal("unreachable metrics accepted")
	}
	if _, err := NewWorker(ctx, WorkerConfig{URL: "localhost:8000"}); !errors.Is(err, ErrBadURL) {
		t.Fatalf("bad URL: %v", err)
	}
}
