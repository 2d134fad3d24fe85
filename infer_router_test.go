package agentkv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/session"
)

// A client that names no session (Pi's openai-completions path) gets one
// inferred session for its turns: one worker, a cached later turn, one
// admission program, its lineage, and the route reason says so; a second
// client with the same system prompt gets a session of its own.
func TestRouterInfersSessions(t *testing.T) {
	r, _ := newTestRouter(t, Config{InferSessions: &InferConfig{}, Affinity: AffinitySoft, Admission: &admission.Config{}}, 1, 2)
	sys := tokens(64, 9)
	turn1 := append(append([]uint32(nil), sys...), tokens(16, 1)...)
	route := func(toks []uint32, client string) *Decision {
		t.Helper()
		d, err := r.Route(context.Background(), &Request{Tokens: toks, Client: client})
		require.NoError(t, err)
		d.Done(Usage{PromptTokens: len(toks), CompletionTokens: 4})
		return d
	}
	// A named session on the same system prompt makes it a known shared
	// prefix (with no other session holding it, a prompt that keeps the
	// only session's context but its last TailTokens would join it).
	named, err := r.Route(context.Background(), &Request{Tokens: append(append([]uint32(nil), sys...), tokens(8, 5)...),
		Agent: session.AgentContext{SessionID: "named"}})
	require.NoError(t, err)
	named.Done(Usage{})
	d1 := route(turn1, "")
	require.True(t, d1.agent.Inferred)
	require.Equal(t, session.HarnessInferred, d1.agent.Harness)
	id := d1.agent.SessionID
	turn2 := append(append([]uint32(nil), turn1...), tokens(24, 2)...)
	d2 := route(turn2, "")
	require.Equal(t, id, d2.agent.SessionID, "the next turn extends the session's context")
	require.Equal(t, d1.Worker, d2.Worker)
	require.Equal(t, RouteInferred, d2.Reason)
	require.Positive(t, d2.Cached.Device+d2.Cached.Host, "the approximate index holds turn 1's prefix")
	chain, err := r.tree.Lineage(id, nil)
	require.NoError(t, err)
	require.Len(t, chain, len(turn2)/testBS)
	info, ok := r.Sessions().Get(id)
	require.True(t, ok)
	require.True(t, info.Inferred)
	require.Equal(t, uint64(2), info.Requests)

	other := route(append(append([]uint32(nil), sys...), tokens(16, 3)...), "")
	require.NotEqual(t, id, other.agent.SessionID, "a shared system prompt does not join a session")

	// No client can name an inferred session.
	d, err := r.Route(context.Background(), &Request{Tokens: tokens(40, 4), Agent: session.AgentContext{SessionID: id}})
	require.NoError(t, err)
	require.NotEqual(t, id, d.agent.SessionID)
	d.Done(Usage{})
}

func TestRouteReasons(t *testing.T) {
	r, _ := newTestRouter(t, Config{Affinity: AffinitySoft}, 1, 2)
	ac := session.AgentContext{SessionID: "s"}
	route := func(req *Request) *Decision {
		t.Helper()
		d, err := r.Route(context.Background(), req)
		require.NoError(t, err)
		d.Done(Usage{})
		return d
	}
	require.Equal(t, RouteLoad, route(&Request{Tokens: tokens(32, 1)}).Reason, "nothing cached anywhere")
	require.Equal(t, RoutePrefix, route(&Request{Tokens: tokens(48, 1)}).Reason, "the first request's prefix")
	route(&Request{Tokens: tokens(32, 2), Agent: ac})
	require.Equal(t, RouteSession, route(&Request{Tokens: tokens(40, 2), Agent: ac}).Reason, "the binding")
	for k, want := range map[RouteReason]string{RouteLoad: "load", RoutePrefix: "prefix", RouteSession: "session", RouteInferred: "inferred", RouteHeld: "held"} {
		require.Equal(t, want, k.String())
	}
}

// A compaction restarts the session's lineage: the rewritten context is
// its only branch, and the session and its program go on.
func TestRouterCompaction(t *testing.T) {
	r, _ := newTestRouter(t, Config{Affinity: AffinitySoft}, 1)
	route := func(toks []uint32, ac session.AgentContext) {
		t.Helper()
		d, err := r.Route(context.Background(), &Request{Tokens: toks, Agent: ac})
		require.NoError(t, err)
		d.Done(Usage{})
	}
	route(tokens(64, 1), session.AgentContext{SessionID: "s", Window: 1})
	route(tokens(80, 1), session.AgentContext{SessionID: "s", Window: 1})
	route(tokens(16, 2), session.AgentContext{SessionID: "s", Window: 2}) // Codex opened a new window
	fr, err := r.tree.Frontiers("s", nil)
	require.NoError(t, err)
	require.Len(t, fr, 1, "the old branch is no longer the session's")
	require.Equal(t, 4, fr[0].Depth)
	route(tokens(8, 3), session.AgentContext{SessionID: "s", Compaction: true})
	fr, err = r.tree.Frontiers("s", nil)
	require.NoError(t, err)
	require.Len(t, fr, 1)
	require.Equal(t, 2, fr[0].Depth)
	info, _ := r.Sessions().Get("s")
	require.Equal(t, uint64(2), info.Compactions)
	require.Equal(t, uint64(4), info.Requests)
}
