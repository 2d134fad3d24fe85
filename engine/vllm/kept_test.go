package vllm

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rawEngine is a TCP server whose replies the test writes byte for byte:
// serve runs once per accepted connection. It counts the connections.
type rawEngine struct {
	url   string
	conns atomic.Int32
}

func newRawEngine(t *testing.T, serve func(n int32, c net.Conn, br *bufio.Reader)) *rawEngine {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &rawEngine{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close() // a kept connection's serve waits for a request
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := e.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(n, c, bufio.NewReader(c))
			}()
		}
	}()
	return e
}

// readTokenize reads one request and checks it is the /tokenize POST with
// its whole body.
func readTokenize(br *bufio.Reader) error {
	req, err := http.ReadRequest(br)
	if err != nil {
		return err
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return err
	}
	if req.Method != http.MethodPost || req.URL.Path != "/tokenize" || int64(len(b)) != req.ContentLength ||
		req.Header.Get("Content-Type") != "application/json" || !bytes.Contains(b, []byte(`"prompt":"hello"`)) {
		return fmt.Errorf("%w: %s %s %q", errBadRequest, req.Method, req.URL, b)
	}
	return nil
}

const (
	tokReply  = `{"count":3,"max_model_len":8,"tokens":[1,2,3]}`
	tokBody   = `{"model":"m","prompt":"hello"}`
	plainTail = "Content-Length: 46\r\n\r\n" + tokReply
)

func tokenizeHello(c *Client, ctx context.Context) ([]uint32, error) {
	return c.Tokenize(ctx, CompletionPath, []byte(tokBody))
}

// TestKeptReplies: the direct /tokenize path reads each shape of reply
// right, keeps the connection exactly when the reply allows, and a
// connection it kept carries the next request cleanly.
func TestKeptReplies(t *testing.T) {
	tests := []struct {
		name  string
		reply string // the first request's reply
		close bool   // the server closes after it
		err   error  // want from the first Tokenize (nil: ids 1,2,3)
		conns int32  // connections the two requests take
	}{
		{name: "content length", reply: "HTTP/1.1 200 OK\r\n" + plainTail, conns: 1},
		{name: "chunked with trailers", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"5\r\n{\"cou\r\n29;ext=1\r\nnt\":3,\"max_model_len\":8,\"tokens\":[1,2,3]}\r\n0\r\nX-Trailer: a\r\nX-More: b\r\n\r\n", conns: 1},
		{name: "early hints first", reply: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\n" + plainTail, conns: 1},
		{name: "header case and spaces", reply: "HTTP/1.1 200 OK\r\ncontent-LENGTH:   46 \r\nCONNECTION: Keep-Alive\r\n\r\n" + tokReply, conns: 1},
		{name: "connection close", reply: "HTTP/1.1 200 OK\r\nConnection: close\r\n" + plainTail, close: true, conns: 2},
		{name: "HTTP/1.0 to the end", reply: "HTTP/1.0 200 OK\r\n\r\n" + tokReply, close: true, conns: 2},
		{name: "HTTP/1.0 keep-alive", reply: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n" + plainTail, conns: 1},
		{name: "error status", reply: "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom", err: ErrStatus, conns: 1},
		{name: "reply not JSON", reply: "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnope", err: errAny, conns: 1},
		{name: "malformed status", reply: "HTTP/1.1 2x0 OK\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "no protocol", reply: "200 OK\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "truncated body", reply: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"tokens\"", close: true, err: io.ErrUnexpectedEOF, conns: 2},
		{name: "truncated head", reply: "HTTP/1.1 200 OK\r\nContent-Le", close: true, err: io.ErrUnexpectedEOF, conns: 2},
		{name: "closed before a reply", reply: "", close: true, err: io.EOF, conns: 2},
		{name: "truncated chunk", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n{\"tok", close: true, err: io.ErrUnexpectedEOF, conns: 2},
		{name: "length and chunked", reply: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "two lengths", reply: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "bad length", reply: "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "gzip coding", reply: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "folded header", reply: "HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "switching protocols", reply: "HTTP/1.1 101 Switching Protocols\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "head too large", reply: "HTTP/1.1 200 OK\r\nX-A: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", err: errKeptReply, conns: 2},
		{name: "many header lines", reply: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: 1\r\n", 10<<10) + "\r\n", err: errKeptReply, conns: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRawEngine(t, func(n int32, c net.Conn, br *bufio.Reader) {
				for first := n == 1; ; first = false {
					if err := readTokenize(br); err != nil {
						if errors.Is(err, errBadRequest) {
							t.Error(err)
						}
						return
					}
					if !first {
						io.WriteString(c, "HTTP/1.1 200 OK\r\n"+plainTail)
						continue
					}
					io.WriteString(c, tt.reply)
					if tt.close {
						return
					}
				}
			})
			c, err := NewClient(e.url, nil)
			if err != nil || c.kept == nil {
				t.Fatalf("no direct path: %v", err)
			}
			ids, err := tokenizeHello(c, context.Background())
			switch {
			case tt.err == nil && (err != nil || !slices.Equal(ids, []uint32{1, 2, 3})):
				t.Fatalf("got %v %v, want [1 2 3]", ids, err)
			case tt.err == errAny && err == nil, tt.err != nil && tt.err != errAny && !errors.Is(err, tt.err):
				t.Fatalf("got %v %v, want error %v", ids, err, tt.err)
			}
			var se *StatusError
			if errors.As(err, &se) && (se.Code != 500 || se.Body != "boom") {
				t.Fatalf("status error %+v", se)
			}
			if ids, err := tokenizeHello(c, context.Background()); err != nil || !slices.Equal(ids, []uint32{1, 2, 3}) {
				t.Fatalf("the next request: %v %v", ids, err)
			}
			if got := e.conns.Load(); got != tt.conns {
				t.Fatalf("%d connections, want %d", got, tt.conns)
			}
		})
	}
}

var (
	errAny        = errors.New("any error")
	errBadRequest = errors.New("not the /tokenize request") // the others are the connection's end
)

// TestKeptStaleConnection: a server that closes each connection after one
// reply without saying so (a keep-alive timeout) costs the client nothing:
// the request is asked again, once, on a new connection.
func TestKeptStaleConnection(t *testing.T) {
	e := newRawEngine(t, func(_ int32, c net.Conn, br *bufio.Reader) {
		if err := readTokenize(br); err != nil {
			if errors.Is(err, errBadRequest) {
				t.Error(err)
			}
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n"+plainTail)
	})
	c, _ := NewClient(e.url, nil)
	for i := range 20 {
		if ids, err := tokenizeHello(c, context.Background()); err != nil || len(ids) != 3 {
			t.Fatalf("request %d: %v %v", i, ids, err)
		}
	}
	if got := e.conns.Load(); got != 20 {
		t.Fatalf("%d connections, want 20", got)
	}
	// A new connection that fails is not asked again.
	e2 := newRawEngine(t, func(_ int32, c net.Conn, br *bufio.Reader) { readTokenize(br) })
	c2, _ := NewClient(e2.url, nil)
	if _, err := tokenizeHello(c2, context.Background()); !errors.Is(err, io.EOF) {
		t.Fatalf("err %v, want EOF", err)
	}
	if got := e2.conns.Load(); got != 1 {
		t.Fatalf("%d connections, want 1", got)
	}
}

// TestKeptCancel: cancelling the request's context ends a /tokenize that
// waits for its reply, and the connection is not kept.
func TestKeptCancel(t *testing.T) {
	arrived := make(chan struct{})
	release := make(chan struct{})
	e := newRawEngine(t, func(n int32, c net.Conn, br *bufio.Reader) {
		if err := readTokenize(br); err != nil {
			if errors.Is(err, errBadRequest) {
				t.Error(err)
			}
			return
		}
		if n == 1 {
			close(arrived)
			<-release
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n"+plainTail)
	})
	defer close(release)
	c, _ := NewClient(e.url, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := tokenizeHello(c, ctx)
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if ids, err := tokenizeHello(c, context.Background()); err != nil || len(ids) != 3 {
		t.Fatalf("after the cancel: %v %v", ids, err)
	}
	if got := e.conns.Load(); got != 2 {
		t.Fatalf("%d connections, want 2 (the cancelled one is not kept)", got)
	}
}

// TestKeptConcurrent: concurrent requests each take a connection of their
// own and give it back; no more are opened than run at once.
func TestKeptConcurrent(t *testing.T) {
	e := newRawEngine(t, func(_ int32, c net.Conn, br *bufio.Reader) {
		for readTokenize(br) == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n"+plainTail)
		}
	})
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	c, _ := NewClient(e.url, &http.Client{Transport: tr})
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if ids, err := tokenizeHello(c, context.Background()); err != nil || len(ids) != 3 {
					t.Errorf("%v %v", ids, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := e.conns.Load(); got < 1 || got > 8 {
		t.Fatalf("%d connections for 8 goroutines", got)
	}
	c.CloseIdleConnections()
	if len(c.kept.idle) != 0 {
		t.Fatal("idle connections kept after CloseIdleConnections")
	}
}

type wrapRT struct{ http.RoundTripper }

// TestKeptOnlyWhereAllowed: the direct path is taken only where the
// http.Client asks nothing it does not do, and it dials through the
// Transport's DialContext.
func TestKeptOnlyWhereAllowed(t *testing.T) {
	jar, _ := cookiejar.New(nil)
	proxy, _ := url.Parse("http://proxy.invalid:3128")
	tests := []struct {
		name string
		url  string
		hc   *http.Client
		want bool
	}{
		{"plain http", "http://127.0.0.1:8000", nil, true},
		{"under a path", "http://127.0.0.1:8000/engine", nil, true},
		{"https", "https://127.0.0.1:8000", nil, false},
		{"credentials", "http://u:p@127.0.0.1:8000", nil, false},
		{"proxy", "http://10.1.2.3:8000", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}, false},
		{"cookie jar", "http://127.0.0.1:8000", &http.Client{Jar: jar}, false},
		{"custom round tripper", "http://127.0.0.1:8000", &http.Client{Transport: wrapRT{http.DefaultTransport}}, false},
	}
	for _, tt := range tests {
		c, err := NewClient(tt.url, tt.hc)
		if err != nil {
			t.Fatal(err)
		}
		if (c.kept != nil) != tt.want {
			t.Errorf("%s: direct path %v, want %v", tt.name, c.kept != nil, tt.want)
		}
	}
	c, _ := NewClient("http://127.0.0.1:8000/engine/", nil)
	if c.kept.target != "/engine/tokenize" || c.kept.addr != "127.0.0.1:8000" {
		t.Fatalf("target %q addr %q", c.kept.target, c.kept.addr)
	}

	e := newRawEngine(t, func(_ int32, c net.Conn, br *bufio.Reader) {
		for readTokenize(br) == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n"+plainTail)
		}
	})
	var dials atomic.Int32
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	c, _ = NewClient(e.url, &http.Client{Transport: tr})
	for range 3 {
		if _, err := tokenizeHello(c, context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if dials.Load() != 1 {
		t.Fatalf("%d dials through the Transport's DialContext, want 1", dials.Load())
	}
}

// TestTokenizeBothPaths: the direct path and net/http's give the same ids
// and the same errors for the same engine.
func TestTokenizeBothPaths(t *testing.T) {
	srv := fakeEngine(t)
	direct, _ := NewClient(srv.URL, nil)
	viaHTTP, _ := NewClient(srv.URL, &http.Client{Transport: wrapRT{http.DefaultTransport}})
	if direct.kept == nil || viaHTTP.kept != nil {
		t.Fatal("paths not as meant")
	}
	bodies := []string{
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"tools":[{"type":"function"}]}`,
		`{"model":"m","messages":[]}`,
		`{"model":"m","prompt":"hello"}`,
	}
	for _, b := range bodies {
		path := ChatPath
		if strings.Contains(b, "prompt") {
			path = CompletionPath
		}
		a, aerr := direct.Tokenize(context.Background(), path, []byte(b))
		h, herr := viaHTTP.Tokenize(context.Background(), path, []byte(b))
		if !slices.Equal(a, h) || (aerr == nil) != (herr == nil) {
			t.Fatalf("%s: direct %v %v, net/http %v %v", b, a, aerr, h, herr)
		}
	}
}

// FuzzKeptReply: what the direct path reads of a reply agrees with
// net/http's ReadResponse wherever both read it: the status, the body, whether the
// connection may be kept, and the bytes left for the next reply.
func FuzzKeptReply(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\n" + plainTail + "HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nA: b\r\n\r\nNEXT",
		"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiNEXT",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nxy",
		"HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\nNEXT",
		"HTTP/1.1 200 OK\r\nContent-Length: 03\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 16
		br := bufio.NewReaderSize(bytes.NewReader(data), 16<<10)
		h, got, err := readReply(br, nil, limit)
		if err != nil {
			return
		}
		rest, _ := io.ReadAll(br)

		hr := bufio.NewReader(bytes.NewReader(data))
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(hr, &http.Request{Method: http.MethodPost})
			if err != nil {
				return // net/http refuses what the direct path reads: allowed, the direct path is stricter
			}
			if resp.StatusCode >= 200 {
				break
			}
		}
		want, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		wrest, _ := io.ReadAll(hr)
		if h.status != resp.StatusCode || !bytes.Equal(got, want) {
			t.Fatalf("status %d body %q; net/http %d %q", h.status, got, resp.StatusCode, want)
		}
		if h.keep != !resp.Close {
			t.Fatalf("keep %v; net/http close %v", h.keep, resp.Close)
		}
		if h.keep && !bytes.Equal(rest, wrest) {
			t.Fatalf("left %q for the next reply; net/http %q", rest, wrest)
		}
	})
}
