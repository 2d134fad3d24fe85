package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
)

// TestStackReadyOnlyWhenJoined: a worker down at start is ready (/readyz
// 200, routable) only once it has joined the router, so a request sent
// the moment /readyz says 200 is served. The health probes find a worker
// sooner than the start-up backoff that joins it does (here the probes
// retry every 100 ms, the join backoff has grown to 800 ms); counting it
// ready before it joined answered such a request 503 "no workers".
func TestStackReadyOnlyWhenJoined(t *testing.T) {
	addr := freeAddr(t)
	s, srv := testStack(t, StackConfig{BlockSize: 16, Gateway: Config{Failover: fastFailover(), ReadyWait: -1}},
		WorkerSpec{URL: "http://" + addr})
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b [512]byte
		n, _ := resp.Body.Read(b[:])
		return resp.StatusCode, string(b[:n])
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "worker 0 http://"+addr)
	// Not a synchronisation: the worker comes up late, when the join
	// backoff (100 ms doubling) is longer than the probe interval.
	time.Sleep(900 * time.Millisecond)
	m, err := mock.Start(mock.Config{Listen: addr, Speedup: 1000, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	deadline := time.Now().Add(15 * time.Second)
	for code, _ := get("/readyz"); code != http.StatusOK; code, _ = get("/readyz") {
		require.True(t, time.Now().Before(deadline), "never ready")
		time.Sleep(time.Millisecond)
	}
	require.Len(t, s.Router().Workers(), 1, "ready means joined")
	resp, b := postJSON(t, srv.URL+ChatPath, nil, chatBody("hello", false))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
}
