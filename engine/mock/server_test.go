package mock

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// TestChatCacheTruthful: a second request resending the first prompt plus
// a suffix reports the first's full blocks as cached.
func TestChatCacheTruthful(t *testing.T) {
	s := start(t, Config{})
	text := words(300, "w")
	body := map[string]any{"model": s.Model(), "max_tokens": 4, "stream": true, "stream_options": map[string]bool{"include_usage": true},
		"messages": []map[string]string{{"role": "user", "content": text}}}
	usage := func(raw []byte) apiwire.Usage {
		var u *apiwire.Usage
		for _, line := range strings.Split(string(raw), "\n") {
			d, ok := strings.CutPrefix(line, "data: ")
			if !ok || d == "[DONE]" {
				continue
			}
			var c apiwire.ChatChunk
			if err := json.Unmarshal([]byte(d), &c); err != nil {
				t.Fatalf("chunk %q: %v", d, err)
			}
			if c.Usage != nil {
				u = c.Usage
			}
		}
		if u == nil || !strings.HasSuffix(string(raw), "data: [DONE]\n\n") {
			t.Fatalf("no usage or no [DONE] in\n%s", raw)
		}
		return *u
	}
	st, raw := post(t, s.URL()+"/v1/chat/completions", body)
	if st != 200 {
		t.Fatalf("status %d: %s", st, raw)
	}
	u1 := usage(raw)
	prompt1 := u1.PromptTokens
	if prompt1 != 300+3 || u1.CompletionTokens != 4 || u1.CachedTokens() != 0 {
		t.Fatalf("first usage %+v", u1)
	}
	body["messages"] = []map[string]string{{"role": "user", "content": text + " and more words"}}
	_, raw = post(t, s.URL()+"/v1/chat/completions", body)
	u2 := usage(raw)
	// The first prompt's <|user|> + 300 words are shared; its "<|end|>"
	// is not (the suffix comes before it).
	bs := s.BlockSize()
	if want := (1 + 300) / bs * bs; u2.CachedTokens() != want {
		t.Fatalf("second request cached %d, want %d (usage %+v)", u2.CachedTokens(), want, u2)
	}
}
