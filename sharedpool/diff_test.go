package sharedpool

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The differential test runs random streams of batches, layout changes and
// resets through an Index and through model, a naive specification kept as
// a map of object key -> set of media, and compares them after every step.

type opKind uint8

const (
	opBatch opKind = iota
	opSetLayout
	opSync
	opReset
)

type op struct {
	kind    opKind
	batch   Batch
	layout  Layout
	workers map[uint64]Layout
}

func (o op) String() string {
	switch o.kind {
	case opSetLayout:
		return fmt.Sprintf("SetLayout(%+v)", o.layout)
	case opSync:
		return fmt.Sprintf("SyncLayouts(%+v)", o.workers)
	case opReset:
		return "Reset()"
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Apply(seq=%d", o.batch.Seq)
	for _, e := range o.batch.Events {
		fmt.Fprintf(&sb, " %s{%q m=%q t=%q b=%q g=%q}", e.Kind, e.Key, e.Medium, e.Tenant, e.Backend, e.GroupID)
	}
	for _, r := range o.batch.Rejected {
		fmt.Fprintf(&sb, " rejected{%q}", r.Key)
	}
	return sb.String() + ")"
}

// model is the naive specification.
type model struct {
	maxPages        int
	tenant, backend string
	universe        []PageHash

	hasLayout bool
	layout    Layout
	suffixes  []string
	keysOf    [][]string                 // universe page -> its object keys
	objs      map[string]map[string]bool // layout object key -> media

	hasSeq  bool
	lastSeq uint64
}

func newModel(cfg Config, universe []PageHash) *model {
	m := &model{maxPages: cfg.MaxPages, tenant: cfg.Tenant, backend: cfg.Backend, universe: universe, objs: map[string]map[string]bool{}}
	if m.tenant == "" {
		m.tenant = DefaultTenant
	}
	if cfg.Layout != (Layout{}) {
		m.setLayout(cfg.Layout)
	}
	return m
}

func (m *model) setLayout(l Layout) {
	if m.hasLayout && m.layout.Equal(l) {
		return
	}
	if l.Validate() != nil {
		return
	}
	m.objs = map[string]map[string]bool{}
	m.hasLayout, m.layout, m.suffixes = true, l, l.Suffixes()
	m.keysOf = make([][]string, len(m.universe))
	for i, p := range m.universe {
		m.keysOf[i] = l.AppendObjectKeys(nil, p)
	}
}

// logical returns the logical page key of an object key the layout writes:
// the prefix, 64 lowercase hex characters, one of the layout's suffixes.
func (m *model) logical(key string) (string, bool) {
	if !m.hasLayout {
		return "", false
	}
	pfx := m.layout.Prefix()
	if pfx != "" {
		pfx += "_"
	}
	rest, ok := strings.CutPrefix(key, pfx)
	if !ok || len(rest) < 64 || strings.Trim(rest[:64], "0123456789abcdef") != "" || !slices.Contains(m.suffixes, rest[64:]) {
		return "", false
	}
	return key[:len(pfx)+64], true
}

// trackedPages counts the logical pages with at least one present object.
func (m *model) trackedPages() int {
	seen := map[string]bool{}
	for k, media := range m.objs {
		if len(media) > 0 {
			lg, _ := m.logical(k)
			seen[lg] = true
		}
	}
	return len(seen)
}

func (m *model) sync(workers map[uint64]Layout) {
	var first *Layout
	ok := len(workers) > 0
	for _, l := range workers {
		if l.Validate() != nil {
			ok = false
		}
		if first == nil {
			first = &l
		} else if !first.Equal(l) {
			ok = false
		}
	}
	if !ok {
		m.hasLayout = false
		m.objs = map[string]map[string]bool{}
		return
	}
	m.setLayout(*first)
}

// completePages counts the logical pages (in or out of the universe) with
// every object present.
func (m *model) completePages() int {
	n := 0
	seen := map[string]bool{}
	for k, media := range m.objs {
		lg, _ := m.logical(k)
		if len(media) == 0 || seen[lg] {
			continue
		}
		seen[lg] = true
		all := true
		for _, suf := range m.suffixes {
			if len(m.objs[lg+suf]) == 0 {
				all = false
			}
		}
		if all {
			n++
		}
	}
	return n
}

func (m *model) tracked(logical string) bool {
	for k, media := range m.objs {
		if lg, _ := m.logical(k); lg == logical && len(media) > 0 {
			return true
		}
	}
	return false
}

func (m *model) present(page int) bool {
	if !m.hasLayout {
		return false
	}
	for _, k := range m.keysOf[page] {
		if len(m.objs[k]) == 0 {
			return false
		}
	}
	return true
}

func (m *model) apply(b *Batch) Report {
	rep := Report{Seq: b.Seq}
	if m.hasSeq && b.Seq == m.lastSeq {
		rep.Duplicate = true
		return rep
	}
	if m.hasSeq && b.Seq != m.lastSeq+1 {
		rep.Gap = &SeqGap{Last: m.lastSeq, Got: b.Seq}
		m.objs = map[string]map[string]bool{}
	}
	m.hasSeq, m.lastSeq = true, b.Seq
	// Merge events and rejections back into publisher order.
	type item struct {
		ev  *Event
		rej *Rejection
	}
	var items []item
	for i := range b.Events {
		items = append(items, item{ev: &b.Events[i]})
	}
	for i := range b.Rejected {
		r := &b.Rejected[i]
		at := min(r.Index, len(items))
		items = slices.Insert(items, at, item{rej: r})
	}
	for _, it := range items {
		if it.rej != nil {
			rep.Rejected++
			if _, ok := m.logical(it.rej.Key); ok {
				delete(m.objs, it.rej.Key)
			}
			continue
		}
		e := *it.ev
		if (e.Tenant != "" && e.Tenant != m.tenant) || (m.backend != "" && e.Backend != "" && e.Backend != m.backend) {
			rep.Ignored++
			continue
		}
		if e.Kind == Clear {
			rep.ClearEvents++
			m.objs = map[string]map[string]bool{}
			continue
		}
		lg, ok := m.logical(e.Key)
		if e.Key == "" || !ok {
			rep.Ignored++
			continue
		}
		rep.Applied++
		if e.Kind == Store {
			if !m.tracked(lg) {
				if m.trackedPages() >= m.maxPages {
					rep.Overflows++
					m.objs = map[string]map[string]bool{}
				}
			}
			if m.objs[e.Key] == nil {
				m.objs[e.Key] = map[string]bool{}
			}
			m.objs[e.Key][e.Medium] = true
			continue
		}
		if e.Medium == "" {
			delete(m.objs, e.Key)
		} else {
			delete(m.objs[e.Key], e.Medium)
		}
	}
	return rep
}

var diffLayouts = []Layout{
	{PageSize: 2, MLA: true},
	{PageSize: 2, TPSize: 2},
	{PageSize: 2, TPSize: 2, PPSize: 2, ExtraBackendTag: "tag"},
	{PageSize: 2, TPSize: 2, TPLCMSize: 4, SplitHeads: true},
	{PageSize: 2, MLA: true, PPSize: 2, KeyPrefix: "tag_org-m"},
	{PageSize: 2, TPSize: 1},
	{PageSize: 0}, // invalid
}

// gen produces a random op stream over a universe of pages.
type gen struct {
	r        *rand.Rand
	universe []PageHash
	seq      uint64
	// maxEvents bounds the events per batch (0: 5); maxRejected bounds the
	// rejections per batch (0: at most one, one batch in 15).
	maxEvents, maxRejected int
}

func (g *gen) key() string {
	l := diffLayouts[g.r.IntN(len(diffLayouts)-1)]
	p := g.universe[g.r.IntN(len(g.universe))]
	keys := l.AppendObjectKeys(nil, p)
	k := keys[g.r.IntN(len(keys))]
	switch g.r.IntN(12) {
	case 0: // near miss: one character changed
		b := []byte(k)
		b[g.r.IntN(len(b))] ^= 1
		return string(b)
	case 1:
		return strings.ToUpper(k)
	case 2:
		return k[:g.r.IntN(len(k))]
	case 3:
		return "junk-" + fmt.Sprint(g.r.IntN(5))
	}
	return k
}

func (g *gen) op() op {
	switch x := g.r.IntN(100); {
	case x < 3:
		return op{kind: opSetLayout, layout: diffLayouts[g.r.IntN(len(diffLayouts))]}
	case x < 5:
		w := map[uint64]Layout{}
		for i := range 1 + g.r.IntN(3) {
			w[uint64(i)] = diffLayouts[g.r.IntN(3)]
		}
		return op{kind: opSync, workers: w}
	case x < 7:
		g.seq = g.r.Uint64N(50)
		return op{kind: opReset}
	}
	switch x := g.r.IntN(100); {
	case x < 5: // duplicate
	case x < 9:
		g.seq += 2 + g.r.Uint64N(4)
	case x < 11:
		g.seq = g.r.Uint64N(50)
	default:
		g.seq++
	}
	b := Batch{Seq: g.seq}
	maxEvents := g.maxEvents
	if maxEvents == 0 {
		maxEvents = 5
	}
	for range g.r.IntN(maxEvents + 1) {
		e := Event{Kind: Store, Key: g.key()}
		switch x := g.r.IntN(100); {
		case x < 40:
			e.Kind = Remove
		case x < 42:
			e.Kind = Clear
		}
		e.Medium = []string{"", "", "cpu", "disk", "ssd"}[g.r.IntN(5)]
		e.Tenant = []string{"", "default", "default", "other"}[g.r.IntN(4)]
		e.Backend = []string{"", "", "mc", "x"}[g.r.IntN(4)]
		if g.r.IntN(3) == 0 {
			e.GroupID = GroupIDPrefix + e.Key
		}
		if e.Kind == Store && g.r.IntN(20) == 0 {
			e.Key = ""
		}
		b.Events = append(b.Events, e)
	}
	if g.maxRejected == 0 {
		if g.r.IntN(15) == 0 {
			// Positions in the original list, ascending, as the decoder makes them.
			total := len(b.Events) + 1
			b.Rejected = append(b.Rejected, Rejection{Index: g.r.IntN(total), Key: g.key(), Err: ErrMalformedEvent})
		}
		return op{kind: opBatch, batch: b}
	}
	nrej := g.r.IntN(g.maxRejected + 1)
	total := len(b.Events) + nrej
	for _, pos := range g.r.Perm(total)[:nrej] {
		b.Rejected = append(b.Rejected, Rejection{Index: pos, Key: g.key(), Err: ErrMalformedEvent})
	}
	slices.SortFunc(b.Rejected, func(a, b Rejection) int { return a.Index - b.Index })
	return op{kind: opBatch, batch: b}
}

func diffUniverse() []PageHash {
	tokens := make([]uint32, 2*10)
	for i := range tokens {
		tokens[i] = uint32(i % 7)
	}
	return PageHashes(tokens, 2, false, nil)
}

var diffConfig = Config{Layout: diffLayouts[1], MaxPages: 5, InitialPages: 4, Backend: "mc"}

// runDiff applies ops to an Index and the model, checking after every op.
// It returns the index of the first failing op and why, or -1.
func runDiff(ops []op, seed uint64) (int, string) {
	universe := diffUniverse()
	cfg := diffConfig
	cfg.Seed = seed | 1
	ix, err := New(cfg)
	if err != nil {
		return 0, err.Error()
	}
	m := newModel(cfg, universe)
	var h Hits
	for i, o := range ops {
		switch o.kind {
		case opSetLayout:
			ix.SetLayout(o.layout)
			m.setLayout(o.layout)
		case opSync:
			ix.SyncLayouts(o.workers)
			m.sync(o.workers)
		case opReset:
			ix.Reset()
			m.objs, m.hasSeq = map[string]map[string]bool{}, false
		case opBatch:
			got, want := ix.Apply(&o.batch), m.apply(&o.batch)
			if (got.Gap == nil) != (want.Gap == nil) || (got.Gap != nil && *got.Gap != *want.Gap) {
				return i, fmt.Sprintf("gap %v, want %v", got.Gap, want.Gap)
			}
			got.Gap, want.Gap = nil, nil
			if got != want {
				return i, fmt.Sprintf("report %+v, want %+v", got, want)
			}
		}
		err := ix.QueryInto(&h, universe)
		if (err == nil) != m.hasLayout {
			return i, fmt.Sprintf("query error %v with layout %v", err, m.hasLayout)
		}
		var wantRanges []Range
		present := 0
		for p := range universe {
			pr := m.present(p)
			if ix.Contains(universe[p]) != pr {
				return i, fmt.Sprintf("page %d: Contains %v, want %v", p, !pr, pr)
			}
			if pr {
				present++
				if n := len(wantRanges); n > 0 && wantRanges[n-1].End == p {
					wantRanges[n-1].End++
				} else {
					wantRanges = append(wantRanges, Range{p, p + 1})
				}
			}
		}
		tracked, objects, complete := m.trackedPages(), 0, m.completePages()
		for _, media := range m.objs {
			if len(media) > 0 {
				objects++
			}
		}
		if m.hasLayout && (!slices.Equal(h.Ranges, wantRanges) || h.Total != present || h.Pages != len(universe)) {
			return i, fmt.Sprintf("hits %+v, want ranges %v total %d", h, wantRanges, present)
		}
		if s := ix.Stats(); ix.Len() != complete || s.Pages != tracked || s.Objects != objects {
			return i, fmt.Sprintf("len %d pages %d objects %d, want %d %d %d", ix.Len(), s.Pages, s.Objects, complete, tracked, objects)
		}
	}
	return -1, ""
}

// shrink greedily drops ops from a failing prefix while it still fails.
func shrink(ops []op, seed uint64) []op {
	for i := 0; i < len(ops); {
		cand := slices.Delete(slices.Clone(ops), i, i+1)
		if at, _ := runDiff(cand, seed); at >= 0 {
			ops = cand[:at+1]
			continue
		}
		i++
	}
	return ops
}

func reportDiff(t *testing.T, ops []op, seed uint64, at int, why string) {
	t.Helper()
	min := shrink(ops[:at+1], seed)
	_, minWhy := runDiff(min, seed)
	var sb strings.Builder
	for i, o := range min {
		fmt.Fprintf(&sb, "\n  %d: %s", i, o)
	}
	t.Fatalf("seed %d: mismatch at op %d: %s\nminimal failing prefix (%d ops, fails with: %s):%s", seed, at, why, len(min), minWhy, sb.String())
}

func TestDifferential(t *testing.T) {
	seeds, steps := 300, 250
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		g := &gen{r: rand.New(rand.NewPCG(seed, 77)), universe: diffUniverse()}
		ops := make([]op, steps)
		for i := range ops {
			ops[i] = g.op()
		}
		if at, why := runDiff(ops, seed); at >= 0 {
			reportDiff(t, ops, seed, at, why)
		}
	}
}

// TestDifferentialLargeBatches runs batches of up to 200 events with up
// to 8 rejections at random positions, so that Apply's parse-ahead chunks
// (applyChunk events) are crossed by rejections, clears, overflows and
// table growth in the middle of a batch.
func TestDifferentialLargeBatches(t *testing.T) {
	seeds, steps := 60, 40
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		g := &gen{r: rand.New(rand.NewPCG(seed, 91)), universe: diffUniverse(), maxEvents: 200, maxRejected: 8}
		ops := make([]op, steps)
		long := 0
		for i := range ops {
			ops[i] = g.op()
			if len(ops[i].batch.Events) > 2*applyChunk {
				long++
			}
		}
		if long == 0 {
			t.Fatalf("seed %d: no batch spans more than two chunks", seed)
		}
		if at, why := runDiff(ops, seed); at >= 0 {
			reportDiff(t, ops, seed, at, why)
		}
	}
}

// TestDifferentialDetectsBugs shows the harness fails on a wrong model: an
// index that never clears on gaps must be caught.
func TestDifferentialDetectsBugs(t *testing.T) {
	universe := diffUniverse()
	l := diffLayouts[1]
	ops := []op{{kind: opBatch, batch: Batch{Seq: 1, Events: storeAll(l, "", universe[0])}}}
	if at, _ := runDiff(ops, 1); at != -1 {
		t.Fatal("a correct stream fails")
	}
	// Mutate the expectation: feed the model a batch the index does not see.
	cfg := diffConfig
	cfg.Seed = 3
	ix, _ := New(cfg)
	m := newModel(cfg, universe)
	ix.Apply(&ops[0].batch)
	m.apply(&Batch{Seq: 1})
	if ix.Contains(universe[0]) == m.present(0) {
		t.Fatal("index and model agree although they saw different events")
	}
}
