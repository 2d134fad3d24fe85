package session

import (
	"io"
	"net/http"
	"strings"
)

// Middleware wraps next with the Default extractor.
func Middleware(next http.Handler) http.Handler { return Default.Middleware(next) }

// Middleware returns a handler that extracts each request's AgentContext
// and stores it in the request context (read it with FromContext) before
// calling next. A request with no session, or a refused one, reaches next
// with no AgentContext in its context.
//
// When the headers name no session (or Config.AlwaysReadBody is set), the
// middleware reads at most MaxBodyBytes of a JSON (or untyped) body for the
// body fallbacks. It never reads more than that cap, and next still sees
// the whole body: the bytes read are replayed ahead of the unread rest, and
// a read error is replayed after them.
func (e *Extractor) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ac, err := e.FromRequest(r, nil)
		if err == nil && e.wantBody(r, ac) {
			if prefix := e.peekBody(r); len(prefix) > 0 {
				ac, err = e.FromRequest(r, prefix)
			}
		}
		if err == nil && ac.Valid() {
			r = r.WithContext(NewContext(r.Context(), ac))
		}
		next.ServeHTTP(w, r)
	})
}

func (e *Extractor) wantBody(r *http.Request, ac AgentContext) bool {
	if e.maxBody < 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return false
	}
	if ac.Valid() && !e.alwaysBod {
		return false
	}
	ct := r.Header.Get("Content-Type")
	return ct == "" || strings.Contains(strings.ToLower(ct), "json")
}

// peekBody reads up to maxBody bytes of r.Body and replaces r.Body with a
// reader that yields those bytes, then the rest of the original body.
func (e *Extractor) peekBody(r *http.Request) []byte {
	limit := e.maxBody
	if r.ContentLength > 0 && r.ContentLength < limit {
		limit = r.ContentLength
	}
	buf := make([]byte, 0, min(limit, 64<<10))
	var rerr error
	for int64(len(buf)) < e.maxBody {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow geometrically
		}
		room := min(int64(cap(buf)-len(buf)), e.maxBody-int64(len(buf)))
		n, err := r.Body.Read(buf[len(buf) : len(buf)+int(room)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			r.Body = &replayBody{buf: buf, rest: r.Body, err: rerr, eof: err == io.EOF}
			return buf
		}
	}
	r.Body = &replayBody{buf: buf, rest: r.Body}
	return buf
}

// replayBody yields buf, then (unless the original body already ended)
// the rest of the original body; a read error seen while peeking is
// returned after buf.
type replayBody struct {
	buf  []byte
	off  int
	rest io.ReadCloser
	err  error
	eof  bool
}

func (b *replayBody) Read(p []byte) (int, error) {
	if b.off < len(b.buf) {
		n := copy(p, b.buf[b.off:])
		b.off += n
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	if b.eof {
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

func (b *replayBody) Close() error { return b.rest.Close() }
