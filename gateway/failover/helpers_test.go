package failover

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// stepClock is a fake clock: Now is moved by hand, and every After call is
// handed to the test (on asks) to fire when it wants.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	asks chan stepAsk
}

type stepAsk struct {
	d    time.Duration
	fire chan time.Time
}

func newStepClock() *stepClock {
	return &stepClock{now: time.Unix(1_700_000_000, 0), asks: make(chan stepAsk, 1024)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	a := stepAsk{d: d, fire: make(chan time.Time, 1)}
	c.asks <- a
	return a.fire
}

// next waits (real time, bounded) for the next After call.
func (c *stepClock) next(t *testing.T) stepAsk {
	t.Helper()
	select {
	case a := <-c.asks:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no timer was asked for within 10 s")
		return stepAsk{}
	}
}

// fire advances the clock by the ask's wait and fires it.
func (c *stepClock) fire(a stepAsk) {
	c.Advance(a.d)
	a.fire <- c.Now()
}

// closedPort returns a loopback address nothing listens on (a listener
// bound and closed).
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// statusServer answers every request with code.
func statusServer(t *testing.T, code int) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

// stallServer accepts requests and answers none until the test ends.
func stallServer(t *testing.T) *httptest.Server {
	t.Helper()
	done := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); s.Close() })
	return s
}
