package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wedgeLoadShape is one kind of request of the wedged-worker test's mixed
// load: an API, streamed or not, with max_tokens or without.
type wedgeLoadShape struct {
	path   string
	stream bool
	budget bool // sets max_tokens (a whole reply without it may run to the context)
}

var wedgeShapes = []wedgeLoadShape{
	{"/v1/chat/completions", true, true}, {"/v1/chat/completions", false, true}, {"/v1/chat/completions", false, false},
	{"/v1/responses", true, true}, {"/v1/responses", false, true}, {"/v1/responses", false, false},
	{"/v1/messages", true, true}, {"/v1/messages", false, true},
}

func (s wedgeLoadShape) body(prompt string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"stream":%v`, pfModel, s.stream)
	switch {
	case strings.HasSuffix(s.path, "/messages"):
		fmt.Fprintf(&b, `,"max_tokens":64,"messages":[{"role":"user","content":%q}]}`, prompt)
	case strings.HasSuffix(s.path, "/responses"):
		if s.budget {
			b.WriteString(`,"max_output_tokens":64`)
		}
		fmt.Fprintf(&b, `,"input":%q}`, prompt)
	default:
		if s.budget {
			b.WriteString(`,"max_tokens":64`)
		}
		fmt.Fprintf(&b, `,"messages":[{"role":"user","content":%q}]}`, prompt)
	}
	return b.String()
}

// complete reports whether a reply is whole in its API's shape.
func (s wedgeLoadShape) complete(code int, body string) bool {
	if code != http.StatusOK {
		return false
	}
	if s.stream {
		switch {
		case strings.HasSuffix(s.path, "/messages"):
			return strings.Contains(body, "message_stop") && !strings.Contains(body, "event: error")
		case strings.HasSuffix(s.path, "/responses"):
			return (strings.Contains(body, "response.completed") || strings.Contains(body, "response.incomplete")) &&
				!strings.Contains(body, "response.failed")
		}
		return strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]")
	}
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(body), &m) != nil {
		return false
	}
	_, choices := m["choices"]
	_, output := m["output"]
	_, content := m["content"]
	return choices || output || content
}

// wedgeReq is one request of the load as its client saw it.
type wedgeReq struct {
	start, end time.Time
	worker     string
	ok         bool
	shape      wedgeLoadShape
	err        string
}

// TestProcessWedgedWorkerEjected: three "agentkv mock-worker" processes
// behind an "agentkv proxy" process under mixed load (chat completions,
// Responses, Messages; streamed, whole with max_tokens and whole
// without); one worker is wedged through its admin endpoint (its /health
// and /metrics stay green, generations never start). Every request is
// answered whole; none waits longer than the wedge's detection plus twice
// the slowest healthy request (its deadline, or the ejection that
// cancelled it, plus one retry); only requests the wedged worker received
// are retried (no retry away from a healthy worker, so none took more
// than two attempts); the worker is ejected within 5 s of the wedge (plus
// the slowest healthy request, what the loaded machine managed); once it
// recovers it is routable again within one ejection period
// (--ejection-time) and serves again.
func TestProcessWedgedWorkerEjected(t *testing.T) {
	ejection := 4 * time.Second
	if v := os.Getenv("AGENTKV_WEDGE_EJECTION_TIME"); v != "" { // e.g. 30s: the default, to measure
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		ejection = d
	}
	workers := []*mockProc{newMockProc(t), newMockProc(t), newMockProc(t)}
	args := []string{"--ejection-time", ejection.String()}
	for _, w := range workers {
		w.start()
		args = append(args, "--worker", w.spec())
	}
	px := startProxyProc(t, args...)
	px.listening(t)
	_, ok := pollUntil(waitBound, func() bool {
		return px.routable(t, 0) == 1 && px.routable(t, 1) == 1 && px.routable(t, 2) == 1
	})
	require.True(t, ok, "the three workers never became routable; proxy log:\n%s", px.p.stderr.String())
	const wedged = 2
	victim := workers[wedged].url()

	var mu sync.Mutex
	var reqs []wedgeReq
	served := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: waitBound} // a bound for a hung request, not a window
	for c := range 9 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				s := wedgeShapes[(c+i)%len(wedgeShapes)]
				r := wedgeReq{start: time.Now(), shape: s}
				resp, err := client.Post(px.base+s.path, "application/json",
					strings.NewReader(s.body(fmt.Sprintf("client %d turn %d: tell me about the sea", c, i))))
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					r.worker, r.ok = resp.Header.Get("X-Agentkv-Worker"), s.complete(resp.StatusCode, string(b))
					if !r.ok {
						r.err = fmt.Sprintf("%d %.300s", resp.StatusCode, b)
					}
				} else {
					r.err = err.Error()
				}
				r.end = time.Now()
				mu.Lock()
				reqs = append(reqs, r)
				if r.ok {
					served[r.worker]++
				}
				mu.Unlock()
			}
		}()
	}
	servedBy := func(w string) int { mu.Lock(); defer mu.Unlock(); return served[w] }
	_, ok = pollUntil(waitBound, func() bool {
		return servedBy(workers[0].url()) > 5 && servedBy(workers[1].url()) > 5 && servedBy(victim) > 5
	})
	require.True(t, ok, "the load never reached every worker")
	mu.Lock()
	var slowest time.Duration // the slowest healthy request: what this machine manages
	for _, r := range reqs {
		slowest = max(slowest, r.end.Sub(r.start))
	}
	mu.Unlock()

	wedgeAt := wedgeFault(t, victim, `{"wedge":true}`)
	took, ok := pollUntil(20*time.Second, func() bool { return px.routable(t, wedged) == 0 })
	if !ok {
		for k, v := range px.metrics(t) {
			if strings.Contains(k, `worker="2"`) {
				t.Log(k, v)
			}
		}
	}
	require.True(t, ok, "the wedged worker was never ejected; proxy log:\n%s", px.p.stderr.String())
	ejectedAt := time.Now()
	t.Logf("wedged → ejected in %v (the slowest healthy request before: %v)", took.Round(time.Millisecond), slowest.Round(time.Millisecond))
	require.Less(t, took, 5*time.Second+slowest, "ejected too late; proxy log:\n%s", px.p.stderr.String())
	m := px.metrics(t)
	require.Equal(t, 1.0, m[`agentkv_gateway_worker_ejections_total{reason="timeout",worker="2"}`], "ejected for timeouts")
	code, ready := px.get("/readyz")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, ready, "ejected (timeout)")

	// Load goes on on the two others; the held requests were cancelled
	// at the ejection and retried at once.
	before := servedBy(workers[0].url()) + servedBy(workers[1].url())
	_, ok = pollUntil(waitBound, func() bool { return servedBy(workers[0].url())+servedBy(workers[1].url()) > before+30 })
	require.True(t, ok, "the load stalled after the ejection")
	retriesAt := px.metrics(t)[`agentkv_failover_retries_total{worker="2"}`]

	// Recovery: it rejoins within one ejection period and serves again.
	recoverAt := wedgeFault(t, victim, `{}`)
	back, ok := pollUntil(waitBound, func() bool { return px.routable(t, wedged) == 1 })
	require.True(t, ok, "the recovered worker never came back")
	t.Logf("recovered → routable in %v (ejection period %v; %v after the ejection)", back.Round(time.Millisecond), ejection,
		time.Since(ejectedAt).Round(time.Millisecond))
	require.LessOrEqual(t, back, ejection+slowest, "back later than one ejection period after it recovered")
	n := servedBy(victim)
	_, ok = pollUntil(waitBound, func() bool { return servedBy(victim) > n+3 })
	require.True(t, ok, "the recovered worker serves nothing")
	close(stop)
	wg.Wait()

	m = px.metrics(t)
	require.Zero(t, m[`agentkv_failover_retries_total{worker="0"}`]+m[`agentkv_failover_retries_total{worker="1"}`],
		"a request was retried away from a healthy worker")
	retried := m[`agentkv_failover_retries_total{worker="2"}`]
	require.Equal(t, retriesAt, retried, "requests were retried off the worker after its ejection")
	mu.Lock()
	defer mu.Unlock()
	sentDuring := 0 // requests sent between the wedge and the ejection: the most that can have reached it
	for _, r := range reqs {
		require.True(t, r.ok, "a request failed: %s %+v", r.err, r.shape)
		if r.end.After(wedgeAt) && r.start.Before(ejectedAt) {
			sentDuring++
		}
		waited := r.end.Sub(r.start)
		require.LessOrEqual(t, waited, took+2*slowest, "a request waited past its deadline plus one retry: %+v", r)
	}
	require.Positive(t, retried)
	require.LessOrEqual(t, retried, float64(sentDuring))
	t.Logf("%d requests, %d retried off the wedged worker (%d in flight between wedge and ejection); recovered at +%v",
		len(reqs), int(retried), sentDuring, recoverAt.Sub(wedgeAt).Round(time.Millisecond))
}

// wedgeFault posts body to a mock worker's fault switches and returns
// when it was answered.
func wedgeFault(t *testing.T, url, body string) time.Time {
	t.Helper()
	resp, err := http.Post(url+"/admin/fault", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return time.Now()
}

var _ = strconv.Itoa
var _ = context.Background
var _ atomic.Int64
