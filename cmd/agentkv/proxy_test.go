package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/freeport"
)

// fakeVLLM is an in-process stand-in for a vLLM OpenAI server: /metrics
// with vllm:cache_config_info, /tokenize (one token per byte of a
// deterministic rendering, so a growing conversation tokenizes to an
// extension of its earlier tokens), /v1/models and /v1/chat/completions,
// JSON or SSE (usage in the final chunk when include_usage is asked for).
type fakeVLLM struct {
	srv       *httptest.Server
	blockSize int
	blocks    int

	// Knobs, set before the first request.
	noCacheInfo bool // /metrics lacks cache_config_info
	noTokenize  bool // /tokenize answers 404
	// tokenize, if set, answers /tokenize for a chat body (else one
	// token per byte of renderChat).
	tokenize  func(body []byte) ([]uint32, error)
	arrived   chan struct{} // if set, receives one value per chat request on arrival
	gateFirst chan struct{} // if set, a stream waits on it before its first chunk
	gateRest  chan struct{} // if set, a stream waits on it after its first chunk

	mu       sync.Mutex // guards the fields below
	chats    int
	lastBody map[string]any
	lastHdr  http.Header
	streamed []byte // the exact bytes of the last stream sent
}

const fakeCompletionTokens = 7
const fakeCachedTokens = 16

func newFakeVLLM(t testing.TB, blockSize, blocks int) *fakeVLLM {
	t.Helper()
	f := &fakeVLLM{blockSize: blockSize, blocks: blocks}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeVLLM) URL() string { return f.srv.URL }

func (f *fakeVLLM) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chats
}

// renderChat is the fake chat template: "role:content\n" per message.
func renderChat(msgs []map[string]any) []byte {
	var b bytes.Buffer
	for _, m := range msgs {
		fmt.Fprintf(&b, "%v:%v\n", m["role"], m["content"])
	}
	return b.Bytes()
}

func tokensOf(text []byte) []uint32 {
	out := make([]uint32, len(text))
	for i, c := range text {
		out[i] = uint32(c)
	}
	return out
}

func (f *fakeVLLM) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		fmt.Fprintln(w, "# HELP vllm:num_requests_running Number of requests in model execution batches.")
		fmt.Fprintln(w, `vllm:num_requests_running{engine="0",model_name="m"} 0.0`)
		if !f.noCacheInfo {
			fmt.Fprintln(w, "# TYPE vllm:cache_config_info gauge")
			fmt.Fprintf(w, "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"auto\",engine=\"0\",num_gpu_blocks=\"%d\",prefix_caching_hash_algo=\"sha256\"} 1.0\n",
				f.blockSize, f.blocks)
		}
	case "/v1/models":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	case "/tokenize":
		if f.noTokenize {
			http.NotFound(w, r)
			return
		}
		if f.tokenize != nil {
			body, _ := io.ReadAll(r.Body)
			toks, err := f.tokenize(body)
			if err != nil {
				http.Error(w, `{"error":"bad tokenize request"}`, http.StatusBadRequest)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "count": len(toks), "max_model_len": 1 << 20})
			return
		}
		var req struct {
			Messages []map[string]any `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Messages == nil {
			http.Error(w, `{"error":"bad tokenize request"}`, http.StatusBadRequest)
			return
		}
		toks := tokensOf(renderChat(req.Messages))
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks, "count": len(toks), "max_model_len": 1 << 20})
	case "/v1/chat/completions":
		f.chat(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeVLLM) chat(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":"bad json"}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.chats++
	f.lastBody, f.lastHdr = req, r.Header.Clone()
	f.mu.Unlock()
	if f.arrived != nil {
		f.arrived <- struct{}{}
	}
	var msgs []map[string]any
	if raw, ok := req["messages"].([]any); ok {
		for _, m := range raw {
			if mm, ok := m.(map[string]any); ok {
				msgs = append(msgs, mm)
			}
		}
	}
	if len(msgs) > 0 && msgs[0]["content"] == "please fail" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"object":"error","message":"engine says no","type":"BadRequestError","code":400}`)
		return
	}
	prompt := len(renderChat(msgs))
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
		prompt, prompt+fakeCompletionTokens, fakeCompletionTokens, fakeCachedTokens)
	if stream, _ := req["stream"].(bool); !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok","tool_calls":[{"id":"t1","type":"function","function":{"name":"Bash","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":%s}`, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl := w.(http.Flusher)
	var sent bytes.Buffer
	emit := func(s string) {
		sent.WriteString(s)
		_, _ = io.WriteString(w, s)
		fl.Flush()
	}
	if f.gateFirst != nil {
		<-f.gateFirst
	}
	emit("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n")
	if f.gateRest != nil {
		<-f.gateRest
	}
	emit("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n")
	emit("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\\n\"},\"finish_reason\":\"stop\"}]}\n\n")
	if so, ok := req["stream_options"].(map[string]any); ok && so["include_usage"] == true {
		emit("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":" + usage + "}\n\n")
	}
	emit("data: [DONE]\n\n")
	f.mu.Lock()
	f.streamed = append([]byte(nil), sent.Bytes()...)
	f.mu.Unlock()
}

// testProxy builds a proxy over the fakes and serves it from httptest.
func testProxy(t *testing.T, cfg proxyConfig, fakes ...*fakeVLLM) (*proxy, *httptest.Server) {
	t.Helper()
	for _, f := range fakes {
		cfg.Workers = append(cfg.Workers, workerSpec{URL: f.URL()})
	}
	if cfg.MetricsPath == "" {
		cfg.MetricsPath = "/metrics"
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	p, err := newProxy(context.Background(), cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, p.Close())
	})
	// Every fake answers /health: wait for the first probes, so tests
	// that count on each worker (round-robin, placement) see them all.
	eventually(t, "every worker routable", func() bool {
		for _, st := range p.Gateway().Tracker().Status() {
			if !st.Routable {
				return false
			}
		}
		return true
	})
	return p, srv
}

type chatMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func chatBody(t *testing.T, stream bool, msgs ...chatMsg) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs, "stream": stream})
	require.NoError(t, err)
	return b
}

func post(t *testing.T, url string, hdr map[string]string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// metricValue reads one sample from the proxy's metrics endpoint
// ("name{labels}" exactly as exposed); 0 when absent.
func metricValue(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err, line)
			return v
		}
	}
	return 0
}

// eventually polls cond every few milliseconds until it holds. Its bound
// (2 minutes) is only for a condition that never comes: far above what
// any wait here takes on a loaded 2-core machine, so it cannot flake.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tk := time.NewTicker(2 * time.Millisecond)
	defer tk.Stop()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-tk.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

var systemPrompt = strings.Repeat("You are a careful coding agent. ", 12)

// TestProxySessionLandsOnSameWorker sends growing turns of several Claude
// Code sessions through KV-aware routing in approximate mode (the fakes
// publish no events): every turn of a session must land on the worker of
// its first turn, with the expected cached prefix in the debug header; with
// round-robin the same turns scatter, so the KV policy is what keeps them.
func TestProxySessionLandsOnSameWorker(t *testing.T) {
	const bs = 16
	fakes := []*fakeVLLM{newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000)}
	p, srv := testProxy(t, proxyConfig{}, fakes...)
	require.True(t, p.Approximate(), "fakes publish no events: approximate mode")

	type turnResult struct{ worker, cached string }
	runSession := func(base, sid string, turns int) ([]turnResult, int) {
		msgs := []chatMsg{{"system", systemPrompt + sid}, {"user", "task for " + sid}}
		var out []turnResult
		prompts := 0
		for k := 0; k < turns; k++ {
			resp, body := post(t, base+vllm.ChatPath, map[string]string{"X-Claude-Code-Session-Id": sid}, chatBody(t, false, msgs...))
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			require.Contains(t, string(body), `"finish_reason":"tool_calls"`)
			out = append(out, turnResult{resp.Header.Get(headerWorker), resp.Header.Get(headerCachedTokens)})
			prompts += len(renderChat(toMaps(msgs)))
			msgs = append(msgs, chatMsg{"assistant", fmt.Sprintf("calling a tool, turn %d", k)},
				chatMsg{"user", fmt.Sprintf("tool result %d: %s", k, strings.Repeat("x", 40))})
		}
		return out, prompts
	}

	sessions := []string{"sess-a", "sess-b", "sess-c", "sess-d"}
	var totalPrompt int
	for _, sid := range sessions {
		res, prompts := runSession(srv.URL, sid, 3)
		totalPrompt += prompts
		for k, r := range res {
			require.Equal(t, res[0].worker, r.worker, "session %s turn %d moved worker", sid, k)
			require.NotEmpty(t, r.worker)
			cached, err := strconv.Atoi(r.cached)
			require.NoError(t, err)
			if k > 0 {
				// The previous turn's prompt was recorded on this worker: at
				// least its full blocks are expected to be cached.
				msgs := []chatMsg{{"system", systemPrompt + sid}, {"user", "task for " + sid}}
				for j := 0; j < k-1; j++ {
					msgs = append(msgs, chatMsg{"assistant", fmt.Sprintf("calling a tool, turn %d", j)},
						chatMsg{"user", fmt.Sprintf("tool result %d: %s", j, strings.Repeat("x", 40))})
				}
				prev := len(renderChat(toMaps(msgs)))
				require.GreaterOrEqual(t, cached, prev/bs*bs, "session %s turn %d", sid, k)
			}
		}
	}
	// Every response came from a worker the fakes saw.
	total := 0
	for _, f := range fakes {
		total += f.requests()
	}
	require.Equal(t, 12, total)

	// Usage reached Decision.Done: the router's finished counter, the
	// proxy's usage counters, and the session table's totals.
	require.Equal(t, 12.0, metricValue(t, srv.URL, `agentkv_router_requests_finished_total{outcome="ok"}`))
	require.Equal(t, float64(totalPrompt), metricValue(t, srv.URL, `agentkv_gateway_usage_tokens_total{api="chat",kind="prompt"}`))
	require.Equal(t, float64(12*fakeCompletionTokens), metricValue(t, srv.URL, `agentkv_gateway_usage_tokens_total{api="chat",kind="completion"}`))
	require.Equal(t, float64(12*fakeCachedTokens), metricValue(t, srv.URL, `agentkv_gateway_usage_tokens_total{api="chat",kind="cached"}`))
	require.Equal(t, 12.0, metricValue(t, srv.URL, `agentkv_gateway_responses_total{api="chat",code="200"}`))
	info, ok := p.router.Sessions().Get("sess-a")
	require.True(t, ok)
	require.EqualValues(t, 3, info.Requests)
	require.EqualValues(t, 3*fakeCompletionTokens, info.Usage.OutputTokens)
	require.EqualValues(t, 3*fakeCachedTokens, info.Usage.CachedTokens)
	for _, w := range p.router.Workers() {
		require.Equal(t, agentkv.Load{}, p.router.WorkerLoad(w), "load left behind on %v", w)
	}

	// Control: round-robin over two workers alternates the same turns.
	_, rr := testProxy(t, proxyConfig{Policy: agentkv.RoundRobin}, newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000))
	res, _ := runSession(rr.URL, "sess-rr", 2)
	require.NotEqual(t, res[0].worker, res[1].worker)
}

func toMaps(msgs []chatMsg) []map[string]any {
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	return out
}

// TestProxyStreaming checks that a stream passes through byte for byte,
// that the first chunk moves the request from prefill to decode load while
// it is still in flight, and that the usage of the final chunk (which the
// proxy asked for with include_usage) reaches Decision.Done.
func TestProxyStreaming(t *testing.T) {
	f := newFakeVLLM(t, 16, 1000)
	f.arrived = make(chan struct{}, 1)
	f.gateFirst = make(chan struct{})
	f.gateRest = make(chan struct{})
	p, srv := testProxy(t, proxyConfig{}, f)
	key := flashindex.Worker{ID: 0}

	body := chatBody(t, true, chatMsg{"system", systemPrompt}, chatMsg{"user", "stream please"})
	req, err := http.NewRequest(http.MethodPost, srv.URL+vllm.ChatPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Dynamo-Session-Id", "stream-1")
	req.Header.Set("Authorization", "Bearer sk-stream")
	req.Header.Set(headerDPRank, "3") // a client may not pin ranks itself
	type result struct {
		resp *http.Response
		err  error
	}
	respc := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		respc <- result{resp, err}
	}()

	<-f.arrived
	l := p.router.WorkerLoad(key)
	require.Equal(t, 1, l.Requests)
	require.Greater(t, l.PrefillTokens, 0, "before the first byte the prompt is prefill load")
	close(f.gateFirst)
	res := <-respc
	require.NoError(t, res.err)
	defer res.resp.Body.Close()
	require.Equal(t, http.StatusOK, res.resp.StatusCode)
	require.Equal(t, "text/event-stream", res.resp.Header.Get("Content-Type"))
	require.Equal(t, f.URL(), res.resp.Header.Get(headerWorker))
	require.Equal(t, "0/0", res.resp.Header.Get(headerWorkerID))
	require.Equal(t, "0", res.resp.Header.Get(headerCachedTokens))

	// Read the first event while the worker holds back the rest.
	rd := bufio.NewReader(res.resp.Body)
	var got bytes.Buffer
	for !bytes.HasSuffix(got.Bytes(), []byte("\n\n")) {
		b, err := rd.ReadByte()
		require.NoError(t, err)
		got.WriteByte(b)
	}
	l = p.router.WorkerLoad(key)
	require.Equal(t, 1, l.Requests, "still streaming")
	require.Equal(t, 0, l.PrefillTokens, "first chunk ends prefill")
	close(f.gateRest)
	rest, err := io.ReadAll(rd)
	require.NoError(t, err)
	got.Write(rest)

	f.mu.Lock()
	sent, upstream, hdr := f.streamed, f.lastBody, f.lastHdr
	f.mu.Unlock()
	require.Equal(t, string(sent), got.String(), "stream must pass through byte for byte")
	require.Contains(t, got.String(), `"usage":`)
	so, _ := upstream["stream_options"].(map[string]any)
	require.Equal(t, true, so["include_usage"], "the proxy asks for usage in the final chunk")
	require.Empty(t, hdr.Get("X-Dynamo-Session-Id"), "only the headers a worker needs are forwarded")
	require.Equal(t, "Bearer sk-stream", hdr.Get("Authorization"), "the API key is forwarded")
	require.Empty(t, hdr.Get(headerDPRank), "a single-rank worker gets no rank header")

	prompt := len(renderChat([]map[string]any{{"role": "system", "content": systemPrompt}, {"role": "user", "content": "stream please"}}))
	require.Equal(t, agentkv.Load{}, p.router.WorkerLoad(key))
	require.Equal(t, 1.0, metricValue(t, srv.URL, `agentkv_router_requests_finished_total{outcome="ok"}`))
	require.Equal(t, float64(prompt), metricValue(t, srv.URL, `agentkv_gateway_usage_tokens_total{api="chat",kind="prompt"}`))
	require.Equal(t, float64(fakeCompletionTokens), metricValue(t, srv.URL, `agentkv_gateway_usage_tokens_total{api="chat",kind="completion"}`))
	info, ok := p.router.Sessions().Get("stream-1")
	require.True(t, ok)
	require.EqualValues(t, prompt, info.Usage.InputTokens)
	require.EqualValues(t, fakeCompletionTokens, info.Usage.OutputTokens)
}

// TestProxyBadInput covers the error paths: every one answers with an
// OpenAI-style JSON error and the proxy keeps serving.
func TestProxyBadInput(t *testing.T) {
	f := newFakeVLLM(t, 16, 1000)
	_, srv := testProxy(t, proxyConfig{MaxBodyBytes: 4096}, f)
	_, empty := testProxy(t, proxyConfig{})

	for _, tc := range []struct {
		name, method, url, body string
		code                    int
	}{
		{"oversized", "POST", srv.URL + vllm.ChatPath, `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 5000) + `"}]}`, http.StatusRequestEntityTooLarge},
		{"oversized-garbage", "POST", srv.URL + vllm.ChatPath, strings.Repeat("\x00", 1<<20), http.StatusRequestEntityTooLarge},
		{"truncated-json", "POST", srv.URL + vllm.ChatPath, `{"model":"m","messages":[`, http.StatusBadRequest},
		{"not-an-object", "POST", srv.URL + vllm.ChatPath, `[1,2,3]`, http.StatusBadRequest},
		{"empty", "POST", srv.URL + vllm.ChatPath, ``, http.StatusBadRequest},
		{"trailing-garbage", "POST", srv.URL + vllm.ChatPath, `{"model":"m"} x`, http.StatusBadRequest},
		{"messages-not-a-list", "POST", srv.URL + vllm.ChatPath, `{"model":"m","messages":"hi"}`, http.StatusBadRequest},
		{"no-workers", "POST", empty.URL + vllm.ChatPath, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, http.StatusServiceUnavailable},
		{"unknown-path", "POST", srv.URL + "/v1/embeddings", `{}`, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.code, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var e struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, tc.code, e.Error.Code)
			require.NotEmpty(t, e.Error.Message)
		})
	}
	resp, err := http.Get(srv.URL + vllm.ChatPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, 0, f.requests(), "no bad request reached the worker")
	require.Equal(t, 2.0, metricValue(t, srv.URL, `agentkv_gateway_responses_total{api="chat",code="413"}`))

	// Still serving after all that.
	ok, body := post(t, srv.URL+vllm.ChatPath, nil, chatBody(t, false, chatMsg{"user", "hi"}))
	require.Equal(t, http.StatusOK, ok.StatusCode, string(body))
	resp, err = http.Get(srv.URL + "/v1/models")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(b), `"id":"m"`)
}

// TestProxyWorkerTrouble: a worker whose /tokenize is missing makes the
// proxy fall back to approximate tokens (session affinity still holds), an
// engine error passes through and counts as failed, and when every worker
// went away after startup the request is retried on each, then 502.
func TestProxyWorkerTrouble(t *testing.T) {
	a, b := newFakeVLLM(t, 16, 1000), newFakeVLLM(t, 16, 1000)
	a.noTokenize, b.noTokenize = true, true
	p, srv := testProxy(t, proxyConfig{}, a, b)

	msgs := []chatMsg{{"system", systemPrompt}, {"user", "first"}}
	hdr := map[string]string{"X-Claude-Code-Session-Id": "fb"}
	r1, body := post(t, srv.URL+vllm.ChatPath, hdr, chatBody(t, false, msgs...))
	require.Equal(t, http.StatusOK, r1.StatusCode, string(body))
	msgs = append(msgs, chatMsg{"assistant", "ok"}, chatMsg{"user", "second"})
	r2, body := post(t, srv.URL+vllm.ChatPath, hdr, chatBody(t, false, msgs...))
	require.Equal(t, http.StatusOK, r2.StatusCode, string(body))
	require.Equal(t, r1.Header.Get(headerWorker), r2.Header.Get(headerWorker))
	c2, _ := strconv.Atoi(r2.Header.Get(headerCachedTokens))
	require.Greater(t, c2, 0, "pseudo-tokens are prefix-stable")
	require.Equal(t, 2.0, metricValue(t, srv.URL, `agentkv_gateway_prompt_tokens_source_total{api="chat",source="approximate"}`))

	// An engine-side 400 passes through and is reported as failed.
	r3, body := post(t, srv.URL+vllm.ChatPath, nil, chatBody(t, false, chatMsg{"user", "please fail"}))
	require.Equal(t, http.StatusBadRequest, r3.StatusCode)
	require.Contains(t, string(body), "engine says no")
	require.Equal(t, 1.0, metricValue(t, srv.URL, `agentkv_router_requests_finished_total{outcome="failed"}`))

	// Both workers gone: 502 from the proxy, load released.
	a.srv.Close()
	b.srv.Close()
	r4, body := post(t, srv.URL+vllm.ChatPath, nil, chatBody(t, false, chatMsg{"user", "anyone?"}))
	require.Equal(t, http.StatusBadGateway, r4.StatusCode, string(body))
	require.Contains(t, string(body), "cannot reach the worker")
	// One failed router decision per attempt: the first worker, then the
	// retry on the other unless its probe already took it out; none leaves
	// load behind.
	retried := metricValue(t, srv.URL, `agentkv_gateway_failures_total{api="chat",kind="retried"}`)
	require.LessOrEqual(t, retried, 1.0)
	require.Equal(t, 1.0, metricValue(t, srv.URL, `agentkv_gateway_failures_total{api="chat",kind="connect"}`),
		"the last attempt's failure is the request's")
	require.Equal(t, 2.0+retried, metricValue(t, srv.URL, `agentkv_router_requests_finished_total{outcome="failed"}`))
	for _, w := range p.router.Workers() {
		require.Equal(t, agentkv.Load{}, p.router.WorkerLoad(w))
	}
}

// TestProxyAdmissionHolds: with program-aware admission, a second program
// that does not fit next to a running one blocks in Route until the first
// program's session ends, then runs.
func TestProxyAdmissionHolds(t *testing.T) {
	f := newFakeVLLM(t, 16, 625) // 10,000 tokens
	f.gateFirst = make(chan struct{})
	f.arrived = make(chan struct{}, 2)
	p, srv := testProxy(t, proxyConfig{Admission: true, Tick: 5 * time.Millisecond}, f)

	big := func(sid, final string) *http.Request {
		body := chatBody(t, true, chatMsg{"user", sid + strings.Repeat("z", 5000)})
		req, err := http.NewRequest(http.MethodPost, srv.URL+vllm.ChatPath, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-Dynamo-Session-Id", sid)
		if final != "" {
			req.Header.Set("X-Dynamo-Session-Final", final)
		}
		return req
	}
	type result struct {
		code int
		err  error
	}
	do := func(req *http.Request, out chan<- result) {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{0, err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- result{resp.StatusCode, nil}
	}
	ra, rb := make(chan result, 1), make(chan result, 1)
	go do(big("prog-a", "true"), ra)
	<-f.arrived // A runs (its stream is gated)
	go do(big("prog-b", ""), rb)
	eventually(t, "program B to be held", func() bool {
		return metricValue(t, srv.URL, "agentkv_admission_requests_held_total") == 1
	})
	require.Equal(t, 1, f.requests(), "B must not reach the worker while held")
	close(f.gateFirst)
	require.Equal(t, result{http.StatusOK, nil}, <-ra)
	require.Equal(t, result{http.StatusOK, nil}, <-rb)
	require.Equal(t, 2, f.requests())
	st := p.router.AdmissionStats()
	require.NotZero(t, st, "admission decisions were counted")
}

// TestProxyKVEvents feeds the router from a worker's KV event stream (a
// ZMQ publisher in vLLM's wire format): a prompt whose blocks that worker
// published goes there, with the published prefix as the cached tokens.
func TestProxyKVEvents(t *testing.T) {
	const bs = 16
	a, b := newFakeVLLM(t, bs, 1000), newFakeVLLM(t, bs, 1000)
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freeport.Port(t))
	pub := zmq4.NewPub(context.Background(), zmq4.WithLogger(log.New(io.Discard, "", 0)))
	require.NoError(t, pub.Listen(ep))
	defer pub.Close()

	cfg := proxyConfig{Workers: []workerSpec{{URL: a.URL()}, {URL: b.URL(), Events: ep}}}
	p, srv := testProxy(t, cfg)

	msgs := []chatMsg{{"system", systemPrompt}, {"user", "which worker has me?"}}
	toks := tokensOf(renderChat(toMaps(msgs)))
	nb := 8
	hashes := make([]uint64, nb)
	for i := range hashes {
		hashes[i] = 0xabc000 + uint64(i)
	}
	payload, err := vllm.Encoding{MapEvents: true}.Append(nil, 1, []vllm.WireEvent{{
		Kind: flashindex.Stored, Hashes: hashes, Tokens: toks[:nb*bs], BlockSize: bs, Medium: "GPU"}})
	require.NoError(t, err)
	h, err := flashindex.NewHasher(bs, "")
	require.NoError(t, err)
	_, seq := h.AppendHashes(nil, nil, toks, 0, false)

	// PUB drops messages until the subscription arrives: publish until the
	// index holds the blocks (re-storing them is idempotent).
	s := uint64(0)
	eventually(t, "KV events to reach the index", func() bool {
		frame := make([]byte, 8)
		binary.BigEndian.PutUint64(frame, s)
		s++
		require.NoError(t, pub.SendMulti(zmq4.NewMsgFrom([]byte("kv"), frame, payload)))
		for _, m := range p.router.Index().FindMatches(seq, nil) {
			if m.Worker.ID == 1 && m.Device == nb {
				return true
			}
		}
		return false
	})
	resp, body := post(t, srv.URL+vllm.ChatPath, nil, chatBody(t, false, msgs...))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, b.URL(), resp.Header.Get(headerWorker))
	require.Equal(t, strconv.Itoa(nb*bs), resp.Header.Get(headerCachedTokens))
	require.Greater(t, metricValue(t, srv.URL, `agentkv_index_events_total{result="applied",worker="1/0"}`), 0.0)
}

// TestProxyDataParallelRank: a dp=2 worker is two routing targets; the
// chosen rank is pinned with X-Data-Parallel-Rank and capacity is split.
func TestProxyDataParallelRank(t *testing.T) {
	f := newFakeVLLM(t, 16, 1000)
	p, srv := testProxy(t, proxyConfig{Workers: []workerSpec{{URL: f.URL(), DPRanks: 2}}, Policy: agentkv.RoundRobin})
	require.Len(t, p.router.Workers(), 2)
	require.Equal(t, 8000, p.WorkerInfo(0).KVCapacityTokens)
	seen := map[string]bool{}
	for i := 0; i < 2; i++ {
		resp, body := post(t, srv.URL+vllm.ChatPath, nil, chatBody(t, false, chatMsg{"user", "hi"}))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		f.mu.Lock()
		rank := f.lastHdr.Get(headerDPRank)
		f.mu.Unlock()
		require.Equal(t, "0/"+rank, resp.Header.Get(headerWorkerID))
		seen[rank] = true
	}
	require.Equal(t, map[string]bool{"0": true, "1": true}, seen)
}

// TestProxyCapacityRefresh: a worker whose KV pool changes is re-read.
func TestProxyCapacityRefresh(t *testing.T) {
	f := newFakeVLLM(t, 16, 1000)
	p, _ := testProxy(t, proxyConfig{Refresh: -1}, f)
	require.Equal(t, 16000, p.WorkerInfo(0).KVCapacityTokens)
	f.mu.Lock()
	f.blocks = 2000
	f.mu.Unlock()
	p.Refresh(context.Background(), 0)
	require.Equal(t, 32000, p.WorkerInfo(0).KVCapacityTokens)
	f.srv.Close()
	p.Refresh(context.Background(), 0) // unreadable: keeps the last value
	require.Equal(t, 32000, p.WorkerInfo(0).KVCapacityTokens)
}

func TestProxyStartupErrors(t *testing.T) {
	good := newFakeVLLM(t, 16, 1000)
	noInfo := newFakeVLLM(t, 16, 1000)
	noInfo.noCacheInfo = true
	other := newFakeVLLM(t, 32, 1000)
	gone := newFakeVLLM(t, 16, 1000)
	gone.srv.Close()
	for _, tc := range []struct {
		name  string
		cfg   proxyConfig
		wants []string
	}{
		{"no-cache-info", proxyConfig{Workers: []workerSpec{{URL: noInfo.URL()}}},
			[]string{noInfo.URL(), "vllm:cache_config_info", "metric not found"}},
		// Down at start with no --block-size: waited for until the start
		// context ends (the test's is short), never an immediate exit.
		{"unreachable", proxyConfig{Workers: []workerSpec{{URL: gone.URL()}}},
			[]string{"no worker answered", "vllm:cache_config_info", "deadline exceeded"}},
		{"block-size-mismatch", proxyConfig{Workers: []workerSpec{{URL: good.URL()}, {URL: other.URL()}}},
			[]string{other.URL(), "block size", "16"}},
		{"configured-block-size", proxyConfig{BlockSize: 64, Workers: []workerSpec{{URL: good.URL()}}},
			[]string{good.URL(), "configured 64, engine 16"}},
		{"bad-metrics-path", proxyConfig{MetricsPath: "metrics", Workers: []workerSpec{{URL: good.URL()}}},
			[]string{"must start with /"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Registry = prometheus.NewRegistry()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			p, err := newProxy(ctx, tc.cfg)
			require.Error(t, err)
			require.Nil(t, p)
			for _, w := range tc.wants {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseWorkerSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want workerSpec
		err  string
	}{
		{"http://h:8000", workerSpec{URL: "http://h:8000"}, ""},
		{"http://h:8000,events=tcp://h:5557", workerSpec{URL: "http://h:8000", Events: "tcp://h:5557"}, ""},
		{"http://h:8000, events=tcp://h:5557, replay=tcp://h:5558, dp=4",
			workerSpec{URL: "http://h:8000", Events: "tcp://h:5557", Replay: "tcp://h:5558", DPRanks: 4}, ""},
		{"", workerSpec{}, "empty worker URL"},
		{"h:8000", workerSpec{}, "http:// or https://"},
		{"http://h:8000,events", workerSpec{}, "bad option"},
		{"http://h:8000,dp=0", workerSpec{}, "dp must be"},
		{"http://h:8000,dp=x", workerSpec{}, "dp must be"},
		{"http://h:8000,color=red", workerSpec{}, "unknown option"},
		{"http://h:8000,replay=tcp://h:5558", workerSpec{}, "replay= needs events="},
	} {
		got, err := parseWorkerSpec(tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.want, got)
	}
}

func TestProxyCLIUsageErrors(t *testing.T) {
	f := newFakeVLLM(t, 16, 1000)
	noInfo := newFakeVLLM(t, 16, 1000)
	noInfo.noCacheInfo = true
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no-worker", []string{"proxy"}, 2, "at least one --worker"},
		{"bad-worker", []string{"proxy", "--worker", "localhost:8000"}, 2, "http:// or https://"},
		{"bad-policy", []string{"proxy", "--worker", f.URL(), "--policy", "best"}, 2, "unknown policy"},
		{"bad-affinity", []string{"proxy", "--worker", f.URL(), "--affinity", "sticky"}, 2, "unknown mode"},
		{"bad-hints", []string{"proxy", "--worker", f.URL(), "--hints", "share,gossip"}, 2, "unknown hint policy"},
		{"bad-worker-hints", []string{"proxy", "--worker", f.URL() + ",hints=sometimes"}, 2, "hints="},
		{"negative-block", []string{"proxy", "--worker", f.URL(), "--block-size", "-1"}, 2, "--block-size"},
		{"bad-metrics", []string{"proxy", "--worker", f.URL(), "--metrics", "m"}, 2, "--metrics"},
		{"zero-tick", []string{"proxy", "--worker", f.URL(), "--tick", "0s"}, 2, "--tick"},
		{"extra-arg", []string{"proxy", "--worker", f.URL(), "oops"}, 2, "unexpected argument"},
		{"unreadable-capacity", []string{"proxy", "--worker", noInfo.URL(), "--listen", "127.0.0.1:0"}, 1, "vllm:cache_config_info"},
		{"bad-listen", []string{"proxy", "--worker", f.URL(), "--listen", "256.0.0.1:http"}, 1, "proxy:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, "", tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.want)
		})
	}
	code, stdout, _ := runCLI(t, "", "proxy", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "X-Agentkv-Cached-Tokens")
}

// TestProxyCLIRunsAndStopsOnSignal runs "agentkv proxy" in-process, sends it
// a request, reads its metrics, then interrupts it like Ctrl-C would.
func TestProxyCLIRunsAndStopsOnSignal(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	require.NoError(t, err)
	f := newFakeVLLM(t, 16, 1000)
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(&cmdEnv{stdin: strings.NewReader(""), stdout: pw, stderr: &stderr},
			[]string{"proxy", "--listen", "127.0.0.1:0", "--worker", f.URL(), "--admission", "--affinity", "soft", "--tick", "10ms"})
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	require.True(t, lines.Scan(), "no startup line; stderr: %s", stderr.String())
	first := lines.Text()
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		rest <- b.String()
	}()
	require.Contains(t, first, "block size 16")
	base, _, ok := strings.Cut(strings.TrimPrefix(first, "agentkv proxy listening on "), ": ")
	require.True(t, ok, first)
	resp, body := post(t, base+vllm.ChatPath, map[string]string{"X-Claude-Code-Session-Id": "cli"},
		chatBody(t, false, chatMsg{"user", "hello"}))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, f.URL(), resp.Header.Get(headerWorker))
	require.Equal(t, 1.0, metricValue(t, base, `agentkv_router_requests_finished_total{outcome="ok"}`))
	require.Greater(t, metricValue(t, base, "go_goroutines"), 0.0)

	if err := self.Signal(os.Interrupt); err != nil {
		t.Skipf("cannot signal self on this platform: %v", err)
	}
	require.Equal(t, 0, <-done, stderr.String())
	require.Contains(t, <-rest, "agentkv proxy stopped")
	_, err = http.Get(base + "/healthz")
	require.Error(t, err, "listener closed")
}

// lockedBuffer is a bytes.Buffer safe for the server's concurrent logging.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProxyServeShutdown: on shutdown a request held by admission answers
// 503 at once, while a stream in flight is allowed to finish.
func TestProxyServeShutdown(t *testing.T) {
	f := newFakeVLLM(t, 16, 625) // 10,000 tokens: one 5,000-token program at a time
	f.arrived = make(chan struct{}, 2)
	f.gateRest = make(chan struct{})
	cfg := proxyConfig{Workers: []workerSpec{{URL: f.URL()}}, Admission: true, Tick: time.Hour,
		Registry: prometheus.NewRegistry(), MetricsPath: "/metrics"}
	p, err := newProxy(context.Background(), cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- p.serve(ctx, ln, 10*time.Second) }()

	send := func(sid string, out chan<- *http.Response) {
		body := chatBody(t, true, chatMsg{"user", sid + strings.Repeat("z", 5000)})
		req, _ := http.NewRequest(http.MethodPost, base+vllm.ChatPath, bytes.NewReader(body))
		req.Header.Set("X-Dynamo-Session-Id", sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			out <- nil
			return
		}
		out <- resp
	}
	ra, rb := make(chan *http.Response, 1), make(chan *http.Response, 1)
	go send("a", ra)
	<-f.arrived
	a := <-ra // headers and the first chunk are out; the rest is gated
	require.NotNil(t, a)
	go send("b", rb)
	eventually(t, "b to be held", func() bool {
		return metricValue(t, base, "agentkv_admission_requests_held_total") == 1
	})

	stop() // as SIGINT would
	b := <-rb
	require.NotNil(t, b)
	bb, _ := io.ReadAll(b.Body)
	b.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, b.StatusCode, string(bb))
	require.Contains(t, string(bb), "held request dropped")

	close(f.gateRest)
	ab, err := io.ReadAll(a.Body)
	require.NoError(t, err)
	a.Body.Close()
	require.Equal(t, http.StatusOK, a.StatusCode)
	require.True(t, strings.HasSuffix(string(ab), "data: [DONE]\n\n"), "the stream in flight finished: %q", ab)
	require.NoError(t, <-served)
	require.Equal(t, 1, f.requests())
}

// FuzzProxyRequestBody: whatever the body, the proxy answers with a status
// it chose deliberately (never a 5xx of its own, never a panic) and a JSON
// error when it refuses.
func FuzzProxyRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":null}`,
		`{"model":"m","messages":"x"}`, `{"messages":[{"content":[{"type":"text","text":"a"}]}]}`,
		`{"stream":"yes"}`, `{`, `[]`, `null`, ``, "\xff\xfe", `{"messages":[null]}`,
	} {
		f.Add([]byte(s))
	}
	fake := &fakeVLLM{blockSize: 16, blocks: 1000}
	fake.srv = httptest.NewServer(http.HandlerFunc(fake.serve))
	defer fake.srv.Close()
	p, err := newProxy(context.Background(), proxyConfig{Workers: []workerSpec{{URL: fake.URL()}},
		MaxBodyBytes: 1 << 16, Registry: prometheus.NewRegistry(), Refresh: -1})
	require.NoError(f, err)
	defer p.Close()
	h := p.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, vllm.ChatPath, bytes.NewReader(body))
		req.Header.Set("X-Claude-Code-Session-Id", "fuzz")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			var e struct {
				Error struct{ Message string } `json:"error"`
			}
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Message == "" {
				// The engine's own 400s pass through unchanged.
				require.Contains(t, rec.Body.String(), "bad json", "status %d body %q", rec.Code, rec.Body.String())
			}
		default:
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body.String())
		}
		for _, w := range p.router.Workers() {
			require.Equal(t, 0, p.router.WorkerLoad(w).Requests, "a request leaked its load")
		}
	})
}

func FuzzParseWorkerSpec(f *testing.F) {
	for _, s := range []string{"http://h:8000", "http://h:8000,events=tcp://h:5557,replay=tcp://h:5558,dp=2",
		"https://h/v1,dp=1024", ",,", "http://h,dp=-1", "http://h,events==", "http://[::1]:80,events=ipc:///tmp/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ws, err := parseWorkerSpec(s)
		if err != nil {
			return
		}
		require.NotEmpty(t, ws.URL)
		require.NotContains(t, ws.URL, ",")
		require.True(t, ws.DPRanks >= 0 && ws.DPRanks <= 1024)
		require.False(t, ws.Replay != "" && ws.Events == "")
		_, err = vllm.NewClient(ws.URL, nil)
		require.NoError(t, err)
	})
}
