package sim

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// Defaults of a zero Config.
const (
	DefaultBlockSize        = 16   // vLLM's default block size on CUDA
	DefaultMaxBatch         = 256  // vLLM's default max_num_seqs
	DefaultMaxBatchedTokens = 8192 // vLLM V1's max_num_batched_tokens for online serving
)

// Config configures an Engine. Zero fields mean the documented defaults.
type Config struct {
	// Worker is the identity the engine's events carry.
	Worker flashindex.Worker
	// BlockSize is the number of tokens per KV block; 0 means 16.
	BlockSize int
	// DeviceBlocks is the size of the device KV pool in blocks; 0 means
	// Llama3_8B_A100_KVTokens / BlockSize.
	DeviceBlocks int
	// HostBlocks is the size of the host tier in blocks: blocks evicted
	// from the device are kept there, least recently used first out, and
	// a prefix hit on them is copied back. 0 means no host tier.
	HostBlocks int
	// MaxBatch bounds the running sequences (vLLM max_num_seqs); 0 means
	// 256.
	MaxBatch int
	// MaxBatchedTokens bounds the tokens computed per step (vLLM
	// max_num_batched_tokens; longer prefills are chunked); 0 means 8192.
	MaxBatchedTokens int
	// Timing is the step-time model; the zero Timing means Llama3_8B_A100.
	Timing Timing
	// Hints bounds how the engine honours KV hints (see HintConfig and
	// the package manual); the zero value means the defaults.
	Hints HintConfig
	// Priority schedules by Request.Priority as vLLM's
	// --scheduling-policy priority does (V1 scheduler): the waiting queue
	// is ordered by (priority, arrival), lower values first, preempted
	// requests rejoin it in that order, and when a running request cannot
	// get a block the victim is the running request with the largest
	// (priority, arrival) among those not yet scheduled in the step
	// (itself included), not the newest. False is vLLM's default FCFS.
	Priority bool
}

func (c Config) withDefaults() (Config, error) {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.BlockSize < 1 || c.BlockSize > flashindex.MaxBlockSize {
		return c, fmt.Errorf("%w: block size %d", ErrConfig, c.BlockSize)
	}
	if c.DeviceBlocks == 0 {
		c.DeviceBlocks = Llama3_8B_A100_KVTokens / c.BlockSize
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxBatchedTokens == 0 {
		c.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	if c.Timing == (Timing{}) {
		c.Timing = Llama3_8B_A100
	}
	if err := c.Hints.fill(c.DeviceBlocks); err != nil {
		return c, err
	}
	switch {
	case c.DeviceBlocks < 1 || c.DeviceBlocks > 1<<30:
		return c, fmt.Errorf("%w: device blocks %d", ErrConfig, c.DeviceBlocks)
	case c.HostBlocks < 0 || c.HostBlocks > 1<<30:
		return c, fmt.Errorf("%w: host blocks %d", ErrConfig, c.HostBlocks)
	case c.MaxBatch < 1:
		return c, fmt.Errorf("%w: max batch %d", ErrConfig, c.MaxBatch)
	case c.MaxBatchedTokens < 1:
		return c, fmt.Errorf("%w: max batched tokens %d", ErrConfig, c.MaxBatchedTokens)
	}
	return c, c.Timing.validate()
}

// Request is one model call. The replay fills the fields above the line
// before routing; the engine fills the ones below as the request runs.
// A Request belongs to one engine at a time and is not safe for concurrent
// use.
type Request struct {
	// ID is unique within a run; it also names the request's private
	// blocks (see AppendBlockHashes).
	ID uint64
	// Session is the session (agent program or subagent) the request
	// belongs to; Root the root session of its program; Parent the
	// session that spawned Session ("" for a root). Turn is the index of
	// the turn within its session.
	Session, Root, Parent string
	Turn                  int
	// Priority is the request's vLLM priority (lower runs first), used
	// when Config.Priority is set; the router sets it before dispatch.
	Priority int
	// Arrival is when the request became ready (before any hold).
	Arrival time.Duration
	// InputTokens and OutputTokens are the prompt and completion lengths;
	// an OutputTokens below 1 counts as 1.
	InputTokens, OutputTokens int
	// LocalHashes and SeqHashes are the local and sequence hashes of the
	// prompt's full engine blocks (AppendBlockHashes), equal in length and
	// at most InputTokens/BlockSize long — or, for a caller that knows the
	// tokens it will generate (the mock worker), of every full block of
	// the sequence, at most (InputTokens+OutputTokens−1)/BlockSize long;
	// blocks beyond them are private to the request. Read-only for
	// everyone; the replay drops them when the request has finished.
	LocalHashes, SeqHashes []uint64

	// Worker is the index of the engine the request was dispatched to, -1
	// before dispatch. Dispatched is when; Held is how long the router held
	// it before.
	Worker     int
	Dispatched time.Duration
	Held       time.Duration
	// DoorHeld is set on a program's first turn that waited at the door
	// for ReplayConfig.MaxRunning (that wait is in Held and in Arrival).
	DoorHeld bool
	// Admitted is when the engine first scheduled it, FirstToken when its
	// first output token was sampled (the end of that step), Finished when
	// its last was.
	Admitted, FirstToken, Finished time.Duration
	// CachedTokens and HostCachedTokens are the prompt tokens found in the
	// device and host prefix cache at its first admission.
	CachedTokens, HostCachedTokens int
	// ComputedTokens counts every token the engine computed for it;
	// RecomputedTokens those it had computed before and lost to a
	// preemption; Preemptions how often it was preempted.
	ComputedTokens, RecomputedTokens int
	Preemptions                      int
	// Rejected is set when the request could never fit the engine
	// (ErrTooLarge); it then finishes at its dispatch time with no output.
	Rejected bool

	st *seqState
}

type seqState struct {
	seqLen      int // prompt + generated tokens
	computed    int // tokens whose KV is computed (or scheduled this step)
	maxComputed int
	generated   int
	target      int // output tokens to generate
	blocks      []int32
	registered  int // leading blocks whose hashes have been handled
	extLocal    []uint64
	extSeq      []uint64
	admitted    bool
}

// Stats are an engine's counters.
type Stats struct {
	Steps        int64
	Busy         time.Duration // Σ step durations
	Tokens       int64         // tokens computed (prefill chunks + decodes)
	DecodeTokens int64         // of which single decode tokens
	PromptTokens int64         // prompt tokens of admitted requests (first admission)
	HitTokens    int64         // device prefix-cache hits at first admission
	HostHits     int64         // host-tier hits at first admission, tokens
	Recomputed   int64         // tokens computed again after preemptions
	Preemptions  int64
	Evictions    int64 // cached device blocks evicted
	HostEvicted  int64 // host blocks evicted
	BlockOps     int64 // allocations, hits, frees, evictions, registrations, host operations
	Events       int64 // events handed to the sink
	Added        int64
	Finished     int64
	Rejected     int64
	PeakUsed     int // most device blocks referenced at once
	// Hints counts what the engine did with KV hints.
	Hints HintStats
}

// StepResult is what one Step did. The slices are owned by the engine and
// valid until the next Step.
type StepResult struct {
	// Duration is the step's time; 0 when there was nothing to do.
	Duration time.Duration
	// Seqs and Tokens are the sequences scheduled and tokens computed.
	Seqs, Tokens int
	// Preempted counts sequences preempted by this step.
	Preempted int
	// FirstTokens are requests whose first output token this step sampled;
	// Finished those it completed. Both happen at the step's end.
	FirstTokens, Finished []*Request
}

const (
	flagCached   uint8 = 1 << iota // hash registered in the device map
	flagParent                     // parent is valid
	flagFree                       // in a free list
	flagPinned                     // a pin lease holds one reference (hints.go)
	flagDemote                     // demote to the host tier when the last reference drops
	flagReleased                   // released by a hint: goes to the front of the host LRU when evicted
	flagHeadHit                    // a prefix hit of the blocked head of the queue (headMemo)
)

type block struct {
	hash, local, parent uint64
	pinUntil, keepUntil time.Duration // pin and retain lease ends (virtual time)
	prev, next          int32
	ref                 int32
	flags               uint8
	prio                uint8 // retain priority class; 0 = the default free list
}

// Engine is a simulated vLLM-style worker: a device KV pool with a prefix
// cache whose unreferenced blocks are evicted least-recently-used, an
// optional host tier, continuous batching with chunked prefill, preemption
// by recompute, and a step-time model. It is synchronous and driven by its
// caller: Add queues requests, Step runs one scheduler iteration and
// returns how long it takes. An Engine is not safe for concurrent use.
type Engine struct {
	cfg    Config
	bs     int
	blocks []block // device pool, then the free-list sentinels: sent (default), sent+p (retain priority p)
	sent   int32
	free   int    // blocks in the free lists
	cached *table // device prefix cache: sequence hash → block
	host   *hostTier

	hints hintState // queued hints, leases, peers (hints.go)

	waiting []*Request // FIFO; preempted requests go back to the front
	whead   int
	running []*Request

	em    emitter
	stats Stats

	memo    headMemo // why the head of the queue did not fit, kept current
	rematch bool     // tests and benchmarks: no memo, look the head up every step
	skips   int64    // lookups the memo saved (tests)

	// scratch
	sched    []schedItem
	hits     []hitRef
	firstBuf []*Request
	doneBuf  []*Request
}

type schedItem struct {
	r *Request
	n int
}

type hitRef struct {
	blk                 int32 // device block, or -1 for a host hit
	hash, local, parent uint64
	hasParent           bool
}

// New returns an engine for cfg that sends its KV events to sink; a nil
// sink drops them.
func New(cfg Config, sink EventSink) (*Engine, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:    c,
		bs:     c.BlockSize,
		blocks: make([]block, c.DeviceBlocks+1+int(c.Hints.Bounds.MaxPriority)),
		sent:   int32(c.DeviceBlocks),
		cached: newTable(c.DeviceBlocks),
		em:     emitter{sink: sink, worker: c.Worker, blockSize: c.BlockSize},
	}
	s := e.sent
	for i := s; i < int32(len(e.blocks)); i++ {
		e.blocks[i].prev, e.blocks[i].next = i, i
	}
	for i := int32(0); i < s; i++ {
		e.pushBack(i)
	}
	if c.HostBlocks > 0 {
		e.host = newHostTier(c.HostBlocks)
	}
	return e, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Stats returns the engine's counters.
func (e *Engine) Stats() Stats {
	s := e.stats
	s.Events = e.em.events
	s.Hints.Pinned = e.hints.pinned
	return s
}

// Waiting returns the number of queued requests; Running the number of
// admitted ones.
func (e *Engine) Waiting() int { return len(e.waiting) - e.whead }

// Running returns the number of admitted, unfinished requests.
func (e *Engine) Running() int { return len(e.running) }

// HasWork reports whether a Step would schedule something.
func (e *Engine) HasWork() bool { return e.Waiting() > 0 || len(e.running) > 0 }

// UsedBlocks returns the device blocks referenced by running requests.
func (e *Engine) UsedBlocks() int { return e.cfg.DeviceBlocks - e.free }

// CachedBlocks returns the number of blocks in the device prefix cache
// (referenced or not).
func (e *Engine) CachedBlocks() int { return e.cached.n }

// Cached returns the sequence hashes cached on tier (Device or Host),
// sorted; for tests and inspection (it allocates).
func (e *Engine) Cached(tier flashindex.Tier) []uint64 {
	var out []uint64
	switch tier {
	case flashindex.Device:
		e.cached.each(func(h uint64, _ int32) { out = append(out, h) })
	case flashindex.Host:
		if e.host != nil {
			e.host.index.each(func(h uint64, _ int32) { out = append(out, h) })
		}
	}
	slices.Sort(out)
	return out
}

// Add queues r. It returns ErrRequest for a malformed request and
// ErrTooLarge for one that could never fit the device pool (r.Rejected is
// then set); neither changes the engine.
func (e *Engine) Add(r *Request) error {
	if r.InputTokens < 1 || r.OutputTokens < 0 {
		return fmt.Errorf("%w: request %d has %d input and %d output tokens", ErrRequest, r.ID, r.InputTokens, r.OutputTokens)
	}
	if full := (r.InputTokens + max(1, r.OutputTokens) - 1) / e.bs; len(r.LocalHashes) != len(r.SeqHashes) || len(r.SeqHashes) > full {
		return fmt.Errorf("%w: request %d has %d local and %d sequence hashes for %d full blocks", ErrRequest, r.ID, len(r.LocalHashes), len(r.SeqHashes), full)
	}
	if r.st != nil {
		return fmt.Errorf("%w: request %d was already added", ErrRequest, r.ID)
	}
	target := max(1, r.OutputTokens)
	if need := (r.InputTokens + target - 1 + e.bs - 1) / e.bs; need > e.cfg.DeviceBlocks {
		r.Rejected = true
		e.stats.Rejected++
		return fmt.Errorf("%w: request %d needs %d blocks, the pool has %d", ErrTooLarge, r.ID, need, e.cfg.DeviceBlocks)
	}
	r.st = &seqState{seqLen: r.InputTokens, target: target}
	if e.cfg.Priority {
		e.enqueue(r)
		e.stats.Added++
		return nil
	}
	e.waiting = append(e.waiting, r)
	e.stats.Added++
	return nil
}

// Step runs one scheduler iteration starting at now: it schedules running
// requests first (allocating blocks, preempting the newest running request
// when the pool is exhausted), then admits waiting ones if nothing was
// preempted, emits the resulting KV events, and returns the step's
// duration. Requests' FirstToken and Finished are set to now + Duration.
// With nothing to do it returns a zero StepResult.
func (e *Engine) Step(now time.Duration) (StepResult, error) {
	e.sched = e.sched[:0]
	e.firstBuf = e.firstBuf[:0]
	e.doneBuf = e.doneBuf[:0]
	var res StepResult
	e.applyHints(now)
	if !e.HasWork() {
		e.em.flush()
		return res, e.sinkErr()
	}
	budget := e.cfg.MaxBatchedTokens
	var work StepWork

	// Running requests, oldest first.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		r := e.running[i]
		st := r.st
		n := min(st.seqLen-st.computed, budget)
		ok := true
		for !e.grow(r, st.computed+n) {
			if e.hints.pinned > 0 {
				// Pins are leases on spare memory: break them before
				// preempting running work.
				e.breakPins()
				continue
			}
			vi := len(e.running) - 1
			if e.cfg.Priority {
				vi = e.priorityVictim(i)
			}
			victim := e.running[vi]
			e.running = slices.Delete(e.running, vi, vi+1)
			e.preempt(victim)
			res.Preempted++
			if victim == r {
				ok = false
				break
			}
		}
		if !ok {
			if e.cfg.Priority {
				i-- // r left the running list: its successor is at i now
				continue
			}
			break // FCFS: r was the newest; nothing after it runs
		}
		e.schedule(r, n, &work)
		budget -= n
	}

	// Waiting requests, FIFO, unless this step preempted.
	if res.Preempted == 0 {
		budget = e.admitWaiting(now, budget, &work)
		if len(e.sched) == 0 && e.hints.pinned > 0 {
			// Nothing can run while pins hold the memory the head of
			// the queue needs: break them rather than stall.
			e.breakPins()
			budget = e.admitWaiting(now, budget, &work)
		}
	}
	if len(e.sched) == 0 {
		e.em.flush()
		return res, fmt.Errorf("%w: worker %v with %d waiting and %d running requests", ErrEngine, e.cfg.Worker, e.Waiting(), len(e.running))
	}
	// Copies that hints asked for since the last step are charged here.
	work.HostTokens += e.hints.hostTokens
	work.PeerTokens += e.hints.peerTokens
	e.hints.hostTokens, e.hints.peerTokens = 0, 0

	res.Duration = e.cfg.Timing.Step(work)
	end := now + res.Duration
	res.Seqs, res.Tokens = int(work.Seqs), int(work.Tokens)
	e.stats.Steps++
	e.stats.Busy += res.Duration
	e.stats.Tokens += work.Tokens
	if used := e.UsedBlocks(); used > e.stats.PeakUsed {
		e.stats.PeakUsed = used
	}

	// Progress: tokens computed, tokens sampled, requests finished.
	finished := false
	for _, s := range e.sched {
		r, st := s.r, s.r.st
		st.computed += s.n
		if st.computed < st.seqLen {
			continue
		}
		st.generated++
		if st.generated == 1 {
			r.FirstToken = end
			e.firstBuf = append(e.firstBuf, r)
		}
		if st.generated < st.target {
			st.seqLen++
			continue
		}
		r.Finished = end
		e.freeBlocks(st)
		r.st = nil
		e.doneBuf = append(e.doneBuf, r)
		e.stats.Finished++
		finished = true
	}
	if finished {
		e.running = slices.DeleteFunc(e.running, func(r *Request) bool { return r.st == nil })
	}
	e.em.flush()
	res.FirstTokens, res.Finished = e.firstBuf, e.doneBuf
	return res, e.sinkErr()
}

// sinkErr returns (and clears) the event sink's first error of the step.
func (e *Engine) sinkErr() error {
	if e.em.err == nil {
		return nil
	}
	err := e.em.err
	e.em.err = nil
	return fmt.Errorf("sim: worker %v event sink: %w", e.cfg.Worker, err)
}

// admitWaiting admits waiting requests in FIFO order while the batch, the
// token budget and the pool allow, and returns the budget left.
func (e *Engine) admitWaiting(now time.Duration, budget int, work *StepWork) int {
	for e.Waiting() > 0 && len(e.running) < e.cfg.MaxBatch && budget > 0 {
		r := e.waiting[e.whead]
		n, ok := e.admit(r, now, budget, work)
		if !ok {
			break
		}
		e.waiting[e.whead] = nil
		e.whead++
		e.running = append(e.running, r)
		e.schedule(r, n, work)
		budget -= n
	}
	if e.whead > 64 && e.whead*2 > len(e.waiting) {
		k := copy(e.waiting, e.waiting[e.whead:])
		clear(e.waiting[k:])
		e.waiting = e.waiting[:k]
		e.whead = 0
	}
	return budget
}

// schedule records that r computes n tokens this step, registers the blocks
// those tokens complete, and adds the work to w.
func (e *Engine) schedule(r *Request, n int, w *StepWork) {
	st := r.st
	p := st.computed
	e.sched = append(e.sched, schedItem{r, n})
	w.Seqs++
	w.Tokens += int64(n)
	w.AttnPairs += int64(n)*int64(p) + int64(n)*int64(n+1)/2
	w.KVTokens += int64(p + n)
	w.AttnNanos += e.cfg.Timing.AttnCost(int64(p), int64(n))
	if n == 1 && st.generated > 0 && p == st.seqLen-1 {
		e.stats.DecodeTokens++
	}
	r.ComputedTokens += n
	if p < st.maxComputed {
		re := min(p+n, st.maxComputed) - p
		r.RecomputedTokens += re
		e.stats.Recomputed += int64(re)
	}
	st.maxComputed = max(st.maxComputed, p+n)
	full := (p + n) / e.bs
	for j := st.registered; j < full; j++ {
		b := st.blocks[j]
		local, hash := e.hashAt(r, j)
		var parent uint64
		if j > 0 {
			_, parent = e.hashAt(r, j-1)
			if !e.resident(parent) {
				// The parent was a private copy whose cached twin has
				// left every tier (after hints moved it): no prefix
				// lookup can reach this block, so it stays private too.
				continue
			}
		}
		if _, fresh := e.cached.putIfAbsent(hash, b); !fresh {
			continue // another request computed the same block; this copy stays private
		}
		e.inserted(hash)
		blk := &e.blocks[b]
		blk.hash, blk.local = hash, local
		blk.flags |= flagCached
		if j > 0 {
			blk.parent = parent
			blk.flags |= flagParent
		}
		e.stats.BlockOps++
		e.em.stored(flashindex.Device, blk.parent, j > 0, hash, local)
	}
	if full > st.registered {
		st.registered = full
	}
}

// hashAt returns the local and sequence hash of r's block j.
func (e *Engine) hashAt(r *Request, j int) (local, seq uint64) {
	if j < len(r.SeqHashes) {
		return r.LocalHashes[j], r.SeqHashes[j]
	}
	st := r.st
	k := j - len(r.SeqHashes)
	for len(st.extSeq) <= k {
		i := len(r.SeqHashes) + len(st.extSeq)
		l := privateLocal(r.ID, i)
		var s uint64
		switch {
		case len(st.extSeq) > 0:
			s = flashindex.NextSequenceHash(st.extSeq[len(st.extSeq)-1], l)
		case len(r.SeqHashes) > 0:
			s = flashindex.NextSequenceHash(r.SeqHashes[len(r.SeqHashes)-1], l)
		default:
			s = l
		}
		st.extLocal = append(st.extLocal, l)
		st.extSeq = append(st.extSeq, s)
	}
	return st.extLocal[k], st.extSeq[k]
}

// admit looks up r's prefix in the cache and allocates the blocks for its
// first chunk. It changes nothing and returns false when the pool cannot
// hold that chunk.
func (e *Engine) admit(r *Request, now time.Duration, budget int, w *StepWork) (int, bool) {
	st := r.st
	if e.memo.r == r {
		if e.memo.stillShort(budget, e.bs) {
			e.skips++
			return 0, false
		}
		e.forget()
	}
	e.hits = e.hits[:0]
	maxHit := (st.seqLen - 1) / e.bs
	devInFree := 0
	devHits := 0
	for j := 0; j < maxHit; j++ {
		local, hash := e.hashAt(r, j)
		if b, ok := e.cached.get(hash); ok {
			e.hits = append(e.hits, hitRef{blk: b})
			devHits++
			if e.blocks[b].ref == 0 {
				devInFree++
			}
			continue
		}
		if e.host != nil {
			if _, ok := e.host.index.get(hash); ok {
				h := hitRef{blk: -1, hash: hash, local: local}
				if j > 0 {
					_, h.parent = e.hashAt(r, j-1)
					h.hasParent = true
				}
				e.hits = append(e.hits, h)
				continue
			}
		}
		break
	}
	computed := len(e.hits) * e.bs
	n := min(st.seqLen-computed, budget)
	need := (computed+n+e.bs-1)/e.bs - devHits
	if need > e.free-devInFree {
		if devHits == len(e.hits) && !e.rematch { // no host hits: see headMemo
			e.remember(r, need-(e.free-devInFree), n, st.seqLen-computed, maxHit)
		}
		return 0, false
	}
	// Pin device hits first so allocating cannot evict them.
	for _, h := range e.hits {
		if h.blk >= 0 {
			e.ref(h.blk)
		}
	}
	st.blocks = st.blocks[:0]
	hostHits := 0
	for _, h := range e.hits {
		if h.blk >= 0 {
			st.blocks = append(st.blocks, h.blk)
			continue
		}
		b := e.alloc()
		blk := &e.blocks[b]
		blk.hash, blk.local, blk.parent = h.hash, h.local, h.parent
		blk.flags |= flagCached
		if h.hasParent {
			blk.flags |= flagParent
		}
		e.cached.put(h.hash, b)
		e.inserted(h.hash)
		e.host.touch(h.hash)
		e.stats.BlockOps += 2
		e.em.stored(flashindex.Device, h.parent, h.hasParent, h.hash, h.local)
		st.blocks = append(st.blocks, b)
		hostHits++
	}
	for len(st.blocks) < (computed+n+e.bs-1)/e.bs {
		st.blocks = append(st.blocks, e.alloc())
	}
	st.computed = computed
	st.registered = len(e.hits)
	w.HostTokens += int64(hostHits * e.bs)
	if !st.admitted {
		st.admitted = true
		r.Admitted = now
		r.CachedTokens = devHits * e.bs
		r.HostCachedTokens = hostHits * e.bs
		e.stats.PromptTokens += int64(r.InputTokens)
		e.stats.HitTokens += int64(devHits * e.bs)
		e.stats.HostHits += int64(hostHits * e.bs)
	}
	return n, true
}

// grow allocates blocks so r can hold tokens tokens; false if the free
// list is too short (nothing changes).
func (e *Engine) grow(r *Request, tokens int) bool {
	st := r.st
	need := (tokens+e.bs-1)/e.bs - len(st.blocks)
	if need > e.free {
		return false
	}
	for ; need > 0; need-- {
		st.blocks = append(st.blocks, e.alloc())
	}
	return true
}

// preempt frees r's blocks and puts it back at the front of the queue to
// be recomputed (vLLM's recompute preemption).
func (e *Engine) preempt(r *Request) {
	st := r.st
	e.freeBlocks(st)
	st.computed = 0
	st.registered = 0
	r.Preemptions++
	e.stats.Preemptions++
	if e.cfg.Priority {
		e.enqueue(r)
		return
	}
	if e.whead > 0 {
		e.whead--
		e.waiting[e.whead] = r
		return
	}
	e.waiting = slices.Insert(e.waiting, 0, r)
}

// freeBlocks drops st's references, tail block first, so that the tail of
// a sequence is evicted before its head (vLLM's free order).
func (e *Engine) freeBlocks(st *seqState) {
	for i := len(st.blocks) - 1; i >= 0; i-- {
		e.unref(st.blocks[i])
	}
	st.blocks = st.blocks[:0]
}

// unref drops one reference to b; the last one puts it in its free list,
// or demotes it to the host tier when a Demote hint was deferred on it.
func (e *Engine) unref(b int32) {
	blk := &e.blocks[b]
	blk.ref--
	e.stats.BlockOps++
	if blk.ref != 0 {
		return
	}
	if blk.flags&(flagDemote|flagCached) == flagDemote|flagCached && e.host != nil {
		e.demoteBlock(b)
		e.stats.Hints.DeferredDemotions++
		return
	}
	e.pushBack(b)
}

func (e *Engine) ref(b int32) {
	blk := &e.blocks[b]
	if blk.ref == 0 {
		e.unlink(b)
		blk.flags &^= flagReleased // in use again
	}
	blk.ref++
	e.stats.BlockOps++
}

// alloc takes the least recently used free block, evicting its cached
// content (to the host tier, if any), and references it.
func (e *Engine) alloc() int32 {
	b := e.take()
	e.blocks[b].ref = 1
	if used := e.cfg.DeviceBlocks - e.free; used > e.stats.PeakUsed {
		e.stats.PeakUsed = used
	}
	return b
}

// take unlinks the next block to reuse — the front of the default free
// list, else the front of the lowest retain class — and evicts its cached
// content (to the host tier, if any). The block comes back empty and
// unreferenced. A free block must exist.
func (e *Engine) take() int32 {
	b := e.blocks[e.sent].next
	if b == e.sent {
		for s := e.sent + 1; s < int32(len(e.blocks)); s++ {
			if e.blocks[s].next != s {
				b = e.blocks[s].next
				break
			}
		}
	}
	e.unlink(b)
	blk := &e.blocks[b]
	e.stats.BlockOps++
	if blk.flags&flagHeadHit != 0 {
		e.lostHit(b) // the blocked head's prefix now ends before b
	}
	if blk.flags&flagCached != 0 {
		e.cached.del(blk.hash)
		e.stats.Evictions++
		e.stats.BlockOps++
		e.em.removed(flashindex.Device, blk.hash)
		if e.host != nil {
			if blk.flags&flagReleased != 0 {
				e.hostPutReleased(blk.hash, blk.local, blk.parent, blk.flags&flagParent != 0)
			} else {
				e.hostPut(blk.hash, blk.local, blk.parent, blk.flags&flagParent != 0)
			}
		}
	}
	*blk = block{}
	return b
}

func (e *Engine) hostPut(hash, local, parent uint64, hasParent bool) {
	h := e.host
	e.stats.BlockOps++
	if _, ok := h.index.get(hash); ok {
		h.touch(hash)
		return
	}
	// No prefix lookup can reach a block whose parent is on no tier
	// (possible only after hints reordered eviction): such a block is
	// dropped, before or after making room (the victim may be the parent).
	if hasParent && !e.resident(parent) {
		e.stats.Hints.Orphans++
		return
	}
	if victim, ok := h.evictIfFull(); ok {
		e.stats.HostEvicted++
		e.em.removed(flashindex.Host, victim)
		if hasParent && victim == parent && !e.resident(parent) {
			e.stats.Hints.Orphans++
			return
		}
	}
	h.insert(hash, local, parent, hasParent)
	e.inserted(hash)
	e.em.stored(flashindex.Host, parent, hasParent, hash, local)
}

// pushBack appends b to its free list (the default one, or its retain
// class) as the most recently used block.
func (e *Engine) pushBack(b int32) {
	s := e.sent + int32(e.blocks[b].prio)
	last := e.blocks[s].prev
	e.blocks[b].prev, e.blocks[b].next = last, s
	e.blocks[last].next = b
	e.blocks[s].prev = b
	e.blocks[b].flags |= flagFree
	e.free++
	if e.memo.r != nil && e.blocks[b].flags&flagHeadHit == 0 {
		e.memo.deficit--
	}
}

// pushFront puts b at the front of the default free list: the next block
// to be reused (an empty block, or a released one).
func (e *Engine) pushFront(b int32) {
	s := e.sent
	first := e.blocks[s].next
	e.blocks[b].prev, e.blocks[b].next = s, first
	e.blocks[first].prev = b
	e.blocks[s].next = b
	e.blocks[b].flags |= flagFree
	e.free++
	if e.memo.r != nil && e.blocks[b].flags&flagHeadHit == 0 {
		e.memo.deficit--
	}
}

func (e *Engine) unlink(b int32) {
	blk := &e.blocks[b]
	e.blocks[blk.prev].next = blk.next
	e.blocks[blk.next].prev = blk.prev
	blk.flags &^= flagFree
	e.free--
	if e.memo.r != nil && blk.flags&flagHeadHit == 0 {
		e.memo.deficit++
	}
}

// headMemo remembers why the head of the waiting queue did not fit, so a
// step does not look its whole prompt up again while nothing that could
// let it fit has changed (a blocked head would otherwise be re-matched on
// every step: the cost of a run grew with steps × prompt blocks).
//
// The head fits when need ≤ free − devInFree (admit). With no host hits,
// need is the blocks of the first chunk beyond the device hits, and the
// memo keeps deficit = need − (free − devInFree) current as blocks move:
// a block that is not one of the head's hits entering a free list lowers
// it, one leaving raises it; a hit (flagHeadHit) moving either way changes
// free and devInFree alike. What else could lower need drops the memo: the
// first missing block of its prefix stored on either tier (an evicted hit
// copied to the host tier is one), applied hints. An evicted hit
// shortens the remembered prefix (lostHit); the chunk follows the step's
// token budget (stillShort). A head with host hits is not remembered
// (losing one can shrink need).
type headMemo struct {
	r       *Request
	deficit int    // blocks short; the head fits again only at ≤ 0
	n       int    // the chunk, in tokens, that did not fit
	rem     int    // prompt tokens after the hits
	miss    uint64 // sequence hash of the first block the caches lack
	hasMiss bool
	blocks  []int32 // the hit blocks, flagged flagHeadHit
}

// stillShort reports whether the remembered head still cannot fit with
// budget tokens left in the step.
func (m *headMemo) stillShort(budget, bs int) bool {
	n := min(m.rem, budget) // the chunk it would get now
	return m.deficit+(n+bs-1)/bs-(m.n+bs-1)/bs > 0
}

// lostHit updates the memo for the eviction of the head's hit block b: its
// prefix now ends before b, so b and the hits after it are blocks like any
// other (those in a free list count as free room again), b's hash is the
// first one missing, and the chunk may grow. Blocks are evicted tail of a
// chain first, so b is found near the end.
func (e *Engine) lostHit(b int32) {
	m := &e.memo
	i := len(m.blocks) - 1
	for i >= 0 && m.blocks[i] != b {
		i--
	}
	if i < 0 {
		e.forget() // not ours: cannot happen, but stay safe
		return
	}
	for _, k := range m.blocks[i+1:] {
		blk := &e.blocks[k]
		blk.flags &^= flagHeadHit
		if blk.ref == 0 {
			m.deficit-- // a free block that no longer counts as a hit
		}
	}
	e.blocks[b].flags &^= flagHeadHit
	m.rem += (len(m.blocks) - i) * e.bs
	m.miss, m.hasMiss = e.blocks[b].hash, true
	m.blocks = m.blocks[:i]
}

// remember records that r, whose device hits are e.hits (of at most maxHit
// blocks looked up), is deficit blocks short for a chunk of n tokens with
// rem prompt tokens beyond its hits.
func (e *Engine) remember(r *Request, deficit, n, rem, maxHit int) {
	e.forget()
	m := &e.memo
	m.r, m.deficit, m.n, m.rem = r, deficit, n, rem
	m.hasMiss = len(e.hits) < maxHit
	if m.hasMiss {
		_, m.miss = e.hashAt(r, len(e.hits))
	}
	for _, h := range e.hits {
		e.blocks[h.blk].flags |= flagHeadHit
		m.blocks = append(m.blocks, h.blk)
	}
}

// forget drops the memo.
func (e *Engine) forget() {
	m := &e.memo
	if m.r == nil {
		return
	}
	for _, b := range m.blocks {
		e.blocks[b].flags &^= flagHeadHit
	}
	m.blocks = m.blocks[:0]
	m.r = nil
}

// inserted is called for every hash stored on a tier: the remembered head
// may now hit further.
func (e *Engine) inserted(hash uint64) {
	if e.memo.r != nil && e.memo.hasMiss && e.memo.miss == hash {
		e.forget()
	}
}

// before reports whether a runs before b under priority scheduling:
// (priority, arrival) ascending, request ID breaking ties.
func before(a, b *Request) bool {
	if a.Priority != b.Priority {
		return a.Priority < b.Priority
	}
	if a.Arrival != b.Arrival {
		return a.Arrival < b.Arrival
	}
	return a.ID < b.ID
}

// enqueue inserts r into the waiting queue in priority order.
func (e *Engine) enqueue(r *Request) {
	q := e.waiting[e.whead:]
	k := sort.Search(len(q), func(i int) bool { return before(r, q[i]) })
	e.waiting = slices.Insert(e.waiting, e.whead+k, r)
}

// priorityVictim returns the index, from from on, of the running request
// that runs last under priority scheduling.
func (e *Engine) priorityVictim(from int) int {
	v := from
	for j := from + 1; j < len(e.running); j++ {
		if before(e.running[v], e.running[j]) {
			v = j
		}
	}
	return v
}
