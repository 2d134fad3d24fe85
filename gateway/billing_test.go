package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBillingStripHitRate measures what stripping Claude Code's billing
// preamble is worth: eight sessions share a system prompt and tools (as
// every Claude Code session does) but each carries its own billing line (the
// digits follow the first prompt, as captured from claude -p 2.1.332). The
// router's expected cached tokens (X-Agentkv-Cached-Tokens) over the
// sessions' first turns give the prefix hit rate with and without the strip.
func TestBillingStripHitRate(t *testing.T) {
	system := strings.Repeat("You are Claude Code, an interactive agent that helps with software engineering tasks. ", 60)
	run := func(strip bool) (hit float64) {
		f := newChatOnly(t)
		_, srv := testStack(t, StackConfig{Gateway: Config{StripBillingHeader: strip}}, WorkerSpec{URL: f.srv.URL})
		var cached, prompt int
		for i := 0; i < 8; i++ {
			body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 8,
				"system": []any{
					map[string]any{"type": "text", "text": fmt.Sprintf("x-anthropic-billing-header: cc_version=2.1.332.%03x; cc_entrypoint=sdk-cli;", 0xb8+i*0x1f)},
					map[string]any{"type": "text", "text": system, "cache_control": map[string]any{"type": "ephemeral"}},
				},
				"tools":    []any{map[string]any{"name": "Bash", "description": strings.Repeat("Run a shell command. ", 40), "input_schema": map[string]any{"type": "object"}}},
				"messages": []any{map[string]any{"role": "user", "content": fmt.Sprintf("task number %d", i)}}})
			resp, b := postJSON(t, srv.URL+MessagesPath, map[string]string{"X-Claude-Code-Session-Id": fmt.Sprint("cc-", i)}, string(body))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			c, err := strconv.Atoi(resp.Header.Get(HeaderCachedTokens))
			require.NoError(t, err)
			up, _, _ := f.last()
			msgs, _ := json.Marshal(up["messages"])
			tools, _ := json.Marshal(up["tools"])
			if i > 0 { // the first session warms the cache
				cached += c
				prompt += len(msgs) + len(tools)
			}
		}
		return float64(cached) / float64(prompt)
	}
	with, without := run(true), run(false)
	t.Logf("prefix hit rate of a new session's first turn: %.1f%% with the billing line stripped, %.1f%% without", 100*with, 100*without)
	require.Greater(t, with, 0.9, "stripped, the shared system prompt and tools are cached")
	// Unstripped, only the tools (which this engine's template renders
	// before the messages) are shared: the billing line in the first
	// system block makes the rest of every session's prefix its own.
	require.Less(t, without, 0.25)
}
