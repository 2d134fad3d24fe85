package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of ServerConfig.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyReadTimeout   = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	// DefaultMaxBodyBytesInFlight bounds the request bodies held in memory
	// at once, all requests together: 256 MiB, eight bodies at the 32 MiB
	// per-request cap.
	DefaultMaxBodyBytesInFlight = 256 << 20
	// bodyChunk is the reservation step for a body of unknown length.
	bodyChunk = 64 << 10
)

// ServerConfig configures NewServer and Limit. Zero fields mean the
// documented defaults.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// BodyReadTimeout bounds reading a request's body, from the end of its
	// headers (default 60 s): a client that announces more than it sends
	// gets 408 (or, if it cannot be written to, a closed connection) when it
	// runs out. Unlike http.Server.ReadTimeout it ends with the body, so it
	// never cuts a long streaming reply.
	BodyReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default
	// 120 s).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block, names and values
	// (default 64 KiB): larger gets 431 in the caller's API shape. Headers
	// beyond twice this (plus net/http's 4 KiB slack) are refused by
	// net/http itself before any handler runs: a plain-text 431, in the
	// API's shape when the server is served on ShapeErrors(ln).
	MaxHeaderBytes int
	// MaxBodyBytes bounds one request body (default DefaultMaxBodyBytes,
	// 32 MiB): larger gets 413 in the caller's API shape, before any of it
	// is read when Content-Length says so.
	MaxBodyBytes int64
	// MaxBodyBytesInFlight bounds the bytes of request bodies held in
	// memory at once, all requests together (default 256 MiB). A body is
	// counted from its first byte read until its handler returns (the
	// gateway keeps it for retries and migration). A request that would
	// pass the bound gets 503 with Retry-After: 1 in the caller's API shape
	// and is counted in agentkv_gateway_rejected_total{reason="body_memory"}.
	MaxBodyBytesInFlight int64
	// Registerer receives the limit metrics (nil: none exported).
	Registerer prometheus.Registerer
	// Logger receives the server's own errors (nil: os.Stderr via slog).
	Logger *slog.Logger
}

func (c *ServerConfig) withDefaults() (ServerConfig, error) {
	o := *c
	for _, d := range []*time.Duration{&o.ReadHeaderTimeout, &o.BodyReadTimeout, &o.IdleTimeout} {
		if *d < 0 {
			return o, fmt.Errorf("%w: server timeouts must be ≥ 0", ErrConfig)
		}
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.BodyReadTimeout == 0 {
		o.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxBodyBytesInFlight == 0 {
		o.MaxBodyBytesInFlight = DefaultMaxBodyBytesInFlight
	}
	switch {
	case o.MaxHeaderBytes < 0 || o.MaxBodyBytes < 0 || o.MaxBodyBytesInFlight < 0:
		return o, fmt.Errorf("%w: server size limits must be ≥ 0", ErrConfig)
	case o.MaxBodyBytesInFlight < o.MaxBodyBytes:
		return o, fmt.Errorf("%w: MaxBodyBytesInFlight %d < MaxBodyBytes %d (no body could ever be read)", ErrConfig,
			o.MaxBodyBytesInFlight, o.MaxBodyBytes)
	}
	return o, nil
}

// NewServer returns an http.Server serving h behind Limit (header, body
// and in-flight memory caps, the body read timeout) with the configured
// header and idle timeouts. It sets no WriteTimeout: streams last as long
// as the generation. The caller calls Serve(ShapeErrors(ln)), so that
// net/http's own replies to unparseable requests are in the API's shape
// too.
func NewServer(h http.Handler, cfg ServerConfig) (*http.Server, error) {
	lim, err := NewLimiter(h, cfg)
	if err != nil {
		return nil, err
	}
	c := lim.cfg
	log := c.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return &http.Server{
		Handler:           lim,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    2 * c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, nil
}

// Limiter is the http.Handler NewServer puts in front of the gateway: it
// enforces ServerConfig's header, body and in-flight limits and the body
// read timeout, reading each request body itself (within the limits) before
// the next handler runs; BufferedBody hands the bytes to it without a copy.
// It is safe for concurrent use.
type Limiter struct {
	next     http.Handler
	cfg      ServerConfig
	inFlight atomic.Int64 // body bytes reserved now
	rejected *prometheus.CounterVec
	gauge    prometheus.GaugeFunc
}

// NewLimiter returns next behind the limits of cfg (whose Registerer, if
// set, receives agentkv_gateway_rejected_total{reason} and
// agentkv_gateway_body_bytes_in_flight).
func NewLimiter(next http.Handler, cfg ServerConfig) (*Limiter, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{next: next, cfg: c}
	l.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentkv", Subsystem: "gateway",
		Name: "rejected_total",
		Help: "Requests refused before routing by a server limit: header_too_large (431), body_too_large (413), body_timeout (408), body_truncated and body_unreadable (400), body_memory (503: MaxBodyBytesInFlight reached)."},
		[]string{"reason"})
	l.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "agentkv", Subsystem: "gateway",
		Name: "body_bytes_in_flight", Help: "Request body bytes held in memory now (bounded by MaxBodyBytesInFlight)."},
		func() float64 { return float64(l.inFlight.Load()) })
	if c.Registerer != nil {
		for _, col := range []prometheus.Collector{l.rejected, l.gauge} {
			if err := c.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("gateway: metrics: %w", err)
			}
		}
	}
	return l, nil
}

// BodyBytesInFlight returns the body bytes reserved now.
func (l *Limiter) BodyBytesInFlight() int64 { return l.inFlight.Load() }

// bodyKey keys the buffered body in a request's context.
type bodyKey struct{}

// BufferedBody returns the request body Limiter read ahead (the handler
// may keep the slice, and must not modify it); ok is false when no Limiter
// read it (read r.Body then).
func BufferedBody(r *http.Request) (body []byte, ok bool) {
	b, ok := r.Context().Value(bodyKey{}).([]byte)
	return b, ok
}

func (l *Limiter) reject(w http.ResponseWriter, r *http.Request, code int, reason, msg string) {
	l.rejected.WithLabelValues(reason).Inc()
	if code != http.StatusServiceUnavailable {
		w.Header().Set("Connection", "close") // what is left of the request is not read
	}
	WriteError(w, r, code, msg)
}

// headerBytes is the size of the header block as received, roughly:
// names, values and ": " and CRLF per line.
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// reserve takes n bytes of the in-flight budget, or reports false.
func (l *Limiter) reserve(n int64) bool {
	for {
		cur := l.inFlight.Load()
		if cur+n > l.cfg.MaxBodyBytesInFlight {
			return false
		}
		if l.inFlight.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// ServeHTTP implements http.Handler.
func (l *Limiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if n := headerBytes(r.Header); n > l.cfg.MaxHeaderBytes {
		l.reject(w, r, http.StatusRequestHeaderFieldsTooLarge, "header_too_large",
			fmt.Sprintf("request headers are %d bytes, more than the %d allowed", n, l.cfg.MaxHeaderBytes))
		return
	}
	if r.ContentLength > l.cfg.MaxBodyBytes {
		l.reject(w, r, http.StatusRequestEntityTooLarge, "body_too_large",
			fmt.Sprintf("request body exceeds %d bytes", l.cfg.MaxBodyBytes))
		return
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		l.next.ServeHTTP(w, r)
		return
	}
	var reserved int64
	defer func() { l.inFlight.Add(-reserved) }()
	body, code, reason, msg := l.read(w, r, &reserved)
	if code != 0 {
		l.reject(w, r, code, reason, msg)
		return
	}
	var enc string
	if enc = r.Header.Get("Content-Encoding"); enc != "" {
		if body, code, reason, msg = l.decode(enc, body, &reserved); code != 0 {
			l.reject(w, r, code, reason, msg)
			return
		}
	}
	r2 := r.WithContext(context.WithValue(r.Context(), bodyKey{}, body))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	if enc != "" {
		r2.Header = r.Header.Clone()
		r2.Header.Del("Content-Encoding")
	}
	l.next.ServeHTTP(w, r2)
}

// decode decodes a compressed body (decodeBody), reserving its decoded
// bytes in the in-flight budget too; code is non-zero on refusal.
func (l *Limiter) decode(enc string, body []byte, reserved *int64) ([]byte, int, string, string) {
	out, err := decodeBody(enc, body, l.cfg.MaxBodyBytes)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body exceeds %d bytes once decoded", l.cfg.MaxBodyBytes)
	case errors.Is(err, errEncoding):
		return nil, http.StatusUnsupportedMediaType, "body_encoding", err.Error()
	case err != nil:
		return nil, http.StatusBadRequest, "body_unreadable", err.Error()
	}
	if len(out) != len(body) || &out[0] != &body[0] {
		if !l.reserve(int64(len(out))) {
			return nil, http.StatusServiceUnavailable, "body_memory",
				fmt.Sprintf("the gateway holds %d bytes of request bodies, its limit; retry shortly", l.cfg.MaxBodyBytesInFlight)
		}
		*reserved += int64(len(out))
	}
	return out, 0, "", ""
}

// read reads r's body within the limits, reserving its bytes as it goes
// (*reserved says how many, to release after the handler); code is non-zero
// when the request must be refused.
func (l *Limiter) read(w http.ResponseWriter, r *http.Request, reserved *int64) (body []byte, code int, reason, msg string) {
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(l.cfg.BodyReadTimeout)
	_ = rc.SetReadDeadline(deadline)
	defer func() {
		// A body read in full: the connection may serve more requests
		// with no deadline. A refused body: the deadline stays passed,
		// so net/http's post-handler drain of the unread rest fails at
		// once and the connection closes, rather than waiting on a
		// client that stalls (Connection: close alone does not stop it).
		if code == 0 {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Unix(1, 0))
		}
	}()
	busy := func() (int, string, string) {
		w.Header().Set("Retry-After", "1")
		return http.StatusServiceUnavailable, "body_memory",
			fmt.Sprintf("the gateway holds %d bytes of request bodies, its limit; retry shortly", l.cfg.MaxBodyBytesInFlight)
	}
	if r.ContentLength > 0 {
		if !l.reserve(r.ContentLength) {
			code, reason, msg = busy()
			return nil, code, reason, msg
		}
		*reserved = r.ContentLength
		body = make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			code, reason, msg = readFailure(err, l.cfg.BodyReadTimeout)
			return nil, code, reason, msg
		}
		return body, 0, "", ""
	}
	// Unknown length (chunked): reserve a chunk at a time.
	for {
		if int64(len(body)) == *reserved {
			step := min(int64(bodyChunk), l.cfg.MaxBodyBytes+1-*reserved)
			if !l.reserve(step) {
				code, reason, msg = busy()
				return nil, code, reason, msg
			}
			*reserved += step
			body = append(body, make([]byte, step)...)[:len(body)]
		}
		n, err := r.Body.Read(body[len(body):*reserved])
		body = body[:len(body)+n]
		if int64(len(body)) > l.cfg.MaxBodyBytes {
			return nil, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body exceeds %d bytes", l.cfg.MaxBodyBytes)
		}
		if errors.Is(err, io.EOF) {
			return body, 0, "", ""
		}
		if err != nil {
			code, reason, msg = readFailure(err, l.cfg.BodyReadTimeout)
			return nil, code, reason, msg
		}
	}
}

func readFailure(err error, timeout time.Duration) (int, string, string) {
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusRequestTimeout, "body_timeout",
			"request body not received within " + timeout.String()
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return http.StatusBadRequest, "body_truncated", "request body shorter than its Content-Length"
	}
	return http.StatusBadRequest, "body_unreadable", "reading request body: " + err.Error()
}
