package agentkv

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// refLB is the naive reference model of GlobalLB: VERL's balancer as its
// Python reads, a list of (session, worker) pairs in recency order with a
// linear scan, the fewest in flight by a scan that keeps the first minimum.
type refLB struct {
	max   int
	pairs []stickyEntry // most recent last
}

func (m *refLB) pick(session string, workers []flashindex.Worker, inflight []int) int {
	if session != "" {
		for i, p := range m.pairs {
			if p.session != session {
				continue
			}
			m.pairs = append(slices.Delete(m.pairs, i, i+1), p) // touch
			if k := slices.Index(workers, p.worker); k >= 0 {
				return k
			}
			break
		}
	}
	best := 0
	for i := range workers {
		if inflight[i] < inflight[best] {
			best = i
		}
	}
	if session != "" {
		m.pairs = slices.DeleteFunc(m.pairs, func(p stickyEntry) bool { return p.session == session })
		m.pairs = append(m.pairs, stickyEntry{session: session, worker: workers[best]})
		if len(m.pairs) > m.max {
			m.pairs = m.pairs[len(m.pairs)-m.max:]
		}
	}
	return best
}

// TestStickyLBMatchesReference drives stickyLB and the reference model with
// the same random picks (sessions re-used, the LRU overflowing, workers
// leaving the candidate set, ties in flight) and requires the same answers
// and the same remembered sessions.
func TestStickyLBMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			size := 1 + rng.IntN(8)
			s, m := newStickyLB(size), &refLB{max: size}
			all := []flashindex.Worker{{ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 2, DPRank: 1}}
			for op := range 2000 {
				var workers []flashindex.Worker
				for _, w := range all {
					if rng.IntN(5) > 0 {
						workers = append(workers, w)
					}
				}
				if len(workers) == 0 {
					workers = all[:1]
				}
				inflight := make([]int, len(workers))
				for i := range inflight {
					inflight[i] = rng.IntN(3) // small: many ties
				}
				sess := ""
				if rng.IntN(6) > 0 {
					sess = fmt.Sprint("s", rng.IntN(3*size))
				}
				got, want := s.pick(sess, workers, inflight), m.pick(sess, workers, inflight)
				require.Equal(t, want, got, "op %d session %q", op, sess)
				require.Equal(t, len(m.pairs), s.len())
				for _, p := range m.pairs {
					e, ok := s.m[p.session]
					require.True(t, ok, "op %d: %q forgotten", op, p.session)
					require.Equal(t, p.worker, e.Value.(*stickyEntry).worker)
				}
			}
		})
	}
}

func TestStickyLBEvictsLeastRecentlyUsed(t *testing.T) {
	s := newStickyLB(2)
	ws := []flashindex.Worker{{ID: 1}, {ID: 2}}
	require.Equal(t, 0, s.pick("a", ws, []int{0, 0})) // tie: the first
	require.Equal(t, 1, s.pick("b", ws, []int{1, 0}))
	require.Equal(t, 0, s.pick("a", ws, []int{5, 0})) // sticky despite load; a is now the most recent
	require.Equal(t, 1, s.pick("c", ws, []int{1, 0})) // evicts b
	_, ok := s.get("b")
	require.False(t, ok)
	w, ok := s.get("a")
	require.True(t, ok)
	require.Equal(t, ws[0], w)
	require.Equal(t, 0, s.pick("b", ws, []int{0, 3}), "b forgotten: fewest in flight again")
	require.Equal(t, 2, s.len())
}

// TestGlobalLBRoutes runs the policy through the Router: new sessions
// spread to the fewest requests in flight (ties to the worker added
// first), a session stays on its worker while another is emptier, a
// request without a session only balances, and a removed worker's
// sessions move.
func TestGlobalLBRoutes(t *testing.T) {
	r, _ := newTestRouter(t, Config{Policy: GlobalLB}, 1, 2, 3)
	route := func(sess string) *Decision {
		t.Helper()
		d, err := r.TryRoute(&Request{Tokens: tokens(16, 1), Agent: session.AgentContext{SessionID: sess}})
		require.NoError(t, err)
		return d
	}
	a, b, c := route("a"), route("b"), route("c")
	require.Equal(t, []uint64{1, 2, 3}, []uint64{a.Worker.ID, b.Worker.ID, c.Worker.ID})
	b.Done(Usage{})
	c.Done(Usage{})
	// Worker 1 has one in flight, 2 and 3 none: a stays on 1.
	a2 := route("a")
	require.Equal(t, uint64(1), a2.Worker.ID)
	// No session: the fewest in flight, the first of the tie.
	n := route("")
	require.Equal(t, uint64(2), n.Worker.ID)
	d := route("d")
	require.Equal(t, uint64(3), d.Worker.ID)
	r.RemoveWorker(1)
	a3 := route("a")
	require.NotEqual(t, uint64(1), a3.Worker.ID)
	a4 := route("a")
	require.Equal(t, a3.Worker.ID, a4.Worker.ID, "re-bound where it moved")
	p, err := ParsePolicy("global-lb")
	require.NoError(t, err)
	require.Equal(t, GlobalLB, p)
	require.Equal(t, "global-lb", p.String())
}
