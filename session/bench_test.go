package session

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// BenchmarkFromRequest measures header-only requests of each harness (the
// target: ≤ 2 µs and ≤ 4 allocations) and one body fallback.
func BenchmarkFromRequest(b *testing.B) {
	meta := `{"session_id":"019a-sess","thread_id":"019a-thread","agent_name":"worker","turn_id":"t-12","sandbox":"workspace-write"}`
	common := [][2]string{
		{"Content-Type", "application/json"}, {"Accept", "text/event-stream"},
		{"User-Agent", "agent/1.0"}, {"Authorization", "Bearer x"},
	}
	for _, bc := range []struct {
		name    string
		headers [][2]string
		body    string
	}{
		{"claude-code-root", [][2]string{{"X-Claude-Code-Session-Id", "5b0c7a4e-2f1d-4f7e-9c1a-0d6b1c9e8f00"}}, ""},
		{"claude-code-subagent", [][2]string{{"X-Claude-Code-Session-Id", "5b0c7a4e-2f1d-4f7e-9c1a-0d6b1c9e8f00"},
			{"X-Claude-Code-Agent-Id", "a1f3c9"}}, ""},
		{"codex", [][2]string{{"Session-Id", "019a-sess"}, {"Thread-Id", "019a-thread"},
			{"X-Codex-Window-Id", "w1"}, {"X-Codex-Turn-Metadata", meta}}, ""},
		{"opencode", [][2]string{{"X-Session-Id", "ses_01"}, {"X-Session-Affinity", "ses_01"}}, ""},
		{"dynamo", [][2]string{{"X-Dynamo-Session-Id", "d1"}, {"X-Dynamo-Parent-Session-Id", "d0"},
			{"X-Dynamo-Session-Final", "false"}}, ""},
		{"none", nil, ""},
		{"body-metadata-4KiB", nil, `{"model":"claude","messages":[{"role":"user","content":"` +
			strings.Repeat("lorem ipsum ", 340) + `"}],"metadata":{"user_id":"{\"session_id\":\"s\"}"}}`},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
		for _, kv := range append(common, bc.headers...) {
			r.Header.Set(kv[0], kv[1])
		}
		var body []byte
		if bc.body != "" {
			body = []byte(bc.body)
		}
		b.Run(bc.name, func(b *testing.B) {
			if _, err := FromRequest(r, body); err != nil {
				b.Fatal(err)
			}
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			c0 := threadCPU()
			for b.Loop() {
				FromRequest(r, body)
			}
			b.ReportMetric(float64((threadCPU()-c0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

func BenchmarkTable(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 16} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			tb, err := NewTable(TableConfig{MaxSessions: n})
			if err != nil {
				b.Fatal(err)
			}
			ids := make([]string, 2*n)
			for i := range ids {
				ids[i] = fmt.Sprint("session-", i)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				id := ids[i%len(ids)]
				tb.Begin(AgentContext{SessionID: id})
				tb.End(id, Usage{InputTokens: 1})
				i++
			}
		})
	}
}
