package kvhint

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gate is an inner sink that records deliveries and blocks each one until
// released (or its context ends).
type gate struct {
	mu      sync.Mutex // guards got
	got     []string
	started chan string   // receives the message id of each delivery as it starts
	release chan struct{} // one receive per delivery; closed = never block
}

func newGate() *gate {
	return &gate{started: make(chan string, 1024), release: make(chan struct{})}
}

func (g *gate) Send(ctx context.Context, env *Envelope) error {
	g.started <- env.MessageID
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.mu.Lock()
	g.got = append(g.got, env.MessageID)
	g.mu.Unlock()
	return nil
}

func (g *gate) delivered() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.got...)
}

func env(id string) *Envelope { return &Envelope{MessageID: id} }

func TestQueueDropsNewestWhenFull(t *testing.T) {
	g := newGate()
	q := must(NewQueue(g, QueueConfig{Capacity: 2}))
	if err := q.Send(context.Background(), env("e0")); err != nil {
		t.Fatal(err)
	}
	if id := <-g.started; id != "e0" { // e0 is in flight; the queue is empty
		t.Fatalf("started %s", id)
	}
	for _, id := range []string{"e1", "e2"} {
		if err := q.Send(context.Background(), env(id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if err := q.Send(context.Background(), env("e3")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("e3: %v", err)
	}
	if s := q.Stats(); s.Enqueued != 3 || s.Dropped != 1 || s.Queued != 2 {
		t.Fatalf("stats %+v", s)
	}
	close(g.release)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := g.delivered(); len(got) != 3 || got[0] != "e0" || got[1] != "e1" || got[2] != "e2" {
		t.Fatalf("delivered %v", got)
	}
	if err := q.Send(context.Background(), env("late")); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	s := q.Stats()
	if s.Delivered != 3 || s.Closed != 1 || s.Enqueued != s.Delivered+s.Failed+s.Evicted+s.Discarded {
		t.Fatalf("stats %+v", s)
	}
}

func TestQueueDropOldest(t *testing.T) {
	g := newGate()
	q := must(NewQueue(g, QueueConfig{Capacity: 2, DropOldest: true}))
	_ = q.Send(context.Background(), env("e0"))
	<-g.started
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		if err := q.Send(context.Background(), env(id)); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	close(g.release)
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := g.delivered(); len(got) != 3 || got[1] != "e3" || got[2] != "e4" {
		t.Fatalf("delivered %v, want e0 e3 e4", got)
	}
	if s := q.Stats(); s.Evicted != 2 || s.Dropped != 0 || s.Enqueued != 5 {
		t.Fatalf("stats %+v", s)
	}
}

// TestQueueCloseGivesUp: when Close's context ends while the inner sink is
// stuck, Close returns ctx.Err, the in-flight delivery sees its context
// canceled, and the rest is discarded, not delivered.
func TestQueueCloseGivesUp(t *testing.T) {
	g := newGate()
	q := must(NewQueue(g, QueueConfig{Capacity: 8}))
	for _, id := range []string{"e0", "e1", "e2"} {
		_ = q.Send(context.Background(), env(id))
	}
	<-g.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := q.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close: %v", err)
	}
	<-q.Done()
	s := q.Stats()
	if s.Failed != 1 || s.Discarded != 2 || s.Delivered != 0 || len(g.delivered()) != 0 {
		t.Fatalf("stats %+v delivered %v", s, g.delivered())
	}
	// Close again: already stopped.
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestQueueInnerErrorsAndTimeout(t *testing.T) {
	var calls atomic.Int64
	boom := errors.New("boom")
	q := must(NewQueue(SinkFunc(func(ctx context.Context, e *Envelope) error {
		calls.Add(1)
		if _, ok := ctx.Deadline(); !ok {
			t.Error("Timeout set but the delivery context has no deadline")
		}
		if e.MessageID == "bad" {
			return boom
		}
		return nil
	}), QueueConfig{Timeout: time.Hour}))
	for _, id := range []string{"ok", "bad", "ok"} {
		if err := q.Send(context.Background(), env(id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := q.Stats(); s.Delivered != 2 || s.Failed != 1 || calls.Load() != 3 {
		t.Fatalf("stats %+v calls %d", s, calls.Load())
	}
}

// TestQueueConcurrent hammers Send from many goroutines (run with -race):
// Send never blocks even though the inner sink is slow, every envelope is
// either enqueued or counted as dropped, and after Close every enqueued one
// was delivered exactly once.
func TestQueueConcurrent(t *testing.T) {
	var delivered sync.Map
	var n atomic.Int64
	q := must(NewQueue(SinkFunc(func(_ context.Context, e *Envelope) error {
		if _, dup := delivered.LoadOrStore(e, true); dup {
			t.Error("delivered twice")
		}
		n.Add(1)
		return nil
	}), QueueConfig{Capacity: 16}))
	const senders, each = 8, 500
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := q.Send(context.Background(), &Envelope{MessageID: "x"}); err != nil {
					if !errors.Is(err, ErrQueueFull) {
						t.Error(err)
					}
					refused.Add(1)
				}
				_ = q.Stats()
			}
		}()
	}
	wg.Wait()
	if err := q.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := q.Stats()
	if s.Enqueued+s.Dropped != senders*each || int64(s.Dropped) != refused.Load() {
		t.Fatalf("stats %+v refused %d", s, refused.Load())
	}
	if int64(s.Delivered) != n.Load() || s.Delivered != s.Enqueued || s.Queued != 0 {
		t.Fatalf("stats %+v inner saw %d", s, n.Load())
	}
}

// TestQueueCloseRacesSend: Close concurrent with Sends never panics (no
// send on a closed channel) and accounts for every envelope.
func TestQueueCloseRacesSend(t *testing.T) {
	for range 20 {
		q := must(NewQueue(SinkFunc(func(context.Context, *Envelope) error { return nil }), QueueConfig{Capacity: 4, DropOldest: true}))
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					_ = q.Send(context.Background(), env("x"))
				}
			}()
		}
		if err := q.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		s := q.Stats()
		if s.Enqueued+s.Dropped+s.Closed != 800 || s.Enqueued != s.Delivered+s.Evicted {
			t.Fatalf("stats %+v", s)
		}
	}
}
