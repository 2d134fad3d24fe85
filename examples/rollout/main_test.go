package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentkv/agentkv/gateway"
)

func smokeConfig(admission bool) config {
	return config{Programs: 12, Turns: 4, Steps: 2, System: 256, Task: 256, Output: 32, Tool: 64,
		Tick: 2 * time.Millisecond, Admission: admission, Model: "mock", Seed: 1, StepControl: "sglang"}
}

// queuedGate holds every program of the first step before its release
// until admission has queued a program: the programs that reached the
// gateway stay, so the ones arriving after them do not fit and must wait,
// whatever the machine's speed. (Without the gate a loaded machine could
// run programs one after another, and nobody would wait.)
//
// The gate also opens once every program of the step waits at it (nobody
// can be queued then; the test reports it rather than hang).
func queuedGate(programs int) func(ctx context.Context, st *gateway.Stack, step int) error {
	var mu sync.Mutex
	waiting := 0
	return func(ctx context.Context, st *gateway.Stack, step int) error {
		if step != 0 {
			return nil
		}
		mu.Lock()
		waiting++
		mu.Unlock()
		for {
			mu.Lock()
			all := waiting == programs
			mu.Unlock()
			if all || st.Router().AdmissionStats().Queued > 0 {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("gate: %w", ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// TestRolloutAdmissionHoldsAndCompletes runs two rollout steps of 16
// programs against two mock workers whose KV caches fit about three
// programs each at their first turn, with a pause, flush, weight update and continue between
// the steps: admission must hold some turns in the gateway and resume
// them, every program must finish every turn, the workers must carry the
// new weights, and the prefix hit rate must beat running everyone at
// once.
func TestRolloutAdmissionHoldsAndCompletes(t *testing.T) {
	srvs, urls, stop, err := startWorkers(2, 110, 1000) // 1,760 tokens each; 16 programs start at 512 and reach 832
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cfg := smokeConfig(true)
	cfg.Programs = 16
	cfg.ToolGap = 5 * time.Millisecond
	cfg.beforeRelease = queuedGate(cfg.Programs)
	with, err := rollout(ctx, cfg, urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("admission:", with)
	if with.Turns != 2*16*4 {
		t.Fatalf("%d turns finished, want 128", with.Turns)
	}
	if with.Held == 0 || with.Admission.Queued == 0 || with.Admission.Resumed == 0 {
		t.Fatalf("admission never held a program: %+v", with)
	}
	if with.PromptTokens == 0 || with.Cached == 0 {
		t.Fatalf("no usage reached the driver: %+v", with)
	}
	for i, s := range srvs {
		if v := s.WeightVersion(); v != "step-1" {
			t.Fatalf("worker %d has weight version %q after the step boundary", i, v)
		}
	}

	_, urls2, stop2, err := startWorkers(2, 110, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	cfg.Admission, cfg.beforeRelease = false, nil
	without, err := rollout(ctx, cfg, urls2)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("no admission:", without)
	if without.Turns != 128 || without.Held != 0 {
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
	_, urls, stop, err := startWorkers(1, 40, 1000) // 640 tokens
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	_, err = rollout(context.Background(), smokeConfig(true), urls)
	if err == nil || !strings.Contains(err.Error(), "more than worker 0's KV cache") {
		t.Fatalf("got %v", err)
	}
}

// TestRolloutCancel: cancelling the context stops programs held in the
// gateway.
func TestRolloutCancel(t *testing.T) {
	_, urls, stop, err := startWorkers(1, 80, 1000) // 1,280 tokens: one program at a time
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

// TestStepBoundary: an unknown step control is an error; vLLM's endpoints
// work on the mock.
func TestStepBoundary(t *testing.T) {
	srvs, urls, stop, err := startWorkers(1, 80, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	hc := gateway.NewHTTPClient()
	if err := stepBoundary(context.Background(), hc, "bogus", urls, 1); err == nil {
		t.Fatal("bogus control accepted")
	}
	for _, c := range []string{"vllm", "sglang", "none"} {
		if err := stepBoundary(context.Background(), hc, c, urls, 3); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
	}
	if v := srvs[0].WeightVersion(); v != "step-3" {
		t.Fatalf("weight version %q", v)
	}
}
