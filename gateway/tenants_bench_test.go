package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv/gateway/tenant"
	"github.com/agentkv/agentkv/internal/cputime"
)

// turnBench is one gateway (a Stack over benchUpstream with the in-process
// tokenizer) and the client sending it 32K-token session turns.
type turnBench struct {
	stack  *Stack
	srv    *httptest.Server
	key    string
	client *http.Client
}

func newTurnBench(b *testing.B, upURL string, keys *tenant.Set, key string) *turnBench {
	s, err := NewStack(context.Background(), StackConfig{
		Workers: []WorkerSpec{{URL: upURL, Tokenizer: benchTokenizer{}}},
		Refresh: -1, Affinity: DefaultAffinity, Registry: prometheus.NewRegistry(), Gateway: Config{Keys: keys}})
	if err != nil {
		b.Fatal(err)
	}
	tb := &turnBench{stack: s, srv: httptest.NewServer(s.Handler("")), key: key, client: NewHTTPClient()}
	b.Cleanup(func() { tb.srv.Close(); _ = s.Close() })
	return tb
}

// turnBodies are 64 sessions' 32K-token turns (benchTokenizer: one token
// per byte of the messages' JSON).
func turnBodies() [][]byte {
	var out [][]byte
	for s := range 64 {
		text := strings.Repeat(fmt.Sprintf("session %02d reads the file and edits it. ", s), 32<<10/40+1)
		body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 8,
			"messages": []any{map[string]any{"role": "user", "content": text[:32<<10-64]}}})
		out = append(out, body)
	}
	return out
}

// turn sends session s's turn and reads the reply to its end; it returns
// the wall time.
func (tb *turnBench) turn(b *testing.B, body []byte, s int) time.Duration {
	hdr := http.Header{"Content-Type": {"application/json"}, "X-Session-Id": {fmt.Sprint("s", s)}}
	if tb.key != "" {
		hdr.Set("Authorization", "Bearer "+tb.key)
	}
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+ChatPath, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = hdr
	start := time.Now()
	resp, err := tb.client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return time.Since(start)
}

// BenchmarkTenantTurn32K measures what key comparison, salting (the body's
// cache_salt splice, the salted block hashes) and tenant scoping add to a
// 32K-token session turn routed end to end: the same turns go through a
// gateway without keys and one with 10,000 tenants' keys, alternating in
// one run, one request at a time over real HTTP to the same engine
// stand-in (no prefill wait). Reported: each side's wall p50, the process
// CPU per request (client, gateway and engine stand-in together, which is
// the same work on both sides but for the tenant's), and the ratios.
func BenchmarkTenantTurn32K(b *testing.B) {
	up := httptest.NewServer(&benchUpstream{chunks: 2})
	defer up.Close()
	var lines strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&lines, "t%05d sk-bench-key-%08d-abcdef\n", i, i)
	}
	ks, err := tenant.Parse(strings.NewReader(lines.String()))
	if err != nil {
		b.Fatal(err)
	}
	plain := newTurnBench(b, up.URL, nil, "")
	keyed := newTurnBench(b, up.URL, tenant.NewSet(ks), "sk-bench-key-00004242-abcdef")
	bodies := turnBodies()
	for s := range bodies { // first turns: sessions open, pools warm
		plain.turn(b, bodies[s], s)
		keyed.turn(b, bodies[s], s)
	}
	const batch = 8
	var tPlain, tKeyed []time.Duration
	var cpuPlain, cpuKeyed time.Duration
	side := func(tb *turnBench, i int, ts *[]time.Duration, cpu *time.Duration) {
		c0 := cputime.Process()
		for j := range batch {
			s := (i*batch + j) % len(bodies)
			*ts = append(*ts, tb.turn(b, bodies[s], s))
		}
		*cpu += cputime.Process() - c0
	}
	b.ResetTimer()
	for i := 0; i < max(b.N/batch, 1); i++ {
		if i%2 == 0 {
			side(plain, i, &tPlain, &cpuPlain)
			side(keyed, i, &tKeyed, &cpuKeyed)
		} else {
			side(keyed, i, &tKeyed, &cpuKeyed)
			side(plain, i, &tPlain, &cpuPlain)
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	n := float64(len(tPlain))
	p50p, p50k := quantile(tPlain, 0.5), quantile(tKeyed, 0.5)
	b.ReportMetric(us(p50p), "plain-p50-us")
	b.ReportMetric(us(p50k), "tenant-p50-us")
	b.ReportMetric(float64(p50k)/float64(p50p), "p50-ratio")
	b.ReportMetric(us(cpuPlain)/n, "plain-cpu-us/req")
	b.ReportMetric(us(cpuKeyed)/n, "tenant-cpu-us/req")
	b.ReportMetric(float64(cpuKeyed)/float64(cpuPlain), "cpu-ratio")
	b.ReportMetric(0, "ns/op")
}
