package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv/engine/mock"
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

// fairBench is two mock workers behind three gateways with the same keys:
// one holding tenants to their weighted share past a capacity, the same
// without counting a tenant between turns as present
// (LimitsConfig.Recent < 0), and one with no fair-share limit.
type fairBench struct {
	model               string
	fair, fairNow, open *httptest.Server
	client              *http.Client
}

const (
	keyChat = "sk-chat-0123456789abcdef"
	keyRL   = "sk-rollout-0123456789abcdef"
)

func newFairBench(b testing.TB, capacity int) *fairBench {
	fb := &fairBench{client: NewHTTPClient()}
	var specs []WorkerSpec
	for range 2 {
		m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", MinOutput: 16, MaxOutput: 32})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { m.Close() })
		fb.model = m.Model()
		specs = append(specs, WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), Tokenizer: m})
	}
	ks, err := tenant.Parse(strings.NewReader("chat " + keyChat + "\nrollout " + keyRL + "\n"))
	if err != nil {
		b.Fatal(err)
	}
	for _, g := range []struct {
		srv    **httptest.Server
		limits tenant.LimitsConfig
	}{
		{&fb.fair, tenant.LimitsConfig{Capacity: capacity}},
		{&fb.fairNow, tenant.LimitsConfig{Capacity: capacity, Recent: -1}},
		{&fb.open, tenant.LimitsConfig{}},
	} {
		s, err := NewStack(context.Background(), StackConfig{Workers: specs, Refresh: -1, Affinity: DefaultAffinity,
			Registry: prometheus.NewRegistry(),
			Gateway:  Config{Keys: tenant.NewSet(ks), TenantLimits: g.limits}})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler(""))
		b.Cleanup(func() { srv.Close(); _ = s.Close() })
		*g.srv = srv
	}
	return fb
}

// send streams one chat turn and returns the time to its first content
// chunk and the reply's status; a 429's Retry-After is returned as wait.
func (fb *fairBench) send(url, key, session, text string) (ttft time.Duration, code int, wait time.Duration, err error) {
	body, _ := json.Marshal(map[string]any{"model": fb.model, "stream": true, "max_tokens": 16,
		"messages": []any{map[string]any{"role": "user", "content": text}}})
	req, _ := http.NewRequest(http.MethodPost, url+ChatPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Session-Id", session)
	start := time.Now()
	resp, err := fb.client.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		if s, e := strconv.Atoi(resp.Header.Get("Retry-After")); e == nil {
			wait = time.Duration(s) * time.Second
		}
		return 0, resp.StatusCode, wait, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if ttft == 0 && bytes.Contains(sc.Bytes(), []byte(`"content":"`)) && !bytes.Contains(sc.Bytes(), []byte(`"content":""`)) {
			ttft = time.Since(start)
		}
	}
	if ttft == 0 {
		return 0, resp.StatusCode, 0, fmt.Errorf("no content chunk (%v)", sc.Err())
	}
	return ttft, resp.StatusCode, 0, sc.Err()
}

// interactive runs the chat tenant: sessions concurrent sessions, each
// sending turns one after another (a 512-token context growing by 16
// tokens a turn, 5 ms of think time), turns in all; it returns every
// turn's time to first token.
func (fb *fairBench) interactive(b testing.TB, url string, sessions, turns int, tag string) []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := e2eWords(512, fmt.Sprintf("%s-chat%d-", tag, s))
			for t := 0; t < turns/sessions; t++ {
				ctx += " " + e2eWords(16, fmt.Sprintf("t%d-", t))
				d, code, _, err := fb.send(url, keyChat, fmt.Sprintf("%s-c%d", tag, s), ctx)
				if err != nil || code != http.StatusOK {
					b.Errorf("chat turn: %d %v", code, err)
					return
				}
				mu.Lock()
				out = append(out, d)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return out
}

// rollout runs the rollout tenant's burst until stop closes: programs
// concurrent programs of 3 turns each (a 1,024-token prompt, 896 of them
// a system prompt all programs share, growing by a 64-token tool result a
// turn, as a rollout step's programs do), a finished program replaced by
// a new one; a refused turn
// waits its Retry-After and up to as long again (jitter), as a client
// should. It returns the turns served
// and refused; tried counts the answers.
func (fb *fairBench) rollout(url string, programs int, tag string, stop <-chan struct{}, tried *atomic.Int64) (served, refused int64) {
	var ok, no atomic.Int64
	var wg sync.WaitGroup
	system := e2eWords(896, "system-")
	for p := range programs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; ; gen++ {
				ctx := system + " " + e2eWords(128, fmt.Sprintf("%s-rl%d-%d-", tag, p, gen))
				for t := 0; t < 3; t++ {
					select {
					case <-stop:
						return
					default:
					}
					_, code, wait, err := fb.send(url, keyRL, fmt.Sprintf("%s-p%d-%d", tag, p, gen), ctx)
					tried.Add(1)
					switch {
					case err == nil && code == http.StatusOK:
						ok.Add(1)
						ctx += " " + e2eWords(64, fmt.Sprintf("tool%d-", t))
					case code == http.StatusTooManyRequests:
						no.Add(1)
						t--
						select {
						case <-stop:
							return
						case <-time.After(wait + rand.N(wait+1)): // jittered, as clients back off
						}
					default:
						t-- // a transient failure: try the turn again
					}
				}
			}
		}()
	}
	<-stop
	wg.Wait()
	return ok.Load(), no.Load()
}

// warmRollout runs a small rollout through the open gateway until 64
// turns are answered, so the rollout's shared system prompt is cached on
// every worker it lands on.
func (fb *fairBench) warmRollout(b *testing.B) {
	stop := make(chan struct{})
	var tried atomic.Int64
	done := make(chan struct{})
	go func() {
		fb.rollout(fb.open.URL, 16, "warm", stop, &tried)
		close(done)
	}()
	for deadline := time.Now().Add(time.Minute); tried.Load() < 64; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatal("the warm-up rollout made no progress")
		}
	}
	close(stop)
	<-done
}

// BenchmarkTenantFairShare measures what fair share buys an interactive
// tenant while another runs a rollout burst: 4 chat sessions' time to
// first token (p99 over 200 turns) alone, then beside a rollout tenant's
// 500 concurrent programs through a gateway with --tenant-capacity 8,
// through the same without recency (the chat tenant counted only while it
// has a request in flight), and through a gateway with no fair-share
// limit (40 turns), all in one run over real HTTP to two mock workers
// (engine/sim timing in real time, so the engines, not this process's
// CPU, are what the tenants share). Every phase's chat sessions are new
// and their prompts the same size (a tag is one word), so each phase has
// 4 cold first turns, and with 200 turns p99 is the second slowest of
// them. Reported: the p99s and p50s, the ratios to running alone, and the
// rollout turns served and refused.
func BenchmarkTenantFairShare(b *testing.B) {
	fb := newFairBench(b, 8)
	const sessions, turns, openTurns, programs = 4, 200, 40, 500
	fb.interactive(b, fb.fair.URL, sessions, 40, "warm")
	// Every phase finds the rollout's system prompt cached on both
	// workers, as the phases after the first would anyway.
	fb.warmRollout(b)
	var alone []time.Duration
	var got [3][]time.Duration // fair, fair without recency, open
	var served, refused [3]int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		alone = append(alone, fb.interactive(b, fb.fair.URL, sessions, turns, fmt.Sprintf("alone%d", i))...)
		for j, url := range []string{fb.fair.URL, fb.fairNow.URL, fb.open.URL} {
			tag := fmt.Sprintf("burst%d-%d", i, j)
			stop := make(chan struct{})
			var tried atomic.Int64
			done := make(chan struct{})
			go func() {
				s, r := fb.rollout(url, programs, tag, stop, &tried)
				served[j] += s
				refused[j] += r
				close(done)
			}()
			// Measure once every program has sent its first turn.
			for deadline := time.Now().Add(2 * time.Minute); tried.Load() < programs; {
				if time.Now().After(deadline) {
					b.Fatal("the rollout burst never started")
				}
				time.Sleep(time.Millisecond)
			}
			n := turns
			if j == 2 {
				n = openTurns // each takes seconds
			}
			got[j] = append(got[j], fb.interactive(b, url, sessions, n, tag)...)
			close(stop)
			<-done
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	pa := quantile(alone, 0.99)
	b.ReportMetric(ms(quantile(alone, 0.5)), "alone-p50-ms")
	b.ReportMetric(ms(pa), "alone-p99-ms")
	for j, name := range []string{"fair", "fair-norecent", "open"} {
		p := quantile(got[j], 0.99)
		if j < 2 {
			b.ReportMetric(ms(quantile(got[j], 0.5)), name+"-p50-ms")
		}
		b.ReportMetric(ms(p), name+"-p99-ms")
		b.ReportMetric(float64(p)/float64(pa), name+"-ratio")
		b.ReportMetric(float64(served[j])/float64(b.N), name+"-rl-turns")
		if j == 0 {
			b.ReportMetric(float64(refused[j])/float64(b.N), name+"-rl-429s")
		}
	}
	b.ReportMetric(0, "ns/op")
}
