package session_test

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/session"
)

// harnessCapture is what .ci/harness.sh's recording forwarder kept of a
// pinned harness's model calls (.ci/capture.py summarise): the stable
// header values, and the headers and body fields that carried the session
// id the harness reported, with that id written as <session>.
type harnessCapture struct {
	Harness           string            `json:"harness"`
	Version           string            `json:"version"`
	API               string            `json:"api"`
	Paths             []string          `json:"paths"`
	SessionHeaders    []string          `json:"session_headers"`
	SessionBodyFields []string          `json:"session_body_fields"`
	Headers           map[string]string `json:"headers"`
}

// captureBody builds a request body holding the captured body fields
// (dotted paths, "path=value").
func captureBody(t *testing.T, fields []string, sid string) []byte {
	body := map[string]any{"model": "m", "stream": true}
	for _, f := range fields {
		path, value, ok := strings.Cut(f, "=")
		require.True(t, ok, "body field %q", f)
		keys := strings.Split(path, ".")
		m := body
		for _, k := range keys[:len(keys)-1] {
			next, _ := m[k].(map[string]any)
			if next == nil {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[keys[len(keys)-1]] = strings.ReplaceAll(value, "<session>", sid)
	}
	b, err := json.Marshal(body)
	require.NoError(t, err)
	return b
}

// TestHarnessCaptures: the requests the pinned harnesses really sent (CI
// records them through the proxy and fails when a new version sends
// different ones) give the session id each harness reported, from the
// built-in rules, as the named harness. Pi on a chat-completions provider
// sends no identity at all: inference (agentkv.Config.Infer) is its only
// way into a session, so the extractor must not invent one.
func TestHarnessCaptures(t *testing.T) {
	want := map[string]string{
		"claude":         session.HarnessClaudeCode,
		"codex":          session.HarnessCodex,
		"opencode":       session.HarnessOpenCode,
		"pi-responses":   session.HarnessPi,
		"pi-completions": "",
	}
	files, err := filepath.Glob(filepath.Join("testdata", "harness", "*.json"))
	require.NoError(t, err)
	require.Len(t, files, len(want), "one capture per pinned harness")
	const sid = "0193a9a5-5f2e-7c1a-9d4e-2b7f3c8d1e60"
	for _, file := range files {
		raw, err := os.ReadFile(file)
		require.NoError(t, err)
		var c harnessCapture
		require.NoError(t, json.Unmarshal(raw, &c), file)
		harness, known := want[c.Harness]
		require.True(t, known, "%s: harness %q has no expectation here", file, c.Harness)
		t.Run(c.Harness+"@"+c.Version, func(t *testing.T) {
			require.NotEmpty(t, c.Paths)
			body := captureBody(t, c.SessionBodyFields, sid)
			req := httptest.NewRequest("POST", strings.SplitN(c.Paths[0], "?", 2)[0], bytes.NewReader(body))
			for k, v := range c.Headers {
				req.Header.Set(k, strings.ReplaceAll(v, "<session>", sid))
			}
			for _, k := range c.SessionHeaders {
				require.Contains(t, c.Headers, k, "a session header's value is captured")
			}
			ac, err := session.FromRequest(req, body)
			require.NoError(t, err)
			require.Equal(t, harness, ac.Harness)
			if harness == "" {
				require.Empty(t, ac.SessionID, "no identity sent: none made up")
				require.Empty(t, c.SessionHeaders)
				return
			}
			require.Equal(t, sid, ac.SessionID)
			// Every carrier alone still names the session (a proxy on the
			// way may drop the others).
			for _, k := range c.SessionHeaders {
				one := httptest.NewRequest("POST", req.URL.Path, nil)
				one.Header.Set(k, req.Header.Get(k))
				ac, err := session.FromRequest(one, nil)
				require.NoError(t, err)
				if ac.SessionID != "" {
					require.Equal(t, sid, ac.SessionID, "header %s alone", k)
				}
			}
		})
	}
}
