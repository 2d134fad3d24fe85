package main

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/gateway"
)

// TestPythonClient runs client.py, the standard-library Python client
// written from slime's request code, against an agentkv gateway in front of
// two mock workers: multi-turn sessions with input_ids,
// sampling_params, return_logprob and X-SMG-Routing-Key, a cached prefix
// from the second turn on, and an abort by rid that ends a stream with
// finish_reason abort, sent by the gateway to the worker holding the rid.
func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: client.py is not exercised (install python3 to run it; it needs no packages)")
	}
	_, urls, stop, err := startWorkers(2, 2000, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	st, err := gateway.NewStack(ctx, gateway.StackConfig{Workers: []gateway.WorkerSpec{{URL: urls[0]}, {URL: urls[1]}},
		Affinity: gateway.DefaultAffinity, Refresh: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	proxy := httptest.NewServer(st.Handler(""))
	defer proxy.Close()
	out, err := exec.CommandContext(ctx, py, "client.py", "--url", proxy.URL, "--sessions", "3", "--turns", "3").CombinedOutput()
	t.Logf("client.py:\n%s", out)
	if err != nil {
		t.Fatalf("client.py failed: %v", err)
	}
	if !strings.Contains(string(out), `"ok": true`) || !strings.Contains(string(out), "finish abort") {
		t.Fatal("client.py did not report success")
	}
}
