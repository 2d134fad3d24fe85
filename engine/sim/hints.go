package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// This file makes the engine honour KV hints (package kvhint) the way a
// real engine with a host tier would. The semantics are documented in the
// package manual ("KV hints"); in short: Send queues, the next Step applies
// (in session order), and every action is counted once per kind with the
// outcome the engine would reply.

// Defaults of a zero HintConfig.
const (
	// DefaultMaxPendingHints is the default bound on envelopes queued
	// between two steps.
	DefaultMaxPendingHints = 1024
)

// HintConfig bounds how an engine honours KV hints. Zero fields mean the
// documented defaults.
type HintConfig struct {
	// MaxPinned is the most device blocks pin leases may hold at once;
	// pins beyond it are clipped. 0 means DeviceBlocks/4; a negative
	// value makes the engine reject Pin hints.
	MaxPinned int
	// MaxPending is the most envelopes queued between two steps; Send
	// refuses more (kvhint.ErrQueueFull) and counts their actions
	// rejected. 0 means DefaultMaxPendingHints.
	MaxPending int
	// Bounds are the limits actions are clipped to and validated against
	// (kvhint.Action.Clip, Validate); the zero value means kvhint's
	// defaults. Bounds.MaxPriority, at most 255, is also the number of
	// retain priority classes.
	Bounds kvhint.Bounds
}

func (h *HintConfig) fill(deviceBlocks int) error {
	if err := h.Bounds.Check(); err != nil {
		return fmt.Errorf("%w: hint bounds: %v", ErrConfig, err)
	}
	if h.Bounds.MaxPriority == 0 {
		h.Bounds.MaxPriority = kvhint.DefaultMaxPriority
	}
	if h.Bounds.MaxPriority > 255 {
		return fmt.Errorf("%w: hint bounds: MaxPriority %d above 255", ErrConfig, h.Bounds.MaxPriority)
	}
	if h.MaxPinned == 0 {
		h.MaxPinned = deviceBlocks / 4
	}
	if h.MaxPending < 0 {
		return fmt.Errorf("%w: MaxPending %d", ErrConfig, h.MaxPending)
	}
	if h.MaxPending == 0 {
		h.MaxPending = DefaultMaxPendingHints
	}
	return nil
}

// HintStats counts what an engine did with KV hints. Every action the
// engine received is counted exactly once, under its kind, with the
// outcome it would reply (kvhint.Counts.Blocks: the blocks it acted on).
type HintStats struct {
	Share, Prefetch, Demote, Pin, Retain, Release kvhint.Counts
	// Invalid counts actions of no known kind (not counted above).
	Invalid int64
	// Dropped counts envelopes refused because MaxPending were queued;
	// their actions are counted as rejected.
	Dropped int64
	// DeferredDemotions counts blocks a deferred Demote moved to the host
	// when their last reference dropped.
	DeferredDemotions int64
	// PinsBroken counts pinned blocks unpinned before their lease ended,
	// so that a request could run.
	PinsBroken int64
	// Pinned is the number of device blocks pinned now; PinnedPeak the
	// most at once.
	Pinned, PinnedPeak int
	// HostTokens and PeerTokens count the tokens that Prefetch copied from
	// the host tier and Share received from other workers; both are
	// charged to the engine's next step.
	HostTokens, PeerTokens int64
	// Orphans counts blocks not kept on the host tier because their
	// parent was on no tier (hints can reorder eviction so that a parent
	// leaves before its child; no prefix lookup could reach such a block).
	Orphans int64
}

// Add adds o's counters to s (to sum a cluster's engines). Pinned and
// PinnedPeak are summed too, so the sum's PinnedPeak bounds the cluster's
// peak from above.
func (s *HintStats) Add(o *HintStats) {
	for k := kvhint.KindShare; k <= kvhint.KindRelease; k++ {
		s.counts(k).Add(*o.counts(k))
	}
	s.Invalid += o.Invalid
	s.Dropped += o.Dropped
	s.DeferredDemotions += o.DeferredDemotions
	s.PinsBroken += o.PinsBroken
	s.Pinned += o.Pinned
	s.PinnedPeak += o.PinnedPeak
	s.HostTokens += o.HostTokens
	s.PeerTokens += o.PeerTokens
	s.Orphans += o.Orphans
}

// Kind returns the counts of kind k (the zero Counts for an invalid kind).
func (s *HintStats) Kind(k kvhint.Kind) kvhint.Counts {
	if c := s.counts(k); c != nil {
		return *c
	}
	return kvhint.Counts{}
}

// Total sums the counts of all kinds.
func (s *HintStats) Total() kvhint.Counts {
	var t kvhint.Counts
	for k := kvhint.KindShare; k <= kvhint.KindRelease; k++ {
		t.Add(s.Kind(k))
	}
	return t
}

func (s *HintStats) counts(k kvhint.Kind) *kvhint.Counts {
	switch k {
	case kvhint.KindShare:
		return &s.Share
	case kvhint.KindPrefetch:
		return &s.Prefetch
	case kvhint.KindDemote:
		return &s.Demote
	case kvhint.KindPin:
		return &s.Pin
	case kvhint.KindRetain:
		return &s.Retain
	case kvhint.KindRelease:
		return &s.Release
	}
	return nil
}

// Peers finds another engine by worker identity, for Share hints; nil when
// there is no such engine.
type Peers func(w flashindex.Worker) *Engine

// hintState is the engine's hint machinery.
type hintState struct {
	queue      []queuedAction
	envelopes  int // envelopes in queue
	leases     leaseHeap
	pinned     int
	peers      Peers
	peerBlocks PeerBlocks
	hostTokens int64 // copy work charged to the next computing step
	peerTokens int64
	got        []int32 // scratch: blocks copied by one action
}

type queuedAction struct {
	session string
	act     kvhint.Action
}

// lease is a pin or retain lease on the blocks an action acted on; it ends
// for a block only if the block's own lease end is still until (a renewal
// pushes a new lease).
type lease struct {
	until  time.Duration
	pin    bool
	blocks []uint64
}

type leaseHeap []lease

func (h *leaseHeap) push(l lease) {
	*h = append(*h, l)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if s[p].until <= s[i].until {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *leaseHeap) pop() lease {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = lease{}
	s = s[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && s[l].until < s[m].until {
			m = l
		}
		if r := l + 1; r < n && s[r].until < s[m].until {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// Send queues env's actions for the engine's next Step: it implements
// kvhint.Sink, never blocks and never calls back. The engine copies what it
// keeps, so the caller may reuse env and its slices after Send returns;
// ctx is not used. With Config.Hints.MaxPending envelopes already queued,
// Send refuses env with kvhint.ErrQueueFull and counts its actions
// rejected. Actions a decoder skipped (env.Skipped) are not seen.
func (e *Engine) Send(_ context.Context, env *kvhint.Envelope) error {
	if env == nil {
		return fmt.Errorf("%w: nil envelope", kvhint.ErrInvalid)
	}
	hs := &e.stats.Hints
	if e.hints.envelopes >= e.cfg.Hints.MaxPending {
		hs.Dropped++
		for i := range env.Actions {
			if c := hs.counts(env.Actions[i].Kind); c != nil {
				c.Rejected++
			} else {
				hs.Invalid++
			}
		}
		return kvhint.ErrQueueFull
	}
	e.hints.envelopes++
	for i := range env.Actions {
		a := env.Actions[i]
		if a.SessionID == "" {
			a.SessionID = env.SessionID
		}
		a.Target.Blocks = slices.Clone(a.Target.Blocks)
		a.Sources = slices.Clone(a.Sources)
		e.hints.queue = append(e.hints.queue, queuedAction{session: a.SessionID, act: a})
	}
	return nil
}

// PendingHints returns the number of queued hint actions the next Step will
// apply.
func (e *Engine) PendingHints() int { return len(e.hints.queue) }

// SetPeers sets how the engine finds the other workers that Share hints
// name as sources. Without peers, Share hints are rejected. NewReplay
// connects a replay's engines to one another unless SetPeers was called.
func (e *Engine) SetPeers(p Peers) { e.hints.peers = p }

// applyHints ends the leases due at now and applies the queued actions,
// grouped by session id (ascending) and in arrival order within a session.
func (e *Engine) applyHints(now time.Duration) {
	for len(e.hints.leases) > 0 && e.hints.leases[0].until <= now {
		e.endLease(e.hints.leases.pop())
	}
	q := e.hints.queue
	if len(q) == 0 {
		return
	}
	e.forget() // hints move blocks between tiers: look the head up again
	// The router's tick visits sessions in map order: sorting makes the
	// application order, and so the run, deterministic.
	slices.SortStableFunc(q, func(a, b queuedAction) int { return strings.Compare(a.session, b.session) })
	for i := range q {
		_ = e.applyAction(now, &q[i].act)
	}
	clear(q)
	e.hints.queue = q[:0]
	e.hints.envelopes = 0
}

func (e *Engine) applyAction(now time.Duration, a *kvhint.Action) kvhint.Result {
	res := kvhint.Result{ActionID: a.ID}
	hs := &e.stats.Hints
	c := hs.counts(a.Kind)
	if c == nil {
		hs.Invalid++
		res.Outcome, res.Reason = kvhint.OutcomeRejected, "unknown action kind"
		return res
	}
	clipped := a.Clip(e.cfg.Hints.Bounds)
	if err := a.Validate(e.cfg.Hints.Bounds); err != nil || len(a.Target.Blocks) == 0 {
		// Invalid, or a range or whole-session target: the engine keeps
		// no session → blocks map, so it resolves only block hashes.
		c.Rejected++
		res.Outcome, res.Reason = kvhint.OutcomeRejected, "target is not a list of block hashes"
		if err != nil {
			res.Reason = err.Error()
		}
		return res
	}
	blocks := a.Target.Blocks
	if a.Limit > 0 && int(a.Limit) < len(blocks) {
		blocks, clipped = blocks[:a.Limit], true
	}
	var r hintResult
	switch a.Kind {
	case kvhint.KindDemote:
		r = e.hintDemote(a, blocks)
	case kvhint.KindPrefetch:
		r = e.hintPrefetch(a, blocks)
	case kvhint.KindShare:
		r = e.hintShare(a, blocks)
	case kvhint.KindPin:
		r = e.hintPin(now, a, blocks)
	case kvhint.KindRetain:
		r = e.hintRetain(now, a, blocks)
	case kvhint.KindRelease:
		r = e.hintRelease(blocks)
	}
	switch {
	case r.rejected:
		c.Rejected++
		res.Outcome, res.Reason = kvhint.OutcomeRejected, r.reason
		return res
	case r.acted == 0 && r.present == 0 && r.deferred == 0:
		c.Missing++
		res.Outcome = kvhint.OutcomeMissing
		return res
	case r.clipped || clipped:
		c.Clipped++
		res.Outcome = kvhint.OutcomeClipped
	case r.acted == 0 && r.deferred > 0:
		c.Deferred++
		res.Outcome = kvhint.OutcomeDeferred
	default:
		c.Accepted++
		res.Outcome = kvhint.OutcomeAccepted
	}
	c.Blocks += uint64(r.acted + r.deferred)
	res.Blocks = uint32(r.acted + r.deferred)
	return res
}

// ApplyHints applies env's actions now, in order, and appends one Result
// per action to dst: the synchronous form of Send, for a driver that
// answers each envelope (engine/mock). Leases due at now end first. The
// outcomes and Stats.Hints counts are those Step would give; the copy work
// (Prefetch, Share) is charged to the next Step. Events are flushed to the
// sink before it returns. The engine keeps no slice of env.
func (e *Engine) ApplyHints(now time.Duration, env *kvhint.Envelope, dst []kvhint.Result) []kvhint.Result {
	for len(e.hints.leases) > 0 && e.hints.leases[0].until <= now {
		e.endLease(e.hints.leases.pop())
	}
	if env == nil || len(env.Actions) == 0 {
		e.em.flush()
		return dst
	}
	e.forget()
	for i := range env.Actions {
		a := env.Actions[i]
		if a.SessionID == "" {
			a.SessionID = env.SessionID
		}
		dst = append(dst, e.applyAction(now, &a))
	}
	e.em.flush()
	return dst
}

// PeerBlock is what a Share needs of one block held by another worker: its
// local hash and its parent's sequence hash.
type PeerBlock struct {
	Local, Parent uint64
	HasParent     bool
}

// Block returns the block stored under sequence hash on the device or the
// host tier (device first) and the tier it was found on.
func (e *Engine) Block(hash uint64) (PeerBlock, flashindex.Tier, bool) {
	if b, ok := e.cached.get(hash); ok {
		blk := &e.blocks[b]
		return PeerBlock{Local: blk.local, Parent: blk.parent, HasParent: blk.flags&flagParent != 0}, flashindex.Device, true
	}
	if e.host != nil {
		if i, ok := e.host.index.get(hash); ok {
			s := &e.host.slots[i]
			return PeerBlock{Local: s.local, Parent: s.parent, HasParent: s.hasParent}, flashindex.Host, true
		}
	}
	return PeerBlock{}, 0, false
}

// PeerBlocks finds a block a Share source holds, for engines whose peers
// are not *Engine values in this process (the mock worker fetches them
// over HTTP before applying the hint). ok is false when src does not hold
// hash.
type PeerBlocks func(src kvhint.Source, hash uint64) (b PeerBlock, ok bool)

// SetPeerBlocks sets the Share lookup used when no Peers are set.
func (e *Engine) SetPeerBlocks(f PeerBlocks) { e.hints.peerBlocks = f }

// hintResult is what one action did: blocks acted on now, deferred, or
// present but already as asked; rejected means unsupported.
type hintResult struct {
	acted, deferred, present int
	clipped, rejected        bool
	reason                   string // why rejected
}

// resident reports whether hash is on the device or the host tier.
func (e *Engine) resident(hash uint64) bool {
	if _, ok := e.cached.get(hash); ok {
		return true
	}
	if e.host != nil {
		_, ok := e.host.index.get(hash)
		return ok
	}
	return false
}

// hintDemote moves the target's cached, unreferenced device blocks to the
// host tier now, tail first (as eviction would), and marks referenced ones
// to move when their last reference drops. Pinned blocks stay (clipped).
func (e *Engine) hintDemote(a *kvhint.Action, blocks []uint64) hintResult {
	var r hintResult
	if a.Dest != kvhint.TierHost || e.host == nil {
		r.rejected, r.reason = true, "no "+a.Dest.String()+" tier here" // no such tier here
		return r
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		b, ok := e.cached.get(blocks[i])
		if !ok {
			continue
		}
		blk := &e.blocks[b]
		switch {
		case blk.flags&flagPinned != 0:
			r.present++
			r.clipped = true
		case blk.ref > 0:
			blk.flags |= flagDemote
			r.deferred++
		default:
			e.unlink(b)
			e.demoteBlock(b)
			r.acted++
		}
	}
	return r
}

// demoteBlock moves the unreferenced, unlinked device block b to the host
// tier and puts the emptied block at the front of the free list.
func (e *Engine) demoteBlock(b int32) {
	blk := &e.blocks[b]
	if blk.flags&flagHeadHit != 0 {
		e.forget() // the blocked head's hit leaves the device
	}
	e.cached.del(blk.hash)
	e.stats.BlockOps++
	e.em.removed(flashindex.Device, blk.hash)
	e.hostPut(blk.hash, blk.local, blk.parent, blk.flags&flagParent != 0)
	*blk = block{}
	e.pushFront(b)
}

// hintPrefetch copies the target's host blocks that are not on the device
// back to it, root first, as unreferenced cached blocks (most recently
// used, tail evicted first), charging the host-load time to the next step.
// It stops at the first block that is on neither tier or whose parent is
// on none (a prefix lookup could not reach past it), and when the free
// list runs out (clipped).
func (e *Engine) hintPrefetch(a *kvhint.Action, blocks []uint64) hintResult {
	var r hintResult
	if a.Dest != kvhint.TierDevice || e.host == nil {
		r.rejected, r.reason = true, "only host to device prefetch exists here"
		return r
	}
	got := e.hints.got[:0]
	for _, h := range blocks {
		if _, ok := e.cached.get(h); ok {
			r.present++
			continue
		}
		i, ok := e.host.index.get(h)
		if !ok {
			break
		}
		s := e.host.slots[i]
		if s.hasParent && !e.resident(s.parent) {
			break
		}
		if e.free == 0 {
			r.present++
			r.clipped = true
			break
		}
		b, ok := e.install(h, s.local, s.parent, s.hasParent)
		if !ok {
			break
		}
		got = append(got, b)
		e.host.touch(h)
		e.stats.BlockOps++
		r.acted++
	}
	e.release(got)
	e.hints.got = got
	n := int64(r.acted * e.bs)
	e.hints.hostTokens += n
	e.stats.Hints.HostTokens += n
	return r
}

// install takes a free block and registers hash in it as a cached device
// block, left unreferenced and out of the free lists (release puts it
// back). It fails, changing nothing but the eviction it made, when making
// room evicted the parent from every tier.
func (e *Engine) install(hash, local, parent uint64, hasParent bool) (int32, bool) {
	b := e.take()
	if hasParent && !e.resident(parent) {
		e.pushFront(b)
		return 0, false
	}
	blk := &e.blocks[b]
	blk.hash, blk.local, blk.parent = hash, local, parent
	blk.flags |= flagCached
	if hasParent {
		blk.flags |= flagParent
	}
	e.cached.put(hash, b)
	e.inserted(hash)
	e.stats.BlockOps++
	e.em.stored(flashindex.Device, parent, hasParent, hash, local)
	return b, true
}

// release returns installed blocks (root first) to the free list, tail
// first, as freeing a request's blocks does.
func (e *Engine) release(got []int32) {
	for i := len(got) - 1; i >= 0; i-- {
		e.pushBack(got[i])
	}
}

// peerBlock finds hash on p's device or host tier.
func (p *Engine) peerBlock(hash uint64) (local, parent uint64, hasParent, ok bool) {
	if b, ok := p.cached.get(hash); ok {
		blk := &p.blocks[b]
		return blk.local, blk.parent, blk.flags&flagParent != 0, true
	}
	if p.host != nil {
		if i, ok := p.host.index.get(hash); ok {
			s := &p.host.slots[i]
			return s.local, s.parent, s.hasParent, true
		}
	}
	return 0, 0, false, false
}

// hintShare copies, root first, the target blocks this engine lacks from
// the first listed source that holds each (device or host) into the device
// (Dest device) or the host tier (Dest host; unspecified: host when there
// is one), charging PeerLoadPer1kTokens to the next step. It stops at the
// first block no source holds or whose parent is on no tier here, and
// when the destination runs out of room (clipped).
func (e *Engine) hintShare(a *kvhint.Action, blocks []uint64) hintResult {
	var r hintResult
	// Validate allows Dest none, device or host for a Share.
	toHost := a.Dest == kvhint.TierHost || a.Dest == kvhint.TierNone && e.host != nil
	if e.hints.peers == nil && e.hints.peerBlocks == nil || toHost && e.host == nil {
		r.rejected, r.reason = true, "no peer fabric or no host tier"
		return r
	}
	got := e.hints.got[:0]
	for j, h := range blocks {
		if _, ok := e.cached.get(h); ok {
			r.present++
			continue
		}
		if toHost {
			if _, ok := e.host.index.get(h); ok {
				r.present++
				continue
			}
		}
		var (
			local, parent uint64
			hasParent, ok bool
		)
		for _, s := range a.Sources {
			if s.Blocks != 0 && j >= int(s.Blocks) {
				continue
			}
			if e.hints.peers == nil {
				var pb PeerBlock
				if pb, ok = e.hints.peerBlocks(s, h); ok {
					local, parent, hasParent = pb.Local, pb.Parent, pb.HasParent
					break
				}
				continue
			}
			p := e.hints.peers(flashindex.Worker{ID: s.Worker.ID, DPRank: s.Worker.DPRank})
			if p == nil || p == e || p.bs != e.bs {
				continue
			}
			if local, parent, hasParent, ok = p.peerBlock(h); ok {
				break
			}
		}
		if !ok || hasParent && !e.resident(parent) {
			break
		}
		if toHost {
			if r.acted >= e.cfg.HostBlocks {
				r.clipped = true
				break
			}
			e.hostPut(h, local, parent, hasParent)
			if _, ok := e.host.index.get(h); !ok {
				break // dropped: making room evicted its parent
			}
		} else {
			if e.free == 0 {
				r.clipped = true
				break
			}
			b, ok := e.install(h, local, parent, hasParent)
			if !ok {
				break
			}
			got = append(got, b)
		}
		r.acted++
	}
	e.release(got)
	e.hints.got = got
	n := int64(r.acted * e.bs)
	e.hints.peerTokens += n
	e.stats.Hints.PeerTokens += n
	return r
}

// hintPin holds one reference to each target block cached on the device
// until now+TTL (renewing existing pins), within MaxPinned.
func (e *Engine) hintPin(now time.Duration, a *kvhint.Action, blocks []uint64) hintResult {
	var r hintResult
	if e.cfg.Hints.MaxPinned < 0 {
		r.rejected, r.reason = true, "pins are disabled"
		return r
	}
	until := now + a.TTL
	l := lease{until: until, pin: true}
	for _, h := range blocks {
		b, ok := e.cached.get(h)
		if !ok {
			continue
		}
		blk := &e.blocks[b]
		if blk.flags&flagPinned == 0 {
			if e.hints.pinned >= e.cfg.Hints.MaxPinned {
				r.present++
				r.clipped = true
				continue
			}
			e.ref(b)
			blk.flags |= flagPinned
			e.hints.pinned++
		}
		if until > blk.pinUntil {
			blk.pinUntil = until
			l.blocks = append(l.blocks, h)
		}
		r.acted++
	}
	e.stats.Hints.PinnedPeak = max(e.stats.Hints.PinnedPeak, e.hints.pinned)
	if len(l.blocks) > 0 {
		e.hints.leases.push(l)
	}
	return r
}

// unpin ends b's pin lease.
func (e *Engine) unpin(b int32) {
	e.blocks[b].flags &^= flagPinned
	e.blocks[b].pinUntil = 0
	e.hints.pinned--
	e.unref(b)
}

// breakPins ends every pin lease now.
func (e *Engine) breakPins() {
	for b := int32(0); b < e.sent && e.hints.pinned > 0; b++ {
		if e.blocks[b].flags&flagPinned != 0 {
			e.unpin(b)
			e.stats.Hints.PinsBroken++
		}
	}
}

// hintRetain gives the target's device blocks eviction priority Priority
// until now+TTL: free blocks are reused from the default list first, then
// from the lowest priority class up.
func (e *Engine) hintRetain(now time.Duration, a *kvhint.Action, blocks []uint64) hintResult {
	var r hintResult
	until := now + a.TTL
	l := lease{until: until}
	prio := uint8(a.Priority)
	for _, h := range blocks {
		b, ok := e.cached.get(h)
		if !ok {
			continue
		}
		blk := &e.blocks[b]
		free := blk.flags&flagFree != 0
		if free {
			e.unlink(b)
		}
		blk.prio, blk.keepUntil = prio, until
		blk.flags &^= flagReleased
		if free {
			e.pushBack(b)
		}
		l.blocks = append(l.blocks, h)
		r.acted++
	}
	if len(l.blocks) > 0 {
		e.hints.leases.push(l)
	}
	return r
}

// endLease ends l for the blocks whose lease end is still l.until.
func (e *Engine) endLease(l lease) {
	for _, h := range l.blocks {
		b, ok := e.cached.get(h)
		if !ok {
			continue
		}
		blk := &e.blocks[b]
		if l.pin {
			if blk.flags&flagPinned != 0 && blk.pinUntil == l.until {
				e.unpin(b)
			}
			continue
		}
		if blk.prio != 0 && blk.keepUntil == l.until {
			free := blk.flags&flagFree != 0
			if free {
				e.unlink(b)
			}
			blk.prio, blk.keepUntil = 0, 0
			if free {
				e.pushBack(b)
			}
		}
	}
}

// hintRelease moves the target's unreferenced, unpinned device blocks to
// the front of the free list (reused first; when evicted they go to the
// front of the host LRU) and its host blocks to the front of the host LRU.
// Referenced or pinned blocks are left alone (clipped).
func (e *Engine) hintRelease(blocks []uint64) hintResult {
	var r hintResult
	for _, h := range blocks {
		acted := false
		if b, ok := e.cached.get(h); ok {
			blk := &e.blocks[b]
			if blk.ref > 0 {
				r.present++
				r.clipped = true
				continue
			}
			e.unlink(b)
			blk.prio, blk.keepUntil = 0, 0
			blk.flags |= flagReleased
			// Root first to the front: the tail ends up reused first.
			e.pushFront(b)
			e.stats.BlockOps++
			acted = true
		}
		if e.host != nil && e.host.toFront(h) {
			e.stats.BlockOps++
			acted = true
		}
		if acted {
			r.acted++
		}
	}
	return r
}

// hostPutReleased keeps an evicted, released block on the host only where
// it displaces nothing: at the front of the LRU when a slot is free; a full
// host would evict it next anyway, so then it is dropped.
func (e *Engine) hostPutReleased(hash, local, parent uint64, hasParent bool) {
	h := e.host
	if h.toFront(hash) {
		e.stats.BlockOps++
		return
	}
	if len(h.spare) == 0 {
		e.stats.BlockOps++
		return
	}
	e.hostPut(hash, local, parent, hasParent)
	h.toFront(hash)
}
