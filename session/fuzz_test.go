package session

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzFromRequest feeds arbitrary header values and bodies to FromRequest
// and the middleware: no panic, every accepted id valid, the parent never
// equal to the session, and the middleware reads at most its cap while the
// next handler still sees the whole body.
func FuzzFromRequest(f *testing.F) {
	f.Add("X-Claude-Code-Session-Id", "s", "x-claude-code-agent-id", "a", `{"metadata":{"user_id":"{\"session_id\":\"s\"}"}}`)
	f.Add("x-codex-turn-metadata", `{"thread_id":"t","turn_id":"1"}`, "session-id", "s", `{"prompt_cache_key":"k"}`)
	f.Add("x-session-id", "o", "x-parent-session-id", "o", `{"program_id":7}`)
	f.Add("x-dynamo-session-id", "d", "x-dynamo-session-final", "true", `{"extra_body":{"program_id":"p"}}`)
	f.Add("x-dynamo-session-id", strings.Repeat("z", 300), "x", "\x00", `{"a":[[[[{"b":"\\"}`)
	f.Add("", "", "", "", `{"metadata":{"user_id":"user_1_account_2_session_3"}}`)
	f.Add("x-deepseek-harness-session-id", "d", "x-deepseek-harness-compact", "1", `{"user":"u"}`)
	f.Add("session_id", "p", "x-client-request-id", "0f8fad5b-d9cb-469f-a165-70867728950e", `{"session_params":{"session_id":5}}`)
	f.Add("x-codex-window-id", "t:4", "authorization", "Bearer b", `{"prompt_cache_key":"k"}`)
	const limit = 128
	e, err := New(Config{MaxBodyBytes: limit, BearerSession: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, body string) {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			r.Header[http.CanonicalHeaderKey(kv[0])] = []string{kv[1]}
		}
		ac, err := e.FromRequest(r, []byte(body))
		if err != nil {
			if ac != (AgentContext{}) {
				t.Fatalf("refused but returned %+v", ac)
			}
		} else if ac.Valid() {
			for _, id := range []string{ac.SessionID, ac.ParentSessionID, ac.AgentID, ac.TurnID, ac.ProgramID} {
				if e.check("fuzz", id) != nil {
					t.Fatalf("accepted invalid id %q in %+v", id, ac)
				}
			}
			if ac.ParentSessionID == ac.SessionID || ac.Harness == "" {
				t.Fatalf("bad context %+v", ac)
			}
		} else if ac != (AgentContext{}) {
			t.Fatalf("sessionless context not zero: %+v", ac)
		}

		src := &countingReader{r: strings.NewReader(body)}
		r.Body = src
		r.ContentLength = -1
		r.Header.Del("Content-Type")
		var got []byte
		var peeked int
		e.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			peeked = src.n
			got, _ = io.ReadAll(r.Body)
		})).ServeHTTP(httptest.NewRecorder(), r)
		if peeked > limit {
			t.Fatalf("middleware read %d bytes, cap %d", peeked, limit)
		}
		if !bytes.Equal(got, []byte(body)) {
			t.Fatalf("next saw %q, want %q", got, body)
		}
	})
}
