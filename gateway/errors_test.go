package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// TestRejectsInCallersShape: bad requests get errors in the caller's API
// family and leave the router untouched.
func TestRejectsInCallersShape(t *testing.T) {
	f := newChatOnly(t)
	s, srv := testStack(t, StackConfig{Gateway: Config{MaxBodyBytes: 4096}}, WorkerSpec{URL: f.srv.URL})
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`
	for _, tc := range []struct {
		name, method, path, body string
		hdr                      map[string]string
		code                     int
		anthropic                bool
	}{
		{"chat-not-json", "POST", ChatPath, `{"model":`, nil, 400, false},
		{"responses-not-object", "POST", ResponsesPath, `[1]`, nil, 400, false},
		{"responses-no-input", "POST", ResponsesPath, `{"model":"m"}`, nil, 400, false},
		{"responses-previous-id", "POST", ResponsesPath, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`, nil, 400, false},
		{"messages-not-json", "POST", MessagesPath, `nope`, nil, 400, true},
		{"messages-bad-role", "POST", MessagesPath, `{"model":"m","messages":[{"role":"tool","content":"x"}]}`, nil, 400, true},
		{"messages-oversize", "POST", MessagesPath, big, nil, 413, true},
		{"chat-oversize", "POST", ChatPath, big, nil, 413, false},
		{"count-tokens-empty", "POST", CountTokensPath, ``, nil, 400, true},
		{"messages-get", "GET", MessagesPath, ``, nil, 405, true},
		{"responses-get", "GET", ResponsesPath, ``, nil, 405, false},
		{"unknown-openai", "POST", "/v1/embeddings", `{}`, nil, 404, false},
		{"unknown-anthropic", "POST", "/v1/complete", `{}`, map[string]string{"anthropic-version": "2023-06-01"}, 404, true},
		{"bad-session-id", "POST", ChatPath, `{"model":"m","messages":[{"role":"user","content":"x"}]}`,
			map[string]string{"X-Session-Id": strings.Repeat("s", 300)}, 400, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Message string `json:"message"`
					Code    *int   `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.NotEmpty(t, e.Error.Message)
			require.NotEmpty(t, e.Error.Type)
			if tc.anthropic {
				require.Equal(t, "error", e.Type)
				require.Nil(t, e.Error.Code)
			} else {
				require.Empty(t, e.Type)
				require.NotNil(t, e.Error.Code)
				require.Equal(t, tc.code, *e.Error.Code)
			}
		})
	}
	f.mu.Lock()
	require.Empty(t, f.bodies, "nothing reached the worker")
	f.mu.Unlock()
	require.Zero(t, s.Router().Sessions().Len(), "no session was recorded")
	for _, w := range s.Router().Workers() {
		require.Equal(t, agentkv.Load{}, s.Router().WorkerLoad(w))
	}
}

func TestWorkerErrorStatus(t *testing.T) {
	f := newChatOnly(t)
	_, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL, Native: APISet(Chat, Completions, Responses)})
	// A native Responses request reaches the worker's /v1/responses, which
	// this engine lacks: its 404 passes through unchanged.
	resp, b := postJSON(t, srv.URL+ResponsesPath, nil, `{"model":"m","input":"hi"}`)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.JSONEq(t, `{"error":{"message":"not found","type":"NotFoundError","code":404}}`, string(b))
	// A translated Messages request that the worker refuses gets the
	// worker's status in Anthropic's shape.
	f.srv.Close()
	resp, b = postJSON(t, srv.URL+MessagesPath, nil, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusBadGateway, resp.StatusCode)
	require.Contains(t, string(b), `"type":"error"`)
	require.Contains(t, string(b), "cannot reach the worker")
}

func TestSessionFinalEndsSession(t *testing.T) {
	f := newChatOnly(t)
	s, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
	for _, tc := range []struct{ path, body string }{
		{ChatPath, `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{ResponsesPath, `{"model":"m","input":"x"}`},
		{MessagesPath, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`},
	} {
		id := "fin-" + tc.path
		resp, b := postJSON(t, srv.URL+tc.path, map[string]string{"X-Dynamo-Session-Id": id}, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		_, ok := s.Router().Sessions().Get(id)
		require.True(t, ok, tc.path)
		resp, b = postJSON(t, srv.URL+tc.path, map[string]string{"X-Dynamo-Session-Id": id, "X-Dynamo-Session-Final": "true"}, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		_, ok = s.Router().Sessions().Get(id)
		require.False(t, ok, "%s: the final request freed the session", tc.path)
	}
}

// TestProgramRelease: ThunderAgent clients put program_id in the body (or
// extra_body) on every API and end the program with POST /programs/release.
func TestProgramRelease(t *testing.T) {
	f := newChatOnly(t)
	s, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL})
	for i, tc := range []struct{ path, body string }{
		{ChatPath, `{"model":"m","program_id":"prog-1","messages":[{"role":"user","content":"x"}]}`},
		{ResponsesPath, `{"model":"m","extra_body":{"program_id":"prog-2"},"input":"x"}`},
		{MessagesPath, `{"model":"m","program_id":"prog-3","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`},
	} {
		id := "prog-" + itoa(i+1)
		resp, b := postJSON(t, srv.URL+tc.path, nil, tc.body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		_, ok := s.Router().Sessions().Get(id)
		require.True(t, ok, tc.path)
		resp, b = postJSON(t, srv.URL+ReleasePath, nil, `{"program_id":"`+id+`"}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.JSONEq(t, `{"program_id":"`+id+`","released":true}`, string(b))
		_, ok = s.Router().Sessions().Get(id)
		require.False(t, ok, "%s: released", tc.path)
	}
	resp, b := postJSON(t, srv.URL+ReleasePath, nil, `{"id":"x"}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
	// The SGLang gateway's routing key names the session too, and reaches
	// the worker.
	resp, b = postJSON(t, srv.URL+ChatPath, map[string]string{"X-SMG-Routing-Key": "smg-1"},
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	_, ok := s.Router().Sessions().Get("smg-1")
	require.True(t, ok)
	_, hdr, _ := f.last()
	require.Equal(t, "smg-1", hdr.Get("X-Smg-Routing-Key"))
}

// TestErrorBodyIsAPIWire: the gateway answers every status with the error
// body the mock worker (apiwire's one table) answers with.
func TestErrorBodyIsAPIWire(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 405, 413, 429, 500, 502, 503, 504, 529} {
		want, err := json.Marshal(apiwire.NewOpenAIError(code, "m"))
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(ErrorBody(false, code, "m")), "%d", code)
		want, err = json.Marshal(apiwire.NewAnthropicError(code, "m"))
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(ErrorBody(true, code, "m")), "%d", code)
	}
}
