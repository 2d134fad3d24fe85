package gateway

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// sessionTokenizer is benchTokenizer with TokenizeChatSession, recording
// which path each request took.
type sessionTokenizer struct {
	benchTokenizer
	mu       sync.Mutex
	sessions []string // "" for TokenizeChat
}

func (s *sessionTokenizer) TokenizeChat(body []byte) ([]uint32, error) {
	s.mu.Lock()
	s.sessions = append(s.sessions, "")
	s.mu.Unlock()
	return s.benchTokenizer.TokenizeChat(body)
}

func (s *sessionTokenizer) TokenizeChatSession(session string, body []byte) ([]uint32, error) {
	s.mu.Lock()
	s.sessions = append(s.sessions, session)
	s.mu.Unlock()
	return s.benchTokenizer.TokenizeChat(body)
}

// TestSessionTokenizer: a worker's SessionTokenizer tokenizes the turns of
// a request with a session incrementally (under its session id), and a
// request without one whole.
func TestSessionTokenizer(t *testing.T) {
	f := newChatOnly(t)
	tok := &sessionTokenizer{}
	_, srv := testStack(t, StackConfig{}, WorkerSpec{URL: f.srv.URL, Tokenizer: tok})
	body := `{"model":"m","messages":[{"role":"user","content":"list files"}]}`
	resp, b := postJSON(t, srv.URL+ChatPath, map[string]string{"X-Dynamo-Session-Id": "agent-7"}, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp, b = postJSON(t, srv.URL+ChatPath, nil, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	tok.mu.Lock()
	defer tok.mu.Unlock()
	require.Equal(t, []string{"agent-7", ""}, tok.sessions[len(tok.sessions)-2:])
}
