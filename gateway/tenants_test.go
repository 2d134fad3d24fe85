package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway/tenant"
)

const (
	keyAlice = "sk-alice-0123456789abcdef"
	keyBob   = "sk-bob-0123456789abcdef01"
	keyOps   = "sk-ops-0123456789abcdef012"
	keyCarol = "sk-carol-0123456789abcdef"
)

// tenantCluster is two mock workers (each behind a proxy that counts the
// requests reaching it) under a Stack with API keys.
type tenantCluster struct {
	stack *Stack
	srv   *httptest.Server
	mocks []*mock.Server
	hits  []*atomic.Int64
}

func startTenants(t *testing.T, workers int) *tenantCluster {
	t.Helper()
	keys, err := tenant.Parse(strings.NewReader(
		"alice " + keyAlice + "\nbob " + keyBob + "\nops " + keyOps + " admin\ncarol " + keyCarol + " max-sessions=1\n"))
	require.NoError(t, err)
	c := &tenantCluster{}
	var specs []WorkerSpec
	for i := 0; i < workers; i++ {
		m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: 1000})
		require.NoError(t, err)
		t.Cleanup(func() { m.Close() })
		u, _ := url.Parse(m.URL())
		n := new(atomic.Int64)
		rp := httputil.NewSingleHostReverseProxy(u)
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && r.URL.Path != "/tokenize" {
				n.Add(1)
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(front.Close)
		c.mocks, c.hits = append(c.mocks, m), append(c.hits, n)
		specs = append(specs, WorkerSpec{URL: front.URL, Events: m.EventsEndpoint(), Replay: m.ReplayEndpoint(), Tokenizer: m})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.stack, err = NewStack(ctx, StackConfig{Workers: specs, Affinity: DefaultAffinity, Refresh: -1,
		Registry: prometheus.NewRegistry(), Gateway: Config{Keys: tenant.NewSet(keys)}})
	require.NoError(t, err)
	c.srv = httptest.NewServer(c.stack.Handler("/metrics"))
	t.Cleanup(func() {
		c.srv.Close()
		require.NoError(t, c.stack.Close())
	})
	// The router hears each worker's KV events before the test starts
	// (a ZeroMQ subscriber misses what is published before it joined).
	deadline := time.Now().Add(time.Minute)
	for i, m := range c.mocks {
		for n := 0; c.deviceBlocks(uint64(i)) == 0; n++ {
			require.True(t, time.Now().Before(deadline), "worker %d: no KV events reached the router", i)
			body := fmt.Sprintf(`{"model":%q,"max_tokens":1,"messages":[{"role":"user","content":%q}]}`,
				m.Model(), e2eWords(64, fmt.Sprintf("probe%dx%d", i, n)))
			resp, err := http.Post(m.URL()+ChatPath, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			resp.Body.Close()
			for end := time.Now().Add(250 * time.Millisecond); c.deviceBlocks(uint64(i)) == 0 && time.Now().Before(end); {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return c
}

func (c *tenantCluster) deviceBlocks(id uint64) int {
	for _, ws := range c.stack.Router().Index().Stats().Workers {
		if ws.Worker.ID == id {
			return ws.Device
		}
	}
	return 0
}

// waitDeviceBlocks waits until the index holds at least n device blocks of
// worker id (KV events arrive asynchronously after a reply).
func (c *tenantCluster) waitDeviceBlocks(t *testing.T, id uint64, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for c.deviceBlocks(id) < n {
		require.True(t, time.Now().Before(deadline), "worker %d: index holds %d device blocks, want %d", id, c.deviceBlocks(id), n)
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *tenantCluster) workerHits() int64 {
	var n int64
	for _, h := range c.hits {
		n += h.Load()
	}
	return n
}

// chat sends a non-streamed chat request; it returns the reply, its worker
// and the cached tokens the engine reported.
func (c *tenantCluster) chat(t *testing.T, key, session, text string, extra map[string]string) (*http.Response, []byte, string, int) {
	t.Helper()
	hdr := map[string]string{"X-Dynamo-Session-Id": session}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	for k, v := range extra {
		hdr[k] = v
	}
	body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":%q}]}`, c.mocks[0].Model(), text)
	resp, b := postJSON(t, c.srv.URL+ChatPath, hdr, body)
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(b, &r), string(b))
	}
	return resp, b, resp.Header.Get(HeaderWorker), r.Usage.Details.Cached
}

// TestTenantKeys: a request without a valid key gets 401 in its API's
// shape and reaches no worker; /metrics needs an admin key.
func TestTenantKeys(t *testing.T) {
	c := startTenants(t, 2)
	before := c.workerHits()
	for _, tc := range []struct {
		path, key string
		anthropic bool
	}{
		{ChatPath, "", false},
		{ChatPath, "sk-wrong-0123456789abcdef", false},
		{MessagesPath, "", true},
		{ResponsesPath, "sk-bob-0123456789abcdef0", false},
		{CompletionsPath, "", false},
	} {
		hdr := map[string]string{"X-Api-Key": tc.key, "Anthropic-Version": "2023-06-01"}
		if !tc.anthropic {
			hdr = map[string]string{"Authorization": "Bearer " + tc.key}
		}
		resp, b := postJSON(t, c.srv.URL+tc.path, hdr, `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s %q: %s", tc.path, tc.key, b)
		require.Equal(t, "authentication_error", errorShape(t, tc.anthropic, b), tc.path)
	}
	require.Equal(t, before, c.workerHits(), "a request without a valid key reached a worker")

	resp, _, _, _ := c.chat(t, keyAlice, "k1", e2eWords(40, "k"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _, _, _ = c.chat(t, "", "k1", e2eWords(40, "k"), map[string]string{"X-Api-Key": keyBob})
	require.Equal(t, http.StatusOK, resp.StatusCode, "x-api-key is read too")

	for key, want := range map[string]int{"": 401, keyAlice: 403, keyOps: 200} {
		req, _ := http.NewRequest(http.MethodGet, c.srv.URL+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "/metrics with key %q", key)
	}
}

// TestTenantIsolation: tenant B sending tenant A's session id lands in a
// session of its own, cannot end or release A's, and is never credited
// with A's cached blocks (one worker, so B lands where A's prefix is).
func TestTenantIsolation(t *testing.T) {
	c := startTenants(t, 1)
	text := e2eWords(200, "secret")
	before := c.deviceBlocks(0)
	_, _, wa, cached := c.chat(t, keyAlice, "shared-id", text, nil)
	require.Zero(t, cached)
	// The router's cached-tokens header counts what the index holds: wait
	// until the worker's KV events for alice's first turn arrived.
	c.waitDeviceBlocks(t, 0, before+200/c.mocks[0].BlockSize())
	resp, _, wa2, cached := c.chat(t, keyAlice, "shared-id", text, nil)
	require.Equal(t, wa, wa2, "alice's session moved")
	require.Greater(t, cached, 0, "alice's second turn found nothing cached")
	require.NotEqual(t, "0", resp.Header.Get(HeaderCachedTokens))

	resp, b, wb, cached := c.chat(t, keyBob, "shared-id", text, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Equal(t, wa, wb)
	require.Zero(t, cached, "bob was served alice's cached prefix on alice's worker")
	require.Equal(t, "0", resp.Header.Get(HeaderCachedTokens), "the router credited bob with alice's blocks")
	// A client cannot pick alice's salt either: the gateway replaces it.
	text2 := e2eWords(200, "other")
	c.chat(t, keyAlice, "a2", text2, nil)
	body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"cache_salt":%q,"messages":[{"role":"user","content":%q}]}`,
		c.mocks[0].Model(), tenant.Salt("alice"), text2)
	resp, b = postJSON(t, c.srv.URL+ChatPath, map[string]string{"Authorization": "Bearer " + keyBob}, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"cached_tokens":0`, "bob reached alice's cache with her salt: %s", b)
	_, ok := c.stack.Router().Sessions().Get("alice/shared-id")
	require.True(t, ok)
	_, ok = c.stack.Router().Sessions().Get("bob/shared-id")
	require.True(t, ok, "bob's turns are a session of their own")

	// Bob ends "his" session and releases the program: alice's lives on.
	resp, _, _, _ = c.chat(t, keyBob, "shared-id", text, map[string]string{"X-Dynamo-Session-Final": "true"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, b = postJSON(t, c.srv.URL+ReleasePath, map[string]string{"Authorization": "Bearer " + keyBob}, `{"program_id":"shared-id"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	_, ok = c.stack.Router().Sessions().Get("alice/shared-id")
	require.True(t, ok, "bob ended alice's session")
	_, ok = c.stack.Router().Sessions().Get("bob/shared-id")
	require.False(t, ok, "bob's own session did not end")
	_, _, _, cached = c.chat(t, keyAlice, "shared-id", text, nil)
	require.Greater(t, cached, 0, "alice's cache went with bob's release")

	// An admin releases alice's program by its scoped id.
	resp, _ = postJSON(t, c.srv.URL+ReleasePath, map[string]string{"Authorization": "Bearer " + keyOps}, `{"program_id":"alice/shared-id"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, ok = c.stack.Router().Sessions().Get("alice/shared-id")
	require.False(t, ok)
}

// TestTenantLimit: a tenant past its session limit gets 429 with
// Retry-After; its live session and other tenants go on.
func TestTenantLimit(t *testing.T) {
	c := startTenants(t, 1)
	resp, _, _, _ := c.chat(t, keyCarol, "c1", e2eWords(20, "c"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	before := c.workerHits()
	resp, b, _, _ := c.chat(t, keyCarol, "c2", e2eWords(20, "c"), nil)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, string(b))
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.Equal(t, "rate_limit_error", errorShape(t, false, b))
	require.Equal(t, before, c.workerHits())
	resp, _, _, _ = c.chat(t, keyCarol, "c1", e2eWords(21, "c"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the live session was refused")
	resp, _, _, _ = c.chat(t, keyAlice, "c2", e2eWords(20, "c"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Ending the session frees its place.
	resp, _, _, _ = c.chat(t, keyCarol, "c1", e2eWords(22, "c"), map[string]string{"X-Dynamo-Session-Final": "1"})
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _, _, _ = c.chat(t, keyCarol, "c2", e2eWords(20, "c"), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, strconv.Itoa(resp.StatusCode))
}

func TestSetCacheSalt(t *testing.T) {
	for _, tc := range []struct{ in, salt, want string }{
		{`{"a":1}`, "s", `{"cache_salt":"s","a":1}`},
		{` { }`, "s", ` {"cache_salt":"s" }`},
		{`{"a":1,"cache_salt":"evil"}`, "s", `{"a":1,"cache_salt":"s"}`},
		{`{"a":1,"cache_salt":"evil"}`, "", `{"a":1}`},
		{`{"a":1}`, "", `{"a":1}`},
	} {
		got, err := setCacheSalt([]byte(tc.in), tc.salt)
		require.NoError(t, err)
		require.JSONEq(t, tc.want, string(got), "in %s", tc.in)
	}
}

// TestHideWorkerAddresses: with HideWorkerAddresses no reply names a
// worker's address: the worker header and error replies say "worker-N".
func TestHideWorkerAddresses(t *testing.T) {
	f := newFleet(t, 1, []mock.API{mock.APIChat}, Config{HideWorkerAddresses: true, Failover: fastFailover()}, false)
	f.waitRoutable(0, true)
	resp, body, err := f.post(context.Background(), MessagesPath, "h1", bodyFor(MessagesPath, "hello there", false))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "worker-0", resp.Header.Get(HeaderWorker))
	require.NoError(t, f.mock(0).SetFaults(mock.Faults{FailStatus: http.StatusBadRequest, FailCount: 1}))
	resp, body, err = f.post(context.Background(), MessagesPath, "h1", bodyFor(MessagesPath, "hello again", false))
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	require.Contains(t, body, "worker-0")
	host := strings.TrimPrefix(f.mock(0).URL(), "http://")
	require.NotContains(t, body, host, "the error names the worker's address")
	require.NotContains(t, body, "127.0.0.1")
}

// TestTenantTokenAPIs: the RL token APIs and control endpoints ask for a
// key too: 401 in SGLang's shape without one, a tenant's rid is its own,
// and engine controls and abort_all need the admin key.
func TestTenantTokenAPIs(t *testing.T) {
	c := startTenants(t, 1)
	body := `{"rid":"r1","input_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17],"sampling_params":{"max_new_tokens":2}}`
	resp, b := postJSON(t, c.srv.URL+GeneratePath, nil, body)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, string(b))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(b, &e), string(b))
	require.NotEmpty(t, e.Error.Message)
	resp, b = postJSON(t, c.srv.URL+GeneratePath, map[string]string{"Authorization": "Bearer " + keyAlice}, body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp, _ = postJSON(t, c.srv.URL+AbortPath, map[string]string{"Authorization": "Bearer " + keyBob}, `{"abort_all":true}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = postJSON(t, c.srv.URL+"/flush_cache", map[string]string{"Authorization": "Bearer " + keyAlice}, `{}`)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, b = postJSON(t, c.srv.URL+"/flush_cache", map[string]string{"Authorization": "Bearer " + keyOps}, `{}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
}
