package gateway

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/gateway/tenant"
)

// TestTenantYield: with the engines contended, a request of the tenant
// over its share waits in the gateway while its worker computes the other
// tenant's prompt, and is sent once that prompt's first token comes; the
// over-share tenant's next request past its share still gets 429 with
// Retry-After. Over real HTTP to a mock worker paused (no step runs) until
// the requests are in place.
func TestTenantYield(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, m, fb, url := tenantStack(t, "chat "+keyChat+"\nrollout "+keyRL+"\n", StackConfig{Affinity: DefaultAffinity, Registry: reg,
		Gateway: Config{TenantLimits: tenant.LimitsConfig{Capacity: 4}, TenantYield: tenant.GateConfig{MaxHold: time.Minute}}})
	g := s.Gateway()
	gate := func() (waiting, yielding, protected int) { return g.gate.Waiting(0) }
	await := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		}
	}

	m.SetPaused(true)
	type result struct {
		who  string
		code int
		err  error
	}
	results := make(chan result, 4)
	var wg sync.WaitGroup
	send := func(who, key, session string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, code, _, err := fb.send(url, key, session, e2eWords(40, who+"-"))
			results <- result{who, code, err}
		}()
	}
	// Capacity 4. The rollout alone: even, sent at once (each marked
	// protected until its first token).
	send("r1", keyRL, "p1")
	send("r2", keyRL, "p2")
	await("the rollout's two requests at the worker", func() bool { _, _, p := gate(); return p == 2 })
	require.Equal(t, tenant.Even, g.limits.Standing(&tenant.Tenant{Name: "rollout", Weight: 1}))
	// The chat tenant arrives (3 in flight: not contended yet), sent at
	// once.
	send("c1", keyChat, "c1")
	await("the chat request at the worker", func() bool { _, _, p := gate(); return p == 3 })
	// The rollout's third request fills the capacity: the rollout is
	// over its share (3 of 4 with 2 tenants active), the chat under, and
	// the request yields to the chat's prompt.
	send("r3", keyRL, "p3")
	await("the rollout's third request to yield", func() bool { w, _, _ := gate(); return w == 1 })
	require.Equal(t, tenant.Under, g.limits.Standing(&tenant.Tenant{Name: "chat", Weight: 1}))
	require.Equal(t, tenant.Over, g.limits.Standing(&tenant.Tenant{Name: "rollout", Weight: 1}))
	// A fourth is past the share: 429 with Retry-After, as before.
	_, code, wait, err := fb.send(url, keyRL, "p4", "four")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, code)
	require.Equal(t, time.Second, wait)
	select {
	case r := <-results:
		t.Fatalf("%s answered while the worker was paused: %d %v", r.who, r.code, r.err)
	default:
	}

	m.SetPaused(false)
	wg.Wait()
	close(results)
	for r := range results {
		require.NoError(t, r.err, r.who)
		require.Equal(t, http.StatusOK, r.code, r.who)
	}
	w, y, p := gate()
	require.Zero(t, w+y+p, "the gate holds nothing once the replies are done")
	require.Equal(t, 1, testutil.CollectAndCount(g.m.tenantYield, "agentkv_gateway_tenant_yield_wait_seconds"))
	h := &strings.Builder{}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "agentkv_gateway_tenant_yield_wait_seconds" {
			for _, mt := range mf.Metric {
				h.WriteString(mt.GetLabel()[0].GetValue())
				require.EqualValues(t, 1, mt.GetHistogram().GetSampleCount())
			}
		}
	}
	require.Equal(t, "sent", h.String(), "the yielding request was sent when the worker was clear, not forced")
}

// TestTenantYieldWhileRecent: a tenant between turns still counts toward
// the shares for LimitsConfig.Recent, so the rollout that fills the
// capacity after the chat tenant's turn ended is over its share and its
// prefills go to the worker one at a time; counted only while in flight
// (Recent < 0), the same rollout is even and sent at once. Over real HTTP
// to a mock worker paused while the rollout's requests are in place.
func TestTenantYieldWhileRecent(t *testing.T) {
	for _, recent := range []time.Duration{0, -1} {
		s, m, fb, url := tenantStack(t, "chat "+keyChat+"\nrollout "+keyRL+"\n", StackConfig{Affinity: DefaultAffinity,
			Gateway: Config{TenantLimits: tenant.LimitsConfig{Capacity: 2, Recent: recent}, TenantYield: tenant.GateConfig{MaxHold: time.Minute}}})
		g := s.Gateway()

		// The chat tenant's turn, answered: nothing of it is in flight.
		_, code, _, err := fb.send(url, keyChat, "c1", e2eWords(40, "chat-"))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.Zero(t, g.limits.InFlight("chat"))

		m.SetPaused(true)
		var wg sync.WaitGroup
		codes := make(chan int, 2)
		for _, p := range []string{"p1", "p2"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, code, _, err := fb.send(url, keyRL, p, e2eWords(40, p+"-"))
				if err != nil {
					t.Error(err)
				}
				codes <- code
			}()
		}
		wantWaiting, wantYielding, wantProtected := 1, 1, 0 // one at a time
		if recent < 0 {
			wantWaiting, wantYielding, wantProtected = 0, 0, 2 // even: both at once
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
			w, y, p := g.gate.Waiting(0)
			if w == wantWaiting && y == wantYielding && p == wantProtected {
				break
			}
			require.True(t, time.Now().Before(deadline), "recent %v: gate waiting %d, yielding %d, protected %d; want %d, %d, %d",
				recent, w, y, p, wantWaiting, wantYielding, wantProtected)
		}
		m.SetPaused(false)
		wg.Wait()
		close(codes)
		for c := range codes {
			require.Equal(t, http.StatusOK, c)
		}
	}
}

// tenantStack is a stack over one mock worker (2-token replies at 1000×
// speed) with the keys in keyFile and cfg's other settings, served over
// HTTP at url; fb sends to it.
func tenantStack(t *testing.T, keyFile string, cfg StackConfig) (s *Stack, m *mock.Server, fb *fairBench, url string) {
	t.Helper()
	m, err := mock.Start(mock.Config{MinOutput: 2, MaxOutput: 2, Speedup: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	ks, err := tenant.Parse(strings.NewReader(keyFile))
	require.NoError(t, err)
	cfg.Gateway.Keys = tenant.NewSet(ks)
	s, srv := testStack(t, cfg, WorkerSpec{URL: m.URL(), Tokenizer: m})
	return s, m, &fairBench{model: m.Model(), fair: srv, client: NewHTTPClient()}, srv.URL
}
