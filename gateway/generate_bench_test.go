package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// tokenUpstream answers /generate and /v1/completions at once with a
// short reply, and /tokenize with the prompt's ids (as vLLM's does for a
// token-id prompt), so a benchmark measures the gateway's work on a turn.
type tokenUpstream struct{}

func (tokenUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	switch r.URL.Path {
	case "/health":
	case "/metrics":
		fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="100000"} 1`)
	case "/tokenize":
		var req struct {
			Prompt []uint32 `json:"prompt"`
		}
		_ = json.Unmarshal(b, &req)
		_ = json.NewEncoder(w).Encode(map[string]any{"count": len(req.Prompt), "tokens": req.Prompt})
	case GeneratePath:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"text":"a b","output_ids":[5,6],"meta_info":{"id":"r","finish_reason":{"type":"length","length":2},"prompt_tokens":32768,"completion_tokens":2,"cached_tokens":32752,"output_token_logprobs":[[-0.5,5,null],[-0.25,6,null]]}}`)
	case CompletionsPath:
		w.Header().Set("Content-Type", "application/json")
		if bytes.Contains(b, []byte(`"return_tokens_as_token_ids":true`)) {
			fmt.Fprint(w, `{"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":"a b","finish_reason":"length","logprobs":{"text_offset":[0,1],"token_logprobs":[-0.5,-0.25],"tokens":["token_id:5","token_id:6"],"top_logprobs":[{"token_id:5":-0.5},{"token_id:6":-0.25}]}}],"usage":{"prompt_tokens":32768,"completion_tokens":2,"total_tokens":32770,"prompt_tokens_details":{"cached_tokens":32752}}}`)
			return
		}
		fmt.Fprint(w, `{"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":"a b","finish_reason":"length","logprobs":null}],"usage":{"prompt_tokens":32768,"completion_tokens":2,"total_tokens":32770,"prompt_tokens_details":{"cached_tokens":32752}}}`)
	default:
		http.NotFound(w, r)
	}
}

// BenchmarkGenerateVsCompletions32K routes the same 32 K-token turn
// through the gateway as SGLang's /generate (input_ids) and as
// /v1/completions with a token-id prompt, alternating in one run, and
// reports the ratio of their mean latencies (generate/completions; the
// target is at most 1.0).
func BenchmarkGenerateVsCompletions32K(b *testing.B) {
	up := httptest.NewServer(tokenUpstream{})
	defer up.Close()
	all, _ := ParseAPIs("all")
	s, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{{URL: up.URL, Native: all}}, Refresh: -1,
		Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	gw := httptest.NewServer(s.Handler(""))
	defer gw.Close()
	ids := idsJSON(32768, 1000)
	gen := []byte(`{"input_ids":` + ids + `,"sampling_params":{"max_new_tokens":2},"return_logprob":true}`)
	cmp := []byte(`{"model":"m","prompt":` + ids + `,"max_tokens":2,"logprobs":0,"return_tokens_as_token_ids":true}`)
	hc := NewHTTPClient()
	post := func(path string, body []byte, i int) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-SMG-Routing-Key", fmt.Sprint("s", i%64))
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %d", path, resp.StatusCode)
		}
		return time.Since(t0)
	}
	var tg, tc time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tg += post(GeneratePath, gen, i)
		tc += post(CompletionsPath, cmp, i)
	}
	b.ReportMetric(float64(tg.Nanoseconds())/float64(b.N), "generate-ns/op")
	b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "completions-ns/op")
	b.ReportMetric(float64(tg)/float64(tc), "generate/completions")
}

// BenchmarkGenerateTranslated32K routes the same 32 K-token /generate turn
// to a worker that serves /generate (passed through) and to one that
// serves only /v1/completions (translated: a token-id prompt,
// return_tokens_as_token_ids, logprobs, the reply decoded and written in
// SGLang's shape), with the same turn by /v1/completions as the baseline,
// alternating in one run; it reports translated/completions and
// translated/native.
func BenchmarkGenerateTranslated32K(b *testing.B) {
	up := httptest.NewServer(tokenUpstream{})
	defer up.Close()
	all, _ := ParseAPIs("all")
	gws := map[TokenAPIs]string{}
	for _, ta := range []TokenAPIs{TokenAPISet(TokenGenerate), TokenAPISet(TokenCompletions)} {
		s, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{{URL: up.URL, Native: all, TokenAPIs: ta}}, Refresh: -1,
			Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		gw := httptest.NewServer(s.Handler(""))
		defer gw.Close()
		gws[ta] = gw.URL
	}
	ids := idsJSON(32768, 1000)
	gen := []byte(`{"input_ids":` + ids + `,"sampling_params":{"max_new_tokens":2},"return_logprob":true}`)
	cmp := []byte(`{"model":"m","prompt":` + ids + `,"max_tokens":2,"logprobs":0,"return_tokens_as_token_ids":true}`)
	hc := NewHTTPClient()
	post := func(url string, body []byte, i int) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-SMG-Routing-Key", fmt.Sprint("s", i%64))
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(rb, []byte("[-0.5,5,null]")) && bytes.Contains(rb, []byte("output_ids")) {
			b.Fatalf("%s: %d %s", url, resp.StatusCode, rb)
		}
		return time.Since(t0)
	}
	native, translated := gws[TokenAPISet(TokenGenerate)], gws[TokenAPISet(TokenCompletions)]
	var tn, tt, tc time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tn += post(native+GeneratePath, gen, i)
		tt += post(translated+GeneratePath, gen, i)
		tc += post(native+CompletionsPath, cmp, i)
	}
	b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N), "native-ns/op")
	b.ReportMetric(float64(tt.Nanoseconds())/float64(b.N), "translated-ns/op")
	b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "completions-ns/op")
	b.ReportMetric(float64(tt)/float64(tc), "translated/completions")
	b.ReportMetric(float64(tt)/float64(tn), "translated/native")
}
