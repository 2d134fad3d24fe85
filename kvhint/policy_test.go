package kvhint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"
)

// tree is a constructed set of sessions: each has a chain of blocks, and a
// child's chain starts with a prefix of its parent's (a subagent forked from
// it). Block hashes are equal exactly where chains share a prefix, as
// sequence hashes are.
type tree struct {
	nodes []*tnode
	next  uint64
}

type tnode struct {
	id       string
	parent   int // -1 for a root
	chain    []uint64
	fork     int // chain positions shared at creation (system prompt or fork point)
	finished bool
	worker   WorkerID
}

func (t *tree) fresh(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		t.next++
		out[i] = 0xb10c000000000000 | t.next
	}
	return out
}

// root adds a root session whose chain is prompt followed by n new blocks.
func (t *tree) root(id string, prompt []uint64, n int, w WorkerID) int {
	chain := append(append([]uint64(nil), prompt...), t.fresh(n)...)
	t.nodes = append(t.nodes, &tnode{id: id, parent: -1, chain: chain, fork: len(prompt), worker: w})
	return len(t.nodes) - 1
}

// fork adds a child of p that shares p's first at blocks and adds n new ones.
func (t *tree) fork(id string, p, at, n int) int {
	par := t.nodes[p]
	chain := append(append([]uint64(nil), par.chain[:at]...), t.fresh(n)...)
	t.nodes = append(t.nodes, &tnode{id: id, parent: p, chain: chain, fork: at, worker: par.worker})
	return len(t.nodes) - 1
}

// refs counts, for each block, the live sessions (plus self) whose chain
// holds it: the naive reference for SharedRefs.
func (t *tree) refs(self int) map[uint64]int32 {
	m := map[uint64]int32{}
	for i, n := range t.nodes {
		if n.finished && i != self {
			continue
		}
		for _, h := range n.chain {
			m[h]++
		}
	}
	return m
}

// session builds the Session view of node i the way a radix index would:
// Shared is the part of the chain shared at creation extended by any block
// still referenced by another live session; SharedRefs from live counts.
func (t *tree) session(i int) Session {
	n := t.nodes[i]
	refs := t.refs(i)
	k := n.fork
	for k < len(n.chain) && refs[n.chain[k]] >= 2 {
		k++
	}
	s := Session{ID: n.id, Shared: n.chain[:k], Unique: n.chain[k:], Finished: n.finished, Worker: n.worker}
	if n.parent >= 0 {
		s.Parent = t.nodes[n.parent].id
	}
	for _, h := range s.Shared {
		s.SharedRefs = append(s.SharedRefs, refs[h])
	}
	return s
}

func (t *tree) input(i int, ev Event) Input {
	in := Input{Event: ev, Session: t.session(i)}
	if p := t.nodes[i].parent; p >= 0 {
		ps := t.session(p)
		in.Parent = &ps
	}
	in.Prefix = t.nodes[i].chain
	return in
}

var (
	w1 = WorkerID{ID: 1}
	w2 = WorkerID{ID: 2}
	w3 = WorkerID{ID: 3}
	w4 = WorkerID{ID: 4, DPRank: 1}
)

// must unwraps a constructor's result; a config error is a bug in the test.
func must[P any](p P, err error) P {
	if err != nil {
		panic(err)
	}
	return p
}

// validHints names the hints with a Batcher and validates every envelope.
func validHints(t testing.TB, hints []Hint) {
	t.Helper()
	for _, ob := range NewBatcher("test").Batch(nil, hints) {
		if err := ob.Envelope.Validate(Bounds{}); err != nil {
			t.Fatalf("policy emitted an invalid hint: %v\n%+v", err, ob.Envelope)
		}
	}
}

func TestTailOffload(t *testing.T) {
	var tr tree
	prompt := tr.fresh(4)
	a := tr.root("a", prompt, 6, w1) // chain: 4 prompt + 6 own
	tr.root("b", prompt, 3, w1)      // shares the prompt
	p := must(NewTailOffload(TailOffloadConfig{After: time.Minute}))

	acting := func(d time.Duration) Input {
		in := tr.input(a, EventTick)
		in.Session.Phase, in.Session.Acting = PhaseActing, d
		return in
	}
	unique := tr.nodes[a].chain[4:]
	for _, tc := range []struct {
		name string
		in   func() Input
		want []Hint
	}{
		{"reasoning", func() Input { return tr.input(a, EventTick) }, nil},
		{"acting briefly", func() Input { return acting(59 * time.Second) }, nil},
		{"acting long, residency unknown: whole tail", func() Input { return acting(time.Minute) },
			[]Hint{{w1, Action{Kind: KindDemote, SessionID: "a", Dest: TierHost, Target: Target{Blocks: unique}}}}},
		{"acting long, 7 blocks on device: 3 of the tail", func() Input {
			in := acting(2 * time.Minute)
			in.Cached = []Residency{{Worker: w1, Device: 7, Host: 3}, {Worker: w2, Device: 10}}
			return in
		}, []Hint{{w1, Action{Kind: KindDemote, SessionID: "a", Dest: TierHost, Target: Target{Blocks: unique[:3]}}}}},
		{"already demoted", func() Input {
			in := acting(2 * time.Minute)
			in.Cached = []Residency{{Worker: w1, Device: 4, Host: 6}}
			return in
		}, nil},
		{"worker holds nothing", func() Input {
			in := acting(2 * time.Minute)
			in.Cached = []Residency{{Worker: w2, Device: 10}}
			return in
		}, nil},
		{"finished", func() Input { in := acting(time.Hour); in.Session.Finished = true; return in }, nil},
		{"admitted with tail on host: prefetch it", func() Input {
			in := tr.input(a, EventAdmit)
			in.Worker = w1
			in.Cached = []Residency{{Worker: w1, Device: 4, Host: 5, Disk: 1}}
			return in
		}, []Hint{{w1, Action{Kind: KindPrefetch, SessionID: "a", Dest: TierDevice, Target: Target{Blocks: unique}}}}},
		{"resumed, all on device", func() Input {
			in := tr.input(a, EventResume)
			in.Worker = w1
			in.Cached = []Residency{{Worker: w1, Device: 10}}
			return in
		}, nil},
		{"admitted elsewhere: nothing to prefetch there", func() Input {
			in := tr.input(a, EventAdmit)
			in.Worker = w2
			in.Cached = []Residency{{Worker: w1, Device: 4, Host: 6}}
			return in
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in()
			got := p.Evaluate(nil, &in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			validHints(t, got)
		})
	}

	// Long tails are split into MaxBlocks chunks that cover the tail in order.
	small := must(NewTailOffload(TailOffloadConfig{MaxBlocks: 4, Dest: TierDisk}))
	in := acting(time.Hour)
	got := small.Evaluate(nil, &in)
	var joined []uint64
	for _, h := range got {
		if h.Action.Dest != TierDisk || len(h.Action.Target.Blocks) > 4 {
			t.Fatalf("chunk %+v", h)
		}
		joined = append(joined, h.Action.Target.Blocks...)
	}
	if len(got) != 2 || !slices.Equal(joined, unique) {
		t.Fatalf("chunks %+v", got)
	}
	// Prefetch to host only lifts disk blocks.
	hp := must(NewTailOffload(TailOffloadConfig{PrefetchTo: TierHost}))
	in = tr.input(a, EventResume)
	in.Worker, in.Cached = w1, []Residency{{Worker: w1, Device: 4, Host: 4, Disk: 2}}
	if got := hp.Evaluate(nil, &in); len(got) != 1 || !slices.Equal(got[0].Action.Target.Blocks, unique[4:]) || got[0].Action.Dest != TierHost {
		t.Fatalf("prefetch to host: %+v", got)
	}
}

func TestPrefixPin(t *testing.T) {
	var tr tree
	system := tr.fresh(8)
	var ids []int
	for i := range 5 {
		ids = append(ids, tr.root(fmt.Sprint("s", i), system, 3, w1))
	}
	// Two subagents of s0 share s0's first 10 blocks (system + 2 own).
	tr.fork("s0.a", ids[0], 10, 4)
	tr.fork("s0.b", ids[0], 10, 2)
	p := must(NewPrefixPin(PrefixPinConfig{MinSessions: 4, TTL: 10 * time.Minute}))

	in := tr.input(ids[0], EventAdmit)
	in.Worker = w2
	got := p.Evaluate(nil, &in)
	want := []Hint{{w2, Action{Kind: KindPin, SessionID: "s0", TTL: 10 * time.Minute, Target: Target{Blocks: system}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	validHints(t, got)

	// The subagent's shared prefix is system (7 refs) + 2 blocks (3 refs):
	// only the system prompt reaches MinSessions.
	in = tr.input(len(tr.nodes)-1, EventResume)
	in.Worker = w1
	if got := p.Evaluate(nil, &in); len(got) != 1 || !slices.Equal(got[0].Action.Target.Blocks, system) {
		t.Fatalf("subagent: %+v (shared %d refs %v)", got, len(in.Session.Shared), in.Session.SharedRefs)
	}
	// Not on ticks; not when too few sessions share it.
	in.Event = EventTick
	if got := p.Evaluate(nil, &in); got != nil {
		t.Fatalf("tick: %+v", got)
	}
	strict := must(NewPrefixPin(PrefixPinConfig{MinSessions: 8}))
	in.Event = EventAdmit
	if got := strict.Evaluate(nil, &in); got != nil {
		t.Fatalf("MinSessions 8: %+v", got)
	}
	capped := must(NewPrefixPin(PrefixPinConfig{MaxBlocks: 3, MinBlocks: 2}))
	if got := capped.Evaluate(nil, &in); len(got) != 1 || !slices.Equal(got[0].Action.Target.Blocks, system[:3]) {
		t.Fatalf("MaxBlocks 3: %+v", got)
	}
	tooShort := must(NewPrefixPin(PrefixPinConfig{MinBlocks: 9}))
	if got := tooShort.Evaluate(nil, &in); got != nil {
		t.Fatalf("MinBlocks 9: %+v", got)
	}
}

// naiveShare is the reference for PeerShare: every eligible worker, sorted.
func naiveShare(cfg PeerShareConfig, in *Input) []Hint {
	own := 0
	for _, c := range in.Cached {
		if c.Worker == in.Worker {
			own = min(c.Device+c.Host, len(in.Prefix))
		}
	}
	type cand struct {
		c     Residency
		depth int
	}
	var cs []cand
	for _, c := range in.Cached {
		d := c.Device
		if cfg.SourceHost {
			d += c.Host
		}
		d = min(d, len(in.Prefix))
		if c.Worker != in.Worker && c.Endpoint != "" && d >= own+cfg.MinGain {
			cs = append(cs, cand{c, d})
		}
	}
	if len(cs) == 0 {
		return nil
	}
	sort.SliceStable(cs, func(i, j int) bool {
		if cs[i].depth != cs[j].depth {
			return cs[i].depth > cs[j].depth
		}
		return cs[i].c.Worker.Less(cs[j].c.Worker)
	})
	cs = cs[:min(len(cs), cfg.MaxSources)]
	n := min(cs[0].depth, cfg.MaxBlocks)
	var srcs []Source
	for _, c := range cs {
		tier := TierDevice
		if c.depth > c.c.Device {
			tier = TierHost
		}
		srcs = append(srcs, Source{Worker: c.c.Worker, Endpoint: c.c.Endpoint, Tier: tier, Blocks: uint32(min(c.depth, n))})
	}
	return []Hint{{in.Worker, Action{Kind: KindShare, SessionID: in.Session.ID, Dest: TierDevice, Target: Target{Blocks: in.Prefix[:n:n]}, Sources: srcs}}}
}

func TestPeerShare(t *testing.T) {
	prefix := []uint64{101, 102, 103, 104}
	// Dynamo's best_source cases: longest eligible prefix wins, the
	// selected worker and workers without an endpoint are excluded, ties go
	// to the smaller worker.
	p := must(NewPeerShare(PeerShareConfig{}))
	in := Input{Event: EventAdmit, Session: Session{ID: "s"}, Worker: w3, Prefix: prefix[:3], Cached: []Residency{
		{Worker: w2, Device: 2, Endpoint: "tcp://w2"},
		{Worker: w3, Device: 3, Endpoint: "tcp://w3"}, // the selected worker itself
		{Worker: w1, Device: 3, Endpoint: "tcp://w1"},
		{Worker: w4, Device: 3}, // no endpoint
	}}
	in.Cached[1].Device = 0
	got := p.Evaluate(nil, &in)
	want := []Hint{{w3, Action{Kind: KindShare, SessionID: "s", Dest: TierDevice, Target: Target{Blocks: prefix[:3]},
		Sources: []Source{{Worker: w1, Endpoint: "tcp://w1", Tier: TierDevice, Blocks: 3}}}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// A source must beat what the selected worker already has.
	in.Cached[1].Device = 3
	if got := p.Evaluate(nil, &in); got != nil {
		t.Fatalf("selected worker already has the prefix: %+v", got)
	}

	// Differential test against naiveShare on random placements.
	for seed := uint64(1); seed <= 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 17))
		cfg := PeerShareConfig{MinGain: 1 + r.IntN(3), MaxSources: 1 + r.IntN(4), SourceHost: r.IntN(2) == 0, MaxBlocks: []int{0, 5}[r.IntN(2)]}
		pol := must(NewPeerShare(cfg))
		cfg = pol.cfg // with defaults
		in := Input{Event: []Event{EventAdmit, EventResume}[r.IntN(2)], Session: Session{ID: "s"}, Prefix: randHashes(r, 1+r.IntN(20))}
		workers := 1 + r.IntN(8)
		in.Worker = WorkerID{ID: uint64(r.IntN(workers))}
		for w := range workers {
			if r.IntN(4) == 0 {
				continue
			}
			c := Residency{Worker: WorkerID{ID: uint64(w)}, Device: r.IntN(len(in.Prefix) + 3), Host: r.IntN(4)}
			if r.IntN(5) != 0 {
				c.Endpoint = fmt.Sprint("tcp://w", w)
			}
			in.Cached = append(in.Cached, c)
		}
		r.Shuffle(len(in.Cached), func(i, j int) { in.Cached[i], in.Cached[j] = in.Cached[j], in.Cached[i] })
		got, want := pol.Evaluate(nil, &in), naiveShare(cfg, &in)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d cfg %+v\ninput %+v\ngot  %+v\nwant %+v", seed, cfg, in, got, want)
		}
		validHints(t, got)
		// With a SourceBuf (holding another policy's sources first), the
		// same hints, their Sources built in it.
		buf := make([]Source, 1, 1+r.IntN(3))
		in.SourceBuf = &buf
		got = pol.Evaluate(nil, &in)
		if !reflect.DeepEqual(got, want) || buf[0] != (Source{}) {
			t.Fatalf("seed %d with SourceBuf: got %+v\nwant %+v", seed, got, want)
		}
		if len(got) == 1 && (len(buf) != 1+len(got[0].Action.Sources) || &buf[1] != &got[0].Action.Sources[0]) {
			t.Fatalf("seed %d: sources not built in SourceBuf (%d there)", seed, len(buf))
		}
	}
}

func TestFinishRelease(t *testing.T) {
	var tr tree
	system := tr.fresh(4)
	root := tr.root("root", system, 6, w1)
	other := tr.root("other", system, 2, w2)
	child := tr.fork("child", root, 7, 5) // shares system + 3 of root's blocks
	p := must(NewFinishRelease(FinishReleaseConfig{}))
	ev := func(i int) []Hint { in := tr.input(i, EventFinish); return p.Evaluate(nil, &in) }

	if got := ev(child); got != nil {
		t.Fatalf("live session released: %+v", got)
	}
	// The child finishes: only its own 5 blocks go; root still holds the rest.
	tr.nodes[child].finished = true
	want := []Hint{{w1, Action{Kind: KindRelease, SessionID: "child", Target: Target{Blocks: tr.nodes[child].chain[7:]}}}}
	if got := ev(child); !reflect.DeepEqual(got, want) {
		t.Fatalf("child: got %+v\nwant %+v", got, want)
	}
	// Root finishes after the child: its 6 own blocks, including the 3
	// it had shared with the (now finished) child; the system prompt stays
	// (other is live).
	tr.nodes[root].finished = true
	in := tr.input(root, EventFinish)
	in.Cached = []Residency{{Worker: w1, Device: 10}, {Worker: w2, Device: 4}, {Worker: w3, Device: 4, Host: 2}}
	got := p.Evaluate(nil, &in)
	own := tr.nodes[root].chain[4:]
	want = []Hint{
		{w1, Action{Kind: KindRelease, SessionID: "root", Target: Target{Blocks: own}}},
		{w3, Action{Kind: KindRelease, SessionID: "root", Target: Target{Blocks: own}}}, // w3 holds 2 of them on host
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("root: got %+v\nwant %+v (shared %d refs %v)", got, want, len(in.Session.Shared), in.Session.SharedRefs)
	}
	validHints(t, got)
	// Last one out releases the system prompt too.
	tr.nodes[other].finished = true
	if got := ev(other); len(got) != 1 || !slices.Equal(got[0].Action.Target.Blocks, tr.nodes[other].chain) {
		t.Fatalf("other: %+v", got)
	}
	// A live parent's chain is protected even if refs are stale.
	var t2 tree
	par := t2.root("p", nil, 5, w1)
	kid := t2.fork("k", par, 3, 2)
	t2.nodes[kid].finished = true
	in = t2.input(kid, EventFinish)
	in.Session.SharedRefs = []int32{1, 1, 1} // stale: claims nobody else holds them
	if got := p.Evaluate(nil, &in); len(got) != 1 || !slices.Equal(got[0].Action.Target.Blocks, t2.nodes[kid].chain[3:]) {
		t.Fatalf("live parent: %+v", got)
	}
}

// TestFinishReleaseDifferential builds random session trees, finishes
// sessions in random order, and checks FinishRelease against the naive
// definition: the blocks of the finished session that no live session
// references.
func TestFinishReleaseDifferential(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 23))
		tr := randomTree(r, 4)
		pol := must(NewFinishRelease(FinishReleaseConfig{MaxBlocks: 1 + r.IntN(6)}))
		for _, i := range r.Perm(len(tr.nodes)) {
			tr.nodes[i].finished = true
			live := map[uint64]bool{}
			for j, n := range tr.nodes {
				if !n.finished && j != i {
					for _, h := range n.chain {
						live[h] = true
					}
				}
			}
			var want []uint64
			for _, h := range tr.nodes[i].chain {
				if !live[h] {
					want = append(want, h)
				}
			}
			in := tr.input(i, EventFinish)
			hints := pol.Evaluate(nil, &in)
			var got []uint64
			for _, h := range hints {
				if h.Worker != tr.nodes[i].worker {
					t.Fatalf("seed %d: hint to %v without residency", seed, h.Worker)
				}
				got = append(got, h.Action.Target.Blocks...)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d session %s: released %x, want %x\nshared %x refs %v unique %x", seed, tr.nodes[i].id, got, want, in.Session.Shared, in.Session.SharedRefs, in.Session.Unique)
			}
			validHints(t, hints)
		}
	}
}

func TestPolicyConfigErrors(t *testing.T) {
	for name, err := range map[string]error{
		"offload dest device":      second(NewTailOffload(TailOffloadConfig{Dest: TierDevice})),
		"offload prefetch to disk": second(NewTailOffload(TailOffloadConfig{PrefetchTo: TierDisk})),
		"offload negative":         second(NewTailOffload(TailOffloadConfig{After: -1})),
		"offload chunk too big":    second(NewTailOffload(TailOffloadConfig{MaxBlocks: DefaultMaxBlocks + 1})),
		"pin ttl too short":        second(NewPrefixPin(PrefixPinConfig{TTL: time.Millisecond})),
		"pin negative":             second(NewPrefixPin(PrefixPinConfig{MinSessions: -1})),
		"share too many sources":   second(NewPeerShare(PeerShareConfig{MaxSources: 9})),
		"share negative gain":      second(NewPeerShare(PeerShareConfig{MinGain: -1})),
		"release negative chunk":   second(NewFinishRelease(FinishReleaseConfig{MaxBlocks: -1})),
		"queue nil sink":           second(NewQueue(nil, QueueConfig{})),
		"queue negative capacity":  second(NewQueue(SinkFunc(nil), QueueConfig{Capacity: -1})),
	} {
		if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestPoliciesChainAndBatch(t *testing.T) {
	var tr tree
	system := tr.fresh(3)
	var last int
	for i := range 4 {
		last = tr.root(fmt.Sprint("s", i), system, 4, w1)
	}
	offload := must(NewTailOffload(TailOffloadConfig{}))
	pin := must(NewPrefixPin(PrefixPinConfig{}))
	share := must(NewPeerShare(PeerShareConfig{}))
	release := must(NewFinishRelease(FinishReleaseConfig{}))
	counted := 0
	all := Policies{offload, pin, share, release, PolicyFunc(func(dst []Hint, in *Input) []Hint { counted++; return dst })}

	in := tr.input(last, EventAdmit)
	in.Worker = w2
	in.Cached = []Residency{{Worker: w1, Device: 7, Endpoint: "tcp://w1"}, {Worker: w2, Device: 3, Host: 2}}
	hints := all.Evaluate(nil, &in)
	kinds := []Kind{}
	for _, h := range hints {
		kinds = append(kinds, h.Action.Kind)
	}
	// prefetch (w2 has 2 blocks on host), pin (4 sessions share the
	// prompt), share (w1 has all 7 on device).
	if !slices.Equal(kinds, []Kind{KindPrefetch, KindPin, KindShare}) || counted != 1 {
		t.Fatalf("kinds %v counted %d", kinds, counted)
	}
	b := NewBatcher("r1")
	out := b.Batch(nil, append(hints, Hint{Worker: w1, Action: Action{Kind: KindRelease, SessionID: "other"}}))
	if len(out) != 2 || out[0].Worker != w2 || out[1].Worker != w1 {
		t.Fatalf("batch %+v", out)
	}
	e := out[0].Envelope
	if e.MessageID != "r1-1" || e.SessionID != "s3" || len(e.Actions) != 3 || e.Actions[2].ID != "r1-1.2" || out[1].Envelope.MessageID != "r1-2" {
		t.Fatalf("envelope %+v", e)
	}
	if hints[0].Action.ID != "" {
		t.Fatal("Batch modified its input")
	}
	for _, ob := range out {
		if err := ob.Envelope.Validate(Bounds{}); err != nil {
			t.Fatal(err)
		}
	}
	// Mixed sessions in one envelope: no envelope session.
	mixed := b.Batch(nil, []Hint{{w1, Action{Kind: KindRelease, SessionID: "a"}}, {w1, Action{Kind: KindRelease, SessionID: "b"}}, {w1, Action{Kind: KindRelease, SessionID: "a"}}})
	if mixed[0].Envelope.SessionID != "" {
		t.Fatalf("mixed sessions: %+v", mixed[0].Envelope)
	}
}

// TestRefsBoundKeepsHints: the built-in policies that read SharedRefs
// give the same hints from counts stopped at RefsBound as from exact
// counts, on random lineage trees and every event; a policy that reads
// SharedRefs without being a RefsBounder makes the bound 0 (exact).
func TestRefsBoundKeepsHints(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 29))
		tr := randomTree(r, 8)
		ps := Policies{
			must(NewPrefixPin(PrefixPinConfig{MinSessions: int32(1 + r.IntN(5))})),
			must(NewFinishRelease(FinishReleaseConfig{MaxBlocks: 1 + r.IntN(6)})),
		}
		bound := RefsBound(ps)
		if want := max(ps[0].(*PrefixPin).cfg.MinSessions, 2); bound != want {
			t.Fatalf("seed %d: RefsBound %d, want %d", seed, bound, want)
		}
		for _, i := range r.Perm(len(tr.nodes)) {
			for _, ev := range []Event{EventAdmit, EventResume, EventFinish} {
				in := tr.input(i, ev)
				capped := in
				capped.Session.SharedRefs = nil
				for _, n := range in.Session.SharedRefs {
					capped.Session.SharedRefs = append(capped.Session.SharedRefs, min(n, bound))
				}
				var want, got []Hint
				for _, p := range ps {
					want = p.Evaluate(want, &in)
					got = p.Evaluate(got, &capped)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d session %s %v: refs %v capped at %d give\n%+v\nwant\n%+v", seed, tr.nodes[i].id, ev, in.Session.SharedRefs, bound, got, want)
				}
			}
			tr.nodes[i].finished = true
		}
	}
	exact := refsReader{}
	if b := RefsBound(Policies{must(NewPrefixPin(PrefixPinConfig{})), exact}); b != 0 {
		t.Fatalf("a policy that reads SharedRefs and states no bound: RefsBound %d, want 0", b)
	}
	share := must(NewPeerShare(PeerShareConfig{}))
	if b := RefsBound(Policies{must(NewPrefixPin(PrefixPinConfig{})), share}); b != 4 {
		t.Fatalf("PrefixPin's default with a policy that reads no refs: RefsBound %d, want 4", b)
	}
}

// refsReader is a user policy that reads everything (not a Needer).
type refsReader struct{}

func (refsReader) Evaluate(dst []Hint, _ *Input) []Hint { return dst }

// randomTree is a random lineage forest: 2 to maxRoots+1 roots on two
// shared prompts (or none) over 3 workers, and up to 9 forks.
func randomTree(r *rand.Rand, maxRoots int) *tree {
	tr := &tree{}
	prompts := [][]uint64{tr.fresh(1 + r.IntN(5)), tr.fresh(1 + r.IntN(5)), nil}
	for i := range 2 + r.IntN(maxRoots) {
		tr.root(fmt.Sprint("r", i), prompts[r.IntN(len(prompts))], r.IntN(6), WorkerID{ID: uint64(r.IntN(3))})
	}
	for i := range r.IntN(10) {
		p := r.IntN(len(tr.nodes))
		tr.fork(fmt.Sprint("c", i), p, r.IntN(len(tr.nodes[p].chain)+1), r.IntN(5))
	}
	return tr
}

// TestPrefixPinRenewal: a pin of the same prefix on the same worker is sent
// again only TTL/4 after the last one the worker could take (it held the
// prefix on device), and every time without a clock.
func TestPrefixPinRenewal(t *testing.T) {
	var tr tree
	system := tr.fresh(8)
	var ids []int
	for i := range 5 {
		ids = append(ids, tr.root(fmt.Sprint("s", i), system, 3, w1))
	}
	ttl := 8 * time.Minute
	p := must(NewPrefixPin(PrefixPinConfig{MinSessions: 4, TTL: ttl}))
	rn := NewRenewals()
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	pins := func(id int, w WorkerID, held int, now time.Time) bool {
		t.Helper()
		in := tr.input(ids[id], EventAdmit)
		in.Worker, in.Now, in.Renewals = w, now, rn
		in.Cached = []Residency{{Worker: w, Device: held}}
		got := p.Evaluate(nil, &in)
		if len(got) > 1 || len(got) == 1 && !slices.Equal(got[0].Action.Target.Blocks, system) {
			t.Fatalf("got %+v", got)
		}
		return len(got) == 1
	}
	steps := []struct {
		name string
		id   int
		w    WorkerID
		held int
		at   time.Duration
		want bool
	}{
		{"first pin", 0, w2, 8, 0, true},
		{"another session, same prefix and worker, soon after", 1, w2, 11, time.Second, false},
		{"just before TTL/4", 2, w2, 8, ttl/4 - 1, false},
		{"another worker", 0, w1, 8, time.Second, true},
		{"TTL/4 after the first", 3, w2, 8, ttl / 4, true},
		{"a clock that went back", 3, w2, 8, ttl/4 - time.Second, true},
		{"a worker without the whole prefix", 0, w3, 7, 0, true},
		{"... is pinned again on its next turn", 1, w3, 7, time.Second, true},
		{"... until it holds it", 2, w3, 8, 2 * time.Second, true},
		{"... then not", 3, w3, 8, 3 * time.Second, false},
		{"the index lost it: pinned again", 4, w3, 0, 4 * time.Second, true},
	}
	for _, s := range steps {
		if got := pins(s.id, s.w, s.held, t0.Add(s.at)); got != s.want {
			t.Fatalf("%s: pinned %v, want %v", s.name, got, s.want)
		}
	}
	// Without a clock, or without a memory, every turn pins.
	for range 3 {
		if !pins(0, w2, 8, time.Time{}) {
			t.Fatal("no clock: no pin")
		}
	}
	rn = nil
	for range 3 {
		if !pins(0, w2, 8, t0) {
			t.Fatal("no memory: no pin")
		}
	}
	// A longer shared prefix is another pin.
	lower := must(NewPrefixPin(PrefixPinConfig{MinSessions: 1, TTL: ttl}))
	in := tr.input(ids[0], EventAdmit)
	in.Worker, in.Now, in.Renewals, in.Cached = w2, t0, NewRenewals(), []Residency{{Worker: w2, Device: 11}}
	if got := lower.Evaluate(nil, &in); len(got) != 1 || len(got[0].Action.Target.Blocks) != len(in.Session.Shared) {
		t.Fatalf("MinSessions 1: %+v", got)
	}
}

// TestPrefixPinRenewalReference compares PrefixPin's renewals with a naive
// model that keeps every pin it sent, on random turns of random sessions
// over three workers, and checks that the memory stays bounded.
func TestPrefixPinRenewalReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const ttl = 4 * time.Minute
	p := must(NewPrefixPin(PrefixPinConfig{MinSessions: 1, TTL: ttl}))
	rn := NewRenewals()
	type key struct {
		w    WorkerID
		last uint64
	}
	sent := map[key]time.Time{} // the reference: the last pin each worker could take
	now := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	workers := []WorkerID{w1, w2, w3}
	prefixes := make([][]uint64, 40)
	for i := range prefixes {
		for j := range 1 + r.IntN(6) {
			prefixes[i] = append(prefixes[i], uint64(i*100+j+1))
		}
	}
	fired := 0
	for step := range 20000 {
		now = now.Add(time.Duration(r.IntN(int(ttl / 40))))
		pre := prefixes[r.IntN(len(prefixes))]
		w := workers[r.IntN(len(workers))]
		held := r.IntN(len(pre) + 2)
		in := Input{Event: EventAdmit, Worker: w, Now: now, Renewals: rn, Prefix: pre,
			Session: Session{ID: "s", Shared: pre, SharedRefs: slices.Repeat([]int32{2}, len(pre))},
			Cached:  []Residency{{Worker: w, Device: held}}}
		got := len(p.Evaluate(nil, &in)) == 1
		k := key{w, pre[len(pre)-1]}
		at, ok := sent[k]
		want := held < len(pre) || !ok || now.Sub(at) >= ttl/4
		switch {
		case held < len(pre):
			delete(sent, k)
		case want:
			sent[k] = now
		}
		if got != want {
			t.Fatalf("step %d: worker %v prefix %v held %d: pinned %v, want %v", step, w, pre, held, got, want)
		}
		if got {
			fired++
		}
	}
	if fired == 0 || fired == 20000 {
		t.Fatalf("%d pins of 20000 turns: the test exercised nothing", fired)
	}
	// Bounded: many prefixes on one worker never keep more than
	// MaxRenewals entries.
	for i := range 3 * MaxRenewals {
		pre := []uint64{uint64(1e9 + i)}
		in := Input{Event: EventAdmit, Worker: w1, Now: now, Renewals: rn, Prefix: pre,
			Session: Session{ID: "s", Shared: pre, SharedRefs: []int32{2}}, Cached: []Residency{{Worker: w1, Device: 1}}}
		p.Evaluate(nil, &in)
	}
	if n := rn.Len(); n > MaxRenewals || n == 0 {
		t.Fatalf("%d renewals remembered, bound %d", n, MaxRenewals)
	}
}
