package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// admissionTenants is a stack with admission on, one mock worker and the
// keys in keyFile, with the helpers the tests below share.
type admissionTenants struct {
	t   *testing.T
	fb  *fairBench
	url string
	reg *prometheus.Registry
}

func newAdmissionTenants(t *testing.T, keyFile string) *admissionTenants {
	reg := prometheus.NewRegistry()
	_, _, fb, url := tenantStack(t, keyFile, StackConfig{Admission: true, Tick: 20 * time.Millisecond, Registry: reg})
	return &admissionTenants{t: t, fb: fb, url: url, reg: reg}
}

// waiting is admission's queue depth after its last tick.
func (a *admissionTenants) waiting() int {
	mfs, err := a.reg.Gather()
	require.NoError(a.t, err)
	for _, mf := range mfs {
		if mf.GetName() == "agentkv_admission_queue_depth" {
			return int(mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	return 0
}

// await polls ok until it holds (a minute at most: progress, not time,
// is what it waits for).
func (a *admissionTenants) await(what string, ok func() bool) {
	a.t.Helper()
	for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(2 * time.Millisecond) {
		require.True(a.t, time.Now().Before(deadline), "timed out waiting for %s", what)
	}
}

// start sends one turn of session in the background; the returned
// channel gets its status.
func (a *admissionTenants) start(key, session string) <-chan int {
	done := make(chan int, 1)
	go func() {
		_, code, _, err := a.fb.send(a.url, key, session, e2eWords(300, session+"-"))
		if err != nil {
			code = -1 // no reply, or a stream cut when its session was released
		}
		done <- code
	}()
	return done
}

// release ends session with key's tenant (POST /programs/release).
func (a *admissionTenants) release(key, session string) {
	req, _ := http.NewRequest(http.MethodPost, a.url+ReleasePath, strings.NewReader(fmt.Sprintf(`{"program_id":%q}`, session)))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := a.fb.client.Do(req)
	require.NoError(a.t, err)
	resp.Body.Close()
	require.Equal(a.t, http.StatusOK, resp.StatusCode)
}

// TestTenantAdmissionShare: with admission on, one tenant's sessions fill
// the worker and four more wait at the door; another tenant's new session,
// offered after them, is let in at the first room, while the rollout's
// stay waiting (the door shares by tenant weight, admission.Groups). A
// door in arrival order would let it in only after all four. Over real
// HTTP to a mock worker.
func TestTenantAdmissionShare(t *testing.T) {
	a := newAdmissionTenants(t, "chat "+keyChat+"\nrollout "+keyRL+"\n")
	var served atomic.Int64
	var doors []<-chan int // the rollout's sessions held at the door
	n := 0
	for ; a.waiting() < 4; n++ {
		require.Less(t, n, 500, "the rollout never filled the worker")
		before := a.waiting()
		done := a.start(keyRL, fmt.Sprint("r", n))
		a.await("the rollout session to run or wait", func() bool {
			select {
			case code := <-done:
				require.Equal(t, http.StatusOK, code)
				served.Add(1)
				return true
			default:
				if a.waiting() > before {
					doors = append(doors, done)
					return true
				}
				return false
			}
		})
	}
	defer func() {
		// End the sessions still at the door, and their requests.
		for i := range n {
			a.release(keyRL, fmt.Sprint("r", i))
		}
		for _, d := range doors {
			<-d
		}
	}()
	held := a.waiting()
	chat := a.start(keyChat, "c0")
	a.await("the chat session at the door", func() bool { return a.waiting() == held+1 })
	a.release(keyRL, "r0") // room for one program
	select {
	case code := <-chat:
		require.Equal(t, http.StatusOK, code)
	case <-time.After(time.Minute):
		t.Fatalf("the chat session was not let in (%d rollout sessions served, %d waiting)", served.Load(), a.waiting())
	}
	require.Positive(t, a.waiting(), "the chat went in ahead of the rollout's waiting sessions")
}

// TestTenantMaxPrograms: a tenant's max-programs keeps its third session
// at the door, not refused, while the worker has room, and lets it in
// when one of its programs is released; another tenant is not held.
func TestTenantMaxPrograms(t *testing.T) {
	a := newAdmissionTenants(t, "chat "+keyChat+"\nrollout "+keyRL+" max-programs=2\n")
	for _, s := range []string{"r0", "r1"} {
		require.Equal(t, http.StatusOK, <-a.start(keyRL, s))
	}
	third := a.start(keyRL, "r2")
	a.await("the third session at the door", func() bool { return a.waiting() == 1 })
	require.Equal(t, http.StatusOK, <-a.start(keyChat, "c0"), "another tenant is not held")
	select {
	case code := <-third:
		t.Fatalf("the third session ran past max-programs=2: %d", code)
	default:
	}
	a.release(keyRL, "r1")
	require.Equal(t, http.StatusOK, <-third)
}
