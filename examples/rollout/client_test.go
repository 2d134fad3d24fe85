package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPythonClient runs client.py, the standard-library Python client
// written from slime's request code, against a mock worker, which speaks
// SGLang's /generate natively: multi-turn sessions with input_ids,
// sampling_params, return_logprob and X-SMG-Routing-Key, a cached prefix
// from the second turn on, and an abort by rid that ends a stream with
// finish_reason abort. (The same client runs against `agentkv proxy` once
// the gateway serves /generate.)
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: client.py is not exercised (install python3 to run it; it needs no packages)")
	}
	_, urls, stop, err := startWorkers(1, 2000, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "client.py", "--url", urls[0], "--sessions", "3", "--turns", "3").CombinedOutput()
	t.Logf("client.py:\n%s", out)
	if err != nil {
		t.Fatalf("client.py failed: %v", err)
	}
	if !strings.Contains(string(out), `"ok": true`) || !strings.Contains(string(out), "finish abort") {
		t.Fatal("client.py did not report success")
	}
}
