package agentkv

import (
	"sync"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// This file holds a routing decision and what happens to it after
// routing: first token, progress, and Done, which settles the request's
// load, admission turn, session totals and trace, and on failure undoes
// what routing recorded.

// TierTokens counts prompt tokens per tier.
type TierTokens struct {
	Device, Host, Disk int
}

// Decision is where a request goes and why.
type Decision struct {
	// RequestID is the request's ID (assigned when the request had none).
	RequestID string
	// Worker is the chosen worker and DP rank.
	Worker flashindex.Worker
	// Cached is the prompt tokens the chosen worker is expected to hold,
	// per tier (exclusive depths times the block size).
	Cached TierTokens
	// SharedBlocks is the shared-pool credit in blocks beyond the worker's
	// own prefix.
	SharedBlocks int
	// Cost is the chosen worker's cost breakdown; Candidates how many
	// workers were scored.
	Cost       Cost
	Candidates int
	// Admission is the admission outcome (zero when admission is off);
	// Waited how long admission held the request.
	Admission admission.Admission
	Waited    time.Duration
	// Affinity is set when a session binding chose the worker.
	Affinity bool
	// Reason says why the worker was chosen: its session, its inferred
	// session, its cached prefix, load alone, or admission after holding
	// the turn (the gateway's X-Agentkv-Route reply header).
	Reason RouteReason
	// Hints counts the hint actions delivered for this request;
	// HintsTook is how long evaluating them took (building the policies'
	// input, running them, batching, handing them to the sinks), zero
	// without hint policies.
	Hints     int
	HintsTook time.Duration

	received     time.Time
	firstToken   time.Time
	replayHashes []uint64
	// recorded is the approximate entries' blocks this route added (beyond
	// the worker's matched device prefix), boundHere whether it bound the
	// session: what a failure undoes.
	recorded  []uint64
	boundHere bool

	r       *Router
	id      uint64
	program string
	agent   session.AgentContext
	prompt  int
	tracked bool // by Config.AdmissionPolicy
	once    sync.Once
	// chain is the prompt's routed block chain as the session's next turn
	// sees it (hint policies, the approximate index): its length and last
	// sequence hash.
	chainLen  int
	chainLast uint64
	// wholeAt is when the approximate index last had the session's whole
	// chain recorded on this worker (zero: not recorded; see Router.record).
	wholeAt time.Time
}

// Usage is what the engine reported for a finished request.
type Usage struct {
	PromptTokens, CompletionTokens, CachedTokens int
	FinishReason                                 string
	ToolCalls                                    []string
	// Failed is set when the request errored or was cancelled (a client
	// that went away included). Done then also undoes what routing
	// recorded for the request: the approximate index entries it added and
	// the session binding it made (see Config.Index, Affinity).
	Failed bool
	// API and ErrorKind, when set (the gateway sets them), go to the
	// request's trace record: the front-door API the request came in on
	// (chat, completions, responses, messages, ...) and, for a failure,
	// how it failed (gateway.ErrorKind).
	API, ErrorKind string
}

// Agent returns the session the request was routed in: its Request.Agent,
// or the session inferred for it (Inferred set).
func (d *Decision) Agent() session.AgentContext { return d.agent }

// FirstToken records that the request's prefill finished: its tokens move
// from prefill to decode load.
func (d *Decision) FirstToken() {
	r := d.r
	r.mu.Lock()
	now := r.cfg.Now()
	r.loads.prefilled(d.id, now)
	if d.firstToken.IsZero() {
		d.firstToken = now
	}
	r.mu.Unlock()
	r.observeLoad(d.Worker)
}

// Progress records that the request is still streaming, so the expiry
// sweep never forgets a long-running request.
func (d *Decision) Progress() {
	r := d.r
	r.mu.Lock()
	r.loads.touch(d.id, r.cfg.Now())
	r.mu.Unlock()
}

// Done reports the request finished with the engine's usage. Admission, the
// session table and metrics learn from these real numbers. Only the first
// call counts.
func (d *Decision) Done(u Usage) {
	d.once.Do(func() { d.r.done(d, u) })
}

func (r *Router) done(d *Decision, u Usage) {
	now := r.cfg.Now()
	prompt := u.PromptTokens
	if prompt == 0 {
		prompt = d.prompt
	}
	if u.Failed {
		r.undoRoute(d)
	}
	if d.agent.Inferred && r.infer != nil {
		r.infer.End(d.agent.SessionID)
	}
	r.mu.Lock()
	r.loads.finish(d.id)
	// Only tick-time hint policies and the approximate index's recording
	// read acting; without them the map stays empty, which spares every
	// turn a map insert and delete.
	if (len(r.cfg.Hints) > 0 || !d.wholeAt.IsZero()) && d.agent.Valid() && !d.agent.Final && !u.Failed {
		r.acting[d.agent.SessionID] = actingSession{worker: d.Worker, since: now, chainLen: d.chainLen, chainLast: d.chainLast, wholeAt: d.wholeAt}
	}
	var rel []release
	if d.tracked {
		r.donePolicyLocked(d, u, prompt, now)
		rel = r.drainAdmissionLocked()
	}
	if r.adm != nil && d.program != "" {
		_ = r.adm.EndRequest(now, d.program, int64(prompt), int64(u.CompletionTokens))
		// Weight = unique tail + the prefix shared with other sessions,
		// which the worker's cache holds once (the lineage tree knows it).
		// The prefix is named by the hash of its last block. It is set
		// after the turn's end, so a first turn's end counts its whole
		// prompt toward the cold-start prior (Door.ColdStartObserved).
		// admission.Agentic is measured with this order.
		if sp, err := r.tree.Split(d.agent.SessionID); err == nil && d.agent.Valid() {
			var key uint64
			if sp.Shared > 0 {
				if chain, err := r.tree.Lineage(d.agent.SessionID, nil); err == nil && len(chain) >= sp.Shared {
					key = chain[sp.Shared-1]
				}
			}
			_ = r.adm.SetShared(d.program, int64(sp.Shared*r.cfg.BlockSize), key)
		}
		if d.agent.Final {
			r.syncBacklogLocked()
			_ = r.adm.EndSession(now, d.program)
		}
		rel = r.drainAdmissionLocked()
	}
	r.mu.Unlock()
	r.notify(rel)
	r.observeLoad(d.Worker)
	if d.agent.Valid() {
		_, _ = r.table.End(d.agent.SessionID, session.Usage{
			InputTokens: uint64(prompt), OutputTokens: uint64(u.CompletionTokens), CachedTokens: uint64(u.CachedTokens),
		})
	}
	r.traceRecord(d, u, now)
	if r.metrics != nil {
		r.metrics.observeFinished(u.Failed)
	}
}

// undoRoute takes back what routing recorded for a request that failed
// (Usage.Failed): the approximate index entries it added on its worker
// (the engine never cached that prompt, or it is gone) and the session
// binding it created, so the next route of the session is not drawn to a
// worker for a cache it lacks. Its load is released by done as for every
// request. The lineage tree and the hash cache describe the session's
// prompt, not its placement, and stay.
func (r *Router) undoRoute(d *Decision) {
	if d.recorded != nil {
		r.index.Unrecord(d.Worker, d.recorded)
	}
	if d.boundHere {
		if b, ok := r.table.Affinity(d.agent.SessionID); ok && indexWorker(b.Worker) == d.Worker {
			r.table.Unbind(d.agent.SessionID)
		}
	}
}
