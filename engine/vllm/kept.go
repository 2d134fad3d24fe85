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
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// keptPoster sends the /tokenize POST to one http:// engine over kept
// HTTP/1.1 connections, writing the request and reading the reply on the
// caller's goroutine. net/http's Transport hands every request to a write
// goroutine and every reply to a read goroutine of the connection, and on a
// small VM those wake-ups cost about as much as the bytes: the /tokenize hop
// ran at about 2× a plain proxy hop's CPU with it (issue #36). Only the
// tokenize round trip takes this path: it is idempotent (a reply lost on a
// kept connection the server had closed is asked again, once, on a new one),
// its reply is read whole, and nothing streams. newKeptPoster says when the
// Client's http.Client allows it; otherwise Tokenize goes through net/http.
type keptPoster struct {
	addr    string // host:port dialled
	host    string // the Host header
	target  string // the request target, "/tokenize" under the base path
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle int
	idleFor time.Duration // a kept connection idle longer is closed (0: never)
	timeout time.Duration // the http.Client's Timeout, per request (0: none)

	mu   sync.Mutex
	idle []*keptConn // most recently used last
}

type keptConn struct {
	c    net.Conn
	br   *bufio.Reader
	head []byte
	bufs net.Buffers
	used time.Time // when it was last put back
}

// newKeptPoster returns the direct path for base+TokenizePath, or nil when
// hc asks for something it does not do: TLS, a proxy, a cookie jar, a
// RoundTripper other than *http.Transport, credentials in the URL.
func newKeptPoster(base *url.URL, hc *http.Client) *keptPoster {
	if base.Scheme != "http" || base.User != nil || hc.Jar != nil {
		return nil
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t, ok := rt.(*http.Transport)
	if !ok {
		return nil
	}
	u := *base
	u.Path += TokenizePath
	u.RawPath = ""
	if t.Proxy != nil {
		if p, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: &u, Header: http.Header{}}); err != nil || p != nil {
			return nil
		}
	}
	p := &keptPoster{host: u.Host, target: u.RequestURI(), timeout: hc.Timeout, idleFor: t.IdleConnTimeout}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	p.addr = net.JoinHostPort(u.Hostname(), port)
	switch {
	case t.DialContext != nil:
		p.dial = t.DialContext
	case t.Dial != nil: //nolint:staticcheck // honour a Transport that still sets it
		dial := t.Dial //nolint:staticcheck
		p.dial = func(_ context.Context, network, addr string) (net.Conn, error) { return dial(network, addr) }
	default:
		var d net.Dialer
		p.dial = d.DialContext
	}
	if !t.DisableKeepAlives {
		p.maxIdle = t.MaxIdleConnsPerHost
		if p.maxIdle == 0 {
			p.maxIdle = http.DefaultMaxIdleConnsPerHost
		}
	}
	return p
}

// errKeptReply reports a reply the direct path cannot read.
var errKeptReply = errors.New("vllm: malformed HTTP reply")

// maxKeptHead bounds a reply's status line and headers together.
const maxKeptHead = 64 << 10

// post sends body (n bytes in all) and returns the reply's status and its
// body appended to dst, at most limit bytes (ErrReplyTooLarge past that).
func (p *keptPoster) post(ctx context.Context, body net.Buffers, n int, dst []byte, limit int) (int, []byte, error) {
	for try := 0; ; try++ {
		kc, reused, err := p.get(ctx)
		if err != nil {
			return 0, dst, err
		}
		status, out, keep, started, err := kc.roundTrip(ctx, p, body, n, dst, limit)
		if err == nil {
			if keep {
				p.put(kc)
			} else {
				kc.c.Close()
			}
			return status, out, nil
		}
		kc.c.Close()
		// A kept connection the server closed while it sat idle fails
		// before a byte of the reply: ask again on a new one.
		if reused && !started && try == 0 && ctx.Err() == nil {
			continue
		}
		return 0, dst, err
	}
}

func (p *keptPoster) get(ctx context.Context) (*keptConn, bool, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		kc := p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		if p.idleFor > 0 && time.Since(kc.used) > p.idleFor {
			kc.c.Close()
			continue
		}
		p.mu.Unlock()
		return kc, true, nil
	}
	p.mu.Unlock()
	c, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, false, err
	}
	return &keptConn{c: c, br: bufio.NewReaderSize(c, 16<<10)}, false, nil
}

func (p *keptPoster) put(kc *keptConn) {
	if p.idleFor > 0 {
		kc.used = time.Now()
	}
	p.mu.Lock()
	if len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, kc)
		kc = nil
	}
	p.mu.Unlock()
	if kc != nil {
		kc.c.Close()
	}
}

// closeIdle closes the kept connections not in use.
func (p *keptPoster) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, kc := range idle {
		kc.c.Close()
	}
}

var longAgo = time.Unix(1, 0)

// roundTrip writes the request and reads the reply. started says whether
// any byte of the reply arrived; keep whether the connection may carry
// another request.
func (kc *keptConn) roundTrip(ctx context.Context, p *keptPoster, body net.Buffers, n int, dst []byte, limit int) (status int, out []byte, keep, started bool, err error) {
	out = dst
	deadline, _ := ctx.Deadline()
	if p.timeout > 0 {
		if d := time.Now().Add(p.timeout); deadline.IsZero() || d.Before(deadline) {
			deadline = d
		}
	}
	if err = kc.c.SetDeadline(deadline); err != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { kc.c.SetDeadline(longAgo) })
	defer func() {
		if !stop() { // cancelled: the deadline is in the past
			keep = false
			if err == nil {
				err = ctx.Err()
			}
		}
		if err != nil && ctx.Err() != nil {
			err = ctx.Err()
		}
	}()

	kc.head = append(kc.head[:0], "POST "...)
	kc.head = append(kc.head, p.target...)
	kc.head = append(kc.head, " HTTP/1.1\r\nHost: "...)
	kc.head = append(kc.head, p.host...)
	kc.head = append(kc.head, "\r\nUser-Agent: agentkv\r\nContent-Type: application/json\r\nContent-Length: "...)
	kc.head = strconv.AppendInt(kc.head, int64(n), 10)
	kc.head = append(kc.head, "\r\n\r\n"...)
	kc.bufs = append(append(kc.bufs[:0], kc.head), body...)
	bufs := kc.bufs // WriteTo consumes its receiver
	_, werr := bufs.WriteTo(kc.c)
	clear(kc.bufs) // drop the references to the caller's body
	// A server may reply (413, say) and close before it reads the whole
	// body: its reply, if one came, says more than the write's error.
	if _, err = kc.br.Peek(1); err != nil {
		if werr != nil {
			err = werr
		}
		return
	}
	started = true
	var h replyHead
	h, out, err = readReply(kc.br, out, limit)
	if err != nil && werr != nil {
		err = werr
	}
	return h.status, out, h.keep && err == nil && werr == nil, started, err
}

// readReply reads one reply from br: the heads of any 1xx replies, then
// the final head and its body, appended to dst (at most limit bytes). The
// bytes after the reply stay in br for the next one.
func readReply(br *bufio.Reader, dst []byte, limit int) (h replyHead, out []byte, err error) {
	out = dst
	for {
		if h, err = readReplyHead(br); err != nil {
			return h, out, err
		}
		if h.status >= 200 {
			break
		}
		if h.status == http.StatusSwitchingProtocols {
			return h, out, fmt.Errorf("%w: status 101", errKeptReply)
		}
		// 103 Early Hints, say: another head follows.
	}
	switch {
	case h.status == http.StatusNoContent || h.status == http.StatusNotModified:
	case h.chunked:
		out, err = readChunked(br, out, limit)
	case h.length >= 0:
		if h.length > int64(limit) {
			return h, out, fmt.Errorf("%w (more than %d bytes)", ErrReplyTooLarge, limit)
		}
		start := len(out)
		out = slices.Grow(out, int(h.length))[:start+int(h.length)]
		if _, err = io.ReadFull(br, out[start:]); err != nil {
			out = out[:start]
		}
	default: // the reply runs to the connection's end
		h.keep = false
		out, err = readMax(br, out, limit)
	}
	return h, out, err
}

// replyHead is what the direct path reads of a reply's head.
type replyHead struct {
	status  int
	length  int64 // -1: none given
	chunked bool
	keep    bool
}

// readReplyHead reads a status line and the header lines after it, up to
// and including the blank line. It knows HTTP/1.0 and 1.1, Content-Length
// (one value), Transfer-Encoding chunked (not in HTTP/1.0, where net/http
// ignores it) and Connection.
func readReplyHead(br *bufio.Reader) (replyHead, error) {
	h := replyHead{length: -1}
	seen := 0
	line, err := readLine(br, &seen)
	if err != nil {
		return h, err
	}
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	switch string(proto) {
	case "HTTP/1.1":
		h.keep = true
	case "HTTP/1.0":
	default:
		return h, fmt.Errorf("%w: status line %q", errKeptReply, clip(line))
	}
	code, _, _ := bytes.Cut(rest, []byte(" "))
	if len(code) != 3 || code[0] < '1' || code[0] > '5' || !isDigits(code) {
		return h, fmt.Errorf("%w: status line %q", errKeptReply, clip(line))
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	for {
		line, err = readLine(br, &seen)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			return h, nil
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(k) == 0 || bytes.ContainsAny(k, " \t") {
			return h, fmt.Errorf("%w: header line %q", errKeptReply, clip(line))
		}
		v = bytes.Trim(v, " \t")
		switch {
		case asciiFold(k, "Content-Length"):
			if !isDigits(v) || len(v) > 18 {
				return h, fmt.Errorf("%w: Content-Length %q", errKeptReply, clip(v))
			}
			l, _ := strconv.ParseInt(string(v), 10, 64)
			if h.length >= 0 && h.length != l {
				return h, fmt.Errorf("%w: two Content-Lengths", errKeptReply)
			}
			h.length = l
		case asciiFold(k, "Transfer-Encoding"):
			if !asciiFold(v, "chunked") || h.chunked || string(proto) == "HTTP/1.0" {
				return h, fmt.Errorf("%w: Transfer-Encoding %q", errKeptReply, clip(v))
			}
			h.chunked = true
		case asciiFold(k, "Connection"):
			for _, tok := range bytes.Split(v, []byte(",")) {
				tok = bytes.Trim(tok, " \t")
				if asciiFold(tok, "close") {
					h.keep = false
				} else if asciiFold(tok, "keep-alive") && string(proto) == "HTTP/1.0" {
					h.keep = true
				}
			}
		}
		if h.chunked && h.length >= 0 {
			return h, fmt.Errorf("%w: both Content-Length and chunked", errKeptReply)
		}
	}
}

// readLine returns one header line without its line end; seen counts the
// head's bytes against maxKeptHead.
func readLine(br *bufio.Reader, seen *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	*seen += len(line)
	if err == bufio.ErrBufferFull || *seen > maxKeptHead {
		return nil, fmt.Errorf("%w: head over %d bytes", errKeptReply, maxKeptHead)
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readChunked appends a chunked body and reads its trailer section.
func readChunked(br *bufio.Reader, dst []byte, limit int) ([]byte, error) {
	dst, err := readMax(httputil.NewChunkedReader(br), dst, limit)
	if err != nil {
		return dst, err
	}
	seen := 0
	for {
		line, err := readLine(br, &seen)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
		if len(line) == 0 {
			return dst, nil
		}
	}
}

// readMax appends r's bytes to dst until EOF, at most limit of them.
func readMax(r io.Reader, dst []byte, limit int) ([]byte, error) {
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst)-start > limit {
			return dst, fmt.Errorf("%w (more than %d bytes)", ErrReplyTooLarge, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

func isDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// asciiFold reports whether b equals s in ASCII case folding.
func asciiFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
