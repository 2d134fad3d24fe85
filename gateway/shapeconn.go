package gateway

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// ShapeErrors returns ln with its connections' net/http error replies
// rewritten in the API's error shape. net/http answers a request it cannot
// parse before any handler runs, in plain text: a header block past
// http.Server.MaxHeaderBytes (431), a control character or another
// malformed header, a bad request line (400), an unsupported transfer
// encoding (501). Through ShapeErrors the client gets the same status,
// still followed by a closed connection, with the JSON body its API
// expects (Anthropic's for /v1/messages paths or an anthropic-version
// header among the first 1 KiB read, OpenAI's otherwise), as every reply
// the gateway's handlers give. Replies written by handlers pass through
// untouched. Serve NewServer's server on it.
func ShapeErrors(ln net.Listener) net.Listener { return shapeListener{ln} }

type shapeListener struct{ net.Listener }

func (l shapeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &shapeConn{Conn: c}, nil
}

// shapeHead is how much of a request's start shapeConn keeps (its request
// line and first headers).
const shapeHead = 1 << 10

// netHTTPErrorHeaders follows the status line of net/http's own error
// replies (server.go), and no handler's: a handler's headers come sorted,
// Connection before Content-Type.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// shapeConn remembers the start of the request being read (from the first
// read after a reply was written) and rewrites net/http's error replies.
type shapeConn struct {
	net.Conn
	mu     sync.Mutex // guards head and wrote: net/http reads in the background while a handler writes
	head   []byte
	wrote  bool
	capped bool
}

func (c *shapeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if c.wrote { // a reply went out: what follows is the next request
			c.head, c.wrote, c.capped = c.head[:0], false, false
		}
		if !c.capped {
			k := min(n, shapeHead-len(c.head))
			c.head = append(c.head, p[:k]...)
			c.capped = len(c.head) >= shapeHead
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *shapeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.wrote = true
	var shaped []byte
	if bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		if i := bytes.Index(p, []byte(netHTTPErrorHeaders)); i > 0 && bytes.IndexByte(p[:i], '\n') < 0 {
			shaped = shapeReply(p[len("HTTP/1.1 "):i], p[i+len(netHTTPErrorHeaders):], c.head)
		}
	}
	c.mu.Unlock()
	if shaped == nil {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(shaped); err != nil {
		return 0, err
	}
	return len(p), nil
}

// shapeReply is net/http's error reply (its status line after the
// version, and its text) in the API shape of the request whose start is
// head; nil if the status line does not parse.
func shapeReply(status, text, head []byte) []byte {
	code, err := strconv.Atoi(string(bytes.SplitN(status, []byte(" "), 2)[0]))
	if err != nil || code < 400 || code > 599 {
		return nil
	}
	anthropic := false
	if line, _, _ := bytes.Cut(head, []byte("\r\n")); len(line) > 0 {
		if f := bytes.Fields(line); len(f) >= 2 {
			anthropic = bytes.HasPrefix(f[1], []byte(MessagesPath))
		}
	}
	if !anthropic {
		anthropic = strings.Contains(strings.ToLower(string(head)), "\nanthropic-version:")
	}
	msg := "agentkv gateway: the request could not be read: " + string(text)
	body := ErrorBody(anthropic, code, msg)
	out := make([]byte, 0, len(body)+160)
	out = append(out, "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(code)...)
	out = append(out, "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, body...)
}
