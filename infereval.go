package agentkv

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/agentkv/agentkv/trace"
)

// InferEval compares the sessions an Inferrer infers for a workload's
// requests, with every session id removed, against the workload's true
// sessions.
type InferEval struct {
	Requests         int // requests with block ids, inferred in arrival order
	TrueSessions     int
	InferredSessions int
	// Kinds counts the requests by how their session was inferred.
	Kinds [4]int
	// Precision and Recall are pairwise: of the request pairs put in one
	// inferred session, the share in one true session; of the pairs in
	// one true session, the share put in one inferred session.
	Precision, Recall float64
	// ParentCorrect is the share of true sessions whose inferred session
	// has the right parent (none for a root; for a subagent, the inferred
	// session of its true parent). Subagents and SubagentsCorrect count
	// the subagents alone.
	ParentCorrect               float64
	Subagents, SubagentsCorrect int
}

func (e InferEval) String() string {
	return fmt.Sprintf("requests %d, sessions %d true / %d inferred (joined %d, forked %d, opened %d, none %d); "+
		"pairwise precision %.3f, recall %.3f; parent links %.3f correct (subagents %d of %d)",
		e.Requests, e.TrueSessions, e.InferredSessions, e.Kinds[InferJoined], e.Kinds[InferForked], e.Kinds[InferOpened],
		e.Kinds[InferNone], e.Precision, e.Recall, e.ParentCorrect, e.SubagentsCorrect, e.Subagents)
}

// ChainOf returns the sequence hashes of a trace turn's full blocks
// (HashIDs cover a partial last block too, which is never routed): each
// hash commits to every block before it, so ids that are only local to a
// position still make a prefix-chained chain. dst is reused.
func ChainOf(t *trace.Turn, blockTokens int, dst []uint64) []uint64 {
	dst = dst[:0]
	if blockTokens <= 0 {
		return dst
	}
	n := min(t.InputTokens/blockTokens, len(t.HashIDs))
	h := uint64(0x9e3779b97f4a7c15)
	for _, id := range t.HashIDs[:n] {
		h = mix64(h ^ mix64(id+0x632be59bd9b4e019))
		dst = append(dst, h)
	}
	return dst
}

// mix64 is splitmix64's finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// EvalInference replays w's requests in nominal arrival order
// (trace.Schedule) through a fresh Inferrer with cfg, each request's
// client scope being its root session (in a Claude Code trace, the file:
// one client's session and its subagents), and scores the inferred
// sessions against the true ones.
func EvalInference(w *trace.Workload, cfg InferConfig) (InferEval, error) {
	var ev InferEval
	plan, err := trace.Schedule(w, trace.TimingModel{})
	if err != nil {
		return ev, err
	}
	in, err := NewInferrer(cfg, max(w.BlockTokens, 1))
	if err != nil {
		return ev, err
	}
	idx := make(map[string]int, len(w.Sessions))
	for i := range w.Sessions {
		idx[w.Sessions[i].ID] = i
	}
	root := func(i int) int {
		for d := 0; w.Sessions[i].Parent != "" && d < 64; d++ {
			i = idx[w.Sessions[i].Parent]
		}
		return i
	}
	type req struct{ s, t int }
	var reqs []req
	for i := range w.Sessions {
		for j := range w.Sessions[i].Turns {
			if len(w.Sessions[i].Turns[j].HashIDs) > 0 {
				reqs = append(reqs, req{i, j})
			}
		}
	}
	slices.SortStableFunc(reqs, func(a, b req) int {
		return cmp.Compare(plan.Turns[a.s][a.t].Arrival, plan.Turns[b.s][b.t].Arrival)
	})
	// Request ends, in time order, reach the Inferrer before any later
	// arrival (as Decision.Done reaches the router's).
	ends := make([]int, len(reqs))
	for k := range ends {
		ends[k] = k
	}
	endAt := func(k int) time.Duration { return plan.Turns[reqs[k].s][reqs[k].t].End }
	slices.SortStableFunc(ends, func(a, b int) int { return cmp.Compare(endAt(a), endAt(b)) })
	got := make([]string, len(reqs))
	parentOf := map[string]string{}
	var chain []uint64
	e := 0
	for k, r := range reqs {
		for ; e < len(ends) && ends[e] < k && endAt(ends[e]) <= plan.Turns[r.s][r.t].Arrival; e++ {
			in.End(got[ends[e]])
		}
		chain = ChainOf(&w.Sessions[r.s].Turns[r.t], w.BlockTokens, chain)
		inf := in.Infer(chain, w.Sessions[root(r.s)].ID)
		ev.Kinds[inf.Kind]++
		got[k] = inf.Agent.SessionID
		if inf.Kind == InferNone {
			got[k] = fmt.Sprintf("none/%d", k) // an isolated request
		} else if _, ok := parentOf[got[k]]; !ok {
			parentOf[got[k]] = inf.Agent.ParentSessionID
		}
	}
	ev.Requests = len(reqs)
	// Pairwise scores from the contingency table.
	type cell struct {
		t int
		g string
	}
	cells := map[cell]int{}
	trueN := map[int]int{}
	gotN := map[string]int{}
	for k, r := range reqs {
		cells[cell{r.s, got[k]}]++
		trueN[r.s]++
		gotN[got[k]]++
	}
	pairs := func(n int) float64 { return float64(n) * float64(n-1) / 2 }
	var tp, tpairs, gpairs float64
	for _, n := range cells {
		tp += pairs(n)
	}
	for _, n := range trueN {
		tpairs += pairs(n)
	}
	for _, n := range gotN {
		gpairs += pairs(n)
	}
	ev.Precision, ev.Recall = 1, 1
	if gpairs > 0 {
		ev.Precision = tp / gpairs
	}
	if tpairs > 0 {
		ev.Recall = tp / tpairs
	}
	ev.TrueSessions, ev.InferredSessions = len(trueN), len(parentOf)
	// Each true session's inferred session is the one most of its
	// requests got; each inferred session's true one likewise.
	best := func(counts map[string]int) string {
		var id string
		n := 0
		for g, c := range counts {
			if c > n || c == n && g < id {
				id, n = g, c
			}
		}
		return id
	}
	byTrue := map[int]map[string]int{}
	byGot := map[string]map[int]int{}
	for c, n := range cells {
		if byTrue[c.t] == nil {
			byTrue[c.t] = map[string]int{}
		}
		byTrue[c.t][c.g] += n
		if byGot[c.g] == nil {
			byGot[c.g] = map[int]int{}
		}
		byGot[c.g][c.t] += n
	}
	trueOf := func(g string) int {
		t, n := -1, 0
		for s, c := range byGot[g] {
			if c > n || c == n && s < t {
				t, n = s, c
			}
		}
		return t
	}
	correct := 0
	for s := range trueN {
		g := best(byTrue[s])
		p := parentOf[g]
		want := w.Sessions[s].Parent
		ok := false
		if want == "" {
			ok = p == ""
		} else {
			ev.Subagents++
			ok = p != "" && trueOf(p) == idx[want]
			if ok {
				ev.SubagentsCorrect++
			}
		}
		if ok {
			correct++
		}
	}
	if len(trueN) > 0 {
		ev.ParentCorrect = float64(correct) / float64(len(trueN))
	}
	return ev, nil
}
