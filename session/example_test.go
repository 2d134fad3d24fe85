package session_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/agentkv/agentkv/session"
)

func ExampleFromRequest() {
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("X-Claude-Code-Session-Id", "3f2a")
	r.Header.Set("X-Claude-Code-Agent-Id", "explore-1")
	ac, err := session.FromRequest(r, nil)
	fmt.Println(ac.SessionID, ac.ParentSessionID, ac.Harness, err)
	// Output: 3f2a/explore-1 3f2a claude-code <nil>
}

func ExampleRule() {
	// Teach the extractor a harness of your own without forking: add a row.
	rules := append(session.DefaultRules(), session.Rule{
		Harness: "my-agent",
		Session: []string{"X-My-Run-Id"},
		Parent:  []string{"X-My-Parent-Run-Id"},
	})
	e, err := session.New(session.Config{Rules: rules})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("X-My-Run-Id", "run-2")
	r.Header.Set("X-My-Parent-Run-Id", "run-1")
	ac, _ := e.FromRequest(r, nil)
	fmt.Println(ac.Harness, ac.SessionID, ac.ParentSessionID)
	// Output: my-agent run-2 run-1
}

func ExampleMiddleware() {
	h := session.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ac, ok := session.FromContext(r.Context())
		fmt.Println(ok, ac.SessionID, ac.ProgramID)
	}))
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		stringsReader(`{"model":"m","program_id":"prog-1"}`))
	r.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(httptest.NewRecorder(), r)
	// Output: true prog-1 prog-1
}

func ExampleTable() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tb, _ := session.NewTable(session.TableConfig{
		Now:      func() time.Time { return now },
		OnRemove: func(r session.Removal) { fmt.Println("removed", r.ID, r.Cause) },
	})
	tb.Begin(session.AgentContext{SessionID: "root"})
	tb.Begin(session.AgentContext{SessionID: "root/sub", ParentSessionID: "root"})
	tb.Bind("root/sub", session.Worker{ID: 3}, session.Soft)
	info, _ := tb.End("root/sub", session.Usage{InputTokens: 1200, OutputTokens: 80})
	fmt.Println(info.Phase, info.Usage.InputTokens, tb.Children("root", nil))
	b, _ := tb.Affinity("root/sub")
	fmt.Println(b.Worker, b.Mode)
	tb.End("root", session.Usage{})
	tb.Begin(session.AgentContext{SessionID: "root", Final: true})
	tb.End("root", session.Usage{})
	// Output:
	// acting 1200 [root/sub]
	// 3/0 soft
	// removed root ended
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
