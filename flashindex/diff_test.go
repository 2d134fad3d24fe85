package flashindex

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The differential test drives the Index and the naive refModel with the
// same seeded random stream of events, approximate records, clock steps,
// expiries and worker removals, and compares queries and statistics after
// every step. The first failing step is reported together with the whole
// stream up to it: that prefix is the minimal failing prefix.

type opKind int

const (
	opApply opKind = iota
	opRecord
	opExpire
	opRemoveWorker
	opAdvance
)

type step struct {
	kind opKind
	ev   *Event
	w    Worker
	seq  []uint64
	ttl  time.Duration
	dt   time.Duration
}

func (s step) String() string {
	switch s.kind {
	case opApply:
		return "apply " + eventString(s.ev)
	case opRecord:
		return fmt.Sprintf("record w=%v ttl=%v seq=%s", s.w, s.ttl, hashesString(s.seq))
	case opExpire:
		return "expire"
	case opRemoveWorker:
		return fmt.Sprintf("remove-worker %v", s.w)
	default:
		return fmt.Sprintf("advance %v", s.dt)
	}
}

func hashesString(hs []uint64) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		parts[i] = fmt.Sprintf("%04x", h&0xffff)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func eventString(ev *Event) string {
	if ev == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "w=%v id=%d %v tier=%v", ev.Worker, ev.EventID, ev.Kind, ev.Tier)
	switch ev.Kind {
	case Stored:
		if ev.HasParent {
			fmt.Fprintf(&b, " parent=%04x", ev.Parent&0xffff)
		}
		if ev.BlockSize != 0 {
			fmt.Fprintf(&b, " bs=%d", ev.BlockSize)
		}
		if ev.LoRA != "" {
			fmt.Fprintf(&b, " lora=%s", ev.LoRA)
		}
		for _, blk := range ev.Blocks {
			if blk.HasLocalHash {
				fmt.Fprintf(&b, " {e=%04x local=%04x}", blk.EngineHash&0xffff, blk.LocalHash&0xffff)
			} else {
				fmt.Fprintf(&b, " {e=%04x tok=%v}", blk.EngineHash&0xffff, blk.Tokens)
			}
		}
	case Removed:
		fmt.Fprintf(&b, " hashes=%s", hashesString(ev.Hashes))
	}
	return b.String()
}

// genSeq is one token sequence of the generator's branching pool.
type genSeq struct {
	lora   string
	blocks [][]uint32
	local  []uint64
	seq    []uint64
}

type gen struct {
	rng     *rand.Rand
	bs      int
	ref     *refModel
	workers []Worker
	nextID  map[Worker]uint64
	past    map[Worker][]*Event
	seqs    []*genSeq
	hashers map[string]*Hasher
	// noRecord replaces approximate records by clock steps, so stores keep
	// finding blocks through the head map (see Index.head).
	noRecord bool
}

func newGen(seed uint64, bs int, ref *refModel, nworkers int) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), bs: bs, ref: ref,
		nextID: map[Worker]uint64{}, past: map[Worker][]*Event{}, hashers: map[string]*Hasher{}}
	for i := 0; i < nworkers; i++ {
		g.workers = append(g.workers, Worker{ID: uint64(1 + i/2), DPRank: uint32(i % 2)})
	}
	for i := 0; i < 4; i++ {
		g.newSeq()
	}
	return g
}

func (g *gen) hasher(lora string) *Hasher {
	if h := g.hashers[lora]; h != nil {
		return h
	}
	h, _ := NewHasher(g.bs, lora)
	g.hashers[lora] = h
	return h
}

// newSeq adds a sequence that branches off a random prefix of an existing
// one (or starts fresh), so sequences share prefixes.
func (g *gen) newSeq() {
	s := &genSeq{}
	if len(g.seqs) > 0 && g.rng.IntN(4) != 0 {
		p := g.seqs[g.rng.IntN(len(g.seqs))]
		k := g.rng.IntN(len(p.blocks) + 1)
		s.lora = p.lora
		s.blocks = slices.Clone(p.blocks[:k])
	} else if g.rng.IntN(5) == 0 {
		s.lora = "adapter"
	}
	n := len(s.blocks) + 1 + g.rng.IntN(12)
	for len(s.blocks) < n {
		blk := make([]uint32, g.bs)
		for i := range blk {
			blk[i] = uint32(g.rng.IntN(6)) // small alphabet: equal blocks at different positions
		}
		s.blocks = append(s.blocks, blk)
	}
	h := g.hasher(s.lora)
	for _, blk := range s.blocks {
		s.local = append(s.local, h.LocalHash(blk))
	}
	s.seq = AppendSequenceHashes(nil, s.local)
	if len(g.seqs) >= 14 {
		g.seqs[g.rng.IntN(len(g.seqs))] = s
	} else {
		g.seqs = append(g.seqs, s)
	}
}

// engineHash is the hash worker w's engine uses for the block seq: equal to
// the own hash on even IDs, salted on odd ones.
func engineHash(w Worker, seq uint64) uint64 {
	if w.ID%2 == 0 {
		return seq
	}
	return (seq ^ (w.ID*0x9E3779B97F4A7C15 + uint64(w.DPRank))) * 0xff51afd7ed558ccd
}

func (g *gen) residentAny(w Worker, s uint64) bool {
	for p := 0; p < 3; p++ {
		if g.ref.resident(w, p, s) {
			return true
		}
	}
	return false
}

func (g *gen) event(w Worker, kind EventKind) *Event {
	id := g.nextID[w]
	g.nextID[w] = id + 1
	if g.rng.IntN(40) == 0 { // a gap
		g.nextID[w] += 1 + uint64(g.rng.IntN(3))
	}
	return &Event{Worker: w, EventID: id, Kind: kind}
}

func (g *gen) next() step {
	r := g.rng.IntN(100)
	w := g.workers[g.rng.IntN(len(g.workers))]
	switch {
	case r < 42:
		return step{kind: opApply, ev: g.stored(w)}
	case r < 64:
		return step{kind: opApply, ev: g.removed(w)}
	case r < 66:
		return step{kind: opApply, ev: g.event(w, Cleared)}
	case r < 71: // a duplicate of an earlier event
		if p := g.past[w]; len(p) > 0 {
			return step{kind: opApply, ev: p[g.rng.IntN(len(p))]}
		}
		return step{kind: opAdvance, dt: time.Second}
	case r < 81:
		if g.noRecord {
			return step{kind: opAdvance, dt: time.Second}
		}
		s := g.seqs[g.rng.IntN(len(g.seqs))]
		ttl := time.Duration(1+g.rng.IntN(30)) * time.Second
		if g.rng.IntN(10) == 0 {
			ttl = 0
		}
		return step{kind: opRecord, w: w, seq: slices.Clone(s.seq[:1+g.rng.IntN(len(s.seq))]), ttl: ttl}
	case r < 88:
		return step{kind: opAdvance, dt: time.Duration(g.rng.IntN(8)) * time.Second}
	case r < 90:
		return step{kind: opExpire}
	case r < 91:
		g.nextID[w] = uint64(g.rng.IntN(3))
		return step{kind: opRemoveWorker, w: w}
	case r < 92:
		if g.rng.IntN(2) == 0 {
			return step{kind: opApply}
		}
		ev := g.event(w, EventKind(7))
		return step{kind: opApply, ev: ev}
	default:
		g.newSeq()
		return step{kind: opAdvance}
	}
}

func (g *gen) stored(w Worker) *Event {
	s := g.seqs[g.rng.IntN(len(g.seqs))]
	ev := g.event(w, Stored)
	ev.Tier = Tier(g.rng.IntN(3))
	ev.LoRA = s.lora
	starts := []int{0}
	for i := 1; i < len(s.seq); i++ {
		if g.residentAny(w, s.seq[i-1]) {
			starts = append(starts, i)
		}
	}
	i := starts[g.rng.IntN(len(starts))]
	if g.rng.IntN(2) == 0 {
		i = starts[len(starts)-1]
	}
	if i >= len(s.seq) {
		i = 0
	}
	k := 1 + g.rng.IntN(min(6, len(s.seq)-i))
	if i > 0 {
		ev.HasParent, ev.Parent = true, engineHash(w, s.seq[i-1])
	}
	if g.rng.IntN(2) == 0 {
		ev.BlockSize = g.bs
	}
	useLocal := g.rng.IntN(2) == 0
	for j := i; j < i+k; j++ {
		b := StoredBlock{EngineHash: engineHash(w, s.seq[j])}
		if useLocal {
			b.LocalHash, b.HasLocalHash = s.local[j], true
		} else {
			b.Tokens = slices.Clone(s.blocks[j])
		}
		ev.Blocks = append(ev.Blocks, b)
	}
	switch g.rng.IntN(60) {
	case 0:
		ev.HasParent, ev.Parent = true, g.rng.Uint64()
	case 1:
		ev.BlockSize = g.bs + 1
	case 2:
		if !useLocal {
			ev.Blocks[0].Tokens = ev.Blocks[0].Tokens[1:]
		}
	case 3:
		ev.Tier = External
	case 4:
		ev.Blocks[0].Tokens, ev.Blocks[0].HasLocalHash = nil, false
	case 5: // an engine hash that maps to other content
		if other := g.seqs[g.rng.IntN(len(g.seqs))]; other.seq[0] != s.seq[i] {
			ev.Blocks[0].EngineHash = engineHash(w, other.seq[0])
		}
	case 6:
		ev.LoRA = "other"
	case 7:
		ev.Blocks[0].ExtraKeys = []uint64{g.rng.Uint64N(4)}
	case 8: // two different engine hashes for one block: an alias
		ev.Blocks[0].EngineHash ^= 0xa11a5
	}
	g.past[w] = append(g.past[w], ev)
	return ev
}

func (g *gen) removed(w Worker) *Event {
	ev := g.event(w, Removed)
	ev.Tier = Tier(g.rng.IntN(3))
	if rw := g.ref.workers[w]; rw != nil {
		var keys []uint64
		for e := range rw.engine[ev.Tier] {
			keys = append(keys, e)
		}
		slices.Sort(keys)
		g.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
		ev.Hashes = keys[:g.rng.IntN(min(len(keys), 5)+1)]
	}
	if g.rng.IntN(8) == 0 {
		ev.Hashes = append(ev.Hashes, g.rng.Uint64())
	}
	if n := len(ev.Hashes); n > 0 && g.rng.IntN(10) == 0 {
		ev.Hashes = append(ev.Hashes, ev.Hashes[g.rng.IntN(n)]) // removed twice in one event
	}
	if g.rng.IntN(40) == 0 {
		ev.Tier = Tier(5)
	}
	g.past[w] = append(g.past[w], ev)
	return ev
}

type diffCase struct {
	seed      uint64
	steps     int
	workers   int
	maxBlocks int
	approxMax int
	noRecord  bool
}

func runDiff(t *testing.T, c diffCase) {
	t.Helper()
	now := time.Unix(1000, 0)
	var gaps []Gap
	cfg := Config{BlockSize: 4, MaxBlocksPerWorker: c.maxBlocks, ApproxMaxEntries: c.approxMax,
		Now: func() time.Time { return now }, OnGap: func(g Gap) { gaps = append(gaps, g) }}
	ix, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ref := newRef(cfg)
	g := newGen(c.seed, 4, ref, c.workers)
	g.noRecord = c.noRecord
	var trail []step
	fail := func(format string, args ...any) {
		t.Helper()
		var b strings.Builder
		for i, s := range trail {
			fmt.Fprintf(&b, "  %4d %v\n", i, s)
		}
		t.Fatalf("seed %d: after step %d: %s\nminimal failing prefix (%d steps):\n%s",
			c.seed, len(trail)-1, fmt.Sprintf(format, args...), len(trail), b.String())
	}
	var got []Match
	linksChecked := 0
	for n := 0; n < c.steps; n++ {
		s := g.next()
		trail = append(trail, s)
		switch s.kind {
		case opApply:
			gaps = gaps[:0]
			var err error
			if s.ev == nil {
				err = ix.Apply(nil)
			} else {
				err = ix.Apply(s.ev)
			}
			rejected, gap := ref.apply(s.ev)
			if (err != nil) != rejected {
				fail("Apply error %v, reference rejected=%v", err, rejected)
			}
			if gap == nil && len(gaps) != 0 || gap != nil && (len(gaps) != 1 || gaps[0] != *gap) {
				fail("gaps %v, reference %v", gaps, gap)
			}
		case opRecord:
			ix.Record(s.w, s.seq, s.ttl)
			ref.record(s.w, s.seq, s.ttl)
		case opExpire:
			ix.Expire()
			ref.expire()
		case opRemoveWorker:
			ix.RemoveWorker(s.w)
			ref.removeWorker(s.w)
		case opAdvance:
			now = now.Add(s.dt)
		}
		// Queries: every pool sequence, a truncated one and one that runs
		// past the indexed blocks.
		probes := make([][]uint64, 0, len(g.seqs)+2)
		for _, q := range g.seqs {
			probes = append(probes, q.seq)
		}
		q := g.seqs[g.rng.IntN(len(g.seqs))].seq
		probes = append(probes, q[:g.rng.IntN(len(q)+1)], append(slices.Clone(q), 12345))
		if err := checkChanges(ix); err != nil {
			fail("run change lists: %v", err)
		}
		if err := checkMaps(ix); err != nil {
			fail("block and head maps: %v", err)
		}
		n, err := checkKids(ix, g.parents())
		if err != nil {
			fail("kid lists: %v", err)
		}
		linksChecked += n
		view := ref.view()
		for _, p := range probes {
			want := view.find(p)
			got = ix.FindMatches(p, got)
			sortMatches(got)
			if !matchesEqual(got, want) {
				fail("FindMatches(%s):\n got  %v\n want %v", hashesString(p), got, want)
			}
			early := ix.FindMatchesEarlyExit(p, nil)
			sortMatches(early)
			if msg := checkEarly(early, want); msg != "" {
				fail("FindMatchesEarlyExit(%s): %s\n got  %v\n full %v", hashesString(p), msg, early, want)
			}
		}
		if gs, ws := ix.Stats(), ref.stats(); !statsEqual(gs, ws) {
			fail("Stats:\n got  %+v\n want %+v", gs, ws)
		}
		if n%400 == 399 {
			checkRoundTrip(t, ix, cfg, g.seqs, fail)
		}
	}
	if linksChecked == 0 {
		t.Fatalf("seed %d: no link checked against the pool's chains", c.seed)
	}
}

func matchesEqual(a, b []Match) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

// checkEarly verifies an early-exit result against the exact one: the same
// workers, all exact but at most one, and that one a truncation of its
// exact depths and the deepest worker of all.
func checkEarly(early, full []Match) string {
	if len(early) != len(full) {
		return "different workers"
	}
	maxTotal := 0
	for _, m := range full {
		maxTotal = max(maxTotal, m.Total())
	}
	off := 0
	for i := range full {
		e, f := early[i], full[i]
		if e == f {
			continue
		}
		off++
		if e.Worker != f.Worker || e.Resident != f.Resident || f.Total() != maxTotal {
			return fmt.Sprintf("worker %v differs and is not the deepest", f.Worker)
		}
		p := e.Total()
		d := min(f.Device, p)
		h := min(f.Device+f.Host, p) - d
		if p > f.Total() || e.Device != d || e.Host != h || e.Disk != p-d-h {
			return fmt.Sprintf("worker %v is not a truncation of its exact depths", f.Worker)
		}
	}
	if off > 1 {
		return "more than one worker differs"
	}
	return ""
}

func statsEqual(g, w Stats) bool {
	g.Blocks, g.Nodes = 0, 0
	if len(g.Workers) == 0 {
		g.Workers = nil
	}
	if len(w.Workers) == 0 {
		w.Workers = nil
	}
	return reflect.DeepEqual(g, w)
}

func checkRoundTrip(t *testing.T, ix *Index, cfg Config, seqs []*genSeq, fail func(string, ...any)) {
	t.Helper()
	var a, b bytes.Buffer
	if err := ix.Snapshot(&a); err != nil {
		fail("Snapshot: %v", err)
	}
	cfg.OnGap = nil
	rx, err := Restore(bytes.NewReader(a.Bytes()), cfg)
	if err != nil {
		fail("Restore: %v", err)
	}
	if err := rx.Snapshot(&b); err != nil {
		fail("Snapshot of restored: %v", err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		fail("snapshot round trip is not bit-identical (%d vs %d bytes)", a.Len(), b.Len())
	}
	for _, s := range seqs {
		x, y := ix.FindMatches(s.seq, nil), rx.FindMatches(s.seq, nil)
		sortMatches(x)
		sortMatches(y)
		if !matchesEqual(x, y) {
			fail("restored index answers %v, original %v", y, x)
		}
	}
	sx, sy := ix.Stats(), rx.Stats()
	sy.Applied, sy.Rejected, sy.Duplicates, sy.Gaps, sy.UnknownRemoved = sx.Applied, sx.Rejected, sx.Duplicates, sx.Gaps, sx.UnknownRemoved
	sy.ApproxExpired, sy.ApproxPruned = sx.ApproxExpired, sx.ApproxPruned
	if !reflect.DeepEqual(sx, sy) {
		fail("restored stats %+v, original %+v", sy, sx)
	}
}

func TestDifferential(t *testing.T) {
	var cases []diffCase
	for seed := uint64(1); seed <= 24; seed++ {
		c := diffCase{seed: seed, steps: 1500, workers: 6}
		if seed%3 == 0 {
			c.maxBlocks = 25
		}
		if seed%2 == 0 {
			c.approxMax = 20
		}
		if seed%8 == 5 { // more than 64 workers: multi-word residency sets
			c.workers, c.steps = 70, 600
		}
		if seed%4 == 1 { // events only: stores find blocks through the head map
			c.noRecord = true
		}
		cases = append(cases, c)
	}
	if testing.Short() {
		cases = cases[:6]
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("seed=%d", c.seed), func(t *testing.T) {
			t.Parallel()
			runDiff(t, c)
		})
	}
}

// checkMaps verifies that the block map holds exactly the blocks of the
// live nodes, each at its (node, offset), and the head map every node's
// first hash with its current contents.
func checkMaps(ix *Index) error {
	var err error
	total := 0
	ix.nodes.each(func(n *node) {
		d := n.data.Load()
		if err != nil || d == nil {
			return
		}
		if h := ix.nodes.heads.peek(d.hashes[0]); h != d {
			err = fmt.Errorf("node %d: head map has %p, want %p", n.id, h, d)
			return
		}
		for off, h := range d.hashes {
			if v, ok := ix.blocks.peek(h); !ok || v != loc(n.id, off) {
				err = fmt.Errorf("node %d offset %d (%#x): block map has %#x,%v", n.id, off, h, v, ok)
				return
			}
		}
		total += len(d.hashes)
	})
	if err == nil && total != ix.blocks.n {
		err = fmt.Errorf("nodes hold %d blocks, block map %d", total, ix.blocks.n)
	}
	if err == nil && ix.nodes.heads.n != ix.nodes.live {
		err = fmt.Errorf("%d nodes, %d head entries", ix.nodes.live, ix.nodes.heads.n)
	}
	return err
}

// checkKids verifies the lineage kept for queries (kids.go): each live
// node's entries are ascending, within the node, and count exactly the
// live nodes linked to them; each head slot lists the node's first
// entries; and, where parent (a block's chain predecessor, by sequence
// hash) is given, every counted link points at the linked node's true
// parent block. It returns how many links it checked against parent.
func checkKids(ix *Index, parent map[uint64]uint64) (int, error) {
	checked := 0
	type at struct {
		n   *node
		off uint32
	}
	counted := map[at]uint32{}
	var err error
	ix.nodes.each(func(n *node) {
		if err != nil || !n.linked() {
			return
		}
		counted[at{n.parent, n.poff}]++
		if parent != nil {
			head := n.data.Load().hashes[0]
			want, ok := parent[head]
			if ok {
				checked++
			}
			if ok && n.parent.data.Load().hashes[n.poff] != want {
				err = fmt.Errorf("node %d (%#x) linked at node %d offset %d, which is not its parent block", n.id, head, n.parent.id, n.poff)
			}
		}
	})
	ix.nodes.each(func(n *node) {
		if err != nil {
			return
		}
		d := n.data.Load()
		for i, e := range n.kids {
			switch {
			case i > 0 && e.off <= n.kids[i-1].off:
				err = fmt.Errorf("node %d: kid offsets out of order: %v", n.id, n.kids)
			case int(e.off) >= len(d.hashes):
				err = fmt.Errorf("node %d: kid offset %d beyond its %d blocks", n.id, e.off, len(d.hashes))
			case e.n == 0 || e.n != counted[at{n, e.off}]:
				err = fmt.Errorf("node %d offset %d: %d kids counted, %d linked", n.id, e.off, e.n, counted[at{n, e.off}])
			}
			delete(counted, at{n, e.off})
		}
		var v view
		if ix.nodes.heads.get(d.hashes[0], &v); v.kids != n.kidList() {
			err = fmt.Errorf("node %d: head slot lists kids %v, node has %v", n.id, v.kids, n.kids)
		}
	})
	if err == nil && len(counted) > 0 {
		err = fmt.Errorf("links counted by no entry: %v", counted)
	}
	return checked, err
}

// parents maps every block of the pool's sequences to its chain
// predecessor (events may also store chains outside the pool).
func (g *gen) parents() map[uint64]uint64 {
	m := map[uint64]uint64{}
	for _, s := range g.seqs {
		for i := 1; i < len(s.seq); i++ {
			m[s.seq[i]] = s.seq[i-1]
		}
	}
	return m
}

// checkChanges verifies every live node's change list against its runs,
// recomputed from scratch.
func checkChanges(ix *Index) error {
	var err error
	ix.nodes.each(func(n *node) {
		d := n.data.Load()
		if err != nil || d == nil {
			return
		}
		runs := slices.Clone(d.runs)
		want := seal(runs, nil, 0)
		for i := range runs {
			if runs[i].cend != d.runs[i].cend {
				err = fmt.Errorf("node %d run %d: cend %d, want %d", n.id, i, d.runs[i].cend, runs[i].cend)
				return
			}
		}
		if !slices.Equal(want, d.chg) {
			err = fmt.Errorf("node %d: changes %x, want %x", n.id, d.chg, want)
		}
	})
	return err
}

// TestRecordNonChain: Record takes hash lists it cannot check. Lists that
// are no chain (known hashes out of order, mixed with unknown ones) leave
// answers about those entries unspecified, but the index stays consistent:
// block and head maps match the nodes after every step, and every answer
// is well formed.
func TestRecordNonChain(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		now := time.Unix(1000, 0)
		cfg := Config{BlockSize: 4, Now: func() time.Time { return now }}
		ix, _ := New(cfg)
		g := newGen(seed, 4, newRef(cfg), 6)
		g.noRecord = true
		rng := rand.New(rand.NewPCG(seed, 77))
		for n := 0; n < 800; n++ {
			if rng.IntN(8) == 0 {
				var list []uint64
				for k := rng.IntN(12); k > 0; k-- {
					s := g.seqs[rng.IntN(len(g.seqs))].seq
					if rng.IntN(4) == 0 {
						list = append(list, rng.Uint64N(64))
					} else {
						list = append(list, s[rng.IntN(len(s))])
					}
				}
				ix.Record(g.workers[rng.IntN(len(g.workers))], list, time.Duration(1+rng.IntN(20))*time.Second)
			} else {
				switch s := g.next(); s.kind {
				case opApply:
					_ = ix.Apply(s.ev)
				case opAdvance:
					now = now.Add(s.dt)
				case opExpire:
					ix.Expire()
				case opRemoveWorker:
					ix.RemoveWorker(s.w)
				}
			}
			if err := checkMaps(ix); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, n, err)
			}
			if err := checkChanges(ix); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, n, err)
			}
			if _, err := checkKids(ix, nil); err != nil { // non-chain lists: links unchecked
				t.Fatalf("seed %d step %d: %v", seed, n, err)
			}
			q := g.seqs[rng.IntN(len(g.seqs))].seq
			if msg := checkWellFormed(ix.FindMatches(q, nil), len(q), ix); msg != "" {
				t.Fatalf("seed %d step %d: %s", seed, n, msg)
			}
		}
	}
}
