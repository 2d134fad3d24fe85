package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func smokeConfig(admission bool) config {
	return config{Programs: 12, Turns: 4, System: 256, Task: 256, Output: 32, Tool: 64,
		Tick: 2 * time.Millisecond, Admission: admission, Model: "fake", Seed: 1}
}

// TestRolloutAdmissionHoldsAndCompletes runs 12 programs against two fake
// engines whose KV caches fit about three programs each: admission must
// hold some turns in Route, every program must still finish every turn,
// and the prefix hit rate must beat running everyone at once. The tool gap
// keeps every program in flight together: without it a fast machine runs
// the programs one after another, nobody evicts anybody, and running
// everyone at once costs nothing (CI saw 81.3 % hits both ways).
func TestRolloutAdmissionHoldsAndCompletes(t *testing.T) {
	urls, stop, err := startFakes(2, 16, 150, 0) // 2,400 tokens each; a program reaches 768
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()

	cfg := smokeConfig(true)
	cfg.ToolGap = 20 * time.Millisecond
	with, err := rollout(ctx, cfg, urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("admission:", with)
	if with.Turns != 12*4 {
		t.Fatalf("%d turns finished, want 48", with.Turns)
	}
	if with.Held == 0 || with.Admission.Queued == 0 || with.Admission.Resumed == 0 {
		t.Fatalf("admission never held a program: %+v", with)
	}
	if with.PromptTokens == 0 || with.Cached == 0 {
		t.Fatalf("no usage reached the driver: %+v", with)
	}

	urls2, stop2, err := startFakes(2, 16, 150, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	cfg.Admission = false
	without, err := rollout(ctx, cfg, urls2)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("no admission:", without)
	if without.Turns != 48 || without.Held != 0 {
		t.Fatalf("without admission: %+v", without)
	}
	hit := func(s summary) float64 { return float64(s.Cached) / float64(s.PromptTokens) }
	if hit(with) <= hit(without) {
		t.Fatalf("admission should keep prefixes resident: hit rate %.3f with, %.3f without", hit(with), hit(without))
	}
}

// TestRolloutRefusesOversizedPrograms: a program that can never fit a
// worker's cache is a configuration error, not a 30-minute wait.
func TestRolloutRefusesOversizedPrograms(t *testing.T) {
	urls, stop, err := startFakes(1, 16, 40, 0) // 640 tokens
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, err = rollout(context.Background(), smokeConfig(true), urls)
	if err == nil || !strings.Contains(err.Error(), "more than worker 0's KV cache") {
		t.Fatalf("got %v", err)
	}
}

// TestRolloutCancel: cancelling the context stops programs held in Route.
func TestRolloutCancel(t *testing.T) {
	urls, stop, err := startFakes(1, 16, 80, 0) // 1,280 tokens: one program at a time
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	cfg := smokeConfig(true)
	cfg.Tick = time.Hour // nobody is ever resumed
	cfg.ToolGap = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := rollout(ctx, cfg, urls)
		done <- err
	}()
	cancel()
	if err := <-done; err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("got %v", err)
	}
}

func TestFakeEnginePrefixCache(t *testing.T) {
	e, err := newFakeEngine(4, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := e.serve(a, []uint32{10, 11, 12}); got != 0 {
		t.Fatalf("cold cache hit %d", got)
	}
	if got := e.serve(a, nil); got != 8 {
		t.Fatalf("warm cache hit %d, want 8 (two full blocks)", got)
	}
	b := []uint32{9, 9, 9, 9, 8, 8, 8, 8, 7, 7, 7, 7}
	e.serve(b, nil) // three new blocks evict a's
	if got := e.serve(a, nil); got != 0 {
		t.Fatalf("evicted prefix still hit %d", got)
	}
}
