package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkv/agentkv/session"
)

// seen is one request as the fake server saw it.
type seen struct {
	Header    http.Header
	Body      map[string]any
	Prompt    string
	Ctx       session.AgentContext
	RequestID string
	Session   string // from X-Request-Id: the replay's session id
	Turn      int
	Arrive    time.Time
	End       time.Time
}

// fakeServer is an OpenAI-compatible server that streams max_tokens chunks
// of "x" and a final usage chunk. Behaviour per request comes from mode.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	// mode picks the reply: "" or "ok", "500", "429", "malformed",
	// "hang", "hang-mid", "cut", "streamerr", "nousage", "json".
	mode func(s *seen) string
	// cached gives usage.prompt_tokens_details.cached_tokens; nil omits it.
	cached func(s *seen) int
	// before runs when a request arrives, before the reply (blocking is
	// allowed: a barrier).
	before func(s *seen)
	// models is the /v1/models listing; nil answers 404.
	models []string

	mu       sync.Mutex // guards the fields below
	reqs     []*seen
	inflight map[string]int
	overlaps []string
}

func newFake(t *testing.T) *fakeServer {
	f := &fakeServer{t: t, inflight: map[string]int{}, models: []string{"fake-model"}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) URL() string { return f.srv.URL }

func (f *fakeServer) requests() []*seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*seen(nil), f.reqs...)
}

func (f *fakeServer) handle(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		if f.models == nil {
			http.NotFound(w, r)
			return
		}
		var list struct {
			Data []map[string]string `json:"data"`
		}
		for _, m := range f.models {
			list.Data = append(list.Data, map[string]string{"id": m})
		}
		_ = json.NewEncoder(w).Encode(list)
		return
	}
	if r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/v1/completions" {
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s := &seen{Header: r.Header.Clone(), Arrive: time.Now(), RequestID: r.Header.Get("X-Request-Id")}
	if err := json.Unmarshal(body, &s.Body); err != nil {
		f.t.Errorf("request body is not JSON: %v", err)
	}
	if msgs, ok := s.Body["messages"].([]any); ok && len(msgs) == 1 {
		s.Prompt, _ = msgs[0].(map[string]any)["content"].(string)
	} else {
		s.Prompt, _ = s.Body["prompt"].(string)
	}
	s.Ctx, _ = session.FromRequest(r, nil)
	if i := strings.LastIndexByte(s.RequestID, '/'); i >= 0 {
		s.Session = s.RequestID[:i]
		s.Turn, _ = strconv.Atoi(s.RequestID[i+1:])
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, s)
	if f.inflight[s.Session] > 0 {
		f.overlaps = append(f.overlaps, s.RequestID)
	}
	f.inflight[s.Session]++
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[s.Session]--
		s.End = time.Now()
		f.mu.Unlock()
	}()
	if f.before != nil {
		f.before(s)
	}
	mode := ""
	if f.mode != nil {
		mode = f.mode(s)
	}
	n := 1
	if v, ok := s.Body["max_tokens"].(float64); ok {
		n = min(int(v), 8)
	}
	words := len(strings.Fields(s.Prompt))
	usage := map[string]any{"prompt_tokens": words, "completion_tokens": n, "total_tokens": words + n}
	if f.cached != nil {
		usage["prompt_tokens_details"] = map[string]int{"cached_tokens": f.cached(s)}
	}
	switch mode {
	case "500", "429":
		code, _ := strconv.Atoi(mode)
		http.Error(w, `{"error":{"message":"fake failure"}}`, code)
		return
	case "hang":
		<-r.Context().Done()
		return
	case "json":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"content": "xx"}, "finish_reason": "stop"}},
			"usage":   usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	emit := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	emit(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"role": "assistant", "content": ""}}}})
	for i := 0; i < n; i++ {
		if mode == "malformed" && i == 0 {
			fmt.Fprint(w, "data: {\"choices\": [oops\n\n")
			continue
		}
		emit(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{"content": "x"}}}})
		if mode == "hang-mid" {
			<-r.Context().Done()
			return
		}
		if mode == "cut" {
			panic(http.ErrAbortHandler) // drop the connection mid-stream
		}
	}
	if mode == "streamerr" {
		emit(map[string]any{"error": map[string]any{"message": "engine died"}})
	}
	emit(map[string]any{"choices": []any{map[string]any{"delta": map[string]any{}, "finish_reason": "length"}}})
	if mode != "nousage" {
		emit(map[string]any{"choices": []any{}, "usage": usage})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// fakeClock is a clock whose Sleep advances it at once and records the
// durations asked for.
type fakeClock struct {
	mu     sync.Mutex // guards now and sleeps
	now    time.Time
	sleeps []time.Duration
}

func newClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// noSleep returns at once (for tests that do not look at time).
func noSleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// barrier releases its waiters once n have arrived; a waiter gives up
// (failing the test) after two minutes so a broken scheduler cannot hang.
type barrier struct {
	mu   sync.Mutex // guards n
	n    int
	open chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: make(chan struct{})} }

func (b *barrier) wait(t *testing.T, what string) {
	b.mu.Lock()
	if b.n--; b.n == 0 {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
	case <-time.After(2 * time.Minute): // a bound for a broken scheduler, far above a loaded machine's delays
		t.Errorf("barrier %s: not all requests arrived together (concurrency missing)", what)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
