package agentkv

import (
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
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
	split, err := r.tree.SplitRefs(id, r.refs, refs)
	if err != nil || split.Shared+split.Unique != len(chain) {
		return s, nil
	}
	s.Shared, s.Unique = chain[:split.Shared:split.Shared], chain[split.Shared:]
	if refs != nil && split.Shared > 0 {
		s.SharedRefs = *refs
	}
	return s, chain
}
