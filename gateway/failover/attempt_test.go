package failover

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSendQueueAwareDeadline: an attempt's deadline allows for the prefill
// queued ahead of it on its worker (attempts without a first byte yet),
// and a TTFT sample is divided by that queue too, so a busy but healthy
// worker keeps its speed (and is not taken for an outlier).
func TestSendQueueAwareDeadline(t *testing.T) {
	tr, _, _, _ := newFleetTracker(t, 3, Config{Outlier: OutlierConfig{FirstByteFloor: time.Second, PrefillRate: 1000,
		MinPromptTokens: 1, AttentionTokens: -1}})
	a := tr.Send(0, Request{Prompt: 1000, Uncached: 1000, Stream: true}, nil)
	if a.Deadline() != 4*time.Second { // 1 s + 3 × 1000 / 1000
		t.Fatalf("first deadline %v", a.Deadline())
	}
	b := tr.Send(0, Request{Prompt: 1000, Uncached: 1000, Stream: true}, nil)
	if b.Deadline() != 7*time.Second || b.Queued() != 1000 { // one prompt queued ahead
		t.Fatalf("queued deadline %v (queued %v)", b.Deadline(), b.Queued())
	}
	if d := tr.Send(1, Request{Prompt: 1000, Uncached: 1000, Stream: true}, nil).Deadline(); d != 4*time.Second {
		t.Fatalf("another worker's queue counted: %v", d)
	}
	a.End() // leaves the queue (as its first byte would)
	if d := tr.Send(0, Request{Prompt: 1000, Uncached: 1000, Stream: true}, nil).Deadline(); d != 7*time.Second {
		t.Fatalf("after a's first byte: %v (b and nothing else queued)", d)
	}
	b.End()
	a.End()
	// A whole reply's budget: max_tokens, else the context left.
	w := tr.Send(2, Request{Prompt: 1000, MaxTokens: 100}, nil)
	if w.Deadline() != time.Second+3*(time.Duration(1000+0)*time.Millisecond+100*DefaultTokenTime) {
		t.Fatalf("whole reply, max_tokens 100: %v", w.Deadline())
	}
	w.End()
	w = tr.Send(2, Request{Prompt: 1000}, nil)
	want := time.Second + 3*(time.Second+time.Duration(DefaultContextTokens-1000)*DefaultTokenTime)
	if w.Deadline() != want {
		t.Fatalf("whole reply, no max_tokens: %v, want %v", w.Deadline(), want)
	}
	w.End()
}

// TestBusyWorkerNotLatencyOutlier: a worker whose TTFTs are long only
// because prompts queue on it (its queue-normalised speed is its peers')
// is not ejected for latency; the same TTFTs with nothing queued are.
func TestBusyWorkerNotLatencyOutlier(t *testing.T) {
	for _, queued := range []bool{true, false} {
		tr, _, _, ejections := newFleetTracker(t, 3, Config{Outlier: OutlierConfig{LatencyMinSamples: 3,
			MinPromptTokens: 1, AttentionTokens: -1}})
		for range 5 {
			for id := range uint64(2) {
				tr.observeFirst(id, 1000, 100*time.Millisecond) // 0.1 ms a token
			}
		}
		for range 6 {
			var held []*Attempt
			n := 1
			if queued {
				n = 10 // ten prompts at once: the last waits behind nine
			}
			for range n {
				held = append(held, tr.Send(2, Request{Prompt: 1000, Uncached: 1000, Stream: true}, nil))
			}
			last := held[n-1]
			last.start = time.Now().Add(-time.Second) // its TTFT: 1 s, ten prompts' worth
			last.FirstByte()
			for _, a := range held {
				a.End()
			}
		}
		got := ejections(ReasonLatency, 2)
		if queued && got != 0 {
			t.Fatal("a busy worker was ejected for latency")
		}
		if !queued && got != 1 {
			t.Fatal("a slow idle worker was not ejected for latency")
		}
	}
}

// TestSentTimeoutNotCounted: timeouts of a worker that had sent part of
// its reply (slow, not silent) eject no one and are not successes either.
func TestSentTimeoutNotCounted(t *testing.T) {
	tr, _, _, ejections := newFleetTracker(t, 3, Config{})
	for range 10 {
		tr.Report(0, Outcome{Kind: Timeout, Sent: true, Err: errStalled})
	}
	if !tr.Routable(0) || ejections(ReasonTimeout, 0) != 0 || ejections(ReasonErrors, 0) != 0 {
		t.Fatalf("a slow worker that sent bytes was ejected: %+v", tr.Status()[0])
	}
	tr.Report(0, Outcome{Kind: Timeout, Err: errStalled})
	tr.Report(0, Outcome{Kind: Timeout, Sent: true})
	tr.Report(0, Outcome{Kind: Timeout, Err: errStalled})
	tr.Report(0, Outcome{Kind: Timeout, Err: errStalled})
	if tr.Routable(0) || ejections(ReasonTimeout, 0) != 1 {
		t.Fatal("three silent timeouts (a slow one between them) did not eject")
	}
}

// TestTimeoutEjectionCancelsHeld: a timeout ejection cancels, with
// ErrEjected, the attempts the worker holds that it sent nothing of, so
// they retry elsewhere at once; attempts it is answering, and those on
// other workers, are left alone.
func TestTimeoutEjectionCancelsHeld(t *testing.T) {
	tr, _, _, _ := newFleetTracker(t, 3, Config{})
	var mu sync.Mutex
	got := map[string]error{}
	cancel := func(name string) func(error) {
		return func(err error) { mu.Lock(); got[name] = err; mu.Unlock() }
	}
	held := tr.Send(1, Request{Prompt: 10, Stream: true}, cancel("held"))
	answering := tr.Send(1, Request{Prompt: 10, Stream: true}, cancel("answering"))
	answering.Received()
	first := tr.Send(1, Request{Prompt: 10, Stream: true}, cancel("first"))
	first.FirstByte()
	other := tr.Send(0, Request{Prompt: 10, Stream: true}, cancel("other"))
	for range 3 {
		tr.Report(1, Outcome{Kind: Timeout, Err: errStalled})
	}
	if tr.Routable(1) {
		t.Fatal("not ejected")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !errors.Is(got["held"], ErrEjected) {
		t.Fatalf("cancelled: %v", got)
	}
	for _, a := range []*Attempt{held, answering, first, other} {
		a.End()
	}
}

// progressServer serves /metrics with vLLM's token counters at *n and
// /health 200.
func progressServer(t *testing.T, n *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != DefaultProgressPath {
			return
		}
		fmt.Fprintf(w, "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} %d\n", n.Load())
		fmt.Fprintf(w, "vllm:num_requests_running{engine=\"0\"} 3\n")
	}))
	t.Cleanup(s.Close)
	return s
}

// TestWedgeConfirmed: three silent timeouts eject a worker only once its
// progress counters, read ConfirmWait apart, stood still: a worker whose
// counters advance is busy, not wedged, and stays in; one whose /metrics
// cannot be read is ejected on its timeouts alone.
func TestWedgeConfirmed(t *testing.T) {
	var busy, wedged atomic.Int64
	busySrv, wedgedSrv := progressServer(t, &busy), progressServer(t, &wedged)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the busy worker's engine generates
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				busy.Add(1)
			}
		}
	}()
	tr, _, _, ejections := newFleetTracker(t, 0, Config{Outlier: OutlierConfig{ConfirmWait: 50 * time.Millisecond,
		MaxEjectedShare: 1}})
	for i, u := range []string{busySrv.URL, wedgedSrv.URL, "http://" + closedPort(t)} {
		if err := tr.Add(uint64(i), u); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for id := range uint64(3) {
			tr.Report(id, Outcome{Kind: Timeout, Err: errStalled})
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ejections(ReasonTimeout, 1) == 0 || ejections(ReasonTimeout, 2) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not ejected: %+v", tr.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(tr.Status()[1].LastError, "no progress") {
		t.Fatalf("last error: %q", tr.Status()[1].LastError)
	}
	// The busy worker: its confirmation ends (counters advanced) with no
	// ejection; a fourth timeout checks again, with the same result.
	for {
		tr.mu.Lock()
		c := tr.workers[0].confirming
		tr.mu.Unlock()
		if !c {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy worker's confirmation never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !tr.Routable(0) || ejections(ReasonTimeout, 0) != 0 {
		t.Fatalf("a busy worker was ejected: %+v", tr.Status()[0])
	}
}

func TestParseProgress(t *testing.T) {
	in := `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="a}b\"c"} 12
vllm:prompt_tokens_total 30 1700000000
vllm:request_success_total{finished_reason="stop"} 2
vllm:request_success_total{finished_reason="length"} 1
vllm:num_requests_running{engine="0"} 5
vllm:iteration_tokens_total_count{engine="0"} 100
vllm:iteration_tokens_total_sum{engine="0"} 9999
vllm:prompt_tokens_total_bogus 1000
vllm:prompt_tokens_total{broken 1000
vllm:prompt_tokens_total NaN
`
	sum, found, err := ParseProgress(strings.NewReader(in))
	if err != nil || !found || sum != 145 {
		t.Fatalf("sum %v found %v err %v", sum, found, err)
	}
	if _, found, _ := ParseProgress(strings.NewReader("up 1\n")); found {
		t.Fatal("found progress in none")
	}
}

// FuzzParseProgress: any input parses without a panic, to a finite sum
// that is not negative.
func FuzzParseProgress(f *testing.F) {
	f.Add([]byte("vllm:generation_tokens_total{engine=\"0\"} 12\n"))
	f.Add([]byte("sglang:prompt_tokens_total 3 17\n# x\n"))
	f.Add([]byte("vllm:prompt_tokens_total{a=\"\\\"}\"} 1e308\nvllm:prompt_tokens_total 1e308\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sum, _, err := ParseProgress(bytes.NewReader(b))
		if err == nil && (sum < 0 || sum != sum) {
			t.Fatalf("sum %v", sum)
		}
	})
}

// TestHeldWholeReplyStartsWedgeCheck: a whole reply (whose first byte
// comes at its end) held past its prefill's deadline with nothing sent
// starts a wedge check with no timeout at all: a worker whose counters
// stand still is ejected and the reply cancelled; one whose counters
// advance is left alone.
func TestHeldWholeReplyStartsWedgeCheck(t *testing.T) {
	var busy, wedged atomic.Int64
	busySrv, wedgedSrv := progressServer(t, &busy), progressServer(t, &wedged)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				busy.Add(1)
			}
		}
	}()
	tr, _, _, ejections := newFleetTracker(t, 0, Config{Outlier: OutlierConfig{ConfirmWait: 50 * time.Millisecond,
		FirstByteFloor: 20 * time.Millisecond, MaxEjectedShare: 1}})
	for i, u := range []string{busySrv.URL, wedgedSrv.URL} {
		if err := tr.Add(uint64(i), u); err != nil {
			t.Fatal(err)
		}
	}
	var cancelled [2]atomic.Bool
	var held []*Attempt
	for id := range uint64(2) {
		held = append(held, tr.Send(id, Request{Prompt: 100}, func(error) { cancelled[id].Store(true) }))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for ejections(ReasonTimeout, 1) == 0 || !cancelled[1].Load() {
		if time.Now().After(deadline) {
			t.Fatalf("the silent worker was not ejected: %+v", tr.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for {
		tr.mu.Lock()
		done := !tr.workers[0].lastProgress.IsZero()
		tr.mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy worker was never checked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !tr.Routable(0) || cancelled[0].Load() {
		t.Fatal("the busy worker was ejected or its reply cancelled")
	}
	for _, a := range held {
		a.End()
	}
}
