package sim

import (
	"testing"
	"time"
)

// TestAbort: an aborted request, queued or running, leaves the engine with
// its blocks released, produces nothing more, and the others finish.
func TestAbort(t *testing.T) {
	e, err := New(Config{BlockSize: 4, DeviceBlocks: 64, MaxBatchedTokens: 64}, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &Request{ID: 1, InputTokens: 16, OutputTokens: 50}
	b := &Request{ID: 2, InputTokens: 16, OutputTokens: 3}
	q := &Request{ID: 3, InputTokens: 16, OutputTokens: 3}
	for _, r := range []*Request{a, b, q} {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	if !e.Abort(q) || e.Abort(q) {
		t.Fatal("aborting a queued request once must succeed, twice must not")
	}
	now := time.Duration(0)
	res, err := e.Step(now)
	if err != nil {
		t.Fatal(err)
	}
	now += res.Duration
	if a.Generated() != 1 || !e.Abort(a) {
		t.Fatalf("running request: generated %d", a.Generated())
	}
	if e.Running() != 1 || e.Waiting() != 0 {
		t.Fatalf("running %d waiting %d after aborts", e.Running(), e.Waiting())
	}
	for e.HasWork() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res.Finished {
			if r != b {
				t.Fatalf("request %d finished after its abort", r.ID)
			}
		}
		now += res.Duration
	}
	if b.Finished == 0 || a.Finished != 0 || q.Finished != 0 {
		t.Fatal("the request left must finish, the aborted ones must not")
	}
	if e.UsedBlocks() != 0 {
		t.Fatalf("%d blocks still referenced", e.UsedBlocks())
	}
	if e.Abort(&Request{ID: 9}) {
		t.Fatal("a request never added aborted")
	}
}
