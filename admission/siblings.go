package admission

import (
	"slices"
	"time"
)

// This file groups programs by the prefix their first prompts share, as
// the rollouts of one task do, and starts first the siblings of a program
// that runs long (Door.Probe.Siblings).

// siblingShare bounds a sibling group: a prefix that more than
// 1/siblingShare of the programs with a first prefix share (a system
// prompt every program starts with) groups nothing.
const siblingShare = 4

// SetFirstPrefix records that the first prompt of program id shares its
// leading shared tokens with programs known before it, a prefix named by
// key (any value equal for every program sharing it, such as the sequence
// hash of its last block; the root router passes the depth at which its
// lineage index leaves the prompt's chain). Programs with the same key are
// siblings (Door.Probe.Siblings). shared 0 clears it. Call it after the
// program's first StartRequest; the value stays until the program ends.
func (c *RawAdmitter) SetFirstPrefix(id string, shared int64, key uint64) error {
	p, err := c.prefixOf(id, shared)
	if err != nil {
		return err
	}
	c.dropSibling(p)
	if shared == 0 {
		return nil
	}
	if c.sibs == nil {
		c.sibs = map[uint64]int{}
	}
	p.first, p.sib = shared, key
	c.sibs[key]++
	c.nSib++
	return nil
}

// dropSibling takes p out of its sibling group.
func (c *RawAdmitter) dropSibling(p *program) {
	if p.first == 0 {
		return
	}
	if c.sibs[p.sib]--; c.sibs[p.sib] == 0 {
		delete(c.sibs, p.sib)
	}
	c.nSib--
	p.first, p.sib = 0, 0
}

// siblingsFirst moves to the front of due (probe candidates in the door's
// order; the order among the rest is kept) the programs that have not
// started and whose sibling group runs long: one of its programs has been
// in one tool call for Door.Probe.Siblings. It leaves those groups in
// c.sibLong for the probe pass (probeCharge).
func (c *RawAdmitter) siblingsFirst(now time.Time, due []*program) {
	after := c.cfg.probe().Siblings
	if after <= 0 || c.nSib == 0 || !slices.ContainsFunc(due, func(p *program) bool { return !p.probed && p.first > 0 }) {
		return
	}
	for _, p := range c.progs {
		if p.first == 0 || p.phase != Acting || now.Sub(p.actingSince) < after || siblingShare*c.sibs[p.sib] > c.nSib {
			continue
		}
		if c.sibLong == nil {
			c.sibLong = map[uint64]bool{}
		}
		c.sibLong[p.sib] = true
	}
	if len(c.sibLong) == 0 {
		return
	}
	slices.SortStableFunc(due, func(a, b *program) int {
		switch fa, fb := c.siblingFirst(a), c.siblingFirst(b); {
		case fa && !fb:
			return -1
		case fb && !fa:
			return 1
		}
		return 0
	})
}

// siblingFirst reports whether p goes first in this probe pass: it has not
// started and its sibling group runs long (c.sibLong).
func (c *RawAdmitter) siblingFirst(p *program) bool {
	return !p.probed && p.first > 0 && c.sibLong[p.sib]
}
