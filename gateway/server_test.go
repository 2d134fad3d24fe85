package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// limitServer serves an echo handler (it answers the body length it got,
// from BufferedBody) behind NewServer on loopback. hold, if set, is waited
// on by the handler before it answers.
func limitServer(t *testing.T, cfg ServerConfig, hold chan struct{}) (string, *Limiter, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, ok := BufferedBody(r)
		rest, _ := io.ReadAll(r.Body)
		if hold != nil {
			<-hold
		}
		fmt.Fprintf(w, "%d %v %d", len(b), ok, len(rest))
	})
	srv, err := NewServer(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ShapeErrors(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), srv.Handler.(*Limiter), reg
}

// errorShape checks an error reply's body is in the API family's shape and
// returns its type.
func errorShape(t *testing.T, anthropic bool, body []byte) string {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    int    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if anthropic && v.Type != "error" || !anthropic && v.Type != "" || v.Error.Message == "" || v.Error.Type == "" {
		t.Fatalf("error body %q not in the %s shape", body, map[bool]string{true: "Anthropic", false: "OpenAI"}[anthropic])
	}
	return v.Error.Type
}

func TestLimiterPassesBodies(t *testing.T) {
	url, lim, _ := limitServer(t, ServerConfig{}, nil)
	for _, chunked := range []bool{false, true} {
		body := bytes.Repeat([]byte("x"), 200_000)
		var rd io.Reader = bytes.NewReader(body)
		if chunked {
			rd = io.MultiReader(rd) // hides the length: chunked
		}
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", rd)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "200000 true 200000" {
			t.Fatalf("chunked %v: handler saw %q", chunked, got)
		}
	}
	if n := lim.BodyBytesInFlight(); n != 0 {
		t.Fatalf("%d bytes still reserved after the requests ended", n)
	}
}

func TestLimiterBodyTooLarge(t *testing.T) {
	url, _, reg := limitServer(t, ServerConfig{MaxBodyBytes: 1000}, nil)
	for _, c := range []struct {
		path      string
		anthropic bool
		chunked   bool
	}{{"/v1/chat/completions", false, false}, {"/v1/messages", true, false}, {"/v1/responses", false, true}, {"/v1/messages", true, true}} {
		var rd io.Reader = strings.NewReader(strings.Repeat("y", 1001))
		if c.chunked {
			rd = io.MultiReader(rd)
		}
		resp, err := http.Post(url+c.path, "application/json", rd)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("%s chunked %v: %d %q", c.path, c.chunked, resp.StatusCode, b)
		}
		errorShape(t, c.anthropic, b)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "body_too_large")); got != 4 {
		t.Fatalf("body_too_large counted %v, want 4", got)
	}
	// Exactly at the cap passes.
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", io.MultiReader(strings.NewReader(strings.Repeat("y", 1000))))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "1000 true 1000" {
		t.Fatalf("at the cap: %d %q", resp.StatusCode, b)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, reason string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "agentkv_gateway_rejected_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == reason {
				c.Add(m.Counter.GetValue())
			}
		}
	}
	return c
}

func TestLimiterHeaderTooLarge(t *testing.T) {
	url, _, reg := limitServer(t, ServerConfig{MaxHeaderBytes: 4096}, nil)
	for _, c := range []struct {
		path      string
		anthropic bool
	}{{"/v1/chat/completions", false}, {"/v1/messages", true}} {
		req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader("{}"))
		req.Header.Set("X-Session-Id", strings.Repeat("s", 6000))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%s: %d %q", c.path, resp.StatusCode, b)
		}
		errorShape(t, c.anthropic, b)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "header_too_large")); got != 2 {
		t.Fatalf("header_too_large counted %v", got)
	}
	// A 1 MiB header never reaches a handler: net/http refuses it, and
	// ShapeErrors puts its reply in the API's shape.
	for _, c := range []struct {
		path      string
		anthropic bool
	}{{"/v1/chat/completions", false}, {"/v1/messages", true}} {
		req, _ := http.NewRequest(http.MethodPost, url+c.path, strings.NewReader("{}"))
		req.Header.Set("X-Session-Id", strings.Repeat("s", 1<<20))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("1 MiB header: %d", resp.StatusCode)
		}
		errorShape(t, c.anthropic, b)
	}
}

// TestShapeErrors: requests net/http refuses before any handler runs (a
// control character in a header, a malformed header line, a bad
// Transfer-Encoding) get the API's error shape, and the connection closes.
func TestShapeErrors(t *testing.T) {
	url, _, _ := limitServer(t, ServerConfig{}, nil)
	addr := strings.TrimPrefix(url, "http://")
	for _, c := range []struct {
		name, req string
		code      int
		anthropic bool
	}{
		{"control character", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Session-Id: a\x01b\r\nContent-Length: 2\r\n\r\n{}", 400, false},
		{"control character, Messages", "POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Claude-Code-Session-Id: a\x7fb\r\nContent-Length: 2\r\n\r\n{}", 400, true},
		{"anthropic-version", "POST /v1/other HTTP/1.1\r\nHost: x\r\nAnthropic-Version: 2023-06-01\r\nBad Header: v\r\n\r\n", 400, true},
		{"transfer encoding", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
			if _, err := io.WriteString(conn, c.req); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("%d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			errorShape(t, c.anthropic, b)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("the connection stayed open: %v", err)
			}
		})
	}
	// A handler's own reply and a kept-alive connection are untouched.
	for range 2 {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "2 true 2" {
			t.Fatalf("%d %q", resp.StatusCode, b)
		}
	}
}

// A request whose Content-Length exceeds what is sent, socket held open,
// is answered 408 within the body read timeout.
func TestLimiterBodyReadTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	url, _, reg := limitServer(t, ServerConfig{BodyReadTimeout: timeout}, nil)
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":", path)
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: no reply: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, b)
		}
		errorShape(t, path == "/v1/messages", b)
		// The server then closes the connection (#34): it used to clear
		// the read deadline and block in net/http's post-handler drain
		// for as long as the client kept the socket open.
		if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
			t.Fatalf("%s: after the 408 the connection is still open (read %d, %v)", path, n, err)
		}
		c.Close()
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "body_timeout")); got != 2 {
		t.Fatalf("body_timeout counted %v", got)
	}
}

// TestStalledBodiesLeaveNoConnections: 50 clients announce a 200 KiB
// body, send a little of it and stall with their sockets open; after each
// has its 408 the server holds none of their connections (it counts them
// by http.Server.ConnState), though every client keeps its socket. Before
// #34's fix all 50 stayed established past the idle timeout.
func TestStalledBodiesLeaveNoConnections(t *testing.T) {
	const clients = 50
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
	srv, err := NewServer(h, ServerConfig{BodyReadTimeout: 300 * time.Millisecond, IdleTimeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if st == http.StateClosed || st == http.StateHijacked {
			delete(open, c)
		} else {
			open[c] = true
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ShapeErrors(ln)) }()
	defer srv.Close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < clients; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", 200<<10)
	}
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("client %d: no reply: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("client %d: %d", i, resp.StatusCode)
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}
	for deadline := time.Now().Add(2 * time.Minute); count() > 0; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections still established after their 408", count(), clients)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The read deadline ends with the body: a handler that streams for longer
// than BodyReadTimeout is not cut.
func TestLimiterLongReplyNotCut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 4; i++ {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(timeout):
			}
			fmt.Fprintf(w, "chunk %d\n", i)
			w.(http.Flusher).Flush()
		}
	})
	srv, err := NewServer(h, ServerConfig{BodyReadTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(b), "chunk") != 4 {
		t.Fatalf("reply %q, %v", b, err)
	}
}

// Bodies in flight are bounded all requests together: a body that would
// pass the bound is refused with 503 in the API's shape while another is
// held, and served once it is released (#22 item 4).
func TestLimiterBodyMemoryBound(t *testing.T) {
	hold := make(chan struct{})
	url, lim, reg := limitServer(t, ServerConfig{MaxBodyBytes: 600_000, MaxBodyBytesInFlight: 1_000_000}, hold)
	body := strings.Repeat("z", 600_000)
	var wg sync.WaitGroup
	wg.Add(1)
	first := make(chan string, 1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			first <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		first <- string(b)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for lim.BodyBytesInFlight() != 600_000 {
		if time.Now().After(deadline) {
			t.Fatalf("first body never reserved: %d", lim.BodyBytesInFlight())
		}
		time.Sleep(5 * time.Millisecond) // polling a real server, not timing
	}
	for _, c := range []struct {
		path      string
		anthropic bool
	}{{"/v1/chat/completions", false}, {"/v1/messages", true}} {
		resp, err := http.Post(url+c.path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s over the bound: %d %q", c.path, resp.StatusCode, b)
		}
		typ := errorShape(t, c.anthropic, b)
		if c.anthropic && typ != "overloaded_error" {
			t.Fatalf("Anthropic type %q", typ)
		}
	}
	// A small body still fits beside the held one.
	small := make(chan string, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(strings.Repeat("a", 1000)))
		if err != nil {
			small <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		small <- string(b)
	}()
	for lim.BodyBytesInFlight() != 601_000 {
		if time.Now().After(deadline) {
			t.Fatalf("small body never reserved: %d", lim.BodyBytesInFlight())
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(hold)
	if got := <-small; got != "1000 true 1000" {
		t.Fatalf("small body beside the held one: %q", got)
	}
	wg.Wait()
	if got := <-first; got != "600000 true 600000" {
		t.Fatalf("first: %q", got)
	}
	if got := testutil.ToFloat64(mustCounter(t, reg, "body_memory")); got != 2 {
		t.Fatalf("body_memory counted %v", got)
	}
	if n := lim.BodyBytesInFlight(); n != 0 {
		t.Fatalf("%d bytes still reserved", n)
	}
}

func TestServerConfigErrors(t *testing.T) {
	for _, c := range []ServerConfig{{BodyReadTimeout: -1}, {MaxHeaderBytes: -1}, {MaxBodyBytes: 10, MaxBodyBytesInFlight: 5}} {
		if _, err := NewServer(http.NotFoundHandler(), c); err == nil {
			t.Errorf("NewServer(%+v) accepted", c)
		}
	}
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
