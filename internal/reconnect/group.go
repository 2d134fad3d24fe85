package reconnect

import (
	"cmp"
	"context"
	"errors"
	"sync"
)

// Errors of a Group whose Started or Closed is nil.
var (
	ErrStarted = errors.New("reconnect: already started")
	ErrClosed  = errors.New("reconnect: closed")
)

// Group is a subscriber's start/close lifecycle: Start launches its
// connection loops once, Close (or the context given to Start) ends them,
// and Close waits for them. The zero Group is ready; its methods are safe
// for concurrent use.
type Group struct {
	// Started and Closed are what Start returns when called a second time
	// or after Close; nil means ErrStarted and ErrClosed.
	Started, Closed error

	mu      sync.Mutex // guards started, closed, cancel
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// Start runs loop(ctx, i) for i in [0, n), each in a goroutine of its own,
// under a context that ends with ctx or at Close, and returns at once.
func (g *Group) Start(ctx context.Context, n int, loop func(ctx context.Context, i int)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return cmp.Or(g.Closed, ErrClosed)
	}
	if g.started {
		return cmp.Or(g.Started, ErrStarted)
	}
	g.started = true
	ctx, g.cancel = context.WithCancel(ctx)
	for i := range n {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			loop(ctx, i)
		}()
	}
	return nil
}

// Close ends the loops and waits for them; a later Start fails with
// Closed. It is safe to call more than once, and before Start.
func (g *Group) Close() {
	g.mu.Lock()
	g.closed = true
	cancel := g.cancel
	g.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	g.wg.Wait()
}
