package admission

import (
	"cmp"
	"slices"
)

// Groups shares the door between groups of programs (an API's tenants) by
// weight, bounds each group's admitted programs, and pauses first the
// programs of the groups over their share (Config.Groups).
//
// The door lets programs in by weighted fair queuing over the groups: the
// k-th program of group g waiting at the door (in the door's own order:
// started first, then by first offer) is tagged (a_g + k) / w_g, with a_g
// the group's programs admitted and w_g its weight, and the door goes by
// tag, then by its own order. So one tenant's 500-program rollout waiting
// at the door does not keep another tenant's new session behind it: that
// session's tag is 1 / w against the rollout's (a + 1) / w and up. With
// one group the tags follow the door's own order, which is unchanged.
type Groups struct {
	// Of returns the group of a program, asked once, when the program is
	// first offered (a subagent too). The group's Weight and MaxAdmitted
	// are taken from its latest program's answer, so a changed weight
	// takes effect with the group's next program.
	Of func(program string) Group
}

// Group is a program's group.
type Group struct {
	Name string
	// Weight is the group's share of the door (< 1: 1).
	Weight int
	// MaxAdmitted bounds the group's programs admitted at once: let in
	// through the door and not ended (0: no bound). Past it the group's
	// new programs wait at the door, run no probe and are never forced
	// in, until one of its programs ends. A subagent of a running program
	// is not held by the bound, but counts in it.
	MaxAdmitted int
}

// group is a Group's state (under the RawAdmitter's owner).
type group struct {
	name     string
	weight   int
	max      int
	members  int // live programs
	admitted int // live programs placed
	seen     int // scratch: door programs ordered or let in this pass
	// over: the group holds more than its weighted share of the admitted
	// programs (markOverShare, at each tick's pauses).
	over bool
}

// markOverShare sets each group's over flag: it holds more than its
// weighted share of the programs admitted, a_g·W > A·w_g with A all
// admitted programs and W the weights of the groups with programs
// admitted. Pauses take over-share groups' programs first, so one
// tenant's rollout growing past the threshold pauses its own programs,
// not another tenant's few small sessions between turns.
func (c *RawAdmitter) markOverShare() {
	if len(c.groups) < 2 {
		return
	}
	all, weights := 0, 0
	for _, g := range c.groups {
		if g.admitted > 0 {
			all += g.admitted
			weights += g.weight
		}
	}
	for _, g := range c.groups {
		g.over = g.admitted*weights > all*g.weight
	}
}

// join puts new program p in its group (Config.Groups).
func (c *RawAdmitter) join(p *program) {
	gs := c.cfg.Groups
	if gs == nil || gs.Of == nil {
		return
	}
	g := gs.Of(p.id)
	grp := c.groups[g.Name]
	if grp == nil {
		if c.groups == nil {
			c.groups = map[string]*group{}
		}
		grp = &group{name: g.Name}
		c.groups[g.Name] = grp
	}
	grp.weight, grp.max = max(g.Weight, 1), max(g.MaxAdmitted, 0)
	grp.members++
	p.grp = grp
}

// markPlaced marks p placed (past the door), counting it in its group's
// admitted programs the first time.
func (c *RawAdmitter) markPlaced(p *program) {
	if !p.placed && p.grp != nil {
		p.grp.admitted++
	}
	p.placed = true
}

// leave takes p, ending, out of its group; an empty group is forgotten.
func (c *RawAdmitter) leave(p *program) {
	g := p.grp
	if g == nil {
		return
	}
	g.members--
	if p.placed {
		g.admitted--
	}
	if g.members == 0 {
		delete(c.groups, g.name)
	}
}

// full reports whether the group may let no more programs in now: it
// holds MaxAdmitted programs (counting those ordered this pass, seen). A
// nil group is never full.
func (g *group) full() bool {
	return g != nil && g.max > 0 && g.admitted+g.seen >= g.max
}

// doorOrder orders cand (sorted by agedOrder or resumeOrder, which both
// keep the door's programs, those never placed, together and in the
// door's own order) for groups: the door's programs by weighted fair tag
// (Groups), dropping those whose group is full. Without Groups it returns
// cand.
func (c *RawAdmitter) doorOrder(cand []*program) []*program {
	if len(c.groups) == 0 {
		return cand
	}
	lo := slices.IndexFunc(cand, func(p *program) bool { return !p.placed })
	if lo < 0 {
		return cand
	}
	hi := lo
	for hi < len(cand) && !cand[hi].placed {
		hi++
	}
	door := cand[lo:lo]
	for _, p := range cand[lo:hi] {
		g := p.grp
		if g.full() {
			continue
		}
		g.seen++
		p.tag = float64(g.admitted+g.seen) / float64(g.weight)
		door = append(door, p) // in place: never ahead of the reads
	}
	slices.SortStableFunc(door, func(a, b *program) int { return cmp.Compare(a.tag, b.tag) })
	for _, g := range c.groups {
		g.seen = 0
	}
	if len(door) == hi-lo {
		return cand
	}
	return append(cand[:lo+len(door)], cand[hi:]...)
}
