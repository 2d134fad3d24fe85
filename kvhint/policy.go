package kvhint

import (
	"slices"
	"strconv"
	"time"
)

// Phase is where an agent program is in its loop (ThunderAgent's states).
type Phase uint8

const (
	// PhaseReasoning: the model is generating (the zero value).
	PhaseReasoning Phase = iota
	// PhaseActing: the program is running a tool; its KV cache is idle.
	PhaseActing
)

func (p Phase) String() string {
	switch p {
	case PhaseReasoning:
		return "reasoning"
	case PhaseActing:
		return "acting"
	}
	return "phase(" + strconv.Itoa(int(p)) + ")"
}

// Event is what made the router evaluate policies.
type Event uint8

const (
	// EventTick: the periodic control tick (the zero value).
	EventTick Event = iota
	// EventAdmit: a new turn of the session was admitted and routed to
	// Input.Worker.
	EventAdmit
	// EventResume: a paused session was resumed on Input.Worker.
	EventResume
	// EventFinish: the session ended.
	EventFinish
)

func (e Event) String() string {
	switch e {
	case EventTick:
		return "tick"
	case EventAdmit:
		return "admit"
	case EventResume:
		return "resume"
	case EventFinish:
		return "finish"
	}
	return "event(" + strconv.Itoa(int(e)) + ")"
}

// Session is a session's lineage as the router's session-prefix index sees
// it. Its chain of blocks is Shared followed by Unique, root first. Like
// Input it is plain data: policies only read it.
type Session struct {
	ID     string
	Parent string // parent session id; "" for a root session

	// Shared is the leading part of the chain that other live sessions
	// also reference (a system prompt, a parent's context a subagent was
	// forked from). SharedRefs[i] is the number of live sessions,
	// this one included, that reference Shared[i]; it never increases
	// along the chain. A missing entry means "unknown". When every policy
	// that reads it is a RefsBounder, a router may count only up to the
	// largest of their bounds: an entry equal to it means at least that
	// many.
	Shared     []uint64
	SharedRefs []int32
	// Unique is the rest of the chain: blocks only this session references.
	Unique []uint64

	Phase Phase
	// Acting is how long the session has been in PhaseActing.
	Acting   time.Duration
	Finished bool
	// Worker is the worker that holds the session's KV cache (its last
	// placement).
	Worker WorkerID
}

// Len is the length of the session's chain.
func (s *Session) Len() int { return len(s.Shared) + len(s.Unique) }

// Block returns block i of the chain (Shared, then Unique).
func (s *Session) Block(i int) uint64 {
	if i < len(s.Shared) {
		return s.Shared[i]
	}
	return s.Unique[i-len(s.Shared)]
}

// Residency is what one worker holds of Input.Prefix. Depths are exclusive
// and contiguous from the root, as a KV index reports them: the worker holds
// Prefix[:Device] on device, the next Host blocks on host, then the next
// Disk blocks on disk.
type Residency struct {
	Worker             WorkerID
	Device, Host, Disk int
	// Endpoint is the worker's control endpoint for peer transfers; ""
	// when the worker cannot serve as a Share source.
	Endpoint string
}

// Input is everything a Policy may look at. The router fills it; policies
// must treat it (and every slice in it) as read-only, so one Input may be
// evaluated by several goroutines at once.
type Input struct {
	Event   Event
	Session Session
	Parent  *Session // the parent session, nil for a root or when unknown
	// Worker is the worker selected for this request (EventAdmit,
	// EventResume); for ticks and finishes it may be zero.
	Worker WorkerID
	// Prefix is the request's prefix blocks (sequence hashes, root first).
	// For EventTick and EventFinish the router passes the session's own
	// chain (Shared then Unique).
	Prefix []uint64
	// Cached is what each worker holds of Prefix, one entry per worker
	// that holds any of it. Order does not matter.
	Cached []Residency
	// Now is the router's clock at the event (a simulator's virtual
	// time), and Renewals its memory of the leases it renewed: policies
	// that renew leases use them to renew no more often than needed. A
	// nil Renewals (a caller without them) makes every renewal due.
	Now      time.Time
	Renewals *Renewals
	// SourceBuf, when not nil, is room the policies build their actions'
	// Sources in (appending to it), so that a caller that reuses its
	// Inputs allocates none for them: the hints then alias it, as they
	// alias Prefix, until the Input is reused. Batcher.Batch copies
	// Sources into the envelopes it makes.
	SourceBuf *[]Source
}

// sources returns room for n Sources: from SourceBuf when there is one
// (grown as needed), else a new slice.
func (in *Input) sources(n int) []Source {
	b := in.SourceBuf
	if b == nil {
		return make([]Source, n)
	}
	start := len(*b)
	*b = slices.Grow(*b, n)[:start+n]
	return (*b)[start : start+n : start+n]
}

// residency returns the entry for w, or nil.
func (in *Input) residency(w WorkerID) *Residency {
	for i := range in.Cached {
		if in.Cached[i].Worker == w {
			return &in.Cached[i]
		}
	}
	return nil
}

// Policy turns what the router knows into hints. Evaluate appends its hints
// to dst and returns the extended slice; it must not modify in, and it must
// not block. A router may call Evaluate from several goroutines at once, so
// implementations must be safe for concurrent use (the built-in ones are). The returned actions leave ID empty (Batcher names them) and
// their Target.Blocks may alias slices of in: copy them before mutating the
// Input's slices.
type Policy interface {
	Evaluate(dst []Hint, in *Input) []Hint
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(dst []Hint, in *Input) []Hint

// Evaluate calls f(dst, in).
func (f PolicyFunc) Evaluate(dst []Hint, in *Input) []Hint { return f(dst, in) }

// Policies runs several policies in order and concatenates their hints.
type Policies []Policy

// Evaluate runs each policy on in.
func (ps Policies) Evaluate(dst []Hint, in *Input) []Hint {
	for _, p := range ps {
		dst = p.Evaluate(dst, in)
	}
	return dst
}

// appendChunked appends one action per chunk of at most max blocks.
func appendChunked(dst []Hint, w WorkerID, proto Action, blocks []uint64, max int) []Hint {
	for len(blocks) > 0 {
		n := min(len(blocks), max)
		a := proto
		a.Target.Blocks = blocks[:n:n]
		dst = append(dst, Hint{Worker: w, Action: a})
		blocks = blocks[n:]
	}
	return dst
}

// Need names the parts of an Input a policy reads beyond Event, Worker,
// Prefix and the session's ID, Parent, Phase, Acting, Finished and Worker
// (which a router fills at no cost): the expensive ones, which a router
// builds only when some policy needs them.
type Need uint8

const (
	// NeedChain: Session.Shared and Session.Unique (and Input.Parent).
	NeedChain Need = 1 << iota
	// NeedRefs: Session.SharedRefs (implies NeedChain).
	NeedRefs
	// NeedCached: Input.Cached.
	NeedCached

	// NeedAll is every part.
	NeedAll = NeedChain | NeedRefs | NeedCached
)

// Needer is a Policy that says what it reads of the Input a router builds
// for event ev (the router's Inputs set Session.Finished only on
// EventFinish, Phase Acting only on EventTick). A Policy that is not a
// Needer needs everything.
type Needer interface {
	Needs(ev Event) Need
}

// RefsBounder is a Needer that reads Session.SharedRefs only to compare
// each count with thresholds no greater than RefsBound: counts at or above
// the bound are all alike to it. A router then stops counting a block's
// sessions at the bound instead of visiting every session that shares it
// (a system prompt is shared by every session).
type RefsBounder interface {
	RefsBound() int32
}

// RefsBound returns the count at which the router may stop counting a
// block's sessions for policies ps: the largest RefsBound of those that
// need SharedRefs, or 0 (count them all) when one of those is not a
// RefsBounder.
func RefsBound(ps []Policy) int32 {
	var b int32
	for _, p := range ps {
		nd, ok := p.(Needer)
		if ok && (nd.Needs(EventAdmit)|nd.Needs(EventResume)|nd.Needs(EventFinish)|nd.Needs(EventTick))&NeedRefs == 0 {
			continue
		}
		rb, ok := p.(RefsBounder)
		if !ok || rb.RefsBound() <= 0 {
			return 0
		}
		b = max(b, rb.RefsBound())
	}
	return b
}

// Needs returns what the policies read of an Input for event ev: the
// union of their Needs, NeedAll for one that is not a Needer.
func Needs(ps []Policy, ev Event) Need {
	var n Need
	for _, p := range ps {
		if nd, ok := p.(Needer); ok {
			n |= nd.Needs(ev)
		} else {
			n = NeedAll
		}
	}
	if n&NeedRefs != 0 {
		n |= NeedChain
	}
	return n
}

// Needs implements Needer for a list of policies.
func (ps Policies) Needs(ev Event) Need { return Needs(ps, ev) }

func routeTime(ev Event) bool { return ev == EventAdmit || ev == EventResume }

// Needs implements Needer: on admit and resume the selected worker's
// residency; otherwise the session's chain and residencies.
func (p *TailOffload) Needs(ev Event) Need {
	if routeTime(ev) {
		return NeedCached
	}
	return NeedChain | NeedCached
}

// Needs implements Needer: the shared prefix and its references, and the
// selected worker's residency, on admit and resume; nothing otherwise.
func (p *PrefixPin) Needs(ev Event) Need {
	if routeTime(ev) {
		return NeedChain | NeedRefs | NeedCached
	}
	return 0
}

// Needs implements Needer: residencies on admit and resume, nothing
// otherwise.
func (p *PeerShare) Needs(ev Event) Need {
	if routeTime(ev) {
		return NeedCached
	}
	return 0
}

// Needs implements Needer: everything on EventFinish, nothing otherwise.
func (p *FinishRelease) Needs(ev Event) Need {
	if ev == EventFinish {
		return NeedAll
	}
	return 0
}

// RefsBound implements RefsBounder: FinishRelease tells only 1 from more.
func (p *FinishRelease) RefsBound() int32 { return 2 }

// RefsBound implements RefsBounder: PrefixPin compares with MinSessions.
func (p *PrefixPin) RefsBound() int32 { return p.cfg.MinSessions }
