package radix

// This file answers, for a chain that names no session, where it leaves
// the tree and whose contexts it follows: the query session inference
// (the root package's Infer stage) is built on.

// Mark is one session's frontier: the session and how deep it reaches.
type Mark struct {
	Session string
	Depth   int
}

// MaxOnPath is how many frontiers on a chain's path Branch reports.
const MaxOnPath = 8

// maxEndsScanned bounds the frontiers Branch examines in one node, and
// maxOwnerNodes the nodes it visits below the junction: a node where
// thousands of sessions end, or a wide subtree, is shared whatever lies
// beyond the bound.
const (
	maxEndsScanned = 256
	maxOwnerNodes  = 64
)

// Branch is where a chain leaves the tree and whose contexts it follows.
type Branch struct {
	// Depth is how many leading blocks of the chain the tree holds on one
	// path (the junction).
	Depth int
	// OnPath holds the frontiers on the chain's path at or above Depth
	// (contexts the chain extends), deepest first; NOnPath how many of
	// OnPath are set. At most MaxOnPath are reported.
	OnPath  [MaxOnPath]Mark
	NOnPath int
	// Owners counts the distinct sessions whose lineage reaches Depth
	// (a frontier at or below it), up to 2: 2 means shared.
	Owners int
	// Owner is the one session reaching Depth when Owners is 1, and
	// OwnerDepth its deepest frontier at or below Depth.
	Owner      string
	OwnerDepth int
}

// Branch reports where chain (root-first sequence hashes, prefix-chained)
// leaves the tree: the junction depth, the frontiers on its path, and
// whether one session or several reach the junction. It changes nothing
// but query scratch, costs O(log len(chain)) lookups plus O(depth in
// nodes), and examines at most 256 frontiers per node and 64 nodes below
// the junction (beyond them the junction counts as shared).
func (t *RawTree) Branch(chain []uint64) Branch {
	var b Branch
	if len(chain) == 0 {
		return b
	}
	b.Depth = t.junction(0, chain)
	if b.Depth == 0 {
		return b
	}
	l, _ := t.blocks.get(chain[b.Depth-1])
	p := t.posOf(l)
	t.onPathMarks(p, &b)
	t.owners(p, &b)
	return b
}

// onPathMarks fills b.OnPath with the frontiers at or above p, deepest
// first.
func (t *RawTree) onPathMarks(p pos, b *Branch) {
	limit := p.depth
	for n := p.node; n != rootID && n != nilID; n = t.nodes[n].parent {
		nn := &t.nodes[n]
		for k, f := range nn.ends {
			if k == maxEndsScanned {
				break
			}
			fr := &t.fronts[f]
			if fr.depth > limit {
				continue
			}
			b.addOnPath(Mark{Session: t.sessions[fr.session].id, Depth: int(fr.depth)})
		}
		limit = nn.base
	}
}

// addOnPath keeps the MaxOnPath deepest marks, deepest first.
func (b *Branch) addOnPath(m Mark) {
	i := b.NOnPath
	if i == MaxOnPath {
		if b.OnPath[i-1].Depth >= m.Depth {
			return
		}
		i--
	} else {
		b.NOnPath++
	}
	for i > 0 && b.OnPath[i-1].Depth < m.Depth {
		b.OnPath[i] = b.OnPath[i-1]
		i--
	}
	b.OnPath[i] = m
}

// owners counts the sessions with a frontier at or below p (up to 2).
func (t *RawTree) owners(p pos, b *Branch) {
	var owner uint32
	deepest := uint32(0)
	see := func(f uint32) bool {
		fr := &t.fronts[f]
		switch {
		case owner == 0:
			owner, deepest = fr.session, fr.depth
		case fr.session != owner:
			b.Owners = 2
			return false
		default:
			deepest = max(deepest, fr.depth)
		}
		return true
	}
	nn := &t.nodes[p.node]
	for k, f := range nn.ends {
		if k == maxEndsScanned {
			b.Owners = 2
			return
		}
		if t.fronts[f].depth >= p.depth && !see(f) {
			return
		}
	}
	var stack [maxOwnerNodes]uint32
	top, visited := 0, 0
	push := func(ids []uint32) bool {
		for _, c := range ids {
			if top == len(stack) {
				return false
			}
			stack[top] = c
			top++
		}
		return true
	}
	if !push(nn.children) {
		b.Owners = 2
		return
	}
	for top > 0 {
		top--
		n := stack[top]
		if visited++; visited > maxOwnerNodes {
			b.Owners = 2
			return
		}
		for k, f := range t.nodes[n].ends {
			if k == maxEndsScanned || !see(f) {
				b.Owners = 2
				return
			}
		}
		if !push(t.nodes[n].children) {
			b.Owners = 2
			return
		}
	}
	if owner != 0 {
		b.Owners, b.Owner, b.OwnerDepth = 1, t.sessions[owner].id, int(deepest)
	}
}
