package radix

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// mix is a stand-in for XXH3 sequence hashing in tests: seq[i] depends on
// seq[i-1] and the block's content, so chains are prefix-chained.
func mix(prev, local uint64) uint64 {
	x := prev ^ (local+0x9E3779B97F4A7C15)*0xBF58476D1CE4E5B9
	x ^= x >> 31
	x *= 0x94D049BB133111EB
	x ^= x >> 29
	return x
}

func chainOf(content []uint64) []uint64 {
	out := make([]uint64, len(content))
	var prev uint64
	for i, c := range content {
		if i == 0 {
			prev = mix(0x1337, c)
		} else {
			prev = mix(prev, c)
		}
		out[i] = prev
	}
	return out
}

// ---- the naive reference ----

type refTree struct {
	maxSessions, maxFronts int
	fronts                 map[string][][]uint64 // least recent first
	lru                    []string              // least recent first
}

func newRef(maxSessions, maxFronts int) *refTree {
	return &refTree{maxSessions: maxSessions, maxFronts: maxFronts, fronts: map[string][][]uint64{}}
}

type refBlock struct {
	depth  int
	parent uint64
}

func (r *refTree) blocks() map[uint64]refBlock {
	m := map[uint64]refBlock{}
	for _, fs := range r.fronts {
		for _, f := range fs {
			for i, b := range f {
				var p uint64
				if i > 0 {
					p = f[i-1]
				}
				m[b] = refBlock{i + 1, p}
			}
		}
	}
	return m
}

func isPrefix(a, b []uint64) bool { return len(a) <= len(b) && slices.Equal(a, b[:len(a)]) }

func (r *refTree) touch(s string) {
	if i := slices.Index(r.lru, s); i >= 0 {
		r.lru = slices.Delete(r.lru, i, i+1)
	} else {
		r.fronts[s] = nil
	}
	r.lru = append(r.lru, s)
}

func (r *refTree) update(s string, h []uint64) error {
	bl := r.blocks()
	j := 0
	for j < len(h) {
		b, ok := bl[h[j]]
		if !ok || b.depth != j+1 || (j > 0 && b.parent != h[j-1]) {
			break
		}
		j++
	}
	tail := h[j:]
	for i, b := range tail {
		if _, ok := bl[b]; ok {
			if slices.Contains(h[:j], b) {
				return &CycleError{Block: b, Depth: j + 1 + i}
			}
			return &ParentConflictError{Block: b, Depth: j + 1 + i, HaveDepth: bl[b].depth}
		}
		if slices.Contains(tail[:i], b) {
			return &CycleError{Block: b, Depth: j + 1 + i}
		}
	}
	r.touch(s)
	if len(h) > 0 {
		e := slices.Clone(h)
		fs := r.fronts[s]
		done := false
		for i, f := range fs {
			if isPrefix(f, e) || isPrefix(e, f) {
				if isPrefix(f, e) {
					fs[i] = e
				}
				f := fs[i]
				fs = append(slices.Delete(fs, i, i+1), f)
				done = true
				break
			}
		}
		if !done {
			fs = append(fs, e)
			if len(fs) > r.maxFronts {
				fs = fs[1:]
			}
		}
		r.fronts[s] = fs
	}
	for len(r.lru) > r.maxSessions {
		delete(r.fronts, r.lru[0])
		r.lru = r.lru[1:]
	}
	return nil
}

func (r *refTree) stored(s string, parent uint64, hasParent bool, blocks []uint64) error {
	var prefix []uint64
	if hasParent {
		bl := r.blocks()
		b, ok := bl[parent]
		if !ok {
			return ErrUnknownBlock
		}
		prefix = make([]uint64, b.depth)
		for d, x := b.depth, parent; d > 0; d-- {
			prefix[d-1] = x
			x = bl[x].parent
		}
	}
	return r.update(s, append(prefix, blocks...))
}

func (r *refTree) remove(s string) bool {
	if _, ok := r.fronts[s]; !ok {
		return false
	}
	delete(r.fronts, s)
	i := slices.Index(r.lru, s)
	r.lru = slices.Delete(r.lru, i, i+1)
	return true
}

func (r *refTree) current(s string) []uint64 {
	fs := r.fronts[s]
	if len(fs) == 0 {
		return nil
	}
	return fs[len(fs)-1]
}

func (r *refTree) sessions(b uint64, strictDepth int) []string {
	var out []string
	for s, fs := range r.fronts {
		for _, f := range fs {
			if i := slices.Index(f, b); i >= 0 && len(f) > strictDepth {
				out = append(out, s)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r *refTree) split(s string) Share {
	cur := r.current(s)
	shared := 0
	for o, fs := range r.fronts {
		if o == s {
			continue
		}
		for _, f := range fs {
			k := 0
			for k < len(f) && k < len(cur) && f[k] == cur[k] {
				k++
			}
			shared = max(shared, k)
		}
	}
	return Share{Shared: shared, Unique: len(cur) - shared}
}

func (r *refTree) nodes() int {
	bl := r.blocks()
	kids := map[uint64]int{}
	for _, b := range bl {
		if b.depth > 1 {
			kids[b.parent]++
		}
	}
	n := 0
	for _, b := range bl {
		if b.depth == 1 || kids[b.parent] >= 2 {
			n++
		}
	}
	return n
}

// ---- structural invariants ----

func (t *RawTree) check() error {
	free := map[uint32]bool{}
	for _, n := range t.freeNodes {
		free[n] = true
	}
	blocks := 0
	var walk func(n uint32) (int32, error)
	walk = func(n uint32) (int32, error) {
		nn := &t.nodes[n]
		refs := int32(len(nn.ends))
		for i, c := range nn.children {
			cn := &t.nodes[c]
			if free[c] || cn.parent != n || cn.slot != uint32(i) || cn.base != nn.end() || len(cn.blocks) == 0 {
				return 0, fmt.Errorf("node %d: bad child %d (parent %d slot %d base %d, want base %d)", n, c, cn.parent, cn.slot, cn.base, nn.end())
			}
			r, err := walk(c)
			if err != nil {
				return 0, err
			}
			refs += r
		}
		if n != rootID {
			if refs != nn.refs || refs == 0 {
				return 0, fmt.Errorf("node %d: refs %d, counted %d", n, nn.refs, refs)
			}
			if len(nn.children) == 1 {
				return 0, fmt.Errorf("node %d: one child, not compressed", n)
			}
			maxEnd := uint32(0)
			for i, f := range nn.ends {
				fr := &t.fronts[f]
				if fr.node != n || fr.slot != uint32(i) || fr.depth <= nn.base || fr.depth > nn.end() {
					return 0, fmt.Errorf("node %d: bad end %d %+v", n, f, *fr)
				}
				if fr.hash != nn.blocks[fr.depth-nn.base-1] {
					return 0, fmt.Errorf("frontier %d: hash mismatch", f)
				}
				maxEnd = max(maxEnd, fr.depth)
			}
			if len(nn.children) == 0 && maxEnd != nn.end() {
				return 0, fmt.Errorf("leaf %d: unreferenced tail (ends at %d, node ends %d)", n, maxEnd, nn.end())
			}
			for i, b := range nn.blocks {
				l, ok := t.blocks.get(b)
				if !ok || l.node != n || l.depth != nn.base+1+uint32(i) {
					return 0, fmt.Errorf("block %#x: map %+v %v, want node %d depth %d", b, l, ok, n, nn.base+1+uint32(i))
				}
			}
			blocks += len(nn.blocks)
		}
		return refs, nil
	}
	if _, err := walk(rootID); err != nil {
		return err
	}
	if blocks != t.blocks.n {
		return fmt.Errorf("map holds %d blocks, tree %d", t.blocks.n, blocks)
	}
	for id, s := range t.byID {
		ss := &t.sessions[s]
		if ss.id != id || len(ss.fronts) > t.cfg.MaxFrontiers {
			return fmt.Errorf("session %q: bad record", id)
		}
		for _, f := range ss.fronts {
			if t.fronts[f].session != s {
				return fmt.Errorf("session %q: frontier %d owned by %d", id, f, t.fronts[f].session)
			}
		}
	}
	n := 0
	for s := t.head; s != 0; s = t.sessions[s].next {
		n++
		if n > len(t.byID) {
			return errors.New("LRU list loops")
		}
	}
	if n != len(t.byID) {
		return fmt.Errorf("LRU list has %d, map %d", n, len(t.byID))
	}
	return nil
}

// compare checks every query of t against the reference.
func compare(t *RawTree, r *refTree) error {
	if err := t.check(); err != nil {
		return err
	}
	if t.Len() != len(r.fronts) {
		return fmt.Errorf("Len %d, ref %d", t.Len(), len(r.fronts))
	}
	bl := r.blocks()
	st := t.Stats()
	if st.Blocks != len(bl) || st.Nodes != r.nodes() {
		return fmt.Errorf("Stats %+v, ref blocks %d nodes %d", st, len(bl), r.nodes())
	}
	for s, fs := range r.fronts {
		got, err := t.Lineage(s, nil)
		if err != nil || !slices.Equal(got, r.current(s)) {
			return fmt.Errorf("Lineage(%s) = %d blocks %v, ref %d blocks", s, len(got), err, len(r.current(s)))
		}
		segs, _ := t.Path(s, nil)
		total := 0
		for _, sg := range segs {
			if sg.Depth != total || got[sg.Depth] != sg.First || got[sg.Depth+sg.Len-1] != sg.Last {
				return fmt.Errorf("Path(%s) segment %+v inconsistent with lineage", s, sg)
			}
			total += sg.Len
		}
		if total != len(got) {
			return fmt.Errorf("Path(%s) covers %d of %d", s, total, len(got))
		}
		fr, _ := t.Frontiers(s, nil)
		if len(fr) != len(fs) {
			return fmt.Errorf("Frontiers(%s) = %v, ref %d", s, fr, len(fs))
		}
		for i, f := range fs {
			if fr[i].Depth != len(f) || fr[i].Hash != f[len(f)-1] {
				return fmt.Errorf("Frontiers(%s)[%d] = %+v, ref depth %d", s, i, fr[i], len(f))
			}
		}
		if err := checkJunction(t, r, got, bl); err != nil {
			return fmt.Errorf("session %s: %w", s, err)
		}
		if sh, _ := t.Split(s); sh != r.split(s) {
			return fmt.Errorf("Split(%s) = %+v, ref %+v", s, sh, r.split(s))
		}
		// SharedRefs: per block, the sessions through its segment's first
		// block, for every prefix length and a limit or none.
		for _, n := range []int{len(got), len(got) / 2, 0} {
			for _, limit := range []int{0, 2} {
				refs, err := t.SharedRefs(s, n, limit, []int32{-1})
				if err != nil || len(refs) != 1+n || refs[0] != -1 {
					return fmt.Errorf("SharedRefs(%s, %d, %d) = %v %v", s, n, limit, refs, err)
				}
				for _, sg := range segs {
					want := len(r.sessions(sg.First, 0))
					if limit > 0 {
						want = min(want, limit)
					}
					for i := sg.Depth; i < min(n, sg.Depth+sg.Len); i++ {
						if refs[1+i] != int32(want) {
							return fmt.Errorf("SharedRefs(%s, %d, %d)[%d] = %d, ref %d", s, n, limit, i, refs[1+i], want)
						}
					}
				}
			}
		}
		if cur := r.current(s); len(cur) > 0 {
			under, _ := t.Under(s, nil)
			slices.Sort(under)
			if want := r.sessions(cur[len(cur)-1], len(cur)); !slices.Equal(under, want) {
				return fmt.Errorf("Under(%s) = %v, ref %v", s, under, want)
			}
		}
	}
	for b := range bl {
		got, err := t.Sessions(b, nil)
		slices.Sort(got)
		if want := r.sessions(b, 0); err != nil || !slices.Equal(got, want) {
			return fmt.Errorf("Sessions(%#x) = %v %v, ref %v", b, got, err, want)
		}
		if n, err := t.CountSessions(b, 0); err != nil || n != len(got) {
			return fmt.Errorf("CountSessions(%#x) = %d %v, Sessions lists %d", b, n, err, len(got))
		}
		for limit := 1; limit <= 3; limit++ {
			if n, err := t.CountSessions(b, limit); err != nil || n != min(limit, len(got)) {
				return fmt.Errorf("CountSessions(%#x, %d) = %d %v, Sessions lists %d", b, limit, n, err, len(got))
			}
		}
	}
	return nil
}

// ---- random session trees ----

type op struct {
	kind      string // update, stored, remove
	session   string
	chain     []uint64
	parent    uint64
	hasParent bool
}

func (o op) String() string {
	switch o.kind {
	case "remove":
		return fmt.Sprintf("remove(%s)", o.session)
	case "stored":
		return fmt.Sprintf("stored(%s, parent=%#x/%v, %d blocks)", o.session, o.parent, o.hasParent, len(o.chain))
	}
	return fmt.Sprintf("update(%s, %d blocks, last=%#x)", o.session, len(o.chain), o.chain[len(o.chain)-1:])
}

type gen struct {
	rng      *rand.Rand
	contents map[string][]uint64 // each session's latest content
	next     uint64
}

func (g *gen) fresh(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		g.next++
		out[i] = g.next
	}
	return out
}

func (g *gen) pick() string {
	names := make([]string, 0, len(g.contents))
	for s := range g.contents {
		names = append(names, s)
	}
	slices.Sort(names)
	return names[g.rng.IntN(len(names))]
}

func (g *gen) op(step int, live *refTree) op {
	rng := g.rng
	if len(g.contents) == 0 || rng.IntN(10) == 0 {
		// A new root session on one of three system prompts.
		s := fmt.Sprintf("r%d", step)
		sys := uint64(rng.IntN(3)) + 1<<40
		c := append([]uint64{sys, sys + 10}, g.fresh(1+rng.IntN(6))...)
		g.contents[s] = c
		return op{kind: "update", session: s, chain: chainOf(c)}
	}
	s := g.pick()
	c := g.contents[s]
	switch k := rng.IntN(20); {
	case k < 8: // the next turn extends the context
		c = append(slices.Clone(c), g.fresh(1+rng.IntN(5))...)
	case k < 10: // a subagent forks from a prefix of its parent
		child := fmt.Sprintf("%s/a%d", s, step)
		cc := append(slices.Clone(c[:1+rng.IntN(len(c))]), g.fresh(1+rng.IntN(4))...)
		g.contents[child] = cc
		return op{kind: "update", session: child, chain: chainOf(cc)}
	case k < 11: // compaction: a rewritten context
		c = append(slices.Clone(c[:min(2, len(c))]), g.fresh(2+rng.IntN(3))...)
	case k < 12: // a side request sharing only the system prompt
		side := append(slices.Clone(c[:1]), g.fresh(1+rng.IntN(2))...)
		return op{kind: "update", session: s, chain: chainOf(side)}
	case k < 13: // a resend of an earlier prefix
		return op{kind: "update", session: s, chain: chainOf(c[:1+rng.IntN(len(c))])}
	case k < 15: // a stored event for the session's next blocks
		ext := append(slices.Clone(c), g.fresh(1+rng.IntN(3))...)
		ch := chainOf(ext)
		at := rng.IntN(len(c) + 1)
		g.contents[s] = ext
		if at == 0 {
			return op{kind: "stored", session: s, chain: ch}
		}
		return op{kind: "stored", session: s, chain: ch[at:], parent: ch[at-1], hasParent: true}
	case k < 16: // remove
		delete(g.contents, s)
		return op{kind: "remove", session: s}
	case k < 17: // a cycle: the chain repeats one of its blocks
		ch := chainOf(append(slices.Clone(c), g.fresh(2)...))
		return op{kind: "update", session: s, chain: append(ch, ch[rng.IntN(len(ch))])}
	case k < 18: // a conflict: a block the tree holds at another depth
		ch := chainOf(c)
		bl := live.blocks()
		for b, info := range bl {
			if info.depth != len(ch)+1 && !slices.Contains(ch, b) {
				return op{kind: "update", session: s, chain: append(ch, b)}
			}
		}
		return op{kind: "update", session: s, chain: ch}
	default: // a stored event under an unknown parent
		return op{kind: "stored", session: s, chain: chainOf(g.fresh(2)), parent: 12345, hasParent: true}
	}
	g.contents[s] = c
	return op{kind: "update", session: s, chain: chainOf(c)}
}

func apply(t *RawTree, o op) error {
	switch o.kind {
	case "remove":
		t.RemoveSession(o.session)
		return nil
	case "stored":
		return t.Stored(o.session, o.parent, o.hasParent, o.chain)
	}
	return t.UpdateFromMatch(o.session, o.chain)
}

func applyRef(r *refTree, o op) error {
	switch o.kind {
	case "remove":
		r.remove(o.session)
		return nil
	case "stored":
		return r.stored(o.session, o.parent, o.hasParent, o.chain)
	}
	return r.update(o.session, o.chain)
}

func sameErr(a, b error) bool {
	var ca, cb *CycleError
	var pa, pb *ParentConflictError
	switch {
	case a == nil || b == nil:
		return a == nil && b == nil
	case errors.As(a, &ca):
		return errors.As(b, &cb) && *ca == *cb
	case errors.As(a, &pa):
		return errors.As(b, &pb) && *pa == *pb
	}
	return errors.Is(a, ErrUnknownBlock) && errors.Is(b, ErrUnknownBlock)
}

func TestDifferential(t *testing.T) {
	seeds, steps := 80, 250
	if testing.Short() {
		seeds = 20
	}
	for seed := range seeds {
		maxS, maxF := 4+seed%9, 1+seed%4
		tr, err := NewRawTree(Config{MaxSessions: maxS, MaxFrontiers: maxF})
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(maxS, maxF)
		g := &gen{rng: rand.New(rand.NewPCG(uint64(seed), 7)), contents: map[string][]uint64{}}
		var log []string
		for step := range steps {
			o := g.op(step, ref)
			log = append(log, o.String())
			errT, errR := apply(tr, o), applyRef(ref, o)
			if !sameErr(errT, errR) {
				t.Fatalf("seed %d step %d: %s: err %v, ref %v\nfailing prefix:\n  %s",
					seed, step, o, errT, errR, strings.Join(log, "\n  "))
			}
			for s := range g.contents { // evicted sessions restart from scratch
				if _, ok := ref.fronts[s]; !ok && s != o.session {
					delete(g.contents, s)
				}
			}
			if err := compare(tr, ref); err != nil {
				t.Fatalf("seed %d step %d: after %s: %v\nfailing prefix (maxSessions %d, maxFrontiers %d):\n  %s",
					seed, step, o, err, maxS, maxF, strings.Join(log, "\n  "))
			}
		}
	}
}

// checkJunction checks Junction on the session's lineage and on chains
// that leave it after every block (a fresh block re-chained from there on),
// against the naive answer: the longest prefix whose every block the
// reference holds at its depth.
func checkJunction(t *RawTree, r *refTree, lineage []uint64, bl map[uint64]refBlock) error {
	naive := func(chain []uint64) int {
		n := 0
		for n < len(chain) {
			if b, ok := bl[chain[n]]; !ok || b.depth != n+1 {
				break
			}
			n++
		}
		return n
	}
	if got, want := t.Junction(lineage), naive(lineage); got != want || want != len(lineage) {
		return fmt.Errorf("Junction(lineage) = %d, naive %d, lineage %d blocks", got, want, len(lineage))
	}
	for k := 0; k <= len(lineage); k++ {
		chain := append(slices.Clone(lineage[:k]), 0, 0)
		prev := uint64(0x51b)
		if k > 0 {
			prev = lineage[k-1]
		}
		chain[k] = mix(prev, 0xfeed0000+uint64(k))
		chain[k+1] = mix(chain[k], 0xbeef)
		if got, want := t.Junction(chain), naive(chain); got != want || want != k {
			return fmt.Errorf("Junction(lineage[:%d]+fresh) = %d, naive %d", k, got, want)
		}
	}
	if t.Junction(nil) != 0 {
		return fmt.Errorf("Junction(nil) = %d", t.Junction(nil))
	}
	return nil
}
