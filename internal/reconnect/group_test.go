package reconnect

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGroupLifecycle: Start runs one loop per index under a context that
// Close ends, Close waits for every loop, a second Start and a Start after
// Close fail with the Group's errors, and Close is safe twice.
func TestGroupLifecycle(t *testing.T) {
	errStarted, errClosed := errors.New("started"), errors.New("closed")
	g := &Group{Started: errStarted, Closed: errClosed}
	var running sync.WaitGroup
	running.Add(3)
	var seen [3]atomic.Bool
	var ended atomic.Int32
	err := g.Start(context.Background(), 3, func(ctx context.Context, i int) {
		seen[i].Store(true)
		running.Done()
		<-ctx.Done()
		ended.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	running.Wait()
	for i := range seen {
		if !seen[i].Load() {
			t.Fatalf("loop %d did not run", i)
		}
	}
	if err := g.Start(context.Background(), 1, func(context.Context, int) {}); !errors.Is(err, errStarted) {
		t.Fatalf("second Start: %v", err)
	}
	g.Close()
	if n := ended.Load(); n != 3 {
		t.Fatalf("Close returned with %d of 3 loops ended", n)
	}
	g.Close()
	if err := g.Start(context.Background(), 1, func(context.Context, int) {}); !errors.Is(err, errClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// TestGroupZero: the zero Group closes before Start, then refuses it with
// ErrClosed; a started zero Group refuses a second Start with ErrStarted;
// loops also end with the context Start was given.
func TestGroupZero(t *testing.T) {
	var closed Group
	closed.Close()
	if err := closed.Start(context.Background(), 1, func(context.Context, int) {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	var g Group
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := g.Start(ctx, 1, func(ctx context.Context, _ int) { <-ctx.Done(); close(done) }); err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx, 1, func(context.Context, int) {}); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the loop did not end with its context")
	}
	g.Close()
}
