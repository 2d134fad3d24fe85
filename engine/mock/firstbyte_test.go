package mock

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestChatStreamStartsWithFirstToken: as vLLM, the stream's headers come
// at once and its first event (the role chunk) with the first token, so a
// client's (or a gateway's) first byte is the time to first token.
func TestChatStreamStartsWithFirstToken(t *testing.T) {
	s, err := Start(Config{Speedup: 1000, MinOutput: 3, MaxOutput: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetPaused(true) // no step runs: no token
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"first byte"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("headers: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() != "" {
				lines <- sc.Text()
			}
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		t.Fatalf("an event before any token: %s", l)
	case <-time.After(50 * time.Millisecond): // a negative check: it can only pass wrongly, never fail wrongly
	}
	s.SetPaused(false)
	first := <-lines
	if !strings.Contains(first, `"role":"assistant"`) {
		t.Fatalf("first event: %s", first)
	}
	if second := <-lines; !strings.Contains(second, `"content":"`) || strings.Contains(second, `"content":""`) {
		t.Fatalf("second event is not the first token: %s", second)
	}
	n := 2
	for range lines {
		n++
	}
	if n != 1+3+1+1 { // role, 3 tokens, finish, [DONE]
		t.Fatalf("%d events", n)
	}
}
