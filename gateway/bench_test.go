package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv/internal/cputime"
)

// benchUpstream is an engine stand-in for the latency benchmark: /tokenize
// (one token per byte of the messages' JSON), and streamed chat
// completions that wait prefill before the first chunk, then send chunks
// chunks and the usage chunk.
type benchUpstream struct {
	prefill time.Duration
	chunks  int
}

func (u *benchUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/health":
		return
	case "/metrics":
		fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="100000"} 1`)
	case "/tokenize":
		var req struct {
			Messages json.RawMessage `json:"messages"`
		}
		_ = json.Unmarshal(b, &req)
		toks := make([]uint32, len(req.Messages))
		for i, c := range req.Messages {
			toks[i] = uint32(c)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": toks})
	case ChatPath:
		time.Sleep(u.prefill) // the modelled prefill of this fake engine
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < u.chunks; i++ {
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w%d \"},\"finish_reason\":null}]}\n\n", i)
			fl.Flush()
		}
		fmt.Fprint(w, "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":8,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n")
	default:
		http.NotFound(w, r)
	}
}

// benchTokenizer reproduces benchUpstream's /tokenize in process.
type benchTokenizer struct{}

func (benchTokenizer) TokenizeChat(body []byte) ([]uint32, error) {
	var req struct {
		Messages json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var c bytes.Buffer
	if err := json.Compact(&c, req.Messages); err != nil {
		return nil, err
	}
	toks := make([]uint32, c.Len())
	for i, x := range c.Bytes() {
		toks[i] = uint32(x)
	}
	return toks, nil
}

func benchBody(api API, session int) (path string, body []byte, hdr http.Header) {
	prompt := strings.Repeat("You are a careful coding agent. ", 40) + fmt.Sprintf("task %d", session)
	hdr = http.Header{"Content-Type": {"application/json"}}
	switch api {
	case Responses:
		body, _ = json.Marshal(map[string]any{"model": "m", "stream": true, "store": false, "max_output_tokens": 8,
			"input": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}}})
		hdr.Set("Session-Id", fmt.Sprint("s", session))
	case Messages:
		body, _ = json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 8,
			"messages": []any{map[string]any{"role": "user", "content": prompt}}})
		hdr.Set("X-Claude-Code-Session-Id", fmt.Sprint("s", session))
	default:
		body, _ = json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 8,
			"messages": []any{map[string]any{"role": "user", "content": prompt}}})
		hdr.Set("X-Session-Id", fmt.Sprint("s", session))
	}
	return api.Path(), body, hdr
}

// ttfb sends one request and returns the time to the first body byte;
// the reply is read to its end.
func ttfb(c *http.Client, url string, body []byte, hdr http.Header) (time.Duration, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header = hdr.Clone()
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	return d, nil
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// BenchmarkGatewayTTFB measures the time to first byte the gateway adds
// over direct access to the same engine, per API and concurrency: each
// round sends conc streams directly to the engine (chat completions, the
// engine's own API) and conc through the gateway (the API under test; the
// engine serves chat only, so Responses and Messages are translated),
// alternating. Reported: direct and gateway TTFB p50/p99, the added p50 and
// p99, and the process CPU and heap allocations per proxied request beyond
// a direct one. tok=inprocess uses an exact in-process tokenizer, tok=http
// the engine's /tokenize.
func BenchmarkGatewayTTFB(b *testing.B) {
	up := httptest.NewServer(&benchUpstream{prefill: 2 * time.Millisecond, chunks: 8})
	defer up.Close()
	// The floor: a bare reverse proxy (net/http/httputil, flushing every
	// write) in front of the same engine adds the least any HTTP hop in
	// this process can, the gateway's parsing, routing and accounting
	// aside. The gateway's added latency is read against it.
	for _, conc := range []int{1, 200} {
		b.Run(fmt.Sprintf("floor=httputil/api=chat/c=%d", conc), func(b *testing.B) {
			target, err := url.Parse(up.URL)
			if err != nil {
				b.Fatal(err)
			}
			rp := httputil.NewSingleHostReverseProxy(target)
			rp.FlushInterval = -1
			rp.Transport = NewHTTPClient().Transport
			px := httptest.NewServer(rp)
			defer px.Close()
			measureTTFB(b, NewHTTPClient(), up.URL, px.URL, Chat, conc)
		})
	}
	for _, tok := range []string{"inprocess", "http"} {
		for _, api := range []API{Chat, Responses, Messages} {
			for _, conc := range []int{1, 200} {
				b.Run(fmt.Sprintf("tok=%s/api=%s/c=%d", tok, api, conc), func(b *testing.B) {
					spec := WorkerSpec{URL: up.URL}
					if tok == "inprocess" {
						spec.Tokenizer = benchTokenizer{}
					}
					s, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{spec}, Refresh: -1,
						Registry: prometheus.NewRegistry()})
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					gw := httptest.NewServer(s.Handler(""))
					defer gw.Close()
					measureTTFB(b, NewHTTPClient(), up.URL, gw.URL, api, conc)
				})
			}
		}
	}
}

// measureTTFB runs the rounds of BenchmarkGatewayTTFB: conc chat streams
// straight to the engine at directURL, then conc streams of api through the
// proxy at viaURL, alternating, and reports the figures.
func measureTTFB(b *testing.B, client *http.Client, directURL, viaURL string, api API, conc int) {
	var direct, via []time.Duration
	var mu sync.Mutex
	var viaCPU, directCPU time.Duration
	var viaAllocs, directAllocs uint64
	phase := func(to string, a API, out *[]time.Duration, cpu *time.Duration, allocs *uint64) {
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		c0 := cputime.Process()
		var wg sync.WaitGroup
		for i := 0; i < conc; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				path, body, hdr := benchBody(a, i)
				d, err := ttfb(client, to+path, body, hdr)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				*out = append(*out, d)
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		*cpu += cputime.Process() - c0
		runtime.ReadMemStats(&ms1)
		*allocs += ms1.Mallocs - ms0.Mallocs
	}
	// Warm the connection pools.
	phase(directURL, Chat, new([]time.Duration), new(time.Duration), new(uint64))
	phase(viaURL, api, new([]time.Duration), new(time.Duration), new(uint64))
	rounds := max(b.N/conc, 1)
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		phase(directURL, Chat, &direct, &directCPU, &directAllocs)
		phase(viaURL, api, &via, &viaCPU, &viaAllocs)
	}
	b.StopTimer()
	n := float64(len(via))
	if n == 0 || len(direct) == 0 {
		b.Fatal("no successful requests")
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	dp50, dp99 := quantile(direct, 0.5), quantile(direct, 0.99)
	vp50, vp99 := quantile(via, 0.5), quantile(via, 0.99)
	b.ReportMetric(us(dp50), "direct-p50-us")
	b.ReportMetric(us(dp99), "direct-p99-us")
	b.ReportMetric(us(vp50), "gw-p50-us")
	b.ReportMetric(us(vp99), "gw-p99-us")
	b.ReportMetric(us(vp50-dp50), "added-p50-us")
	b.ReportMetric(us(vp99-dp99), "added-p99-us")
	b.ReportMetric(us(viaCPU-directCPU)/n, "added-cpu-us/req")
	b.ReportMetric((float64(viaAllocs)-float64(directAllocs))/n, "added-allocs/req")
	b.ReportMetric(0, "ns/op")
}
