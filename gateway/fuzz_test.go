package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
)

// FuzzGatewayRequest: any body on any API gets a deliberate status (never
// a 5xx of the gateway's own, never a panic), and no request leaks load.
func FuzzGatewayRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","input":"hi","stream":true}`, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{`, `{"messages":[null]}`, `{"input":[{}]}`} {
		f.Add(byte(0), []byte(s))
		f.Add(byte(2), []byte(s))
		f.Add(byte(3), []byte(s))
	}
	cf := &chatOnly{cachedTokens: 1}
	cf.srv = httptest.NewServer(http.HandlerFunc(cf.serve))
	defer cf.srv.Close()
	r, err := agentkv.New(agentkv.Config{BlockSize: 16, Index: agentkv.IndexApproximate})
	require.NoError(f, err)
	require.NoError(f, r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
		return agentkv.WorkerInfo{ID: 0, BlockSize: 16, KVCapacityTokens: 1 << 16}
	})))
	g, err := New(Config{Router: r, Workers: []Worker{{ID: 0, URL: cf.srv.URL}}, MaxBodyBytes: 1 << 16})
	require.NoError(f, err)
	apis := []API{Chat, Completions, Responses, Messages, CountTokens}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		a := apis[int(which)%len(apis)]
		req := httptest.NewRequest(http.MethodPost, a.Path(), bytes.NewReader(body))
		req.Header.Set("X-Session-Id", "fuzz")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK, rec.Code == http.StatusBadRequest, rec.Code == http.StatusRequestEntityTooLarge:
		case rec.Code == http.StatusNotFound && a == Completions && strings.Contains(rec.Body.String(), "NotFoundError"):
			// The chat-only engine's own 404 for text completions, passed through.
		default:
			t.Fatalf("%s: status %d for %q: %s", a, rec.Code, body, rec.Body.String())
		}
		for _, w := range r.Workers() {
			require.Equal(t, 0, r.WorkerLoad(w).Requests, "a request leaked its load")
		}
	})
}

// FuzzShapeReply: rewriting net/http's error reply never panics, whatever
// request start (untrusted) was read before it, and gives a JSON body.
func FuzzShapeReply(f *testing.F) {
	f.Add([]byte("431 Request Header Fields Too Large"), []byte("431 Request Header Fields Too Large"), []byte("POST /v1/messages HTTP/1.1\r\nHost: x\r\n"))
	f.Add([]byte("400 Bad Request"), []byte("400 Bad Request: invalid header name"), []byte("GET / HTTP/1.1\r\nanthropic-version: 1\r\n"))
	f.Add([]byte("x"), []byte(""), []byte(""))
	f.Fuzz(func(t *testing.T, status, text, head []byte) {
		out := shapeReply(status, text, head)
		if out == nil {
			return
		}
		_, body, ok := bytes.Cut(out, []byte("\r\n\r\n"))
		if !ok || !json.Valid(body) {
			t.Fatalf("reply %q", out)
		}
	})
}
