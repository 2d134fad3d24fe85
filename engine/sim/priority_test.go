package sim

import (
	"testing"
	"time"
)

// drainDone steps e until it has no work, returning the requests in the order
// they finished.
func drainDone(t *testing.T, e *Engine, now time.Duration) []*Request {
	t.Helper()
	var done []*Request
	for e.HasWork() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		done = append(done, res.Finished...)
	}
	return done
}

// TestPriorityQueueOrder: with Config.Priority the waiting queue runs by
// (priority, arrival), lower first; without it, in arrival order.
func TestPriorityQueueOrder(t *testing.T) {
	for _, prio := range []bool{false, true} {
		e, err := New(Config{MaxBatch: 1, Priority: prio}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range []int{3, 1, 2, 1} {
			r := &Request{ID: uint64(i), InputTokens: 100, OutputTokens: 5, Priority: p, Arrival: time.Duration(i)}
			if err := e.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		var got []uint64
		for _, r := range drainDone(t, e, 0) {
			got = append(got, r.ID)
		}
		want := []uint64{0, 1, 2, 3}
		if prio {
			want = []uint64{1, 3, 2, 0}
		}
		if len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
			t.Fatalf("priority=%v: finish order %v, want %v", prio, got, want)
		}
	}
}

// TestPriorityPreemptsLowest: when a running request cannot grow, FCFS
// preempts the newest running request, priority scheduling the one with
// the largest (priority, arrival), here the older one.
func TestPriorityPreemptsLowest(t *testing.T) {
	for _, prio := range []bool{false, true} {
		e, err := New(Config{BlockSize: 16, DeviceBlocks: 10, Priority: prio}, nil)
		if err != nil {
			t.Fatal(err)
		}
		low := &Request{ID: 1, InputTokens: 64, OutputTokens: 60, Priority: 5}
		high := &Request{ID: 2, InputTokens: 64, OutputTokens: 60, Priority: 0, Arrival: time.Millisecond}
		if err := e.Add(low); err != nil {
			t.Fatal(err)
		}
		res, err := e.Step(0)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Add(high); err != nil {
			t.Fatal(err)
		}
		drainDone(t, e, res.Duration)
		victim, spared := high, low
		if prio {
			victim, spared = low, high
		}
		if victim.Preemptions == 0 || spared.Preemptions != 0 {
			t.Fatalf("priority=%v: preemptions low %d, high %d", prio, low.Preemptions, high.Preemptions)
		}
	}
}
