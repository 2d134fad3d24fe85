package admission

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestThunderSerializesSession: a program runs one turn at a time behind
// the Policy surface; its later requests wait in arrival order and start,
// one by one, as each turn ends; one withdrawn while waiting never runs.
func TestThunderSerializesSession(t *testing.T) {
	th, err := NewThunder(Config{})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	ws := []PolicyWorker{{ID: 1, Capacity: 100_000}}
	req := func(id string) Request {
		return Request{ID: id, Program: "p", ContextTokens: 1_000, At: now, Workers: ws}
	}
	require.Equal(t, Ready, th.Admit(req("a")))
	require.Equal(t, Defer, th.Admit(req("b")))
	require.Equal(t, Defer, th.Admit(req("c")))
	require.Equal(t, Defer, th.Admit(req("d")))
	require.Equal(t, Bypass, th.Admit(Request{ID: "x", At: now, Workers: ws}), "no program")
	require.Empty(t, th.OnEvent(Event{Kind: Dispatched, ID: "a", Worker: 1, At: now}, nil))
	require.Empty(t, th.OnEvent(Event{Kind: Aborted, ID: "c", At: now}, nil), "withdrawn while waiting")
	require.Equal(t, []string{"b"}, th.OnEvent(Event{Kind: Completed, ID: "a", ContextTokens: 1_100, At: now}, nil))
	p, ok := th.Controller().Program(now, "p")
	require.True(t, ok)
	require.Equal(t, 1, p.Inflight, "one turn in the controller at a time")
	require.Equal(t, []string{"d"}, th.OnEvent(Event{Kind: Completed, ID: "b", ContextTokens: 1_200, At: now}, nil))
	require.Empty(t, th.OnEvent(Event{Kind: Completed, ID: "d", ContextTokens: 1_300, Final: true, At: now}, nil))
	require.Zero(t, th.Controller().Len(), "the final turn ended the program")
	require.Empty(t, th.inflight)
	require.Empty(t, th.serial)
	require.Empty(t, th.program)
}

// TestThunderDefersAtTheDoor: a program that does not fit is deferred in
// the controller; withdrawing it cancels its turn there, and a Reconcile
// after the room frees wakes the next one; a worker missing from the
// host's list is removed.
func TestThunderDefersAtTheDoor(t *testing.T) {
	th, err := NewThunder(Config{})
	require.NoError(t, err)
	now := time.Unix(1000, 0)
	ws := []PolicyWorker{{ID: 1, Capacity: 10_000}}
	require.Equal(t, Ready, th.Admit(Request{ID: "a", Program: "A", ContextTokens: 8_000, At: now, Workers: ws}))
	require.Equal(t, Defer, th.Admit(Request{ID: "b", Program: "B", ContextTokens: 2_000, At: now, Workers: ws}))
	require.Equal(t, Defer, th.Admit(Request{ID: "c", Program: "C", ContextTokens: 2_000, At: now, Workers: ws}))
	require.Empty(t, th.OnEvent(Event{Kind: Aborted, ID: "b", At: now}, nil))
	require.Equal(t, 1, th.Controller().Waiting(), "only C's turn is held")
	require.Empty(t, th.OnEvent(Event{Kind: Completed, ID: "a", ContextTokens: 8_100, Final: true, At: now}, nil))
	require.Equal(t, []string{"c"}, th.OnEvent(Event{Kind: Reconcile, At: now, Workers: ws}, nil))
	th.OnEvent(Event{Kind: Reconcile, At: now, Workers: nil}, nil)
	require.Empty(t, th.Controller().Workers(nil))

	_, err = NewThunder(Config{OnDecision: func(Decision) {}})
	require.Error(t, err)
}
