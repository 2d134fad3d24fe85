package agentkv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/session"
)

// blocks returns n raw block ids of content c (c<<20 | i).
func blocks(c uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = c<<20 | uint64(i)
	}
	return out
}

func cat(parts ...[]uint64) []uint64 {
	var out []uint64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// chained turns raw block ids into prefix-chained sequence hashes.
func chained(ids []uint64) []uint64 {
	out := make([]uint64, len(ids))
	h := uint64(0x9e3779b97f4a7c15)
	for i, id := range ids {
		h = mix64(h ^ mix64(id+0x632be59bd9b4e019))
		out[i] = h
	}
	return out
}

func TestInferRules(t *testing.T) {
	in, err := NewInferrer(InferConfig{TailTokens: 4}, 1) // a 4-block tail
	require.NoError(t, err)
	sys := blocks(1, 20)
	a1 := cat(sys, blocks(2, 5))
	step := func(name string, ids []uint64, scope string, kind InferKind, id, parent string) {
		t.Helper()
		got := in.Infer(chained(ids), scope)
		require.Equal(t, kind, got.Kind, name)
		require.Equal(t, id, got.Agent.SessionID, name)
		require.Equal(t, parent, got.Agent.ParentSessionID, name)
		if kind != InferNone {
			require.True(t, got.Agent.Inferred, name)
			require.Equal(t, session.HarnessInferred, got.Agent.Harness, name)
			in.End(id)
		}
	}
	s1, s2, s3, s4 := InferredPrefix+"1", InferredPrefix+"2", InferredPrefix+"3", InferredPrefix+"4"
	step("a opens", a1, "", InferOpened, s1, "")
	a2 := cat(a1, blocks(3, 6))
	step("a's next turn extends it", a2, "", InferJoined, s1, "")
	step("another task, same system prompt", cat(sys, blocks(4, 5)), "", InferOpened, s2, "")
	step("a third: the prompt is shared by two sessions now", cat(sys, blocks(5, 5)), "", InferOpened, s3, "")
	step("the shared prefix alone never joins", sys, "", InferNone, "", "")
	step("the shared prefix and new blocks never join", cat(sys, blocks(6, 1)), "", InferOpened, s4, "")
	a3 := cat(a2[:len(a2)-3], blocks(7, 8))
	step("a rewrites its last 3 blocks: still a", a3, "", InferJoined, s1, "")
	fork := cat(a3[:31], blocks(8, 4))
	step("branching off a beyond its first prompt: a fork of a", fork, "", InferForked, InferredPrefix+"5", s1)
	step("a continues", cat(a3, blocks(9, 2)), "", InferJoined, s1, "")
	step("a resend of part of a's own context is a", a3[:33], "", InferJoined, s1, "")
	step("a resend of context a and its fork share is neither", a1, "", InferNone, "", "")
	step("another client cannot join a", cat(a3, blocks(9, 3)), "other", InferOpened, InferredPrefix+"6", "")
}

// A rewrite of a session's tail is its next turn, never a sibling that
// arrives while the session's first request runs.
func TestInferParallelSiblings(t *testing.T) {
	in, err := NewInferrer(InferConfig{TailTokens: 8, ScopeParent: true}, 1)
	require.NoError(t, err)
	root := in.Infer(chained(blocks(1, 30)), "client")
	in.End(root.Agent.SessionID)
	explore := blocks(2, 20) // the subagents' own system prompt
	var ids []string
	for i := range 3 {
		got := in.Infer(chained(cat(explore, blocks(uint64(10+i), 2))), "client")
		require.Equal(t, InferOpened, got.Kind)
		require.Equal(t, root.Agent.SessionID, got.Agent.ParentSessionID, "the client's root is the parent")
		ids = append(ids, got.Agent.SessionID)
	}
	require.Len(t, slices.Compact(slices.Clone(ids)), 3, "three siblings, not one session")
}

// A stream of new sessions on one system prompt, each sent after the
// previous one ended, joins the first at most once: then the prefix is
// known to be shared.
func TestInferStreamOnOneSystemPrompt(t *testing.T) {
	in, err := NewInferrer(InferConfig{}, 16)
	require.NoError(t, err)
	sys := blocks(1, 8)
	ids := map[string]bool{}
	for i := range 100 {
		got := in.Infer(chained(cat(sys, blocks(uint64(10+i), 8))), "")
		ids[got.Agent.SessionID] = true
		in.End(got.Agent.SessionID)
	}
	require.GreaterOrEqual(t, len(ids), 99)
}

func TestInferBounded(t *testing.T) {
	in, err := NewInferrer(InferConfig{MaxSessions: 16}, 1)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		got := in.Infer(chained(blocks(rng.Uint64()>>24, 3)), fmt.Sprint(rng.IntN(100)))
		require.Equal(t, InferOpened, got.Kind)
	}
	require.LessOrEqual(t, in.Len(), 16)
	require.LessOrEqual(t, len(in.byScope), 16)
}

// naiveInfer is the reference model: every session's frontiers as plain
// chains, every query a scan.
type naiveInfer struct {
	cfg     InferConfig
	sess    map[string]*naiveSess
	order   []string
	byScope map[string]string
	popular map[uint64]bool
	next    int
}

type naiveSess struct {
	opening, base, flight int
	scope, parent         string
	fronts                [][]uint64 // least recent first
}

func lcp(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func (m *naiveInfer) infer(chain []uint64, scope string) Inference {
	j := 0
	for _, s := range m.sess {
		for _, f := range s.fronts {
			j = max(j, lcp(f, chain))
		}
	}
	joinable := func(id string, d int) *naiveSess {
		s := m.sess[id]
		if s == nil || s.scope != scope || d <= s.base || m.popular[chain[d-1]] {
			return nil
		}
		return s
	}
	// Frontiers on the path, deepest first; owners at j.
	onID, on := "", 0
	owners := map[string]int{}
	for _, id := range m.order {
		s := m.sess[id]
		if s == nil {
			continue
		}
		for _, f := range s.fronts {
			if len(f) <= j && lcp(f, chain) == len(f) && len(f) > on && joinable(id, len(f)) != nil {
				onID, on = id, len(f)
			}
			if j > 0 && len(f) >= j && lcp(f, chain) >= j {
				owners[id] = max(owners[id], len(f))
			}
		}
	}
	tail := m.cfg.TailTokens
	if j > on && len(owners) == 1 {
		for id, deepest := range owners {
			if u := joinable(id, j); u != nil {
				if u.flight == 0 && (deepest-j <= tail || j == len(chain)) {
					u.base = max(u.base, j)
					return m.join(id, chain, j)
				}
				if j >= u.opening {
					return m.open(chain, j, scope, id, InferForked)
				}
			}
		}
	}
	if onID != "" {
		if j == on {
			return m.join(onID, chain, j)
		}
		return m.open(chain, j, scope, onID, InferForked)
	}
	if j == len(chain) {
		return Inference{Depth: j}
	}
	if j > 0 {
		m.popular[chain[j-1]] = true
	}
	parent := ""
	if m.cfg.ScopeParent && scope != "" {
		parent = m.byScope[scope]
	}
	return m.open(chain, j, scope, parent, InferOpened)
}

func (m *naiveInfer) record(s *naiveSess, chain []uint64) {
	for i, f := range s.fronts {
		if lcp(f, chain) == len(f) || lcp(f, chain) == len(chain) {
			if len(chain) > len(f) {
				f = slices.Clone(chain)
			}
			s.fronts = append(append(s.fronts[:i:i], s.fronts[i+1:]...), f)
			return
		}
	}
	s.fronts = append(s.fronts, slices.Clone(chain))
	if len(s.fronts) > 4 {
		s.fronts = s.fronts[1:]
	}
}

func (m *naiveInfer) join(id string, chain []uint64, j int) Inference {
	s := m.sess[id]
	if s.parent == "" {
		m.byScope[s.scope] = id
	}
	s.flight++
	m.record(s, chain)
	return Inference{Agent: session.AgentContext{SessionID: id, ParentSessionID: s.parent, Harness: session.HarnessInferred, Inferred: true},
		Kind: InferJoined, Depth: j}
}

func (m *naiveInfer) open(chain []uint64, j int, scope, parent string, kind InferKind) Inference {
	m.next++
	id := fmt.Sprintf("%s%d", InferredPrefix, m.next)
	s := &naiveSess{opening: len(chain), base: j, scope: scope, parent: parent, flight: 1}
	m.sess[id] = s
	m.order = append(m.order, id)
	if parent == "" {
		m.byScope[scope] = id
	}
	m.record(s, chain)
	return Inference{Agent: session.AgentContext{SessionID: id, ParentSessionID: parent, Harness: session.HarnessInferred, Inferred: true},
		Kind: kind, Depth: j}
}

// The Inferrer (radix tree, bounded queries) decides as the naive model
// does on random agent workloads: sessions that open on one of a few
// system prompts, extend, rewrite their tails, fork, and end their
// requests at random, from two clients.
func TestInferMatchesNaiveModel(t *testing.T) {
	var kinds [4]int
	defer func() {
		for k, n := range kinds {
			if n == 0 {
				t.Errorf("no %v inference in the workloads", InferKind(k))
			}
		}
	}()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		cfg := InferConfig{TailTokens: 3, ScopeParent: seed%2 == 0}
		in, err := NewInferrer(cfg, 1)
		require.NoError(t, err)
		m := &naiveInfer{cfg: cfg, sess: map[string]*naiveSess{}, byScope: map[string]string{}, popular: map[uint64]bool{}}
		type live struct {
			ids   []uint64
			scope string
		}
		var lives []live
		content := uint64(100)
		fresh := func(n int) []uint64 { content++; return blocks(content, n) }
		var inflight []string
		for step := range 300 {
			var ids []uint64
			scope := fmt.Sprint(rng.IntN(2))
			switch k := rng.IntN(11); {
			case k < 3 || len(lives) == 0: // open on a system prompt
				ids = cat(blocks(uint64(rng.IntN(3)+1), 6), fresh(1+rng.IntN(4)))
			case k < 7: // extend a live context
				l := &lives[rng.IntN(len(lives))]
				ids, scope = cat(l.ids, fresh(1+rng.IntN(4))), l.scope
			case k < 9: // rewrite a tail
				l := &lives[rng.IntN(len(lives))]
				cut := max(1, len(l.ids)-rng.IntN(5))
				ids, scope = cat(l.ids[:cut], fresh(1+rng.IntN(3))), l.scope
			case k < 10: // branch anywhere
				l := &lives[rng.IntN(len(lives))]
				ids, scope = cat(l.ids[:1+rng.IntN(len(l.ids))], fresh(2)), l.scope
			default: // resend a prefix of a live context
				l := &lives[rng.IntN(len(lives))]
				ids, scope = l.ids[:1+rng.IntN(len(l.ids))], l.scope
			}
			chain := chained(ids)
			got, want := in.Infer(chain, scope), m.infer(chain, scope)
			require.Equal(t, want, got, "seed %d step %d", seed, step)
			kinds[got.Kind]++
			if got.Kind != InferNone {
				lives = append(lives, live{ids, scope})
				inflight = append(inflight, got.Agent.SessionID)
			}
			for len(inflight) > 0 && rng.IntN(3) > 0 {
				i := rng.IntN(len(inflight))
				id := inflight[i]
				inflight = append(inflight[:i], inflight[i+1:]...)
				in.End(id)
				if s := m.sess[id]; s != nil && s.flight > 0 {
					s.flight--
				}
			}
		}
	}
}

// FuzzInfer drives an Inferrer and the naive model with the same
// prompts, scopes and ends: they decide alike, and nothing panics.
func FuzzInfer(f *testing.F) {
	f.Add([]byte{0, 6, 1, 1, 1, 1, 2, 3, 0, 8, 1, 1, 1, 1, 2, 3, 4, 5, 2, 0, 1, 7, 1, 1, 1, 1, 9, 9, 9})
	f.Add([]byte{1, 4, 1, 2, 3, 4, 1, 4, 1, 2, 3, 5, 2, 1, 0, 3, 1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := InferConfig{TailTokens: 2, ScopeParent: len(data)%2 == 0}
		in, err := NewInferrer(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		m := &naiveInfer{cfg: cfg, sess: map[string]*naiveSess{}, byScope: map[string]string{}, popular: map[uint64]bool{}}
		var ids []string
		for len(data) >= 2 {
			op, n := data[0], int(data[1]%16)
			data = data[2:]
			n = min(n, len(data))
			ids0 := make([]uint64, n)
			for i := range ids0 {
				ids0[i] = uint64(data[i] % 8)
			}
			data = data[n:]
			switch op % 3 {
			case 2: // end a request
				if len(ids) > 0 {
					id := ids[n%len(ids)]
					in.End(id)
					if s := m.sess[id]; s != nil && s.flight > 0 {
						s.flight--
					}
				}
			default:
				chain, scope := chained(ids0), fmt.Sprint(op%2)
				got, want := in.Infer(chain, scope), m.infer(chain, scope)
				if got != want {
					t.Fatalf("Infer(%v, %q) = %+v, model %+v", ids0, scope, got, want)
				}
				if got.Kind != InferNone {
					ids = append(ids, got.Agent.SessionID)
				}
			}
		}
	})
}
