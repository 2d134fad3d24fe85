package radix

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"
)

// Defaults for Config.
const (
	DefaultMaxSessions  = 65536
	DefaultMaxFrontiers = 4
)

var (
	// ErrUnknownSession reports a session the tree does not hold.
	ErrUnknownSession = errors.New("radix: unknown session")
	// ErrUnknownBlock reports a block (or an event's parent block) the tree
	// does not hold.
	ErrUnknownBlock = errors.New("radix: unknown block")
	// ErrNoSession reports an empty session id.
	ErrNoSession = errors.New("radix: empty session id")
	// ErrLineage is matched (errors.Is) by *CycleError and
	// *ParentConflictError.
	ErrLineage = errors.New("radix: inconsistent lineage")
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("radix: invalid config")
)

// CycleError reports a chain in which a block would be its own ancestor:
// it appears twice in one lineage.
type CycleError struct {
	Block uint64
	Depth int // depth (1-based) at which it appeared again
}

func (e *CycleError) Error() string {
	return fmt.Sprintf("radix: block %#x repeats at depth %d (cycle)", e.Block, e.Depth)
}

// Is makes errors.Is(err, ErrLineage) true.
func (e *CycleError) Is(target error) bool { return target == ErrLineage }

// ParentConflictError reports a block the tree already holds under a
// different parent (or at a different depth).
type ParentConflictError struct {
	Block     uint64
	Depth     int // depth the chain puts it at
	HaveDepth int // depth the tree has it at
}

func (e *ParentConflictError) Error() string {
	return fmt.Sprintf("radix: block %#x at depth %d already has another parent (held at depth %d)",
		e.Block, e.Depth, e.HaveDepth)
}

// Is makes errors.Is(err, ErrLineage) true.
func (e *ParentConflictError) Is(target error) bool { return target == ErrLineage }

// Config configures a tree. Zero fields mean the documented defaults.
type Config struct {
	// MaxSessions bounds the sessions held (default 65,536); beyond it the
	// least recently updated session is removed.
	MaxSessions int
	// MaxFrontiers bounds how many divergent branches one session keeps
	// (default 4): a rewritten context (compaction) or a side request with
	// another prefix opens a new frontier; the oldest is released.
	MaxFrontiers int
	// OnEvict, if set, is called with each session removed by the
	// MaxSessions bound (Tree only; after its lock is released).
	OnEvict func(session string)
}

func (c *Config) fill() error {
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxFrontiers == 0 {
		c.MaxFrontiers = DefaultMaxFrontiers
	}
	if c.MaxSessions < 0 || c.MaxFrontiers < 0 {
		return fmt.Errorf("%w: MaxSessions %d, MaxFrontiers %d", ErrConfig, c.MaxSessions, c.MaxFrontiers)
	}
	return nil
}

const (
	nilID  = 0
	rootID = 1
)

// node is a compressed edge: a run of blocks with no branching inside.
// Block i of the node has depth base+1+i.
type node struct {
	blocks   []uint64
	base     uint32   // depth of the block before blocks[0]
	parent   uint32   // node id
	slot     uint32   // index in the parent's children
	children []uint32 // node ids
	ends     []uint32 // frontier ids ending inside this node
	refs     int32    // frontiers whose path passes through this node
	stamp    uint32   // query scratch: epoch of own
	own      int32    // query scratch: own frontiers through this node
}

func (n *node) end() uint32 { return n.base + uint32(len(n.blocks)) }

type frontier struct {
	session uint32
	node    uint32
	depth   uint32
	slot    uint32 // index in the node's ends
	hash    uint64 // block at depth
}

type sess struct {
	id         string
	fronts     []uint32 // frontier ids, least recently used first
	prev, next uint32   // LRU list of session ids (0 = none)
	mark       uint32   // query scratch
}

// pos is a position in the tree: just after the block at depth on node's
// path. The root position is {rootID, 0}.
type pos struct{ node, depth uint32 }

// RawTree is the synchronous core of Tree: the same operations, no
// locking. It is not safe for concurrent use; queries also write scratch
// fields, so even concurrent reads need external locking.
type RawTree struct {
	cfg       Config
	blocks    blockMap
	nodes     []node
	freeNodes []uint32
	fronts    []frontier
	freeFront []uint32
	sessions  []sess
	freeSess  []uint32
	byID      map[string]uint32
	head      uint32 // most recently updated session
	tail      uint32 // least recently updated session
	epoch     uint32
	evicted   []string
	stack     []uint32 // collect's and walk's scratch
	path      []uint32 // SharedRefs' scratch
}

// NewRawTree returns an empty RawTree.
func NewRawTree(cfg Config) (*RawTree, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	t := &RawTree{
		cfg:      cfg,
		nodes:    make([]node, 2), // 0: nil, 1: root
		fronts:   make([]frontier, 1),
		sessions: make([]sess, 1),
		byID:     make(map[string]uint32),
	}
	t.blocks.init(minMapSlots)
	return t, nil
}

// ---- allocation ----

func (t *RawTree) newNode(parent uint32, base uint32, blocks []uint64) uint32 {
	var id uint32
	if k := len(t.freeNodes); k > 0 {
		id = t.freeNodes[k-1]
		t.freeNodes = t.freeNodes[:k-1]
	} else {
		t.nodes = append(t.nodes, node{})
		id = uint32(len(t.nodes) - 1)
	}
	t.nodes[id] = node{blocks: blocks, base: base, parent: parent}
	return id
}

func (t *RawTree) addChild(p, c uint32) {
	pn := &t.nodes[p]
	t.nodes[c].parent = p
	t.nodes[c].slot = uint32(len(pn.children))
	pn.children = append(pn.children, c)
}

func (t *RawTree) removeChild(p, c uint32) {
	pn := &t.nodes[p]
	i := t.nodes[c].slot
	last := pn.children[len(pn.children)-1]
	pn.children[i] = last
	t.nodes[last].slot = i
	pn.children = pn.children[:len(pn.children)-1]
}

func (t *RawTree) addEnd(n, f uint32) {
	nn := &t.nodes[n]
	t.fronts[f].node = n
	t.fronts[f].slot = uint32(len(nn.ends))
	nn.ends = append(nn.ends, f)
}

func (t *RawTree) removeEnd(n, f uint32) {
	nn := &t.nodes[n]
	i := t.fronts[f].slot
	last := nn.ends[len(nn.ends)-1]
	nn.ends[i] = last
	t.fronts[last].slot = i
	nn.ends = nn.ends[:len(nn.ends)-1]
}

// ---- sessions and LRU ----

func (t *RawTree) lruUnlink(s uint32) {
	ss := &t.sessions[s]
	if ss.prev != 0 {
		t.sessions[ss.prev].next = ss.next
	} else {
		t.head = ss.next
	}
	if ss.next != 0 {
		t.sessions[ss.next].prev = ss.prev
	} else {
		t.tail = ss.prev
	}
	ss.prev, ss.next = 0, 0
}

func (t *RawTree) lruFront(s uint32) {
	ss := &t.sessions[s]
	ss.next = t.head
	if t.head != 0 {
		t.sessions[t.head].prev = s
	}
	t.head = s
	if t.tail == 0 {
		t.tail = s
	}
}

func (t *RawTree) touch(s uint32) {
	if t.head != s {
		t.lruUnlink(s)
		t.lruFront(s)
	}
}

// session returns the id of session name, creating it (most recent) if
// needed. The caller must call t.bound() afterwards.
func (t *RawTree) session(name string) uint32 {
	if s, ok := t.byID[name]; ok {
		t.touch(s)
		return s
	}
	var s uint32
	if k := len(t.freeSess); k > 0 {
		s = t.freeSess[k-1]
		t.freeSess = t.freeSess[:k-1]
	} else {
		t.sessions = append(t.sessions, sess{})
		s = uint32(len(t.sessions) - 1)
	}
	t.sessions[s] = sess{id: name}
	t.byID[name] = s
	t.lruFront(s)
	return s
}

// bound evicts least recently updated sessions beyond MaxSessions.
func (t *RawTree) bound() {
	for len(t.byID) > t.cfg.MaxSessions && t.tail != 0 {
		id := t.sessions[t.tail].id
		t.removeSession(t.tail)
		if t.cfg.OnEvict != nil {
			t.evicted = append(t.evicted, id)
		}
	}
}

// ---- positions ----

// blockAt returns the block at depth d (1 ≤ d ≤ p.depth) on p's path,
// walking up from p's node: O(depth in nodes).
func (t *RawTree) blockAt(p pos, d uint32) uint64 {
	n := p.node
	for t.nodes[n].base >= d {
		n = t.nodes[n].parent
	}
	nn := &t.nodes[n]
	return nn.blocks[d-nn.base-1]
}

// onPath reports whether position a lies on the path to position b.
func (t *RawTree) onPath(a, b pos) bool {
	if a.depth == 0 {
		return true
	}
	if a.depth > b.depth {
		return false
	}
	an := &t.nodes[a.node]
	return t.blockAt(b, a.depth) == an.blocks[a.depth-an.base-1]
}

func (t *RawTree) posOf(l loc) pos { return pos{l.node, l.depth} }

// ---- structure edits ----

// split cuts node n after depth d (base < d < end) into a head (depths up
// to d) and a tail (the rest, with n's children), and returns the head.
// The smaller part gets the new node id, so the cost is O(min(head, tail))
// block relabels: a subagent forking a long context near its start, or
// near its end, is cheap.
func (t *RawTree) split(n uint32, d uint32) uint32 {
	nn := &t.nodes[n]
	cut := int(d - nn.base)
	if cut <= len(nn.blocks)-cut {
		// New head; n keeps the tail (and its id, children and deep ends).
		h := t.newNode(nn.parent, nn.base, slices.Clone(t.nodes[n].blocks[:cut]))
		nn, hn := &t.nodes[n], &t.nodes[h]
		hn.slot = nn.slot
		t.nodes[nn.parent].children[nn.slot] = h
		nn.blocks = slices.Clip(nn.blocks[cut:])
		nn.base = d
		hn.refs = nn.refs
		moved := t.moveEnds(n, h, func(depth uint32) bool { return depth <= d })
		t.nodes[n].refs -= moved
		t.addChild(h, n)
		for i, b := range t.nodes[h].blocks {
			t.blocks.set(b, loc{h, t.nodes[h].base + 1 + uint32(i)})
		}
		return h
	}
	// New tail; n keeps the head.
	m := t.newNode(n, d, slices.Clone(t.nodes[n].blocks[cut:]))
	nn, mn := &t.nodes[n], &t.nodes[m]
	nn.blocks = nn.blocks[:cut:cut]
	mn.children, nn.children = nn.children, nil
	for i, c := range mn.children {
		t.nodes[c].parent = m
		t.nodes[c].slot = uint32(i)
	}
	t.moveEnds(n, m, func(depth uint32) bool { return depth > d })
	t.nodes[m].refs = t.nodes[n].refs - int32(len(t.nodes[n].ends))
	t.addChild(n, m)
	for i, b := range t.nodes[m].blocks {
		t.blocks.set(b, loc{m, d + 1 + uint32(i)})
	}
	return n
}

// moveEnds moves the frontiers ending on node from whose depth satisfies
// move to node to, and returns how many moved.
func (t *RawTree) moveEnds(from, to uint32, move func(depth uint32) bool) int32 {
	ends := t.nodes[from].ends
	var moved int32
	for i := 0; i < len(ends); {
		f := ends[i]
		if move(t.fronts[f].depth) {
			t.removeEnd(from, f)
			t.addEnd(to, f)
			ends = t.nodes[from].ends
			moved++
			continue
		}
		i++
	}
	return moved
}

// merge folds node n and its only child into one node, relabelling the
// smaller of the two. O(min(blocks of n, blocks of the child)) relabels.
func (t *RawTree) merge(n uint32) {
	c := t.nodes[n].children[0]
	if len(t.nodes[c].blocks) <= len(t.nodes[n].blocks) {
		cn := t.nodes[c]
		nn := &t.nodes[n]
		for i, b := range cn.blocks {
			t.blocks.set(b, loc{n, cn.base + 1 + uint32(i)})
		}
		nn.blocks = append(nn.blocks, cn.blocks...)
		nn.children = cn.children
		for _, g := range cn.children {
			t.nodes[g].parent = n
		}
		for _, f := range cn.ends {
			t.addEnd(n, f)
		}
		t.freeNode(c)
		return
	}
	// The child is bigger: it absorbs n and takes n's place.
	nn := t.nodes[n]
	cn := &t.nodes[c]
	for i, b := range nn.blocks {
		t.blocks.set(b, loc{c, nn.base + 1 + uint32(i)})
	}
	cn.blocks = append(slices.Clip(nn.blocks), cn.blocks...)
	cn.base, cn.parent, cn.slot, cn.refs = nn.base, nn.parent, nn.slot, nn.refs
	t.nodes[nn.parent].children[nn.slot] = c
	for _, f := range nn.ends {
		t.addEnd(c, f)
	}
	t.freeNode(n)
}

func (t *RawTree) freeNode(n uint32) {
	t.nodes[n] = node{}
	t.freeNodes = append(t.freeNodes, n)
}

// tidy keeps edges compressed: a non-root node left with one child (its
// sibling released) merges with it. Frontiers may end inside a node, so
// only branching splits nodes.
func (t *RawTree) tidy(n uint32) {
	if n != rootID && len(t.nodes[n].children) == 1 {
		t.merge(n)
	}
}

// insertTail hangs tail after position p, checking that every block is
// new to the tree and appears once. It returns the end position. On error
// nothing changes.
func (t *RawTree) insertTail(p pos, tail []uint64) (pos, error) {
	if len(tail) == 0 {
		return p, nil
	}
	pn := &t.nodes[p.node]
	inPlace := p.node != rootID && p.depth == pn.end() && len(pn.children) == 0
	target := p.node
	if !inPlace {
		target = t.newNode(nilID, p.depth, nil) // linked below once valid
	}
	t.blocks.reserve(len(tail))
	for i, h := range tail {
		if i%touchBatch == 0 {
			t.blocks.touch(tail[i:min(i+touchBatch, len(tail))])
		}
		if t.blocks.insertNoGrow(h, loc{target, p.depth + 1 + uint32(i)}) {
			continue
		}
		for _, g := range tail[:i] {
			t.blocks.delete(g)
		}
		if !inPlace {
			t.freeNode(target)
		}
		depth := int(p.depth) + 1 + i
		if l, ok := t.blocks.get(h); ok && !t.onPath(t.posOf(l), p) {
			return p, &ParentConflictError{Block: h, Depth: depth, HaveDepth: int(l.depth)}
		}
		return p, &CycleError{Block: h, Depth: depth} // on p's path, or repeated in tail
	}
	if inPlace {
		t.nodes[p.node].blocks = append(t.nodes[p.node].blocks, tail...)
		return pos{target, p.depth + uint32(len(tail))}, nil
	}
	at := p.node
	if at != rootID && p.depth < t.nodes[at].end() {
		at = t.split(at, p.depth)
	}
	t.nodes[target].blocks = append(make([]uint64, 0, len(tail)), tail...)
	t.addChild(at, target)
	return pos{target, p.depth + uint32(len(tail))}, nil
}

// addRefs adds delta to the refs of every node from n up to (excluding)
// stop.
func (t *RawTree) addRefs(n, stop uint32, delta int32) {
	for ; n != stop && n != nilID; n = t.nodes[n].parent {
		t.nodes[n].refs += delta
	}
}

// reach records that session s now references the path to e. A frontier
// of s on that path advances to e; if e lies on a frontier's path nothing
// changes; otherwise e opens a new frontier (the least recent beyond
// MaxFrontiers is released). Frontiers of one session therefore never lie
// on each other's paths.
func (t *RawTree) reach(s uint32, e pos) {
	if e.depth == 0 {
		return
	}
	for i, f := range t.sessions[s].fronts {
		fr := t.fronts[f]
		fp := pos{fr.node, fr.depth}
		switch {
		case t.onPath(fp, e):
			// The session extends this frontier: advance it. fr.node is
			// e.node or one of its ancestors.
			old := fr.node
			t.fronts[f].depth = e.depth
			t.fronts[f].hash = t.blockAt(e, e.depth)
			t.mru(s, i)
			if old != e.node {
				t.addRefs(e.node, old, 1)
				t.removeEnd(old, f)
				t.addEnd(e.node, f)
			}
			return
		case t.onPath(e, fp):
			// Already referenced (a resend of an earlier prefix).
			t.mru(s, i)
			return
		}
	}
	f := t.newFrontier(s)
	t.fronts[f].depth = e.depth
	t.fronts[f].hash = t.blockAt(e, e.depth)
	t.addEnd(e.node, f)
	t.addRefs(e.node, nilID, 1)
	ss := &t.sessions[s]
	ss.fronts = append(ss.fronts, f)
	if len(ss.fronts) > t.cfg.MaxFrontiers {
		t.dropFrontier(s, 0)
	}
}

// mru moves frontier i of s to the most-recent end.
func (t *RawTree) mru(s uint32, i int) {
	fs := t.sessions[s].fronts
	f := fs[i]
	copy(fs[i:], fs[i+1:])
	fs[len(fs)-1] = f
}

func (t *RawTree) newFrontier(s uint32) uint32 {
	var f uint32
	if k := len(t.freeFront); k > 0 {
		f = t.freeFront[k-1]
		t.freeFront = t.freeFront[:k-1]
	} else {
		t.fronts = append(t.fronts, frontier{})
		f = uint32(len(t.fronts) - 1)
	}
	t.fronts[f] = frontier{session: s}
	return f
}

// dropFrontier releases frontier i of session s and every block no other
// frontier references.
func (t *RawTree) dropFrontier(s uint32, i int) {
	ss := &t.sessions[s]
	f := ss.fronts[i]
	ss.fronts = append(ss.fronts[:i], ss.fronts[i+1:]...)
	n := t.fronts[f].node
	t.removeEnd(n, f)
	t.fronts[f] = frontier{}
	t.freeFront = append(t.freeFront, f)
	t.addRefs(n, nilID, -1)
	t.release(n)
}

// release deletes the unreferenced nodes from n upwards, trims the
// surviving node's unreferenced tail, and re-compresses.
func (t *RawTree) release(n uint32) {
	for n != rootID && t.nodes[n].refs == 0 {
		nn := &t.nodes[n]
		t.blocks.deleteAll(nn.blocks)
		p := nn.parent
		t.removeChild(p, n)
		t.freeNode(n)
		n = p
	}
	if n == rootID {
		return
	}
	nn := &t.nodes[n]
	if len(nn.children) == 0 {
		maxEnd := nn.base
		for _, f := range nn.ends {
			maxEnd = max(maxEnd, t.fronts[f].depth)
		}
		if keep := maxEnd - nn.base; int(keep) < len(nn.blocks) {
			t.blocks.deleteAll(nn.blocks[keep:])
			nn.blocks = nn.blocks[:keep]
		}
	}
	t.tidy(n)
}

func (t *RawTree) removeSession(s uint32) {
	for len(t.sessions[s].fronts) > 0 {
		t.dropFrontier(s, len(t.sessions[s].fronts)-1)
	}
	t.lruUnlink(s)
	delete(t.byID, t.sessions[s].id)
	t.sessions[s] = sess{}
	t.freeSess = append(t.freeSess, s)
}

// ---- updates ----

// junction returns how many leading blocks of chain the tree already holds
// on one path. It trusts the prefix property of sequence hashes (a block's
// hash commits to every block before it): with a frontier of s on chain it
// costs one lookup; otherwise a binary search, O(log len(chain)) lookups.
func (t *RawTree) junction(s uint32, chain []uint64) int {
	present := func(i int) bool {
		l, ok := t.blocks.get(chain[i])
		return ok && l.depth == uint32(i+1)
	}
	lo := 0 // chain[:lo] is known present
	if s != 0 {
		fs := t.sessions[s].fronts
		for k := len(fs) - 1; k >= 0; k-- {
			fr := &t.fronts[fs[k]]
			if d := int(fr.depth); d <= len(chain) && chain[d-1] == fr.hash && d > lo {
				lo = d
				break
			}
		}
	}
	if lo == len(chain) || !present(lo) {
		return lo
	}
	if present(len(chain) - 1) {
		return len(chain)
	}
	// present(lo) is true and present(len-1) false: find the boundary.
	a, b := lo, len(chain)-1
	for b-a > 1 {
		m := int(uint(a+b) >> 1)
		if present(m) {
			a = m
		} else {
			b = m
		}
	}
	return a + 1
}

// Junction returns how many leading blocks of chain (root-first sequence
// hashes, prefix-chained) the tree holds on one path: the prefix chain
// shares with the sessions the tree knows, such as a new session's prompt
// sharing a system prompt or a task with others. It changes nothing and
// costs O(log len(chain)) lookups.
func (t *RawTree) Junction(chain []uint64) int {
	if len(chain) == 0 {
		return 0
	}
	return t.junction(0, chain)
}

// UpdateFromMatch records that session's request context is chain, the
// root-first sequence hashes of its full blocks, as routed. Blocks the tree
// already holds are shared; only the new tail is inserted, so a request
// that extends the session's previous context costs O(new blocks).
//
// chain must be prefix-chained (flashindex sequence hashes): the tree
// checks only the block where the new tail joins, never the whole prefix.
// A tail block the tree already holds elsewhere yields a
// *ParentConflictError; a block repeated in the chain a *CycleError; on
// error nothing changes. The tree keeps no reference to chain.
func (t *RawTree) UpdateFromMatch(session string, chain []uint64) error {
	if session == "" {
		return ErrNoSession
	}
	s := t.byID[session]
	j := 0
	if len(chain) > 0 {
		j = t.junction(s, chain)
	}
	p := pos{rootID, 0}
	if j > 0 {
		l, _ := t.blocks.get(chain[j-1])
		p = t.posOf(l)
	}
	e, err := t.insertTail(p, chain[j:])
	if err != nil {
		return err
	}
	s = t.session(session)
	t.reach(s, e)
	t.bound()
	return nil
}

// Stored attributes an engine's stored-block event to session, whose
// request caused it: blocks (root-first sequence hashes) follow parent, or
// start a chain when hasParent is false. Blocks already on that path are
// shared; the rest are inserted; the session then references the path. An
// unknown parent yields ErrUnknownBlock; inconsistent lineage a
// *CycleError or *ParentConflictError; on error nothing changes.
func (t *RawTree) Stored(session string, parent uint64, hasParent bool, blocks []uint64) error {
	if session == "" {
		return ErrNoSession
	}
	p := pos{rootID, 0}
	if hasParent {
		l, ok := t.blocks.get(parent)
		if !ok {
			return fmt.Errorf("%w: parent %#x", ErrUnknownBlock, parent)
		}
		p = t.posOf(l)
	}
	// Walk along blocks the tree already holds at the next position.
	i := 0
	for ; i < len(blocks); i++ {
		l, ok := t.blocks.get(blocks[i])
		if !ok || l.depth != p.depth+1 {
			break
		}
		next := t.posOf(l)
		if next.node != p.node {
			nn := &t.nodes[next.node]
			if nn.parent != p.node || nn.base != p.depth || p.depth != t.nodes[p.node].end() {
				break
			}
		}
		p = next
	}
	e, err := t.insertTail(p, blocks[i:])
	if err != nil {
		return err
	}
	t.reach(t.session(session), e)
	t.bound()
	return nil
}

// RemoveSession forgets session and releases every block only it
// referenced. It reports whether the session was held.
func (t *RawTree) RemoveSession(session string) bool {
	s, ok := t.byID[session]
	if !ok {
		return false
	}
	t.removeSession(s)
	return true
}

// TakeEvicted returns the sessions removed by the MaxSessions bound since
// the last call and clears the list. The caller owns the slice. Evictions
// are recorded only when Config.OnEvict is set (RawTree never calls it).
func (t *RawTree) TakeEvicted() []string {
	e := t.evicted
	t.evicted = nil
	return e
}

// ---- queries ----

func (t *RawTree) current(session string) (uint32, *frontier, error) {
	s, ok := t.byID[session]
	if !ok {
		return 0, nil, fmt.Errorf("%w: %q", ErrUnknownSession, session)
	}
	fs := t.sessions[s].fronts
	if len(fs) == 0 {
		return s, nil, nil
	}
	return s, &t.fronts[fs[len(fs)-1]], nil
}

// Segment is one node of a session's path: a run of Len blocks from
// depth Depth+1, First and Last being its first and last block hashes.
type Segment struct {
	First, Last uint64
	Depth       int // blocks before First
	Len         int
}

// Path appends to dst the segments (compressed edges) of session's most
// recent lineage, root first, cut at its frontier. O(depth in nodes).
func (t *RawTree) Path(session string, dst []Segment) ([]Segment, error) {
	_, f, err := t.current(session)
	if err != nil || f == nil {
		return dst, err
	}
	start := len(dst)
	d := f.depth
	for n := f.node; n != rootID; n = t.nodes[n].parent {
		nn := &t.nodes[n]
		k := min(d, nn.end()) - nn.base
		dst = append(dst, Segment{First: nn.blocks[0], Last: nn.blocks[k-1], Depth: int(nn.base), Len: int(k)})
	}
	for i, j := start, len(dst)-1; i < j; i, j = i+1, j-1 {
		dst[i], dst[j] = dst[j], dst[i]
	}
	return dst, nil
}

// Lineage appends session's most recent lineage (root-first block hashes,
// up to its frontier) to dst. It copies one run per node.
func (t *RawTree) Lineage(session string, dst []uint64) ([]uint64, error) {
	_, f, err := t.current(session)
	if err != nil || f == nil {
		return dst, err
	}
	start := len(dst)
	dst = slices.Grow(dst, int(f.depth))[:start+int(f.depth)]
	out := dst[start:]
	d := f.depth
	for n := f.node; n != rootID; n = t.nodes[n].parent {
		nn := &t.nodes[n]
		k := min(d, nn.end()) - nn.base
		copy(out[nn.base:nn.base+k], nn.blocks[:k])
	}
	return dst, nil
}

// Frontier is the end of one branch a session references.
type Frontier struct {
	Hash  uint64 // last block
	Depth int    // blocks on the branch
}

// Frontiers appends session's frontiers to dst, least recently updated
// first (the last is the one Lineage follows).
func (t *RawTree) Frontiers(session string, dst []Frontier) ([]Frontier, error) {
	s, ok := t.byID[session]
	if !ok {
		return dst, fmt.Errorf("%w: %q", ErrUnknownSession, session)
	}
	for _, f := range t.sessions[s].fronts {
		dst = append(dst, Frontier{Hash: t.fronts[f].hash, Depth: int(t.fronts[f].depth)})
	}
	return dst, nil
}

func (t *RawTree) nextEpoch() uint32 {
	t.epoch++
	if t.epoch == 0 { // wrapped: clear every stamp once
		for i := range t.nodes {
			t.nodes[i].stamp = 0
		}
		for i := range t.sessions {
			t.sessions[i].mark = 0
		}
		t.epoch = 1
	}
	return t.epoch
}

// collect appends the sessions with a frontier on the subtree below
// position p (deeper than p.depth when strict, else at least p.depth).
func (t *RawTree) collect(p pos, strict bool, dst []string) []string {
	ep := t.nextEpoch()
	t.walk(p, strict, ep, func(s uint32) bool {
		dst = append(dst, t.sessions[s].id)
		return true
	})
	return dst
}

// walk calls found once for each session (marked with ep) with a
// frontier on the subtree below p (deeper than p.depth when strict, else
// at least p.depth), until found returns false.
func (t *RawTree) walk(p pos, strict bool, ep uint32, found func(uint32) bool) {
	more := true
	add := func(f uint32) {
		s := t.fronts[f].session
		if t.sessions[s].mark != ep {
			t.sessions[s].mark = ep
			more = found(s)
		}
	}
	nn := &t.nodes[p.node]
	for _, f := range nn.ends {
		if d := t.fronts[f].depth; more && (d > p.depth || (!strict && d == p.depth)) {
			add(f)
		}
	}
	stack := append(t.stack[:0], nn.children...)
	for more && len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, f := range t.nodes[n].ends {
			if more {
				add(f)
			}
		}
		stack = append(stack, t.nodes[n].children...)
	}
	t.stack = stack[:0]
}

// CountSessions is len(Sessions(block)), without listing them, counted up
// to limit when limit > 0: it stops at the limit's session, so a result
// equal to limit means at least that many. A block many sessions share (a
// system prompt) has them all below it, and an exact count walks all of
// their paths.
func (t *RawTree) CountSessions(block uint64, limit int) (int, error) {
	l, ok := t.blocks.get(block)
	if !ok {
		return 0, fmt.Errorf("%w: %#x", ErrUnknownBlock, block)
	}
	n := 0
	t.walk(t.posOf(l), false, t.nextEpoch(), func(uint32) bool {
		n++
		return limit <= 0 || n < limit
	})
	return n, nil
}

// SharedRefs appends to dst, for each of the n leading blocks of
// session's most recent lineage (root first), CountSessions(limit) of the
// first block of the segment (Path) holding it: one count per segment,
// repeated for its blocks. It stops at the lineage's end. O(depth in
// nodes) plus the counting walks.
func (t *RawTree) SharedRefs(session string, n, limit int, dst []int32) ([]int32, error) {
	_, f, err := t.current(session)
	if err != nil || f == nil || n <= 0 {
		return dst, err
	}
	path := t.path[:0] // the path's nodes, leaf first
	for p := f.node; p != rootID; p = t.nodes[p].parent {
		path = append(path, p)
	}
	t.path = path[:0]
	want := len(dst) + min(n, int(f.depth))
	for i := len(path) - 1; i >= 0 && len(dst) < want; i-- {
		nn := &t.nodes[path[i]]
		c := 0
		t.walk(pos{path[i], nn.base + 1}, false, t.nextEpoch(), func(uint32) bool {
			c++
			return limit <= 0 || c < limit
		})
		for k := min(f.depth, nn.end()) - nn.base; k > 0 && len(dst) < want; k-- {
			dst = append(dst, int32(c))
		}
	}
	return dst, nil
}

// Sessions appends to dst the sessions whose lineage includes block (any
// of their frontiers), in no particular order. O(nodes in the subtree).
func (t *RawTree) Sessions(block uint64, dst []string) ([]string, error) {
	l, ok := t.blocks.get(block)
	if !ok {
		return dst, fmt.Errorf("%w: %#x", ErrUnknownBlock, block)
	}
	return t.collect(t.posOf(l), false, dst), nil
}

// Under appends to dst the sessions that branch below session's current
// frontier: their lineage contains all of session's and goes deeper (its
// subagents, and forks taken from its context). session itself appears
// only if another of its frontiers lies deeper. O(nodes in the subtree).
func (t *RawTree) Under(session string, dst []string) ([]string, error) {
	_, f, err := t.current(session)
	if err != nil || f == nil {
		return dst, err
	}
	return t.collect(pos{f.node, f.depth}, true, dst), nil
}

// Share is how a session's current lineage splits into a prefix shared
// with other live sessions and its own unique tail.
type Share struct {
	Shared int // leading blocks some other session also references
	Unique int // the rest: only this session references them
}

// Split returns session's Share. It walks the session's path once, plus
// the paths of its other frontiers: O(depth in nodes), independent of the
// number of blocks.
func (t *RawTree) Split(session string) (Share, error) {
	s, f, err := t.current(session)
	if err != nil || f == nil {
		return Share{}, err
	}
	ep := t.nextEpoch()
	for _, g := range t.sessions[s].fronts {
		for n := t.fronts[g].node; n != rootID; n = t.nodes[n].parent {
			nn := &t.nodes[n]
			if nn.stamp != ep {
				nn.stamp, nn.own = ep, 0
			}
			nn.own++
		}
	}
	shared := uint32(0)
	for n := f.node; n != rootID; n = t.nodes[n].parent {
		nn := &t.nodes[n]
		others := nn.refs - nn.own
		if others == 0 {
			continue
		}
		// Other frontiers pass through n: they end inside it, or continue
		// below its end (through a child off f's path, or, at f's own
		// node, any child).
		ends, deepest := int32(0), uint32(0)
		for _, g := range nn.ends {
			if fr := &t.fronts[g]; fr.session != s {
				ends++
				deepest = max(deepest, fr.depth)
			}
		}
		if others > ends {
			deepest = nn.end()
		}
		shared = min(deepest, f.depth)
		break
	}
	return Share{Shared: int(shared), Unique: int(f.depth - shared)}, nil
}

// Contains reports whether the tree holds block.
func (t *RawTree) Contains(block uint64) bool {
	_, ok := t.blocks.get(block)
	return ok
}

// Len returns the number of sessions held.
func (t *RawTree) Len() int { return len(t.byID) }

// Stats is a memory report.
type Stats struct {
	Sessions  int
	Frontiers int
	Nodes     int // compressed edges, root excluded
	Blocks    int
	// Bytes estimates the memory held: block map slots, node and block
	// arrays (by capacity), frontier and session records, session ids.
	Bytes int64
}

// Stats returns a memory report. O(nodes + sessions).
func (t *RawTree) Stats() Stats {
	st := Stats{
		Sessions:  len(t.byID),
		Frontiers: len(t.fronts) - 1 - len(t.freeFront),
		Nodes:     len(t.nodes) - 2 - len(t.freeNodes),
		Blocks:    t.blocks.n,
	}
	b := t.blocks.bytes()
	b += int64(cap(t.nodes)) * int64(unsafe.Sizeof(node{}))
	for i := range t.nodes {
		nn := &t.nodes[i]
		b += int64(cap(nn.blocks))*8 + int64(cap(nn.children)+cap(nn.ends))*4
	}
	b += int64(cap(t.fronts)) * int64(unsafe.Sizeof(frontier{}))
	b += int64(cap(t.sessions)) * int64(unsafe.Sizeof(sess{}))
	for id, s := range t.byID {
		// id bytes, map entry (key header + value, roughly), fronts array
		b += int64(len(id)) + 24 + int64(cap(t.sessions[s].fronts))*4
	}
	b += int64(cap(t.freeNodes)+cap(t.freeFront)+cap(t.freeSess)) * 4
	st.Bytes = b
	return st
}
