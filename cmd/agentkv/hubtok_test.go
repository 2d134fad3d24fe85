package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
)

// hubSnapshot writes model's tokenizer (hftok's test BPE and its tools
// chat template) into a Hugging Face hub cache at hub, as
// huggingface_hub lays it out.
func hubSnapshot(t *testing.T, hub, model string) {
	t.Helper()
	repo := filepath.Join(hub, "models--"+strings.ReplaceAll(model, "/", "--"))
	dir := filepath.Join(repo, "snapshots", "0123abcd")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "refs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123abcd"), 0o644))
	tok, err := os.ReadFile("../../hftok/testdata/tiny.json")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644))
	tmpl, err := os.ReadFile("../../hftok/testdata/chat/tools.jinja")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), tmpl, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"),
		[]byte(`{"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>"}`), 0o644))
}

// TestProxyTokenizerFromHubCache: with no --tokenizer the proxy asks each
// --worker for its model, finds that model's tokenizer in the Hugging Face
// cache and tokenizes in process (the metrics count it); a worker whose
// model is not cached stays on /tokenize, and the log says why for each.
func TestProxyTokenizerFromHubCache(t *testing.T) {
	hub := t.TempDir()
	hubSnapshot(t, hub, "acme/tiny")
	t.Setenv("HF_HUB_CACHE", hub)
	var workers []string
	for _, model := range []string{"acme/tiny", "acme/absent"} {
		m, err := mock.Start(mock.Config{Model: model, Aliases: []string{"*"}, Events: "tcp://127.0.0.1:0", Speedup: 1000})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		workers = append(workers, "--worker", m.URL()+",events="+m.EventsEndpoint())
	}

	base, stderr, done := runProxyInProcess(t, append([]string{"--listen", "127.0.0.1:0"}, workers...)...)
	t.Cleanup(func() {
		self, _ := os.FindProcess(os.Getpid())
		_ = self.Signal(os.Interrupt)
		<-done
	})

	// Both workers' paths are logged (progress: the lines, 2-minute bound).
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(stderr.String(), "worker tokenizes in process") ||
		!strings.Contains(stderr.String(), "no tokenizer for its model") {
		require.True(t, time.Now().Before(deadline), "no tokenizer line for each worker: %s", stderr.String())
		time.Sleep(10 * time.Millisecond)
	}
	log := stderr.String()
	require.Regexp(t, `worker tokenizes in process.*model=acme/tiny dir=`+regexpQuote(hub), log)
	require.Regexp(t, `no tokenizer for its model.*acme/absent`, log)

	// A chat request is tokenized in process now (the first one: the
	// background check against the mock's word tokenizer then turns this
	// tokenizer off, as it should).
	resp, b := post(t, base+"/v1/chat/completions", nil, chatBody(t, false, chatMsg{"user", "hello from the hub cache"}))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), `agentkv_gateway_prompt_tokens_source_total{api="chat",source="inprocess"} 1`)
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `.`, `\.`, `+`, `\+`, `(`, `\(`, `)`, `\)`)
	return r.Replace(s)
}
