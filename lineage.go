package agentkv

import (
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/session"
)

// This file keeps each session's context chain in the session-prefix tree
// (radix) and builds the hint policies' view of a session from it.

// updateLineage records the session's context chain after routing.
func (r *Router) updateLineage(ac session.AgentContext, seq []uint64) {
	if !ac.Valid() || len(seq) == 0 {
		return
	}
	if err := r.tree.UpdateFromMatch(ac.SessionID, seq); err != nil {
		r.log.Debug("agentkv: lineage not updated", "session", ac.SessionID, "err", err)
	}
}

// sessionView builds the kvhint view of a session from the lineage tree.
// SharedRefs are filled per radix segment when hints need them.
// It also returns the session's whole chain (Shared then Unique, one slice).
func (r *Router) sessionView(id, parent string, w flashindex.Worker) (kvhint.Session, []uint64) {
	s := kvhint.Session{ID: id, Parent: parent, Worker: hintWorker(w)}
	chain, err := r.tree.Lineage(id, nil)
	if err != nil || len(chain) == 0 {
		return s, nil
	}
	split, err := r.tree.Split(id)
	if err != nil {
		return s, nil
	}
	s.Shared, s.Unique = chain[:split.Shared], chain[split.Shared:]
	if split.Shared > 0 {
		segs, err := r.tree.Path(id, nil)
		if err == nil {
			s.SharedRefs = make([]int32, 0, split.Shared)
			var names []string
			for _, seg := range segs {
				if len(s.SharedRefs) >= split.Shared {
					break
				}
				names, _ = r.tree.Sessions(seg.First, names[:0])
				for i := 0; i < seg.Len && len(s.SharedRefs) < split.Shared; i++ {
					s.SharedRefs = append(s.SharedRefs, int32(len(names)))
				}
			}
		}
	}
	return s, chain
}
