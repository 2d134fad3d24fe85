package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
)

// X-Agentkv-Route says why the worker was chosen; a client that names no
// session has its next turn routed by the session inferred for it.
func TestRouteHeaderInferred(t *testing.T) {
	f := newChatOnly(t)
	_, srv := testStack(t, StackConfig{InferSessions: &agentkv.InferConfig{}, Affinity: agentkv.AffinitySoft}, WorkerSpec{URL: f.srv.URL})
	msgs := []any{
		map[string]any{"role": "system", "content": strings.Repeat("You are a coding agent with tools. ", 80)},
		map[string]any{"role": "user", "content": strings.Repeat("Fix the failing test in the parser package. ", 20)},
	}
	post := func() string {
		body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 8, "messages": msgs})
		resp, b := postJSON(t, srv.URL+ChatPath, nil, string(body))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		return resp.Header.Get(HeaderRoute)
	}
	require.Contains(t, []string{"load", "prefix"}, post())
	msgs = append(msgs, map[string]any{"role": "assistant", "content": strings.Repeat("Looking at the parser now. ", 20)},
		map[string]any{"role": "user", "content": strings.Repeat("The test still fails with the same error. ", 20)})
	require.Equal(t, "inferred", post())
}
