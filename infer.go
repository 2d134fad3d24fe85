package agentkv

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/agentkv/agentkv/radix"
	"github.com/agentkv/agentkv/session"
)

// This file infers sessions: a request that names none (no header, no
// body field: session's source chain ends in "inferred") gets the live
// session whose context its prompt extends, or a new one. It works on
// block sequence hashes only, so the same code infers sessions in a trace
// that carries none (agentkv trace inspect --infer-sessions, simulate
// --infer-sessions).

// InferredPrefix starts every inferred session id. The router never
// accepts it from a client: a named session with this prefix is routed
// as if it named none, so no client can address an inferred session.
const InferredPrefix = "~inferred/"

// DefaultInferTailTokens is InferConfig.TailTokens' default.
const DefaultInferTailTokens = 2048

// InferConfig configures session inference (Config.InferSessions, or
// NewInferrer for traces). Zero fields mean the documented defaults.
type InferConfig struct {
	// TailTokens: a prompt that leaves a live session's context, while
	// none of its requests is in flight (Inferrer.End), at most
	// (or ends inside it: a resend)
	// this many tokens before the session's deepest frontier rewrote its
	// tail (harnesses drop thinking blocks, reminders or an edited last
	// message) and joins it; one that leaves it earlier, beyond the
	// session's first prompt, forks it: a subagent (default 2048).
	TailTokens int
	// MaxSessions bounds the inferred sessions remembered (default
	// radix.DefaultMaxSessions); beyond it the oldest is forgotten, and
	// its context can no longer be joined.
	MaxSessions int
	// ScopeParent links a new root session to the most recently active
	// root inferred session of the same scope (the client, see
	// Request.Client; in a trace, its file): Claude Code's subagents share
	// no context with their parent (they open with their own system
	// prompt), so only the client ties them to it. Off, parents come only
	// from forks.
	ScopeParent bool
}

func (c *InferConfig) fill() error {
	if c.TailTokens == 0 {
		c.TailTokens = DefaultInferTailTokens
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = radix.DefaultMaxSessions
	}
	if c.TailTokens < 0 || c.MaxSessions < 0 {
		return fmt.Errorf("agentkv: InferConfig TailTokens %d, MaxSessions %d < 0", c.TailTokens, c.MaxSessions)
	}
	return nil
}

// InferKind says how a request's session was inferred.
type InferKind uint8

const (
	// InferNone: no session. The prompt has no block beyond what live
	// contexts already hold and extends none that may be joined (only a
	// shared prefix, or nothing at all): it is routed as an isolated call.
	InferNone InferKind = iota
	// InferJoined: the prompt extends a live inferred session's context
	// (or rewrites its last TailTokens) and joins it.
	InferJoined
	// InferForked: the prompt branches off a live session's context
	// beyond that session's first prompt: a new session whose parent it
	// is (a subagent, or a fork).
	InferForked
	// InferOpened: a new root session.
	InferOpened
)

var inferKindNames = [...]string{"none", "joined", "forked", "opened"}

func (k InferKind) String() string {
	if int(k) < len(inferKindNames) {
		return inferKindNames[k]
	}
	return "infer(" + strconv.Itoa(int(k)) + ")"
}

// Inference is the session inferred for one prompt.
type Inference struct {
	// Agent is the inferred identity (Inferred and Harness
	// session.HarnessInferred set); zero for InferNone.
	Agent session.AgentContext
	Kind  InferKind
	// Depth is how many leading blocks of the prompt live contexts hold.
	Depth int
}

// inferred is what the Inferrer remembers of one inferred session.
type inferred struct {
	opening int    // blocks of its first prompt
	base    int    // how deep its context is shared: held by other contexts when it opened, or the depth of its last tail rewrite
	scope   string // the client scope it was inferred in
	parent  string
	seq     uint64 // position in Inferrer.order
	flight  int    // requests inferred and not yet ended (End)
}

// Inferrer infers sessions from block hashes. It is safe for concurrent
// use. Its memory is bounded: MaxSessions sessions (ids of about 20
// bytes plus their scope), a scope table no larger, and 4,096 shared-prefix
// marks; the contexts themselves live in the session-prefix tree
// (radix), bounded by its own MaxSessions.
type Inferrer struct {
	cfg       InferConfig
	tree      *radix.Tree
	own       bool // record chains in tree (a standalone Inferrer)
	tailBlock int

	mu       sync.Mutex // guards everything below
	sessions map[string]*inferred
	order    []string // ids by creation, a ring of MaxSessions
	head     uint64   // sessions created
	byScope  map[string]string
	popular  map[uint64]struct{} // blocks where two sessions' first prompts part
}

// maxPopular bounds the shared-prefix marks (cleared when full: the
// branch query re-learns them from live contexts).
const maxPopular = 4096

// NewInferrer returns a standalone Inferrer with its own session-prefix
// tree, for traces: Infer records each prompt under its inferred session.
// blockSize converts TailTokens to blocks.
func NewInferrer(cfg InferConfig, blockSize int) (*Inferrer, error) {
	tree, err := radix.New(radix.Config{MaxSessions: cfg.MaxSessions})
	if err != nil {
		return nil, err
	}
	in, err := newInferrer(cfg, blockSize, tree)
	if err != nil {
		return nil, err
	}
	in.own = true
	return in, nil
}

// newInferrer returns an Inferrer over tree, which the caller keeps up to
// date (the router records every routed session's chain in commit).
func newInferrer(cfg InferConfig, blockSize int, tree *radix.Tree) (*Inferrer, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if blockSize <= 0 {
		return nil, fmt.Errorf("agentkv: inference block size %d <= 0", blockSize)
	}
	return &Inferrer{
		cfg: cfg, tree: tree, tailBlock: cfg.TailTokens / blockSize,
		sessions: map[string]*inferred{},
		order:    make([]string, cfg.MaxSessions),
		byScope:  map[string]string{},
		popular:  map[uint64]struct{}{},
	}, nil
}

// Infer infers the session of a prompt with block sequence hashes chain
// (root first) from client scope ("" when unknown: sessions of every
// client may then be joined). A standalone Inferrer (NewInferrer) also
// records chain under the session. The Inferrer keeps no reference to
// chain.
func (in *Inferrer) Infer(chain []uint64, scope string) Inference {
	b := in.tree.Branch(chain)
	inf := in.decide(b, chain, scope)
	if in.own && inf.Kind != InferNone {
		_ = in.tree.UpdateFromMatch(inf.Agent.SessionID, chain)
	}
	return inf
}

// End records that a request inferred into session id finished: a
// session with none in flight may have its tail rewritten by its next
// turn. Unknown ids are ignored.
func (in *Inferrer) End(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s := in.sessions[id]; s != nil && s.flight > 0 {
		s.flight--
	}
}

// Forget drops an inferred session (it ended); its context is the tree's.
func (in *Inferrer) Forget(id string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if s := in.sessions[id]; s != nil {
		delete(in.sessions, id)
		if in.byScope[s.scope] == id {
			delete(in.byScope, s.scope)
		}
	}
}

// Len returns the number of inferred sessions remembered.
func (in *Inferrer) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.sessions)
}

// joinable is the live inferred session id in scope whose frontier at
// depth d (its block h) may be joined: d lies beyond what the session
// shared when it opened, and h is not where two sessions' first prompts
// parted.
func (in *Inferrer) joinable(id string, d int, h uint64, scope string) *inferred {
	s := in.sessions[id]
	if s == nil || s.scope != scope || d <= s.base {
		return nil
	}
	if _, shared := in.popular[h]; shared {
		return nil
	}
	return s
}

// decide applies the inference rules to the branch b of chain.
func (in *Inferrer) decide(b radix.Branch, chain []uint64, scope string) Inference {
	in.mu.Lock()
	defer in.mu.Unlock()
	j := b.Depth
	// The deepest context the prompt extends whole.
	var onID string
	on := 0
	for _, m := range b.OnPath[:b.NOnPath] {
		if in.joinable(m.Session, m.Depth, chain[m.Depth-1], scope) != nil {
			onID, on = m.Session, m.Depth
			break
		}
	}
	// Past it, the prompt follows one other session's context alone.
	if j > on && b.Owners == 1 {
		if u := in.joinable(b.Owner, j, chain[j-1], scope); u != nil {
			// A rewrite of the tail comes as the session's next turn, so
			// not while a request of it runs: siblings opened together
			// (parallel subagents with one system prompt and nearly one
			// task) differ only near the end of their first prompts.
			if u.flight == 0 && (b.OwnerDepth-j <= in.tailBlock || j == len(chain)) {
				// The session's context up to j is now proven its own
				// only once: a later prompt that parts from it at j again
				// is another session sharing that prefix, not another
				// rewrite. Without this, a stream of new sessions on one
				// system prompt would each join the first.
				u.base = max(u.base, j)
				return in.join(b.Owner, u, j)
			}
			if j >= u.opening {
				return in.open(chain, j, scope, b.Owner, InferForked)
			}
		}
	}
	if onID != "" {
		if j == on {
			return in.join(onID, in.sessions[onID], j)
		}
		// It went on along other contexts forked from this one: another fork.
		return in.open(chain, j, scope, onID, InferForked)
	}
	if j == len(chain) {
		return Inference{Depth: j}
	}
	if j > 0 {
		in.markPopular(chain[j-1])
	}
	parent := ""
	if in.cfg.ScopeParent && scope != "" {
		parent = in.byScope[scope]
	}
	return in.open(chain, j, scope, parent, InferOpened)
}

func (in *Inferrer) markPopular(h uint64) {
	if len(in.popular) >= maxPopular {
		clear(in.popular)
	}
	in.popular[h] = struct{}{}
}

func (in *Inferrer) join(id string, s *inferred, depth int) Inference {
	if s.parent == "" {
		in.byScope[s.scope] = id
	}
	s.flight++
	return Inference{Agent: in.agent(id, s.parent), Kind: InferJoined, Depth: depth}
}

// open starts a new inferred session for chain, j blocks of which live
// contexts already hold.
func (in *Inferrer) open(chain []uint64, j int, scope, parent string, kind InferKind) Inference {
	in.head++
	id := InferredPrefix + strconv.FormatUint(in.head, 10)
	slot := (in.head - 1) % uint64(len(in.order))
	if old := in.order[slot]; old != "" {
		if s := in.sessions[old]; s != nil && s.seq == in.head-uint64(len(in.order)) {
			delete(in.sessions, old)
			if in.byScope[s.scope] == old {
				delete(in.byScope, s.scope)
			}
		}
	}
	in.order[slot] = id
	in.sessions[id] = &inferred{opening: len(chain), base: j, scope: scope, parent: parent, seq: in.head, flight: 1}
	if parent == "" {
		if len(in.byScope) >= len(in.order) {
			clear(in.byScope)
		}
		in.byScope[scope] = id
	}
	return Inference{Agent: in.agent(id, parent), Kind: kind, Depth: j}
}

func (in *Inferrer) agent(id, parent string) session.AgentContext {
	return session.AgentContext{SessionID: id, ParentSessionID: parent, Harness: session.HarnessInferred, Inferred: true}
}
