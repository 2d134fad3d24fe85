package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestProxyAnswersWhileStarting: until its stack is built (without
// --block-size it waits for a first worker) the proxy answers /healthz
// 200, /readyz 503, its metrics, and API requests 503 in their API's
// error shape with Retry-After; then the stack's handler takes over. It
// used to listen only once a worker answered: a liveness probe or a load
// balancer saw a refused connection.
func TestProxyAnswersWhileStarting(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "agentkv_test_starting_total", Help: "test"})
	reg.MustRegister(c)
	c.Inc()
	late := &lateHandler{starting: startingHandler("/metrics", reg)}
	srv := httptest.NewServer(late)
	defer srv.Close()
	do := func(method, path, anthropic string) (int, http.Header, string) {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"model":"m","messages":[]}`))
		require.NoError(t, err)
		if anthropic != "" {
			req.Header.Set("Anthropic-Version", anthropic)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	code, _, body := do(http.MethodGet, "/healthz", "")
	require.Equal(t, http.StatusOK, code)
	require.True(t, strings.HasPrefix(body, "ok: live"), body)
	code, _, body = do(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "waiting for a worker")
	code, _, body = do(http.MethodGet, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "agentkv_test_starting_total 1")
	for _, tc := range []struct{ path, anthropic, shape string }{
		{"/v1/chat/completions", "", "openai"}, {"/v1/responses", "", "openai"},
		{"/v1/messages", "", "anthropic"}, {"/v1/models", "2023-06-01", "anthropic"},
	} {
		code, hdr, body := do(http.MethodPost, tc.path, tc.anthropic)
		require.Equal(t, http.StatusServiceUnavailable, code, tc.path)
		require.Equal(t, "1", hdr.Get("Retry-After"), tc.path)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		require.Contains(t, e.Error.Message, "starting", body)
		require.Equal(t, tc.shape == "anthropic", e.Type == "error", "%s: %s", tc.path, body)
	}
	// The stack is up: its handler answers everything.
	late.set(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "stack "+r.URL.Path) }))
	for _, p := range []string{"/healthz", "/readyz", "/v1/chat/completions"} {
		code, _, body := do(http.MethodGet, p, "")
		require.Equal(t, http.StatusOK, code, p)
		require.Equal(t, "stack "+p, body)
	}
}
