package session

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// countingReader counts how many bytes were read from it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) Close() error { return nil }

func TestMiddlewareNextSeesFullBody(t *testing.T) {
	big := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name    string
		cap     int64
		body    string
		headers [][2]string
		wantID  string
		peeked  int // bytes read before next ran; -1: don't check
	}{
		{name: "body fallback, body under cap", cap: 1 << 20,
			body: `{"program_id":"p1","messages":"` + big + `"}`, wantID: "p1", peeked: -1},
		{name: "body over cap: reads exactly the cap", cap: 512,
			body: `{"program_id":"p2","messages":"` + big + `"}`, wantID: "p2", peeked: 512},
		{name: "key beyond the cap is not seen", cap: 64,
			body: `{"messages":"` + big + `","program_id":"p3"}`, wantID: "", peeked: 64},
		{name: "headers name the session: body untouched", cap: 1 << 20,
			headers: [][2]string{{"x-session-id", "h1"}}, body: `{"program_id":"p4"}`, wantID: "h1", peeked: 0},
		{name: "non-JSON content type: body untouched", cap: 1 << 20,
			headers: [][2]string{{"Content-Type", "text/plain"}}, body: `{"program_id":"p5"}`, wantID: "", peeked: 0},
		{name: "body reading disabled", cap: -1, body: `{"program_id":"p6"}`, wantID: "", peeked: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(Config{MaxBodyBytes: tc.cap})
			if err != nil {
				t.Fatal(err)
			}
			src := &countingReader{r: strings.NewReader(tc.body)}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			r.Body = src
			r.ContentLength = -1
			for _, kv := range tc.headers {
				r.Header.Set(kv[0], kv[1])
			}
			var gotBody []byte
			var gotID string
			var peeked int
			h := e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				peeked = src.n
				gotID = IDFromContext(r.Context())
				gotBody, err = io.ReadAll(r.Body)
				if err != nil {
					t.Errorf("next: read body: %v", err)
				}
				r.Body.Close()
			}))
			h.ServeHTTP(httptest.NewRecorder(), r)
			if string(gotBody) != tc.body {
				t.Fatalf("next saw %d bytes, want the full %d", len(gotBody), len(tc.body))
			}
			if gotID != tc.wantID {
				t.Fatalf("session = %q, want %q", gotID, tc.wantID)
			}
			if tc.peeked >= 0 && peeked != tc.peeked {
				t.Fatalf("middleware read %d bytes before next, want %d", peeked, tc.peeked)
			}
		})
	}
}

type errReader struct {
	data []byte
	err  error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func (e *errReader) Close() error { return nil }

func TestMiddlewareReplaysReadError(t *testing.T) {
	boom := errors.New("client went away")
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body = &errReader{data: []byte(`{"program_id":"p"`), err: boom}
	r.ContentLength = -1
	var got []byte
	var rerr error
	Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, rerr = io.ReadAll(r.Body)
	})).ServeHTTP(httptest.NewRecorder(), r)
	if string(got) != `{"program_id":"p"` || !errors.Is(rerr, boom) {
		t.Fatalf("next got %q, %v; want the prefix then the error", got, rerr)
	}
}

func TestMiddlewareContext(t *testing.T) {
	var got AgentContext
	var ok bool
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok = FromContext(r.Context())
	}))
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(nil))
	r.Header.Set("X-Claude-Code-Session-Id", "s1")
	r.Header.Set("X-Claude-Code-Agent-Id", "a1")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if !ok || got.SessionID != "s1/a1" || got.ParentSessionID != "s1" {
		t.Fatalf("context = %+v, %v", got, ok)
	}
	r = httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("X-Session-Id", "bad\x01id")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if ok {
		t.Fatalf("refused request has a context: %+v", got)
	}
}
