package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/gateway/tenant"
)

// fewTokens is an in-process tokenizer whose ids do not grow with the
// prompt, so that what a request allocates is the gateway's own work on
// its body (a real tokenizer's ids add about 1× for a 4-byte token of 4
// bytes of text, which no gateway can avoid).
type fewTokens struct{}

func (fewTokens) TokenizeChat(body []byte) ([]uint32, error) {
	return make([]uint32, 64), nil
}

// bodyAllocs sends one request with a body of about size bytes through a
// Limiter and a Stack (with keys when keyed) to a worker stand-in that
// reads the forwarded body to its end (and, when remote, answers the
// gateway's /tokenize, a few ids whatever the prompt), and returns the bytes the process
// allocated for it (runtime.MemStats.TotalAlloc) and the body's size.
func bodyAllocs(t testing.TB, stream, keyed, remote bool, size int) (uint64, int) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/tokenize":
			fmt.Fprint(w, `{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}`)
		case "/metrics":
			fmt.Fprintln(w, `vllm:cache_config_info{block_size="16",num_gpu_blocks="100000"} 1`)
		case ChatPath:
			if stream {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: {\"id\":\"c\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"w\"},\"finish_reason\":\"stop\"}]}\n\n")
				fmt.Fprint(w, "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":64,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n")
				return
			}
			fmt.Fprint(w, `{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"w"},"finish_reason":"stop"}],"usage":{"prompt_tokens":64,"completion_tokens":1}}`)
		}
	}))
	defer up.Close()
	cfg := Config{TokenizerCheckEvery: -1} // a check's /tokenize is one more copy, once per check
	spec := WorkerSpec{URL: up.URL, Tokenizer: fewTokens{}}
	if remote {
		spec.Tokenizer = nil
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "X-Session-Id": {"s1"}}
	if keyed {
		ks, err := tenant.Parse(strings.NewReader("alice " + keyAlice + "\n"))
		require.NoError(t, err)
		cfg.Keys = tenant.NewSet(ks)
		hdr.Set("Authorization", "Bearer "+keyAlice)
	}
	s, err := NewStack(context.Background(), StackConfig{Workers: []WorkerSpec{spec},
		Refresh: -1, Registry: prometheus.NewRegistry(), Gateway: cfg})
	require.NoError(t, err)
	defer s.Close()
	srv, err := NewServer(s.Handler(""), ServerConfig{MaxBodyBytes: 64 << 20, MaxBodyBytesInFlight: 64 << 20})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", size/44)
	body, err := json.Marshal(map[string]any{"model": "m", "stream": stream, "max_tokens": 1,
		"messages": []any{map[string]any{"role": "user", "content": text}}})
	require.NoError(t, err)
	client := &http.Client{}
	send := func() {
		req, err := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+ChatPath, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = hdr.Clone()
		resp, err := client.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	}
	send() // warm: connections, pools, the session
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	send()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc, len(body)
}

// TestLargeBodyAllocations: a large chat body, streamed or not, with or
// without a tenant's key (whose cache_salt is spliced into the forwarded
// body), is held at most once beside the Limiter's read of it: the
// process allocates at most 2× the body's size for the request (the
// client's and the worker stand-in's side included, 1 % allowed for
// their buffers), tokenized in process or by the worker's /tokenize.
// Before #34's fix a streamed keyed body cost 6.0×, 8.0× with /tokenize.
func TestLargeBodyAllocations(t *testing.T) {
	for _, remote := range []bool{false, true} {
		for _, c := range []struct{ stream, keyed bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			t.Run(fmt.Sprintf("remote=%v/stream=%v/keyed=%v", remote, c.stream, c.keyed), func(t *testing.T) {
				got, size := bodyAllocs(t, c.stream, c.keyed, remote, 30<<20)
				ratio := float64(got) / float64(size)
				t.Logf("%d bytes allocated for a %d-byte body: %.2f×", got, size, ratio)
				require.LessOrEqual(t, ratio, 2.05) // 2×, and the transports' buffers
			})
		}
	}
}
