package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProxyAPIKeys runs "agentkv proxy --api-keys" as a user does: a
// request without a key gets 401, a tenant's key is served, /metrics
// needs the admin key, and a SIGHUP reloads the file (a removed key stops
// working, a broken file keeps the keys in use).
func TestProxyAPIKeys(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	keys := filepath.Join(t.TempDir(), "keys")
	const alice, ops = "sk-alice-0123456789abcdef", "sk-ops-0123456789abcdef012"
	require.NoError(t, os.WriteFile(keys, []byte("alice "+alice+"\nops "+ops+" admin\n"), 0o600))
	base, stderr, done := runProxyInProcess(t, "--listen", "127.0.0.1:0", "--mock-workers", "1", "--api-keys", keys)
	chat := func(key string) int {
		hdr := map[string]string{}
		if key != "" {
			hdr["Authorization"] = "Bearer " + key
		}
		resp, _ := post(t, base+"/v1/chat/completions", hdr,
			[]byte(`{"model":"agentkv-mock","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		return resp.StatusCode
	}
	metrics := func(key string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 401, chat(""))
	require.Equal(t, 200, chat(alice))
	require.Equal(t, 403, metrics(alice))
	require.Equal(t, 200, metrics(ops))

	// A broken file is refused; the keys in use stay.
	require.NoError(t, os.WriteFile(keys, []byte("alice\n"), 0o600))
	require.NoError(t, self.Signal(syscall.SIGHUP))
	eventually(t, "the failed reload logged", func() bool { return strings.Contains(stderr.String(), "not reloaded") })
	require.Equal(t, 200, chat(alice))
	// Alice's key removed: it stops working once the reload is logged.
	require.NoError(t, os.WriteFile(keys, []byte("ops "+ops+" admin\n"), 0o600))
	require.NoError(t, self.Signal(syscall.SIGHUP))
	eventually(t, "the reload logged", func() bool { return strings.Contains(stderr.String(), "API keys reloaded") })
	require.Equal(t, 401, chat(alice))
	require.Equal(t, 200, metrics(ops))

	require.NoError(t, self.Signal(os.Interrupt))
	require.Equal(t, 0, <-done, stderr.String())
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8000": true, "localhost:1": true, "[::1]:80": true,
		":8000": false, "0.0.0.0:8000": false, "10.0.0.1:8000": false, "bad": false} {
		require.Equal(t, want, loopback(addr), addr)
	}
}

// runProxyInProcess runs `agentkv proxy args...` in this process and
// returns its base URL (from the listening line), its stderr and its exit
// code's channel; the proxy runs until the process gets SIGINT.
func runProxyInProcess(t *testing.T, args ...string) (string, *lockedBuffer, <-chan int) {
	t.Helper()
	pr, pw := io.Pipe()
	stderr := new(lockedBuffer)
	done := make(chan int, 1)
	go func() {
		done <- run(&cmdEnv{stdin: strings.NewReader(""), stdout: pw, stderr: stderr}, append([]string{"proxy"}, args...))
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	require.True(t, lines.Scan(), "no startup line; stderr: %s", stderr.String())
	base, _, ok := strings.Cut(strings.TrimPrefix(lines.Text(), "agentkv proxy listening on "), ": ")
	require.True(t, ok, lines.Text())
	go func() {
		for lines.Scan() {
		}
	}()
	return base, stderr, done
}
