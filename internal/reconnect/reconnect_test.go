package reconnect

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// fakeTimer records every wait Loop starts; each fires at once unless
// block is set, in which case it never fires.
type fakeTimer struct {
	waits   []time.Duration
	stopped int
	block   bool
}

func (f *fakeTimer) wait(d time.Duration) (<-chan time.Time, func()) {
	f.waits = append(f.waits, d)
	c := make(chan time.Time, 1)
	if !f.block {
		c <- time.Time{}
	}
	return c, func() { f.stopped++ }
}

// TestBackoffDoublesAndResets: the waits Loop actually makes between
// attempts double from min to max, stay at max, and start over from min
// after a connection that delivered data; onRetry is told each failure and
// the wait that follows it.
func TestBackoffDoublesAndResets(t *testing.T) {
	ft := &fakeTimer{}
	var told []time.Duration
	var errs []error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	lost := errors.New("lost")
	loop(ctx, time.Second, 8*time.Second, func(context.Context) (bool, error) {
		calls++
		if calls == 9 {
			cancel()
		}
		return calls == 6, lost // the 6th connection delivered data
	}, func(err error, wait time.Duration) { told = append(told, wait); errs = append(errs, err) }, ft.wait)

	want := []time.Duration{1, 2, 4, 8, 8, 1, 2, 4} // seconds: capped at max, reset after the 6th
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(ft.waits, want) {
		t.Fatalf("waited %v, want %v", ft.waits, want)
	}
	if !slices.Equal(told, want) {
		t.Fatalf("onRetry told %v, want %v", told, want)
	}
	for _, err := range errs {
		if err != lost {
			t.Fatalf("onRetry got %v, want the session's error", err)
		}
	}
	if calls != 9 {
		t.Fatalf("%d sessions, want 9 (none after cancel)", calls)
	}
}

// TestStopsWhenContextEnds: a Loop waiting out its backoff returns as
// soon as ctx ends, abandons the wait and runs no further session.
func TestStopsWhenContextEnds(t *testing.T) {
	ft := &fakeTimer{block: true}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		loop(ctx, time.Hour, time.Hour, func(context.Context) (bool, error) {
			calls++
			close(started)
			return false, errors.New("x")
		}, nil, ft.wait)
		close(done)
	}()
	<-started
	cancel()
	<-done
	if calls != 1 || !slices.Equal(ft.waits, []time.Duration{time.Hour}) || ft.stopped != 1 {
		t.Fatalf("calls %d, waits %v, stopped %d; want 1, [1h], 1", calls, ft.waits, ft.stopped)
	}
}

// TestLoopUsesRealTimers: Loop itself waits on real timers (a short run).
func TestLoopUsesRealTimers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	start := time.Now()
	Loop(ctx, time.Millisecond, 2*time.Millisecond, func(context.Context) (bool, error) {
		calls++
		if calls == 3 {
			cancel()
		}
		return false, errors.New("x")
	}, nil)
	if el := time.Since(start); el < 3*time.Millisecond {
		t.Fatalf("three attempts took %v: the 1 ms and 2 ms waits were not made", el)
	}
}
