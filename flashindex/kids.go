package flashindex

import (
	"cmp"
	"slices"
)

// Node lineage, for queries. A query walks a request through the nodes it
// follows; where it leaves a node mid-way, it continues with the node that
// starts with the request's next block, which (in a chain) continues the
// block it left from: a child of that node. Each node therefore keeps the
// offsets at which other nodes continue it (its kids), and its head slot
// lists the smallest few (kidList). A query tries those first: the request
// leaves node A after block c and enters node B exactly when B starts with
// the request's block after c and A's block c is the request's, which one
// lookup in the head map and one comparison tell, the lookups for all of
// A's listed offsets issued together, instead of comparing the request
// with A's hashes (a search with a cache miss per round) and only then
// looking up B. Lists are hints: a query confirms every answer they give
// by that comparison and otherwise compares as before, so a stale or
// missing entry costs time, never a wrong answer.
//
// Bookkeeping, all by the writer: a node created to continue a block of
// another (insertBlocks) is linked to it; a released node is unlinked; a
// node whose tail is dropped loses the entries there (its kids there are
// orphans: their parent block is gone) and starts a new epoch, so that an
// orphan's later release does not uncount a newer kid at the same offset.

// kidEntry counts the live nodes whose first block continues the block at
// off of a node, linked while the node's epoch was epoch.
type kidEntry struct {
	off, n, epoch uint32
}

func findKid(kids []kidEntry, off uint32) (int, bool) {
	return slices.BinarySearchFunc(kids, off, func(e kidEntry, t uint32) int { return cmp.Compare(e.off, t) })
}

// kidList returns the head slot's copy of n's kids.
func (n *node) kidList() kidList {
	var kl kidList
	kl.n = uint32(min(len(n.kids), headKids))
	for i := range kl.n {
		kl.off[i] = n.kids[i].off
	}
	return kl
}

// link records that n's first block continues the block at off of p.
func (a *arena) link(n, p *node, off int) {
	o := uint32(off)
	i, found := findKid(p.kids, o)
	if found {
		p.kids[i].n++
	} else {
		p.kids = slices.Insert(p.kids, i, kidEntry{off: o, n: 1, epoch: p.epoch})
	}
	n.parent, n.poff, n.pepoch = p, o, p.kids[i].epoch
	if !found && i < headKids {
		a.publishKids(p)
	}
}

// linked reports whether n's link is still counted: its parent is live
// and still holds the entry that counts n.
func (n *node) linked() bool {
	p := n.parent
	if p == nil || p.data.Load() == nil {
		return false
	}
	i, found := findKid(p.kids, n.poff)
	return found && p.kids[i].epoch == n.pepoch
}

// unlink undoes n's link, if it is still counted: its parent may be gone,
// or have dropped the block n continued.
func (a *arena) unlink(n *node) {
	if !n.linked() {
		n.parent = nil
		return
	}
	p := n.parent
	n.parent = nil
	i, _ := findKid(p.kids, n.poff)
	if p.kids[i].n--; p.kids[i].n == 0 {
		p.kids = slices.Delete(p.kids, i, i+1)
		if i < headKids {
			a.publishKids(p)
		}
	}
}

// trimKids drops n's entries at offsets keep and beyond (those blocks are
// being dropped); the caller publishes n.
func (n *node) trimKids(keep int) {
	i, _ := findKid(n.kids, uint32(keep))
	if i < len(n.kids) {
		n.kids = n.kids[:i:i]
		n.epoch++
	}
}

// publishKids rewrites n's head slot with its current kids.
func (a *arena) publishKids(n *node) {
	d := n.data.Load()
	kl := n.kidList()
	a.heads.update(d.hashes[0], d, &kl)
}
