package agentkv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/session"
)

// recorder wraps a Policy and records the events the router reports.
type recorder struct {
	admission.Policy
	events []admission.Event
}

func (p *recorder) OnEvent(ev admission.Event, wake []string) []string {
	rec := ev
	rec.Workers = nil // valid only during the call
	p.events = append(p.events, rec)
	return p.Policy.OnEvent(ev, wake)
}

func (p *recorder) kinds(id string) []admission.EventKind {
	var out []admission.EventKind
	for _, ev := range p.events {
		if ev.ID == id {
			out = append(out, ev.Kind)
		}
	}
	return out
}

func turn(id, sessionID string, n int, final bool) *Request {
	return &Request{ID: id, Tokens: tokens(n, uint32(len(sessionID))), Agent: session.AgentContext{SessionID: sessionID, Final: final}}
}

// TestAdmissionPolicyThunder: ThunderAgent's policy behind the Policy
// surface, through the Router: a program that does not fit is deferred,
// the first program's end and the next Reconcile wake it, and the router
// reports Dispatched (with the worker) and Completed (with the context).
func TestAdmissionPolicyThunder(t *testing.T) {
	th, err := admission.NewThunder(admission.Config{})
	require.NoError(t, err)
	pol := &recorder{Policy: th}
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, AdmissionPolicy: pol})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(7, 10_000)))

	a, err := r.TryRoute(turn("a", "A", 8_000, true))
	require.NoError(t, err)
	_, err = r.TryRoute(turn("b", "B", 2_000, false))
	require.ErrorIs(t, err, ErrHeld, "8,100 + 2,100 > the 8,500 resume ceiling")
	require.Equal(t, 1, th.Controller().Waiting(), "B waits at the door")

	a.Done(Usage{PromptTokens: 8_000, CompletionTokens: 100})
	require.Equal(t, []admission.EventKind{admission.Dispatched, admission.Completed}, pol.kinds("a"))
	require.Equal(t, int64(8_100), pol.events[1].ContextTokens)
	require.True(t, pol.events[1].Final)
	res := r.Tick()
	require.Equal(t, []string{"b"}, res.Released, "the Reconcile resumes B into A's room")
	b, err := r.TryRoute(turn("b", "B", 2_000, false))
	require.NoError(t, err)
	require.Equal(t, uint64(7), b.Worker.ID)
	require.Equal(t, admission.Dispatched, pol.kinds("b")[0])
	b.Done(Usage{PromptTokens: 2_000, CompletionTokens: 10, Failed: true})
	require.Equal(t, admission.Aborted, pol.kinds("b")[1], "a failed request is aborted")
}

// TestAdmissionPolicyAborts: a deferred request withdrawn (Cancel), one
// refused for MaxHeld, and one released but never retried (HeldTTL) are
// each reported Aborted; Bypass requests are not reported at all.
func TestAdmissionPolicyAborts(t *testing.T) {
	pol := &recorder{Policy: &capOne{}}
	clk := newFakeClock()
	r, err := New(Config{BlockSize: testBS, Now: clk.Now, AdmissionPolicy: pol, MaxHeld: 1})
	require.NoError(t, err)
	require.NoError(t, r.AddWorker(worker(1, 1<<20)))

	free, err := r.TryRoute(&Request{ID: "free", Tokens: tokens(64, 9)})
	require.NoError(t, err, "no program: Bypass")
	first, err := r.TryRoute(turn("first", "S", 64, false))
	require.NoError(t, err)
	_, err = r.TryRoute(turn("held", "T", 64, false))
	require.ErrorIs(t, err, ErrHeld)
	_, err = r.TryRoute(turn("over", "U", 64, false))
	require.ErrorIs(t, err, ErrTooManyHeld)
	require.Equal(t, []admission.EventKind{admission.Aborted}, pol.kinds("over"))
	r.Cancel("held")
	require.Equal(t, []admission.EventKind{admission.Aborted}, pol.kinds("held"))

	_, err = r.TryRoute(turn("late", "V", 64, false))
	require.ErrorIs(t, err, ErrHeld)
	first.Done(Usage{PromptTokens: 64})
	free.Done(Usage{PromptTokens: 64})
	require.Empty(t, pol.kinds("free"))
	clk.Advance(r.cfg.HeldTTL)
	res := r.Tick()
	require.Equal(t, 1, res.ExpiredHeld)
	require.Equal(t, []admission.EventKind{admission.Aborted}, pol.kinds("late"), "released, never retried")
}

// capOne runs one request with a program at a time; others bypass.
type capOne struct {
	running string
	queue   []string
}

func (p *capOne) Admit(req admission.Request) admission.Verdict {
	switch {
	case req.Program == "":
		return admission.Bypass
	case p.running == "":
		p.running = req.ID
		return admission.Ready
	}
	p.queue = append(p.queue, req.ID)
	return admission.Defer
}

func (p *capOne) OnEvent(ev admission.Event, wake []string) []string {
	if ev.Kind == admission.Completed || ev.Kind == admission.Aborted {
		if p.running == ev.ID {
			p.running = ""
		}
		for i, id := range p.queue {
			if id == ev.ID {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	if p.running == "" && len(p.queue) > 0 {
		p.running, p.queue = p.queue[0], p.queue[1:]
		wake = append(wake, p.running)
	}
	return wake
}

func TestAdmissionPolicyExclusive(t *testing.T) {
	_, err := New(Config{BlockSize: testBS, Admission: &admission.Config{}, AdmissionPolicy: &capOne{}})
	require.Error(t, err)
}
