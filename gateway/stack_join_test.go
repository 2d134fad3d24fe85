package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/internal/freeport"
)

// TestStackReadyOnlyWhenJoined: a worker down at start is ready (/readyz
// 200, routable) only once it has joined the router, so a request sent
// the moment /readyz says 200 is served. The health probes find a worker
// sooner than the start-up backoff that joins it does (here the probes
// retry every 100 ms, the join backoff has grown to 800 ms); counting it
// ready before it joined answered such a request 503 "no workers".
func TestStackReadyOnlyWhenJoined(t *testing.T) {
	addr := freeport.Addr(t)
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

// blackHole accepts connections and never answers (a host that drops
// traffic, or a process that hangs); it returns the base URL.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + ln.Addr().String()
}

// TestStackStartsPastBlackHoles: three workers that accept and never
// answer cost start-up one connect timeout, not one each (the workers
// are tried at once), and the one that answers serves at once, its
// /tokenize asked before any black hole's.
func TestStackStartsPastBlackHoles(t *testing.T) {
	m, err := mock.Start(mock.Config{Speedup: 1000, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	specs := []WorkerSpec{{URL: blackHole(t)}, {URL: blackHole(t)}, {URL: m.URL()}, {URL: blackHole(t)}}
	start := time.Now()
	_, srv := testStack(t, StackConfig{Gateway: Config{Failover: fastFailover()}}, specs...)
	took := time.Since(start)
	require.Less(t, took, 2*connectTimeout, "one shared connect timeout, not three in a row")
	// The first request is tokenized by the worker that answers, not by
	// the black holes first (it took two TokenizeTimeouts, 20 s, when
	// /tokenize went down the configured order regardless of health).
	reqStart := time.Now()
	resp, b := postJSON(t, srv.URL+ChatPath, nil, chatBody("hello", false))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Less(t, time.Since(reqStart), DefaultTokenizeTimeout/2, "no /tokenize to a worker that is not routable")
	t.Logf("started in %v past three black-holed workers; first request in %v", took.Round(time.Millisecond),
		time.Since(reqStart).Round(time.Millisecond))
}

// TestStackBlockSizesDisagree: with no block size configured, workers
// connected at once must still agree on theirs.
func TestStackBlockSizesDisagree(t *testing.T) {
	var urls []string
	for _, bs := range []int{16, 32} {
		m, err := mock.Start(mock.Config{Speedup: 1000, Engine: sim.Config{BlockSize: bs}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = m.Close() })
		urls = append(urls, m.URL())
	}
	_, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{{URL: urls[0]}, {URL: urls[1]}}, Refresh: -1})
	require.ErrorIs(t, err, vllm.ErrBlockSizeMismatch)
	require.ErrorContains(t, err, "every worker must use the same")
}

// TestNoWorkerWaitsOnce: with no worker routable, a request waits
// ReadyWait once (the tokenizer's wait counts for forward's), then gets
// 503; it waited twice when /tokenize learned to wait for a routable
// worker.
func TestNoWorkerWaitsOnce(t *testing.T) {
	const wait = 600 * time.Millisecond
	_, srv := testStack(t, StackConfig{BlockSize: 16, Gateway: Config{Failover: fastFailover(), ReadyWait: wait}},
		WorkerSpec{URL: "http://" + freeport.Addr(t)})
	start := time.Now()
	resp, b := postJSON(t, srv.URL+ChatPath, nil, chatBody("hello", false))
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(b))
	require.GreaterOrEqual(t, took, wait)
	require.Less(t, took, 2*wait, "one ReadyWait, not two")
}

// TestStackIndexesWhatARunningWorkerHeld: a gateway that starts beside an
// engine already serving learns the blocks the engine stored before the
// gateway's subscription existed, from the engine's replay buffer, when
// the next batch arrives. Without the catch-up, the earlier blocks stay
// unknown and every later block that extends them is dropped for an
// unknown parent.
func TestStackIndexesWhatARunningWorkerHeld(t *testing.T) {
	m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	direct := func(text string) {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`, m.Model(), text)
		resp, err := http.Post(m.URL()+ChatPath, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// Before the gateway: a context of 8 blocks and more, published to
	// nobody.
	first := e2eWords(8*m.BlockSize(), "before")
	direct(first)
	held := m.CachedBlocks()
	require.GreaterOrEqual(t, held, 8)

	s, _ := testStack(t, StackConfig{}, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Replay: m.ReplayEndpoint()})
	device := func() int {
		for _, ws := range s.Router().Index().Stats().Workers {
			if ws.Worker.ID == 0 {
				return ws.Device
			}
		}
		return 0
	}
	// The same context grown by a turn, until a batch reaches the gateway
	// (a SUB socket's subscription reaches the PUB socket after the dial).
	deadline := time.Now().Add(time.Minute)
	for n := 0; device() == 0; n++ {
		require.True(t, time.Now().Before(deadline), "no block of the worker was ever indexed (its events extend chains the gateway never learnt)")
		direct(first + " " + e2eWords(2*m.BlockSize(), fmt.Sprintf("after%d", n)))
		for end := time.Now().Add(250 * time.Millisecond); device() == 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	for device() != m.CachedBlocks() {
		require.True(t, time.Now().Before(deadline), "the index holds %d device blocks, the worker %d", device(), m.CachedBlocks())
		time.Sleep(5 * time.Millisecond)
	}
	require.Greater(t, device(), held, "the blocks stored before the gateway started are indexed too")
}
