package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway/tenant"
)

// regCluster is a Stack over mock workers, with more mocks to add.
type regCluster struct {
	t     *testing.T
	stack *Stack
	url   string
	key   string // the admin key sent, "" for none
}

func startMock(t *testing.T) *mock.Server {
	t.Helper()
	m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Speedup: 1000, Aliases: []string{"*"}, MinOutput: 8, MaxOutput: 16})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func startRegistry(t *testing.T, gc Config, workers int) (*regCluster, []*mock.Server) {
	t.Helper()
	var specs []WorkerSpec
	var mocks []*mock.Server
	for range workers {
		m := startMock(t)
		mocks = append(mocks, m)
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint()})
	}
	if gc.Failover.Probe.Interval == 0 {
		gc.Failover = fastFailover()
	}
	s, srv := testStack(t, StackConfig{Gateway: gc, Affinity: DefaultAffinity, Registry: prometheus.NewRegistry()}, specs...)
	return &regCluster{t: t, stack: s, url: srv.URL}, mocks
}

// call sends method path with body (JSON) and the admin key, if any.
func (c *regCluster) call(method, path, body string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, strings.NewReader(body))
	require.NoError(c.t, err)
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	var m map[string]any
	if len(b) > 0 {
		require.NoError(c.t, json.Unmarshal(b, &m), string(b))
	}
	return resp.StatusCode, resp.Header, m
}

// awaitStatus polls GET /workers/{id} until it says want (2-minute bound).
func (c *regCluster) awaitStatus(id uint64, want WorkerState) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, _, m := c.call(http.MethodGet, fmt.Sprintf("/workers/%d", id), "")
		require.Equal(c.t, http.StatusOK, code, m)
		if m["status"] == string(want) {
			return
		}
		require.True(c.t, time.Now().Before(deadline), "worker %d never %s: %v", id, want, m)
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *regCluster) generate(session string, prompt, maxNew int) (int, string, string, error) {
	h := fnv.New32a()
	h.Write([]byte(session))
	body := `{"input_ids":` + idsJSON(prompt, 1000+int(h.Sum32()%100000)*64) + `,"sampling_params":{"max_new_tokens":` + fmt.Sprint(maxNew) + `,"ignore_eos":true},"return_logprob":true}`
	req, _ := http.NewRequest(http.MethodPost, c.url+GeneratePath, strings.NewReader(body))
	req.Header.Set("X-SMG-Routing-Key", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", "", err
	}
	var r genReply
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil || r.MetaInfo.FinishReason == nil {
			return resp.StatusCode, "", "", fmt.Errorf("bad reply %q: %v", b, err)
		}
		if len(r.OutputIDs) != maxNew {
			return resp.StatusCode, "", "", fmt.Errorf("%d output ids, want %d", len(r.OutputIDs), maxNew)
		}
		return resp.StatusCode, resp.Header.Get(HeaderWorker), r.MetaInfo.FinishReason.Type, nil
	}
	return resp.StatusCode, "", "", errors.New(string(b))
}

// TestRegistryAddTakesSessions: a worker added at run time (POST /workers:
// 202, Location, joining then ready) takes new sessions, and GET /workers
// lists it.
func TestRegistryAddTakesSessions(t *testing.T) {
	c, _ := startRegistry(t, Config{}, 1)
	m := startMock(t)
	code, hdr, body := c.call(http.MethodPost, WorkersPath, `{"url":"`+m.URL()+`","events":"`+m.EventsEndpoint()+`","worker_type":"regular","model_id":"x","priority":50}`)
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, "/workers/1", hdr.Get("Location"))
	require.EqualValues(t, 1, body["id"])
	c.awaitStatus(1, WorkerReady)
	code, _, list := c.call(http.MethodGet, WorkersPath, "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 2, list["total"], list)
	landed := 0
	for i := 0; i < 64 && landed == 0; i++ {
		code, worker, fin, err := c.generate(fmt.Sprintf("new-%d", i), 64, 4)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, "length", fin)
		if worker == m.URL() {
			landed++
		}
	}
	require.Positive(t, landed, "no new session landed on the added worker")
	// The same URL again is a conflict.
	code, _, body = c.call(http.MethodPost, WorkersPath, `{"url":"`+m.URL()+`"}`)
	require.Equal(t, http.StatusConflict, code)
	require.EqualValues(t, 409, body["code"])
}

// TestRegistryDrain: DELETE /workers/{id} while requests run fails none of
// them; the worker goes draining, then removed; requests after it go to
// the others.
func TestRegistryDrain(t *testing.T) {
	c, mocks := startRegistry(t, Config{}, 2)
	c.awaitStatus(1, WorkerReady)
	var failed atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				code, _, fin, err := c.generate(fmt.Sprintf("s%d-%d", g, i), 48, 32)
				if err != nil || code != http.StatusOK || fin != "length" {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(code, fin, err))
				}
			}
		}()
	}
	w1 := c.stack.worker(1)
	deadline := time.Now().Add(2 * time.Minute)
	for c.stack.inFlight(w1) == 0 {
		require.True(t, time.Now().Before(deadline), "no request ever in flight on worker 1")
		time.Sleep(time.Millisecond)
	}
	code, _, body := c.call(http.MethodDelete, "/workers/1", "")
	require.Equal(t, http.StatusAccepted, code, body)
	require.Contains(t, []any{"draining", "removed"}, body["status"])
	c.awaitStatus(1, WorkerRemoved)
	after := 0
	for i := 0; i < 16; i++ {
		code, worker, _, err := c.generate(fmt.Sprintf("after-%d", i), 48, 4)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Equal(t, mocks[0].URL(), worker, "a request went to the removed worker")
		after++
	}
	done.Store(true)
	wg.Wait()
	require.Zero(t, failed.Load(), "requests failed through the drain: %v", firstErr.Load())
	for _, w := range c.stack.Router().Workers() {
		require.NotEqual(t, uint64(1), w.ID)
	}
	code, _, list := c.call(http.MethodGet, WorkersPath, "")
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 1, list["total"])
	// Draining it again is not an error; an unknown id is 404.
	code, _, _ = c.call(http.MethodDelete, "/workers/1", "")
	require.Equal(t, http.StatusAccepted, code)
	code, _, body = c.call(http.MethodDelete, "/workers/7", "")
	require.Equal(t, http.StatusNotFound, code)
	require.EqualValues(t, 404, body["code"])
}

// TestRegistryAdminKey: with keys configured, the registry needs an admin
// key: 401 without a valid key, 403 with a tenant's.
func TestRegistryAdminKey(t *testing.T) {
	keys, err := tenant.Parse(strings.NewReader("alice " + keyAlice + "\nops " + keyOps + " admin\n"))
	require.NoError(t, err)
	c, _ := startRegistry(t, Config{Keys: tenant.NewSet(keys)}, 1)
	m := startMock(t)
	add := `{"url":"` + m.URL() + `"}`
	for _, tc := range []struct {
		key  string
		want int
	}{{"", 401}, {"sk-wrong", 401}, {keyAlice, 403}} {
		c.key = tc.key
		code, _, _ := c.call(http.MethodPost, WorkersPath, add)
		require.Equal(t, tc.want, code, tc.key)
		code, _, _ = c.call(http.MethodDelete, "/workers/0", "")
		require.Equal(t, tc.want, code, tc.key)
		code, _, _ = c.call(http.MethodPost, "/add_worker?url="+m.URL(), "")
		require.Equal(t, tc.want, code, tc.key)
		code, _, _ = c.call(http.MethodGet, "/workers/0", "")
		require.Equal(t, tc.want, code, tc.key)
	}
	c.key = keyOps
	code, _, body := c.call(http.MethodPost, WorkersPath, add)
	require.Equal(t, http.StatusAccepted, code, body)
	c.awaitStatus(1, WorkerReady)
	code, _, body = c.call(http.MethodDelete, "/workers/1?wait=true", "")
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, "removed", body["status"])
}

// TestRegistryBadRequests: bad bodies and ids get 400, 404 and 409 in
// {"error", "code"}, never a panic; the SGLang router's aliases work.
func TestRegistryBadRequests(t *testing.T) {
	c, mocks := startRegistry(t, Config{}, 1)
	for _, tc := range []struct {
		body string
		want int
		says string
	}{
		{`{`, 400, "malformed"},
		{`[]`, 400, "malformed"},
		{`{}`, 400, "url is required"},
		{`{"url":"ftp://x"}`, 400, "http://"},
		{`{"url":"http://127.0.0.1:1","worker_type":"prefill"}`, 400, "regular"},
		{`{"url":"http://127.0.0.1:1","api_key":"sk-1"}`, 400, "does not hold worker secrets"},
		{`{"url":"http://127.0.0.1:1","dp_size":-1}`, 400, "dp_size"},
		{`{"url":"http://127.0.0.1:1","replay":"tcp://x"}`, 400, "replay needs events"},
		{`{"url":"http://127.0.0.1:1","apis":["chat","bogus"]}`, 400, "apis"},
		{`{"url":"http://127.0.0.1:1","token_apis":"generate+nope"}`, 400, "token_apis"},
		{`{"url":"http://127.0.0.1:1","hints":"loud"}`, 400, "hints"},
		{`{"url":"` + mocks[0].URL() + `/"}`, 409, "registered"},
	} {
		code, _, body := c.call(http.MethodPost, WorkersPath, tc.body)
		require.Equal(t, tc.want, code, tc.body)
		require.EqualValues(t, tc.want, body["code"], tc.body)
		require.Contains(t, body["error"], tc.says, tc.body)
	}
	for _, p := range []string{"/workers/9", "/workers/x", "/workers/-1", "/workers/18446744073709551616"} {
		code, _, body := c.call(http.MethodGet, p, "")
		require.Equal(t, http.StatusNotFound, code, p)
		require.EqualValues(t, 404, body["code"])
	}
	code, _, body := c.call(http.MethodPost, "/remove_worker?url=http://127.0.0.1:1", "")
	require.Equal(t, http.StatusNotFound, code, body)
	// The aliases: add, then remove by URL.
	m := startMock(t)
	code, _, body = c.call(http.MethodPost, "/add_worker?url="+m.URL(), "")
	require.Equal(t, http.StatusOK, code, body)
	require.EqualValues(t, 1, body["id"])
	c.awaitStatus(1, WorkerReady)
	code, _, body = c.call(http.MethodPost, "/remove_worker?url="+m.URL()+"&wait=1", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "removed", body["status"])
	// A worker whose URL answers nothing stays joining; draining it is
	// immediate.
	code, _, body = c.call(http.MethodPost, WorkersPath, `{"url":"http://127.0.0.1:1"}`)
	require.Equal(t, http.StatusAccepted, code, body)
	c.awaitStatus(2, WorkerJoining)
	code, _, body = c.call(http.MethodDelete, "/workers/2?wait=true", "")
	require.Equal(t, http.StatusAccepted, code, body)
	require.Equal(t, "removed", body["status"])
}

// TestRegistryChurn: workers added and removed over and over while
// traffic runs: no request fails (run with -race).
func TestRegistryChurn(t *testing.T) {
	c, _ := startRegistry(t, Config{}, 1)
	extra := []*mock.Server{startMock(t), startMock(t)}
	var failed atomic.Int64
	var firstErr atomic.Value
	var done atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				code, _, _, err := c.generate(fmt.Sprintf("c%d-%d", g, i%7), 40, 8)
				if err != nil || code != http.StatusOK {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Sprint(code, err))
				}
			}
		}()
	}
	for round := range 6 {
		m := extra[round%2]
		code, _, body := c.call(http.MethodPost, WorkersPath, `{"url":"`+m.URL()+`","events":"`+m.EventsEndpoint()+`"}`)
		require.Equal(t, http.StatusAccepted, code, body)
		id := uint64(body["id"].(float64))
		if round%3 != 2 {
			c.awaitStatus(id, WorkerReady) // else: removed while joining
		}
		code, _, body = c.call(http.MethodDelete, fmt.Sprintf("/workers/%d?wait=1", id), "")
		require.Equal(t, http.StatusAccepted, code, body)
		require.Equal(t, "removed", body["status"])
	}
	done.Store(true)
	wg.Wait()
	require.Zero(t, failed.Load(), "requests failed through the churn: %v", firstErr.Load())
	require.Len(t, c.stack.Router().Workers(), 1)
	require.Len(t, c.stack.list(), 1)
	require.Len(t, c.stack.Gateway().set().order, 1)
}

// TestStackRegistryAPI: the Stack's own calls, without HTTP.
func TestStackRegistryAPI(t *testing.T) {
	c, _ := startRegistry(t, Config{}, 1)
	m := startMock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := c.stack.AddWorker(ctx, WorkerSpec{URL: m.URL(), TokenAPIs: TokenAPIs(0)})
	require.NoError(t, err)
	_, err = c.stack.AddWorker(ctx, WorkerSpec{URL: m.URL()})
	require.ErrorIs(t, err, ErrWorkerExists)
	st, ok := c.stack.WorkerStatus(id)
	require.True(t, ok)
	require.Equal(t, m.URL(), st.URL)
	require.ErrorIs(t, c.stack.RemoveWorker(ctx, 99), ErrNoSuchWorker)
	require.NoError(t, c.stack.RemoveWorker(ctx, id))
	st, ok = c.stack.WorkerStatus(id)
	require.True(t, ok)
	require.Equal(t, WorkerRemoved, st.Status)
	require.Equal(t, 2, c.stack.Workers())
}

// FuzzWorkerRequest: the POST /workers decoder never panics, and what it
// accepts has a URL the gateway can use.
func FuzzWorkerRequest(f *testing.F) {
	for _, s := range []string{`{"url":"http://h:1"}`, `{"url":"http://h:1","dp_size":2,"apis":["chat"],"token_apis":"generate+inference"}`,
		`{"url":"http://h","events":"tcp://x","replay":"tcp://y","hints":"inline"}`, `{"url":1}`, `{"api_key":null,"url":"https://a"}`, `[`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := DecodeWorkerRequest(b)
		if err != nil {
			require.ErrorIs(t, err, ErrBadWorkerConfig)
			return
		}
		require.NotEmpty(t, spec.URL)
		_, err = newWorker(Worker{URL: spec.URL, DPRanks: spec.DPRanks}, nil)
		require.NoError(t, err)
	})
}
