package session

import (
	"errors"
	"fmt"
	"time"
)

// Table defaults.
const (
	DefaultMaxSessions = 65536
	DefaultIdleTimeout = 30 * time.Minute
	DefaultAffinityTTL = 10 * time.Minute

	// MaxLineageDepth bounds the live parent links above any session: a
	// session is not linked under a parent whose chain of live ancestors
	// would make it deeper (it keeps its Parent id, and is a root for
	// Children and Root). Agents nest a few levels; the bound keeps a
	// flood of ids that each name the previous one as parent from making
	// every Begin walk the whole table (65,536 sessions deep).
	MaxLineageDepth = 64

	// maxAdoptNodes bounds the subtree a session may bring when it is
	// linked after its own children (lazy adoption): a larger one is not
	// linked, so linking costs at most this plus MaxLineageDepth steps.
	maxAdoptNodes = 1024
)

var (
	// ErrNoSession reports an AgentContext without a SessionID.
	ErrNoSession = errors.New("session: no session id")
	// ErrUnknown reports a session that is not live (never seen, ended,
	// expired or evicted).
	ErrUnknown = errors.New("session: unknown session")
)

// Worker names a KV cache a session can be bound to: an engine instance and
// its data-parallel rank. It mirrors flashindex.Worker without importing it.
type Worker struct {
	ID     uint64
	DPRank uint32
}

func (w Worker) String() string { return fmt.Sprintf("%d/%d", w.ID, w.DPRank) }

// Phase is where a session is in its agent loop.
type Phase uint8

const (
	// Reasoning: a model request of the session is in flight.
	Reasoning Phase = iota + 1
	// Acting: no request in flight; the agent runs tools or thinks.
	Acting
)

func (p Phase) String() string {
	switch p {
	case Reasoning:
		return "reasoning"
	case Acting:
		return "acting"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Mode is how strongly an affinity binding holds.
type Mode uint8

const (
	// Soft: prefer the bound worker; the router may pick another.
	Soft Mode = iota
	// Hard: the session must go to the bound worker while it is bound.
	Hard
)

func (m Mode) String() string {
	if m == Hard {
		return "hard"
	}
	return "soft"
}

// Usage is token usage reported for one request.
type Usage struct {
	InputTokens  uint64
	OutputTokens uint64
	CachedTokens uint64
}

func (u *Usage) add(v Usage) {
	u.InputTokens += v.InputTokens
	u.OutputTokens += v.OutputTokens
	u.CachedTokens += v.CachedTokens
}

// Binding is a session's affinity to a worker.
type Binding struct {
	Worker  Worker
	Mode    Mode
	Expires time.Time
}

// Cause says why a session left the table.
type Cause uint8

const (
	// Ended: a Final request finished (or End was called on a Final
	// session).
	Ended Cause = iota + 1
	// Expired: no Begin or End for IdleTimeout.
	Expired
	// Evicted: the table was full; least recently used out.
	Evicted
	// Removed: Remove was called.
	Removed
)

func (c Cause) String() string {
	switch c {
	case Ended:
		return "ended"
	case Expired:
		return "expired"
	case Evicted:
		return "evicted"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Removal reports a session that left the table.
type Removal struct {
	ID    string
	Cause Cause
}

// Info is a snapshot of one session.
type Info struct {
	ID, Parent                  string
	Harness, AgentID, ProgramID string
	Phase                       Phase
	PhaseSince                  time.Time // when Phase was entered
	Created, LastSeen           time.Time
	InFlight                    int    // requests begun and not ended
	Requests                    uint64 // requests begun
	Usage                       Usage  // totals over ended requests
	Children                    int    // live children
	Final                       bool   // ends when its in-flight requests end
	Inferred                    bool   // inferred from the prompt (AgentContext.Inferred)
	// Window is the highest Codex window number seen (AgentContext.Window);
	// Compactions counts the requests that compacted the context.
	Window      uint32
	Compactions uint64
	// Compacted is set only in the Info Begin returns, when that request
	// compacts the context: AgentContext.Compaction, or a Window above the
	// one seen before.
	Compacted bool
}

// TableConfig configures a Table. Zero fields mean the documented default.
type TableConfig struct {
	// MaxSessions bounds the live sessions (default 65,536); beyond it the
	// least recently used session is evicted.
	MaxSessions int
	// MaxIDLen is the longest session or parent id Begin accepts, in bytes
	// (default DefaultMaxIDLen, the Extractor's default; set both alike).
	// Ids are untrusted: a longer one is refused with a *RefusedError, so
	// the table's memory is bounded by MaxSessions × MaxIDLen.
	MaxIDLen int
	// IdleTimeout removes a session with no Begin or End for this long
	// (default 30 min). In-flight requests do not hold a session: a lost
	// End must not pin it forever.
	IdleTimeout time.Duration
	// AffinityTTL is how long a Bind lasts (default 10 min).
	AffinityTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnRemove, if set, is called for each session that leaves the table,
	// after the table's lock is released (Table only; RawTable queues
	// removals for TakeRemovals instead).
	OnRemove func(Removal)
}

func (c *TableConfig) fill() error {
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxIDLen == 0 {
		c.MaxIDLen = DefaultMaxIDLen
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.AffinityTTL == 0 {
		c.AffinityTTL = DefaultAffinityTTL
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.MaxSessions < 0:
		return fmt.Errorf("%w: MaxSessions %d < 0", ErrConfig, c.MaxSessions)
	case c.MaxIDLen < 0:
		return fmt.Errorf("%w: MaxIDLen %d < 0", ErrConfig, c.MaxIDLen)
	case c.IdleTimeout < 0:
		return fmt.Errorf("%w: IdleTimeout %v < 0", ErrConfig, c.IdleTimeout)
	case c.AffinityTTL < 0:
		return fmt.Errorf("%w: AffinityTTL %v < 0", ErrConfig, c.AffinityTTL)
	}
	return nil
}

type entry struct {
	info       Info
	parent     *entry // live parent, or nil
	children   map[*entry]struct{}
	bound      bool
	binding    Binding
	prev, next *entry // LRU list; head is most recent
}

// RawTable is the synchronous core of Table: the same operations with no
// locking. It is not safe for concurrent use. It never calls OnRemove:
// when OnRemove is set, removals are queued for TakeRemovals (Table drains
// the queue after each call); otherwise they are not recorded.
type RawTable struct {
	cfg      TableConfig
	m        map[string]*entry
	head     *entry // most recently used
	tail     *entry // least recently used
	removals []Removal
}

// NewRawTable returns an empty RawTable.
func NewRawTable(cfg TableConfig) (*RawTable, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &RawTable{cfg: cfg, m: make(map[string]*entry)}, nil
}

func (t *RawTable) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

func (t *RawTable) pushFront(e *entry) {
	e.next = t.head
	if t.head != nil {
		t.head.prev = e
	}
	t.head = e
	if t.tail == nil {
		t.tail = e
	}
}

func (t *RawTable) touch(e *entry, now time.Time) {
	e.info.LastSeen = now
	if t.head != e {
		t.unlink(e)
		t.pushFront(e)
	}
}

func (t *RawTable) remove(e *entry, c Cause) {
	t.unlink(e)
	delete(t.m, e.info.ID)
	if e.parent != nil {
		delete(e.parent.children, e)
	}
	for ch := range e.children {
		ch.parent = nil // the child keeps its Parent id; the link is gone
	}
	if t.cfg.OnRemove != nil {
		t.removals = append(t.removals, Removal{ID: e.info.ID, Cause: c})
	}
}

// expire removes idle sessions from the LRU end. LRU order is LastSeen
// order, so this costs O(expired).
func (t *RawTable) expire(now time.Time) {
	for e := t.tail; e != nil && now.Sub(e.info.LastSeen) >= t.cfg.IdleTimeout; e = t.tail {
		t.remove(e, Expired)
	}
}

func (t *RawTable) live(id string, now time.Time) *entry {
	e := t.m[id]
	if e != nil && now.Sub(e.info.LastSeen) >= t.cfg.IdleTimeout {
		t.expire(now)
		return nil
	}
	return e
}

// canLink reports whether e (a root of its own subtree) may be linked
// under parent: no loop (parent is not in e's subtree) and no chain deeper
// than MaxLineageDepth. Every live chain is at most MaxLineageDepth deep
// (removals only shorten chains), so the walk up is bounded, and e's
// subtree is measured only up to maxAdoptNodes.
func (t *RawTable) canLink(e, parent *entry) bool {
	depth := 1 // of e under parent
	for p := parent; p != nil; p = p.parent {
		if p == e {
			return false
		}
		depth++
	}
	if len(e.children) == 0 {
		return depth <= MaxLineageDepth
	}
	budget := maxAdoptNodes
	h := subtreeHeight(e, &budget)
	return h >= 0 && depth+h <= MaxLineageDepth
}

// subtreeHeight returns the height of e's subtree (0 for a leaf), or -1 once
// more than budget nodes have been visited.
func subtreeHeight(e *entry, budget *int) int {
	if *budget--; *budget < 0 {
		return -1
	}
	h := 0
	for c := range e.children {
		ch := subtreeHeight(c, budget)
		if ch < 0 {
			return -1
		}
		h = max(h, ch+1)
	}
	return h
}

func (t *RawTable) link(e *entry) {
	if e.info.Parent == "" || e.parent != nil { // no session has the empty id
		return
	}
	p := t.m[e.info.Parent]
	if p == nil || e.parent != nil || !t.canLink(e, p) {
		return
	}
	e.parent = p
	if p.children == nil {
		p.children = make(map[*entry]struct{})
	}
	p.children[e] = struct{}{}
}

// Begin records the start of a request of ac's session: it creates the
// session if needed (linking it under its live parent), moves it to
// Reasoning, and counts the request. A Final context marks the session to
// end when its in-flight requests end. The parent of a session is fixed by
// its first request that names one; parent links that would form a cycle,
// or a chain deeper than MaxLineageDepth, are ignored. An id longer than
// MaxIDLen is refused with a *RefusedError (ErrRefused).
func (t *RawTable) Begin(ac AgentContext) (Info, error) {
	if ac.SessionID == "" {
		return Info{}, ErrNoSession
	}
	if len(ac.SessionID) > t.cfg.MaxIDLen {
		return Info{}, &RefusedError{Field: "session", Reason: TooLong, Len: len(ac.SessionID)}
	}
	if len(ac.ParentSessionID) > t.cfg.MaxIDLen {
		return Info{}, &RefusedError{Field: "parent", Reason: TooLong, Len: len(ac.ParentSessionID)}
	}
	now := t.cfg.Now()
	t.expire(now)
	e := t.m[ac.SessionID]
	if e == nil {
		for len(t.m) >= t.cfg.MaxSessions && t.tail != nil {
			t.remove(t.tail, Evicted)
		}
		e = &entry{info: Info{
			ID: ac.SessionID, Harness: ac.Harness, AgentID: ac.AgentID, ProgramID: ac.ProgramID,
			Inferred: ac.Inferred, Created: now, LastSeen: now,
		}}
		t.m[ac.SessionID] = e
		t.pushFront(e)
	} else {
		t.touch(e, now)
	}
	if e.info.Parent == "" && ac.ParentSessionID != "" && ac.ParentSessionID != ac.SessionID {
		e.info.Parent = ac.ParentSessionID
	}
	t.link(e)
	// A parent created after its children adopts them lazily: children
	// link when they next Begin.
	if e.info.Phase != Reasoning {
		e.info.Phase, e.info.PhaseSince = Reasoning, now
	}
	if e.info.ProgramID == "" {
		e.info.ProgramID = ac.ProgramID
	}
	e.info.InFlight++
	e.info.Requests++
	e.info.Final = e.info.Final || ac.Final
	compacted := ac.Compaction || (ac.Window > e.info.Window && e.info.Window != 0)
	e.info.Window = max(e.info.Window, ac.Window)
	if compacted {
		e.info.Compactions++
	}
	info := t.snapshot(e)
	info.Compacted = compacted
	return info, nil
}

// End records the end of one request of session id with its reported
// usage. When no request is left in flight the session moves to Acting; a
// Final session is removed (Cause Ended) and its last Info returned.
func (t *RawTable) End(id string, u Usage) (Info, error) {
	now := t.cfg.Now()
	e := t.live(id, now)
	if e == nil {
		return Info{}, fmt.Errorf("%w: %q", ErrUnknown, id)
	}
	t.touch(e, now)
	e.info.Usage.add(u)
	if e.info.InFlight > 0 {
		e.info.InFlight--
	}
	if e.info.InFlight == 0 {
		e.info.Phase, e.info.PhaseSince = Acting, now
		if e.info.Final {
			info := t.snapshot(e)
			t.remove(e, Ended)
			return info, nil
		}
	}
	return t.snapshot(e), nil
}

// Finish ends session id now, whatever is in flight (Cause Ended).
func (t *RawTable) Finish(id string) bool {
	return t.drop(id, Ended)
}

// Remove removes session id (Cause Removed). Its children stay, unlinked.
func (t *RawTable) Remove(id string) bool {
	return t.drop(id, Removed)
}

func (t *RawTable) drop(id string, c Cause) bool {
	e := t.live(id, t.cfg.Now())
	if e == nil {
		return false
	}
	t.remove(e, c)
	return true
}

func (t *RawTable) snapshot(e *entry) Info {
	info := e.info
	info.Children = len(e.children)
	return info
}

// Get returns a snapshot of session id. It does not count as use.
func (t *RawTable) Get(id string) (Info, bool) {
	e := t.live(id, t.cfg.Now())
	if e == nil {
		return Info{}, false
	}
	return t.snapshot(e), true
}

// Children appends the ids of session id's live children to dst, in no
// particular order.
func (t *RawTable) Children(id string, dst []string) []string {
	e := t.live(id, t.cfg.Now())
	if e == nil {
		return dst
	}
	for c := range e.children {
		dst = append(dst, c.info.ID)
	}
	return dst
}

// Root returns the id of the oldest live ancestor of session id (id itself
// for a root), following live parent links.
func (t *RawTable) Root(id string) (string, bool) {
	e := t.live(id, t.cfg.Now())
	if e == nil {
		return "", false
	}
	for e.parent != nil {
		e = e.parent
	}
	return e.info.ID, true
}

// Bind binds session id to worker w for AffinityTTL from now, replacing any
// binding.
func (t *RawTable) Bind(id string, w Worker, m Mode) error {
	now := t.cfg.Now()
	e := t.live(id, now)
	if e == nil {
		return fmt.Errorf("%w: %q", ErrUnknown, id)
	}
	e.bound = true
	e.binding = Binding{Worker: w, Mode: m, Expires: now.Add(t.cfg.AffinityTTL)}
	return nil
}

// Unbind drops session id's binding.
func (t *RawTable) Unbind(id string) {
	if e := t.m[id]; e != nil {
		e.bound = false
	}
}

// Affinity returns session id's binding if it has one that has not
// expired. An expired binding is dropped.
func (t *RawTable) Affinity(id string) (Binding, bool) {
	now := t.cfg.Now()
	e := t.live(id, now)
	if e == nil || !e.bound {
		return Binding{}, false
	}
	if !now.Before(e.binding.Expires) {
		e.bound = false
		return Binding{}, false
	}
	return e.binding, true
}

// Expire removes every idle session now and returns how many it removed.
func (t *RawTable) Expire() int {
	n := len(t.m)
	t.expire(t.cfg.Now())
	return n - len(t.m)
}

// Len returns the number of sessions held (idle ones not yet expired
// included).
func (t *RawTable) Len() int { return len(t.m) }

// TakeRemovals returns the removals queued since the last call, oldest
// first, and clears the queue. The caller owns the returned slice.
func (t *RawTable) TakeRemovals() []Removal {
	r := t.removals
	t.removals = nil
	return r
}
