package reconnect

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoffDoublesAndResets(t *testing.T) {
	var waits []time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Loop(ctx, time.Microsecond, 8*time.Microsecond, func(context.Context) (bool, error) {
		calls++
		if calls == 7 {
			cancel()
		}
		return calls == 5, errors.New("lost") // the 5th connection delivered data
	}, func(_ error, wait time.Duration) { waits = append(waits, wait) })
	want := []time.Duration{1, 2, 4, 8, 1, 2} // µs; reset after the 5th session
	if len(waits) != len(want) {
		t.Fatalf("waits %v, want %v µs", waits, want)
	}
	for i := range want {
		if waits[i] != want[i]*time.Microsecond {
			t.Fatalf("wait %d: %v, want %v", i, waits[i], want[i]*time.Microsecond)
		}
	}
}

func TestStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Loop(ctx, time.Hour, time.Hour, func(context.Context) (bool, error) { return false, errors.New("x") }, nil)
		close(done)
	}()
	cancel()
	<-done // returns during the hour-long wait
}
