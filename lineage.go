package agentkv

import (
	"slices"
	"sync"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/radix"
	"github.com/agentkv/agentkv/session"
)

// This file keeps each session's context chain in the session-prefix tree
// (radix) and builds the hint policies' view of a session from it.

// updateLineage records the session's context chain after routing, and
// reports whether the tree took it (the session's lineage is then seq).
func (r *Router) updateLineage(ac session.AgentContext, seq []uint64) bool {
	if !ac.Valid() || len(seq) == 0 {
		return false
	}
	if err := r.tree.UpdateFromMatch(ac.SessionID, seq); err != nil {
		r.log.Debug("agentkv: lineage not updated", "session", ac.SessionID, "err", err)
		return false
	}
	return true
}

// segPool holds sharedRefs' scratch lists of path segments.
var segPool = sync.Pool{New: func() any { return new([]radix.Segment) }}

// sessionView builds the kvhint view of a session from the lineage tree,
// with SharedRefs filled per radix segment when refs is not nil (appended
// to *refs, which keeps the list for reuse). It also
// returns the session's whole chain (Shared then Unique, one slice): chain
// when the caller knows it is the session's lineage (not copied; nil reads
// it from the tree).
func (r *Router) sessionView(id, parent string, w flashindex.Worker, chain []uint64, refs *[]int32) (kvhint.Session, []uint64) {
	s := kvhint.Session{ID: id, Parent: parent, Worker: hintWorker(w)}
	if chain == nil {
		var err error
		if chain, err = r.tree.Lineage(id, nil); err != nil {
			return s, nil
		}
	}
	if len(chain) == 0 {
		return s, nil
	}
	split, err := r.tree.Split(id)
	if err != nil || split.Shared+split.Unique != len(chain) {
		return s, nil
	}
	s.Shared, s.Unique = chain[:split.Shared:split.Shared], chain[split.Shared:]
	if refs != nil && split.Shared > 0 {
		s.SharedRefs = r.sharedRefs((*refs)[:0], id, split.Shared)
		*refs = s.SharedRefs
	}
	return s, chain
}

// sharedRefs appends to refs how many live sessions reference each of the
// n leading blocks of session id's lineage (one count per radix segment),
// counted up to the hint policies' kvhint.RefsBound.
func (r *Router) sharedRefs(refs []int32, id string, n int) []int32 {
	sp := segPool.Get().(*[]radix.Segment)
	defer segPool.Put(sp)
	segs, err := r.tree.Path(id, (*sp)[:0])
	*sp = segs[:0]
	if err != nil {
		return refs
	}
	refs = slices.Grow(refs, n)
	for _, seg := range segs {
		if len(refs) >= n {
			break
		}
		c, _ := r.tree.CountSessions(seg.First, r.refs)
		for i := 0; i < seg.Len && len(refs) < n; i++ {
			refs = append(refs, int32(c))
		}
	}
	return refs
}
