package agentkv

import (
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
	"github.com/agentkv/agentkv/session"
)

// This file holds every conversion between the packages' identity types
// and enums; nothing else in the root converts them (README, "Architecture":
// why each package keeps its own).
//
// A worker rank is flashindex.Worker in the root (the index's key, and
// Decision.Worker); session.Worker in session bindings; kvhint.WorkerID in
// hint inputs and envelopes. admission.WorkerID is not one of them: it is a
// dense number the router assigns per rank (workerState.admID, byAdm).
// AffinityMode maps to session.Mode; a session between turns is
// kvhint.PhaseActing (session.Acting, a session.Phase, in the table, admission.Acting in
// admission, each package's own view of the same phase).

// sessionWorker is w as session bindings name it.
func sessionWorker(w flashindex.Worker) session.Worker {
	return session.Worker{ID: w.ID, DPRank: w.DPRank}
}

// indexWorker is a session binding's worker as the index names it.
func indexWorker(w session.Worker) flashindex.Worker {
	return flashindex.Worker{ID: w.ID, DPRank: w.DPRank}
}

// hintWorker is w as hint policies name it.
func hintWorker(w flashindex.Worker) kvhint.WorkerID {
	return kvhint.WorkerID{ID: w.ID, DPRank: w.DPRank}
}

// indexWorkerOfHint is a hint's worker as the index names it.
func indexWorkerOfHint(w kvhint.WorkerID) flashindex.Worker {
	return flashindex.Worker{ID: w.ID, DPRank: w.DPRank}
}

// sessionMode is the binding mode of affinity m (AffinityOff binds nothing
// and has none).
func sessionMode(m AffinityMode) session.Mode {
	if m == AffinityHard {
		return session.Hard
	}
	return session.Soft
}
