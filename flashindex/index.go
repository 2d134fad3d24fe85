package flashindex

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultApproxMaxEntries bounds approximate entries when
// Config.ApproxMaxEntries is zero; MaxApproxEntries is the largest bound
// it may set (entries are numbered with 32 bits).
const (
	DefaultApproxMaxEntries = 1 << 20
	MaxApproxEntries        = 1 << 30
)

// DefaultApproxTTL is the lifetime Record gives entries when passed a ttl
// of zero or less (Dynamo's approximate indexer uses the same 120 s).
const DefaultApproxTTL = 120 * time.Second

// Config configures an Index. Zero fields take the documented defaults.
type Config struct {
	// BlockSize is the number of tokens per block. Required. Events that
	// carry another non-zero BlockSize, and stored blocks whose token
	// count differs, are rejected with a *BlockSizeError.
	BlockSize int

	// MaxBlocksPerWorker bounds the (block, tier) residencies one worker
	// (one DP rank) may hold from events: a Stored event that would exceed
	// it is rejected with a *CapacityError, since the engine cannot hold
	// that many and the index must have missed removals. 0 = unbounded.
	MaxBlocksPerWorker int

	// OnGap, if set, is called after Apply sees an event id jump on a
	// worker. It is never called while the index holds a lock, so it may
	// call back into the index.
	OnGap func(Gap)

	// ApproxMaxEntries bounds the approximate (Record) entries over all
	// workers; beyond it the entries closest to expiry (the oldest, when
	// TTLs are equal) are pruned first. 0 = DefaultApproxMaxEntries; at most
	// MaxApproxEntries.
	ApproxMaxEntries int

	// Now is the clock for approximate-entry TTLs. nil = time.Now.
	Now func() time.Time

	// MaxSnapshotBytes caps the decompressed size of a snapshot body that
	// Restore reads; a larger one fails with ErrSnapshotTooLarge before
	// more is read. 0 = DefaultMaxSnapshotBytes. Every count in the
	// snapshot is also checked against the bytes this cap leaves before
	// anything is allocated for it. Not used by New.
	MaxSnapshotBytes int64

	// MaxSnapshotExpansion caps how far a snapshot may decompress: the body
	// read so far may not exceed MaxSnapshotExpansion times the compressed
	// bytes read so far plus SnapshotExpansionSlack, so a small file cannot
	// claim a huge index (a zstd frame of RLE blocks expands 32,000-fold).
	// Snapshots of workers holding mostly different blocks expand 1.5 to
	// 3-fold; the expansion grows with the number of workers that hold the
	// very same blocks (their engine maps repeat: 128 workers holding the
	// same 1000 blocks expand 136-fold), so raise it for fleets like that.
	// 0 = DefaultMaxSnapshotExpansion; negative turns the check off
	// (MaxSnapshotBytes still applies). Not used by New.
	MaxSnapshotExpansion int
}

// Snapshot bounds; see Config.MaxSnapshotBytes and MaxSnapshotExpansion.
const (
	DefaultMaxSnapshotBytes     = 8 << 30
	DefaultMaxSnapshotExpansion = 64
	SnapshotExpansionSlack      = 1 << 20
)

// Match is one worker's overlap with a request, in blocks.
//
// The depths are exclusive, as Dynamo counts them: Device is the longest
// prefix of the request resident on the worker's device tier (events, plus
// approximate entries from Record); Host counts the blocks that continue on
// the host tier from where the device prefix ends; Disk counts the blocks
// that continue on the disk tier from where the host run ends. A block that
// the worker holds on both device and host counts once, in the tier where
// the walk is when it reaches it. Resident is the total number of
// residencies the worker holds (device + host + disk + approximate; a block
// on two tiers counts twice), the usual tie-breaker.
type Match struct {
	Worker   Worker
	Device   int
	Host     int
	Disk     int
	Resident int
}

// Total returns Device + Host + Disk.
func (m Match) Total() int { return m.Device + m.Host + m.Disk }

// Index is the tiered KV block index. Build one with New or Restore.
//
// Thread-safety: all methods are safe for concurrent use. Queries
// (FindMatches, FindMatchesEarlyExit) take no lock: they read immutable
// node snapshots through atomic pointers and find nodes in a
// sequence-locked head map. Writers (Apply, Record,
// Expire, RemoveWorker, Snapshot, Stats) serialise on one writer mutex. A
// query concurrent with a write sees every node either before or after that
// write, so it may observe part of an event applied; a query that starts
// after a write returned sees all of it.
type Index struct {
	blockSize int
	maxBlocks int
	approxMax int
	onGap     func(Gap)
	now       func() time.Time

	blocks *blockMap                 // writer-only (under mu); see blockMap
	nodes  arena                     // lock-free reads; writes under mu
	slots  atomic.Pointer[slotTable] // copy-on-write; replaced under mu

	mu        sync.Mutex // serialises writers; guards every field below
	workers   map[Worker]*workerState
	freeSlots []int
	hashers   map[string]*Hasher
	approx    approxSet
	approxSeq uint64
	bySlot    []*workerState // by bitset slot (nil where free), for approx entries
	st        counters
	refs      []blockRef // scratch for one event
	seqBuf    []uint64   // scratch: sequence hashes of one event
	runBuf    []run      // scratch for updateRange
	dupE      stampSet   // scratch: engine hashes seen in one event
	dupS      stampSet   // scratch: sequence hashes seen in one call
	nodeSet   map[*node]struct{}
}

// slotTable maps bitset slots to workers. Immutable once published; the
// count chunks it points to are shared by every table and written in
// place.
type slotTable struct {
	workers []Worker
	counts  []*countChunk // slot s: counts[s>>6][s&63]
	mask    []uint64      // slots in use, one bit each
}

func (t *slotTable) words() int { return len(t.mask) }

// count returns the residency counters of slot s.
func (t *slotTable) count(s int) *slotCounts { return &t.counts[s>>6].c[s&63] }

// countChunk holds the counters of 64 consecutive slots, with their totals
// in one dense array: a query reporting every worker reads 8 bytes per
// worker, sequentially.
type countChunk struct {
	c     [64]slotCounts
	total [64]atomic.Int64
}

func newCountChunk() *countChunk {
	k := new(countChunk)
	for i := range k.c {
		k.c[i].all = &k.total[i]
	}
	return k
}

// slotCounts holds a worker's residencies per plane and in total, written
// by the writer (add, set) and read by queries (Match.Resident).
type slotCounts struct {
	n   [numPlanes]atomic.Int64
	all *atomic.Int64 // the sum of n, in the chunk's dense total array
}

func (c *slotCounts) add(p int, d int64) {
	c.n[p].Add(d)
	c.all.Add(d)
}

func (c *slotCounts) set(p int, v int64) {
	c.all.Add(v - c.n[p].Swap(v))
}

func (c *slotCounts) events() int {
	return int(c.n[planeDevice].Load() + c.n[planeHost].Load() + c.n[planeDisk].Load())
}

// workerState is the writer's view of one worker. Guarded by Index.mu.
type workerState struct {
	w      Worker
	slot   int
	counts *slotCounts
	// engine maps the worker's engine hashes to own sequence hashes, one
	// map per tier: a (block, tier) is resident exactly when some engine
	// hash of that tier maps to it. The map of tier p is kept only once
	// full[p] is set: until the worker stores a block on that tier under an
	// engine hash that differs from the block's own hash (engines that hash
	// as the index does, which is the common case), every mapping is the
	// identity, the map is empty, and the worker's residency bits on plane
	// p are the set of engine hashes it holds. That saves a hash-map probe
	// and update per stored and removed block. The first other engine hash
	// builds the map from the residency bits (materializeEngine).
	engine [eventPlanes]u64map
	full   [eventPlanes]bool
	// alias counts extra engine hashes that map to an already resident
	// (block, tier) (an engine that keys blocks by something the index
	// does not hash, such as a cache salt). Allocated on first use.
	alias  [eventPlanes]map[uint64]uint32
	approx u64map // sequence hash -> its entry in Index.approx
	lastID uint64
	seen   bool
	gaps   uint64
}

// Rejections counts rejected events by reason.
type Rejections struct {
	Malformed     uint64 // nil event, missing content, bad extra keys
	Kind          uint64 // unknown EventKind
	Tier          uint64 // External or out-of-range tier
	BlockSize     uint64 // block-size mismatch
	UnknownParent uint64 // parent engine hash not resident on the worker
	Conflict      uint64 // engine hash already maps to other content
	Capacity      uint64 // MaxBlocksPerWorker exceeded
}

// Total returns the number of rejected events.
func (r Rejections) Total() uint64 {
	return r.Malformed + r.Kind + r.Tier + r.BlockSize + r.UnknownParent + r.Conflict + r.Capacity
}

type counters struct {
	applied        uint64
	rejected       Rejections
	duplicates     uint64
	gaps           uint64
	unknownRemoved uint64
	approxExpired  uint64
	approxPruned   uint64
}

// New returns an empty Index.
func New(cfg Config) (*Index, error) {
	if cfg.BlockSize < 1 || cfg.BlockSize > MaxBlockSize {
		return nil, fmt.Errorf("%w: BlockSize %d", ErrBlockSize, cfg.BlockSize)
	}
	if cfg.MaxBlocksPerWorker < 0 {
		return nil, fmt.Errorf("%w: MaxBlocksPerWorker %d < 0", ErrConfig, cfg.MaxBlocksPerWorker)
	}
	if cfg.ApproxMaxEntries < 0 || cfg.ApproxMaxEntries > MaxApproxEntries {
		return nil, fmt.Errorf("%w: ApproxMaxEntries %d not in [0, %d]", ErrConfig, cfg.ApproxMaxEntries, MaxApproxEntries)
	}
	if cfg.MaxSnapshotBytes < 0 {
		return nil, fmt.Errorf("%w: MaxSnapshotBytes %d < 0", ErrConfig, cfg.MaxSnapshotBytes)
	}
	ix := &Index{
		blockSize: cfg.BlockSize,
		maxBlocks: cfg.MaxBlocksPerWorker,
		approxMax: cfg.ApproxMaxEntries,
		onGap:     cfg.OnGap,
		now:       cfg.Now,
		blocks:    newBlockMap(),
		nodes:     arena{heads: newHeadMap()},
		workers:   make(map[Worker]*workerState),
		hashers:   make(map[string]*Hasher),
		nodeSet:   make(map[*node]struct{}),
	}
	if ix.approxMax == 0 {
		ix.approxMax = DefaultApproxMaxEntries
	}
	ix.approx.init()
	if ix.now == nil {
		ix.now = time.Now
	}
	ix.slots.Store(&slotTable{})
	return ix, nil
}

// BlockSize returns the index's tokens per block.
func (ix *Index) BlockSize() int { return ix.blockSize }

// worker returns the state of w, registering it (and giving it a slot) on
// first sight. Caller holds mu.
func (ix *Index) worker(w Worker) *workerState {
	if ws := ix.workers[w]; ws != nil {
		return ws
	}
	old := ix.slots.Load()
	var slot int
	if n := len(ix.freeSlots); n > 0 {
		slices.Sort(ix.freeSlots) // lowest free slot first: deterministic
		slot = ix.freeSlots[0]
		ix.freeSlots = ix.freeSlots[1:]
	} else {
		slot = len(old.workers)
	}
	t := &slotTable{
		workers: slices.Clone(old.workers),
		counts:  slices.Clone(old.counts),
		mask:    slices.Clone(old.mask),
	}
	if slot == len(t.workers) {
		t.workers = append(t.workers, w)
		if slot>>6 >= len(t.mask) {
			t.mask = append(t.mask, 0)
			t.counts = append(t.counts, newCountChunk())
		}
	} else {
		t.workers[slot] = w
	}
	t.mask[slot>>6] |= 1 << (uint(slot) & 63)
	// A reused slot's counters were zeroed when its worker was removed.
	ws := &workerState{w: w, slot: slot, counts: t.count(slot), approx: u64map{double: true}}
	ix.workers[w] = ws
	if slot == len(ix.bySlot) {
		ix.bySlot = append(ix.bySlot, ws)
	} else {
		ix.bySlot[slot] = ws
	}
	ix.slots.Store(t)
	return ws
}

func (ix *Index) hasher(lora string) *Hasher {
	if h := ix.hashers[lora]; h != nil {
		return h
	}
	// New validated the block size, so NewHasher's only error cannot occur.
	h := &Hasher{blockSize: ix.blockSize, seed: LoRASeed(lora), lora: lora}
	ix.hashers[lora] = h
	return h
}

// Apply applies one KV event.
//
// Events are checked against the worker's event ids first: an id at or
// below the last one seen for the worker is a duplicate and is skipped
// (Apply returns nil); an id that jumps ahead is a gap, reported through
// Config.OnGap and Stats, and the event is still applied. Every
// non-duplicate event advances the worker's last id, applied or rejected.
//
// A rejected event leaves the index unchanged and returns a typed error:
// *UnknownParentError, *BlockSizeError, *HashConflictError,
// *CapacityError, or one wrapping ErrTier, ErrKind, ErrNoContent or
// ErrTooManyExtraKeys. Removed hashes the worker does not hold on that
// tier are skipped and counted (Stats.UnknownRemoved), not rejected.
// Cleared drops every tier, including approximate entries, of every DP
// rank of the event's worker ID.
//
// Apply does not retain ev or any slice in it.
func (ix *Index) Apply(ev *Event) error {
	if ev == nil {
		ix.mu.Lock()
		ix.st.rejected.Malformed++
		ix.mu.Unlock()
		return ErrNilEvent
	}
	ix.mu.Lock()
	gap, hasGap, err := ix.applyLocked(ev)
	ix.mu.Unlock()
	if hasGap && ix.onGap != nil {
		ix.onGap(gap)
	}
	return err
}

func (ix *Index) applyLocked(ev *Event) (gap Gap, hasGap bool, err error) {
	ix.expireLocked(ix.now())
	ws := ix.worker(ev.Worker)
	if ws.seen && ev.EventID <= ws.lastID {
		ix.st.duplicates++
		return gap, false, nil
	}
	if ws.seen && ev.EventID != ws.lastID+1 {
		gap, hasGap = Gap{Worker: ev.Worker, Expected: ws.lastID + 1, Got: ev.EventID}, true
		ws.gaps++
		ix.st.gaps++
	}
	ws.seen, ws.lastID = true, ev.EventID
	switch ev.Kind {
	case Stored:
		err = ix.applyStored(ws, ev)
	case Removed:
		err = ix.applyRemoved(ws, ev)
	case Cleared:
		for _, o := range ix.workers {
			if o.w.ID == ev.Worker.ID {
				ix.clearWorker(o)
			}
		}
	default:
		ix.st.rejected.Kind++
		return gap, hasGap, fmt.Errorf("%w: %v", ErrKind, ev.Kind)
	}
	if err == nil {
		ix.st.applied++
	}
	return gap, hasGap, err
}

// blockRef is one block of an event being applied.
type blockRef struct {
	engine uint64
	seq    uint64
	node   *node // nil: not indexed yet
	off    int
	had    uint8 // planes the worker held the block in before the event
	mapped bool  // the engine hash already maps to seq on this tier
	need   bool  // the block's set must change
	order  uint64
}

func (ix *Index) eventTier(t Tier) (int, error) {
	if t > Disk {
		ix.st.rejected.Tier++
		return 0, fmt.Errorf("%w: %v", ErrTier, t)
	}
	return int(t), nil
}

// locate finds seq, trying the blocks next to (hint, hintOff) first: events
// list chains in order (stores) or in reverse (evictions).
func (ix *Index) locate(seq uint64, hint *node, hintOff int) (*node, int, bool) {
	if n, off, ok := nextTo(seq, hint, hintOff); ok {
		return n, off, true
	}
	return ix.locateMap(seq)
}

// nextTo reports whether seq is the block after or before (hint, hintOff).
func nextTo(seq uint64, hint *node, hintOff int) (*node, int, bool) {
	if hint != nil {
		d := hint.data.Load()
		if hintOff+1 < len(d.hashes) && d.hashes[hintOff+1] == seq {
			return hint, hintOff + 1, true
		}
		if hintOff > 0 && hintOff <= len(d.hashes) && d.hashes[hintOff-1] == seq {
			return hint, hintOff - 1, true
		}
	}
	return nil, 0, false
}

// repeatsUnindexed reports whether seq, a block of the event being
// validated that the index does not hold, repeats an earlier block of the
// event that it does not hold either (refs are the earlier blocks).
func (ix *Index) repeatsUnindexed(identity, repeat bool, seq uint64, refs []blockRef) bool {
	if !identity {
		return !ix.dupS.add(seq)
	}
	if !repeat { // dupE has seen every earlier hash
		return false
	}
	for _, o := range refs {
		if o.seq == seq && o.node == nil {
			return true
		}
	}
	return false
}

// head finds seq when it can only be the first block of a node or not
// indexed at all, through the small head map instead of the block map.
//
// That is the case for a block of a Stored event that is not next to its
// chain predecessor (the parent, or the event's previous block) while every
// node holds chain segments, which events guarantee: a block at offset k > 0
// of a node has its chain predecessor at offset k-1, so a block found
// anywhere but right after its predecessor starts a node; and a block whose
// predecessor is not indexed is not inside a node either, since the index
// drops only node tails, a block never before its successors. Record takes
// hash lists it cannot check, so once it has built anything (approxSeq > 0)
// stores look blocks up in the block map instead. A 64-bit hash collision,
// the odds every lookup here takes, could break the argument.
func (ix *Index) head(seq uint64) (*node, int, bool) {
	d := ix.nodes.heads.peek(seq)
	if d == nil {
		return nil, 0, false
	}
	return ix.nodes.get(d.id), 0, true
}

// locateMap finds seq through the block map.
func (ix *Index) locateMap(seq uint64) (*node, int, bool) {
	v, ok := ix.blocks.peek(seq)
	if !ok {
		return nil, 0, false
	}
	return ix.nodes.get(uint32(v >> 32)), int(uint32(v)), true
}

// engineGet returns the own hash that engine hash e maps to on plane p of
// ws.
func (ix *Index) engineGet(ws *workerState, p int, e uint64) (uint64, bool) {
	if ws.full[p] {
		return ws.engine[p].get(e)
	}
	n, off, ok := ix.locate(e, nil, 0)
	if !ok || !hasBit(n.data.Load().bitsAt(off), ws.slot, p) {
		return 0, false
	}
	return e, true
}

// engineLookup finds an engine hash on the worker, preferring tier plane.
func (ix *Index) engineLookup(ws *workerState, e uint64, plane int) (uint64, bool) {
	if s, ok := ix.engineGet(ws, plane, e); ok {
		return s, true
	}
	for p := 0; p < eventPlanes; p++ {
		if s, ok := ix.engineGet(ws, p, e); ok {
			return s, true
		}
	}
	return 0, false
}

// residentOn calls f for every block the worker of slot holds on plane p,
// node by node. Writer-only; it reads every node.
func (ix *Index) residentOn(slot, p int, f func(seq uint64)) {
	ix.nodes.each(func(n *node) {
		d := n.data.Load()
		start := 0
		for _, r := range d.runs {
			if hasBit(r.bits, slot, p) {
				for _, h := range d.hashes[start:r.end] {
					f(h)
				}
			}
			start = int(r.end)
		}
	})
}

// materializeEngine switches plane p of ws from identity mode to a full
// engine map, holding h -> h for every block resident there. It changes
// the representation only, never what the index answers.
func (ix *Index) materializeEngine(ws *workerState, p int) {
	if ws.full[p] {
		return
	}
	m := &ws.engine[p]
	ix.residentOn(ws.slot, p, func(h uint64) { m.put(h, h) })
	ws.full[p] = true
}

// applyStored applies a Stored event in three steps: it finds the parent,
// hashes the blocks into sequence hashes, and checks every block against the
// worker's engine map and the index; only an event that passes all three is
// applied, so a rejected one leaves the index unchanged.
func (ix *Index) applyStored(ws *workerState, ev *Event) error {
	plane, err := ix.eventTier(ev.Tier)
	if err != nil {
		return err
	}
	if ev.BlockSize != 0 && ev.BlockSize != ix.blockSize {
		ix.st.rejected.BlockSize++
		return &BlockSizeError{Worker: ws.w, Block: -1, Got: ev.BlockSize, Want: ix.blockSize}
	}
	pn, poff, prev, hasPrev, err := ix.storedParent(ws, ev, plane)
	if err != nil {
		return err
	}
	seqs, hashCount, hashErr := ix.sequenceHashes(ws, ev, prev, hasPrev)
	refs, added, err := ix.validateStored(ws, ev, plane, seqs, pn, poff)
	if err != nil {
		return err
	}
	if hashErr != nil { // after the earlier blocks' errors: errors come in block order
		*hashCount++
		return hashErr
	}
	if ix.maxBlocks > 0 {
		if would := ws.counts.events() + added; added > 0 && would > ix.maxBlocks {
			ix.st.rejected.Capacity++
			return &CapacityError{Worker: ws.w, Limit: ix.maxBlocks, Would: would}
		}
	}
	ix.commitStored(ws, plane, refs, pn, poff, added)
	return nil
}

// storedParent finds the block ev's first block continues, if ev names a
// parent: its node and offset, and its sequence hash, from which the
// event's blocks chain.
func (ix *Index) storedParent(ws *workerState, ev *Event, plane int) (pn *node, poff int, prev uint64, hasPrev bool, err error) {
	if !ev.HasParent {
		return nil, 0, 0, false, nil
	}
	s, ok := ix.engineLookup(ws, ev.Parent, plane)
	if ok {
		pn, poff, ok = ix.locate(s, nil, 0)
	}
	if !ok {
		ix.st.rejected.UnknownParent++
		return nil, 0, 0, false, &UnknownParentError{Worker: ws.w, Parent: ev.Parent}
	}
	return pn, poff, s, true, nil
}

// sequenceHashes returns the sequence hashes of ev's blocks (in ix.seqBuf),
// chained after prev if hasPrev, up to the first block whose content is
// bad. For that block it returns the error and the rejection counter it
// counts in, for applyStored to report once the earlier blocks are
// checked.
func (ix *Index) sequenceHashes(ws *workerState, ev *Event, prev uint64, hasPrev bool) ([]uint64, *uint64, error) {
	h := ix.hasher(ev.LoRA)
	seqs := ix.seqBuf[:0]
	var (
		err   error
		count *uint64
	)
	for i := range ev.Blocks {
		b := &ev.Blocks[i]
		local := b.LocalHash
		if !b.HasLocalHash {
			if len(b.Tokens) == 0 {
				err, count = fmt.Errorf("%w: worker %v block %d", ErrNoContent, ws.w, i), &ix.st.rejected.Malformed
				break
			}
			if len(b.Tokens) != ix.blockSize {
				err, count = &BlockSizeError{Worker: ws.w, Block: i, Got: len(b.Tokens), Want: ix.blockSize}, &ix.st.rejected.BlockSize
				break
			}
			var herr error
			if local, herr = h.LocalHashExtra(b.Tokens, b.ExtraKeys); herr != nil {
				err, count = fmt.Errorf("flashindex: worker %v block %d: %w", ws.w, i, herr), &ix.st.rejected.Malformed
				break
			}
		}
		seq := local
		if hasPrev {
			seq = NextSequenceHash(prev, local)
		}
		prev, hasPrev = seq, true
		seqs = append(seqs, seq)
	}
	ix.seqBuf = seqs
	return seqs, count, err
}

// validateStored checks the blocks seqs of ev (chained after the parent at
// (pn, poff), if any) against the worker's engine map of tier plane and
// the index, and returns a ref per block (in ix.refs) and how many
// residencies the event adds. It changes nothing but the writer's scratch.
//
// While every block so far carries its own hash as engine hash (the
// common case), dupE holds every sequence hash seen, and dupS, the
// unindexed ones among them, is kept only from the first block that
// differs.
func (ix *Index) validateStored(ws *workerState, ev *Event, plane int, seqs []uint64, pn *node, poff int) ([]blockRef, int, error) {
	refs := ix.refs[:0]
	ix.dupE.reset(len(seqs))
	ix.dupS.reset(len(seqs))
	added := 0
	touched := 0 // seqs[:touched] had their block-map slots loaded ahead
	identity := true
	for i, seq := range seqs {
		b := &ev.Blocks[i]
		r := blockRef{engine: b.EngineHash, seq: seq}
		if b.EngineHash != seq && (identity || !ws.full[plane]) {
			ix.leaveIdentity(ws, plane, identity, refs)
			identity = false
		}
		var have uint64
		var mapped bool
		if ws.full[plane] {
			have, mapped = ws.engine[plane].get(b.EngineHash)
		}
		if mapped && have != seq {
			return nil, 0, ix.conflict(ws, ev.Tier, b.EngineHash, have, seq)
		}
		repeat := !ix.dupE.add(b.EngineHash)
		if repeat {
			if err := ix.repeatConflict(ws, ev.Tier, b.EngineHash, seq, refs); err != nil {
				return nil, 0, err
			}
			mapped = true // a repeat of an earlier block of this event
		}
		// Blocks that continue a chain the index holds are found next to
		// the previous one; any other is the first of a node or not
		// indexed (see Index.head), unless Record has built nodes.
		n, off, found := nextTo(seq, pn, poff)
		if !found && ix.approxSeq == 0 {
			n, off, found = ix.head(seq)
		} else if !found {
			n, off, found = ix.locateBatched(seqs, i, &touched)
		}
		if found {
			r.node, r.off = n, off
			r.had = slotMask(n.data.Load().bitsAt(off), ws.slot)
			r.need = r.had&(1<<plane) == 0 || (plane == planeDevice && r.had&(1<<planeApprox) != 0)
			if !ws.full[plane] && r.had&(1<<plane) != 0 {
				mapped = true // identity mode: held under its own hash
			}
		} else if ix.repeatsUnindexed(identity, repeat, seq, refs) {
			ix.st.rejected.Malformed++
			return nil, 0, fmt.Errorf("%w: worker %v block %d repeats a block of the same event", ErrNoContent, ws.w, i)
		}
		r.mapped = mapped
		if !r.mapped && r.had&(1<<plane) == 0 {
			added++
		}
		pn, poff = r.node, r.off
		refs = append(refs, r)
	}
	ix.refs = refs
	return refs, added, nil
}

// leaveIdentity is called at the first block of a Stored event whose engine
// hash is not its own hash: plane gets a full engine map if it has none,
// and, if the event was in identity mode (identity), the unindexed blocks
// of refs, the event's earlier blocks, enter dupS.
func (ix *Index) leaveIdentity(ws *workerState, plane int, identity bool, refs []blockRef) {
	if !ws.full[plane] {
		ix.materializeEngine(ws, plane)
	}
	if identity {
		for _, o := range refs {
			if o.node == nil {
				ix.dupS.add(o.seq)
			}
		}
	}
}

// conflict counts and returns a *HashConflictError: engine hash e of the
// worker maps to have, and a Stored event maps it to got.
func (ix *Index) conflict(ws *workerState, t Tier, e, have, got uint64) error {
	ix.st.rejected.Conflict++
	return &HashConflictError{Worker: ws.w, Tier: t, EngineHash: e, Have: have, Got: got}
}

// repeatConflict returns a conflict if an earlier block of the event, one
// of refs, carries engine hash e with other content than seq.
func (ix *Index) repeatConflict(ws *workerState, t Tier, e, seq uint64, refs []blockRef) error {
	for _, o := range refs {
		if o.engine == e && o.seq != seq {
			return ix.conflict(ws, t, e, o.seq, seq)
		}
	}
	return nil
}

// locateBatched finds block seqs[i] of a Stored event through the block
// map, for an index where Record has built nodes from hash lists it cannot
// check (so a block not next to its chain predecessor may be anywhere in a
// node). It loads the map's slots a batch ahead, so that their cache
// misses overlap; seqs[:*touched] are loaded.
func (ix *Index) locateBatched(seqs []uint64, i int, touched *int) (*node, int, bool) {
	if i >= *touched {
		*touched = min(i+touchBatch, len(seqs))
		ix.blocks.touch(seqs[i:*touched])
	}
	return ix.locateMap(seqs[i])
}

// commitStored applies a validated Stored event: it indexes or updates the
// blocks of refs (chained after the parent at (pn, poff)) with the worker's
// residency on plane, counts the added residencies, records engine hashes
// and aliases, and drops approximate entries the event confirms.
func (ix *Index) commitStored(ws *workerState, plane int, refs []blockRef, pn *node, poff, added int) {
	op := setOp{slot: ws.slot, set: 1 << plane}
	if plane == planeDevice {
		op.clear = 1 << planeApprox
	}
	ix.materialize(refs, pn, poff, op)
	ws.counts.add(plane, int64(added))
	m := &ws.engine[plane]
	for i := range refs {
		r := &refs[i]
		if r.mapped {
			continue
		}
		if ws.full[plane] {
			m.put(r.engine, r.seq)
		}
		if r.had&(1<<plane) != 0 {
			if ws.alias[plane] == nil {
				ws.alias[plane] = make(map[uint64]uint32)
			}
			ws.alias[plane][r.seq]++
		}
		if plane == planeDevice && r.had&(1<<planeApprox) != 0 {
			if i, ok := ws.approx.get(r.seq); ok {
				ix.approx.unlink(int32(i))
				ix.approx.release(int32(i))
				ws.approx.del(r.seq)
				ws.counts.add(planeApprox, -1)
			}
		}
	}
}

// materialize indexes the blocks of refs that are not indexed yet (chained
// after the parent at (pn, poff), or after the previous block) with op's
// planes set, and applies op to the indexed blocks whose need is set. It
// fills in node and off of every ref.
func (ix *Index) materialize(refs []blockRef, pn *node, poff int, op setOp) {
	newBits := op.apply(nil)
	for i := 0; i < len(refs); {
		if refs[i].node == nil {
			j := i + 1
			for j < len(refs) && refs[j].node == nil {
				j++
			}
			ix.insertBlocks(pn, poff, refs[i:j], newBits)
			pn, poff = refs[j-1].node, refs[j-1].off
			i = j
			continue
		}
		if !refs[i].need {
			pn, poff = refs[i].node, refs[i].off
			i++
			continue
		}
		j := i + 1
		for j < len(refs) && refs[j].need && refs[j].node == refs[i].node && refs[j].off == refs[j-1].off+1 {
			j++
		}
		ix.updateRange(refs[i].node, refs[i].off, refs[j-1].off+1, op)
		pn, poff = refs[j-1].node, refs[j-1].off
		i = j
	}
}

// insertBlocks indexes refs (none indexed yet) with residency bits: they
// extend the node of the block at (pn, poff) when that block ends its node,
// or start a new node.
func (ix *Index) insertBlocks(pn *node, poff int, refs []blockRef, bits []uint64) {
	var n *node
	var base int
	if pn != nil {
		if d := pn.data.Load(); poff == len(d.hashes)-1 {
			n, base = pn, len(d.hashes)
			hashes := d.hashes
			for i := range refs {
				hashes = append(hashes, refs[i].seq)
			}
			runs := make([]run, len(d.runs), len(d.runs)+1)
			copy(runs, d.runs)
			k := len(runs)
			runs = appendRun(runs, uint32(len(hashes)), bits)
			ix.nodes.publish(n, newNodeData(hashes, runs, seal(runs, d.chg, k)))
		}
	}
	if n == nil {
		hashes := make([]uint64, len(refs))
		for i := range refs {
			hashes[i] = refs[i].seq
		}
		n = ix.nodes.alloc(newNodeData(hashes, []run{{end: uint32(len(hashes)), bits: bits}}, nil))
		if pn != nil {
			ix.nodes.link(n, pn, poff)
		}
	}
	for i := range refs {
		refs[i].node, refs[i].off = n, base+i
	}
	ix.blocks.putMany(refs)
}

// appendRun appends a run ending at end, merging it into the last run when
// their sets are equal.
func appendRun(runs []run, end uint32, bits []uint64) []run {
	if k := len(runs); k > 0 && bitsEqual(runs[k-1].bits, bits) {
		runs[k-1].end = end
		return runs
	}
	return append(runs, run{end: end, bits: bits})
}

// updateRange applies op to the blocks [a, b) of n and publishes the new
// snapshot. Blocks that end up resident nowhere at the node's tail are
// dropped from the index; a node left empty is released.
func (ix *Index) updateRange(n *node, a, b int, op setOp) {
	d := n.data.Load()
	out := ix.runBuf[:0]
	start := 0
	for _, r := range d.runs {
		rs, re := start, int(r.end)
		start = re
		if re <= a || rs >= b {
			out = appendRun(out, r.end, r.bits)
			continue
		}
		if rs < a {
			out = appendRun(out, uint32(a), r.bits)
		}
		out = appendRun(out, uint32(min(re, b)), op.apply(r.bits))
		if re > b {
			out = appendRun(out, r.end, r.bits)
		}
	}
	ix.runBuf = out[:0]
	hashes := d.hashes
	if k := len(out); len(out[k-1].bits) == 0 {
		keep := 0
		if k > 1 {
			keep = int(out[k-2].end)
		}
		ix.blocks.delMany(hashes[keep:])
		if keep == 0 {
			ix.nodes.release(n)
			return
		}
		// Cap the slice so a later append reallocates instead of writing
		// over blocks that readers of older snapshots may still read.
		hashes = hashes[:keep:keep]
		n.trimKids(keep)
		out = out[:k-1]
	}
	// Runs before the change keep their sets and predecessors, so their
	// change entries carry over.
	same := 0
	for same < len(out) && same < len(d.runs) && out[same].end == d.runs[same].end && sameSet(out[same].bits, d.runs[same].bits) {
		out[same].cend = d.runs[same].cend
		same++
	}
	runs := slices.Clone(out)
	ix.nodes.publish(n, newNodeData(hashes, runs, seal(runs, d.chg, same)))
}

// sameSet reports whether a and b are the same published set (the same
// backing array, or both empty).
func sameSet(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	return len(a) == 0 || &a[0] == &b[0]
}

// applyRemoved applies a Removed event: it finds the blocks the worker
// holds under the event's engine hashes on its tier (skipping and counting
// the others), and clears the worker's residency on them.
func (ix *Index) applyRemoved(ws *workerState, ev *Event) error {
	plane, err := ix.eventTier(ev.Tier)
	if err != nil {
		return err
	}
	m := &ws.engine[plane]
	refs := ix.refs[:0]
	var pn *node
	poff := 0
	full := ws.full[plane]
	if !full {
		ix.dupE.reset(len(ev.Hashes))
	}
	for _, e := range ev.Hashes {
		if !full {
			// Identity mode: e is held iff block e is resident on the
			// plane; a repeat within the event is already gone.
			n, off, found := ix.locate(e, pn, poff)
			if !found || !hasBit(n.data.Load().bitsAt(off), ws.slot, plane) || !ix.dupE.add(e) {
				ix.st.unknownRemoved++
				continue
			}
			refs = append(refs, blockRef{seq: e, node: n, off: off})
			pn, poff = n, off
			continue
		}
		s, ok := m.get(e)
		if !ok {
			ix.st.unknownRemoved++
			continue
		}
		m.del(e)
		if a := ws.alias[plane][s]; a > 0 {
			if a == 1 {
				delete(ws.alias[plane], s)
			} else {
				ws.alias[plane][s] = a - 1
			}
			continue
		}
		n, off, found := ix.locate(s, pn, poff)
		if !found { // unreachable while the engine map and runs agree
			continue
		}
		refs = append(refs, blockRef{seq: s, node: n, off: off})
		pn, poff = n, off
	}
	ix.refs = refs
	if full && m.Len() == 0 && len(ws.alias[plane]) == 0 {
		ws.full[plane] = false // nothing held: back to identity mode
	}
	ws.counts.add(plane, -int64(len(refs)))
	ix.updateRefs(refs, setOp{slot: ws.slot, clear: 1 << plane})
	return nil
}

// updateRefs applies op to the blocks of refs a stretch at a time: the
// blocks of one node at consecutive offsets, in either direction (removals
// list chains in order or in reverse), in one updateRange each.
func (ix *Index) updateRefs(refs []blockRef, op setOp) {
	for i := 0; i < len(refs); {
		lo, hi := refs[i].off, refs[i].off
		j := i + 1
		if j < len(refs) && refs[j].node == refs[i].node {
			step := refs[j].off - refs[i].off
			if step == 1 || step == -1 {
				for j < len(refs) && refs[j].node == refs[i].node && refs[j].off-refs[j-1].off == step {
					j++
				}
				lo, hi = min(refs[i].off, refs[j-1].off), max(refs[i].off, refs[j-1].off)
			}
		}
		ix.updateRange(refs[i].node, lo, hi+1, op)
		i = j
	}
}

// clearWorker drops every residency of ws, events and approximate. It
// visits every node (identity-mode planes have no map to list the
// worker's blocks); Cleared and RemoveWorker are rare.
func (ix *Index) clearWorker(ws *workerState) {
	clear(ix.nodeSet)
	ix.nodes.each(func(n *node) {
		for _, r := range n.data.Load().runs {
			if slotMask(r.bits, ws.slot) != 0 {
				ix.nodeSet[n] = struct{}{}
				return
			}
		}
	})
	for p := range ws.engine {
		ws.engine[p] = u64map{}
		ws.full[p] = false
		ws.alias[p] = nil
		ws.counts.set(p, 0)
	}
	ws.approx.each(func(_, i uint64) {
		ix.approx.unlink(int32(i))
		ix.approx.release(int32(i))
	})
	ws.approx = u64map{double: true}
	ws.counts.set(planeApprox, 0)
	op := setOp{slot: ws.slot, clear: 1<<numPlanes - 1}
	for n := range ix.nodeSet {
		ix.updateRange(n, 0, len(n.data.Load().hashes), op)
	}
	clear(ix.nodeSet)
}

// RemoveWorker drops everything the index holds for w (one DP rank): its
// blocks on every tier, its approximate entries and its event-id state.
// The next event from w starts a fresh id sequence, so call RemoveWorker
// when an engine restarts. Removing an unknown worker does nothing.
func (ix *Index) RemoveWorker(w Worker) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ws := ix.workers[w]
	if ws == nil {
		return
	}
	ix.clearWorker(ws)
	delete(ix.workers, w)
	old := ix.slots.Load()
	t := &slotTable{workers: slices.Clone(old.workers), counts: slices.Clone(old.counts), mask: slices.Clone(old.mask)}
	t.workers[ws.slot] = Worker{} // clearWorker zeroed the slot's counters
	t.mask[ws.slot>>6] &^= 1 << (uint(ws.slot) & 63)
	ix.slots.Store(t)
	ix.freeSlots = append(ix.freeSlots, ws.slot)
	ix.bySlot[ws.slot] = nil
}

// Workers returns the workers the index knows, sorted by ID then DP rank.
func (ix *Index) Workers() []Worker {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]Worker, 0, len(ix.workers))
	for w := range ix.workers {
		out = append(out, w)
	}
	slices.SortFunc(out, compareWorkers)
	return out
}

func compareWorkers(a, b Worker) int {
	if c := cmp.Compare(a.ID, b.ID); c != 0 {
		return c
	}
	return cmp.Compare(a.DPRank, b.DPRank)
}

// WorkerStats is one worker's share of Stats.
type WorkerStats struct {
	Worker      Worker
	Device      int // blocks resident on device, from events
	Host        int
	Disk        int
	Approx      int // approximate (Record) entries
	LastEventID uint64
	Gaps        uint64
}

// Stats is a point-in-time summary of the index.
type Stats struct {
	Workers        []WorkerStats // sorted by worker
	Blocks         int           // distinct blocks indexed (resident somewhere, or kept inside a node)
	Nodes          int           // chain segments
	Residencies    int           // (block, worker, tier) residencies from events
	Approx         int           // approximate entries
	Applied        uint64        // events applied
	Rejected       Rejections    // events rejected, by reason
	Duplicates     uint64        // events skipped as already seen
	Gaps           uint64        // event id gaps seen
	UnknownRemoved uint64        // removed hashes the worker did not hold on that tier
	ApproxExpired  uint64        // approximate entries dropped at their TTL
	ApproxPruned   uint64        // approximate entries dropped by the size bound
}

// Stats returns counters and sizes. It takes the writer lock briefly.
func (ix *Index) Stats() Stats {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := Stats{
		Blocks:         ix.blocks.n,
		Nodes:          ix.nodes.live,
		Approx:         ix.approx.live,
		Applied:        ix.st.applied,
		Rejected:       ix.st.rejected,
		Duplicates:     ix.st.duplicates,
		Gaps:           ix.st.gaps,
		UnknownRemoved: ix.st.unknownRemoved,
		ApproxExpired:  ix.st.approxExpired,
		ApproxPruned:   ix.st.approxPruned,
	}
	for _, ws := range ix.workers {
		c := &ws.counts.n
		w := WorkerStats{
			Worker: ws.w, Device: int(c[planeDevice].Load()), Host: int(c[planeHost].Load()),
			Disk: int(c[planeDisk].Load()), Approx: int(c[planeApprox].Load()),
			LastEventID: ws.lastID, Gaps: ws.gaps,
		}
		s.Residencies += w.Device + w.Host + w.Disk
		s.Workers = append(s.Workers, w)
	}
	slices.SortFunc(s.Workers, func(a, b WorkerStats) int { return compareWorkers(a.Worker, b.Worker) })
	return s
}

// stampSet is a reusable open-addressing set of uint64 keys, emptied in
// O(1) by bumping a generation.
type stampSet struct {
	keys []uint64
	gens []uint32
	gen  uint32
	mask uint64
}

func (s *stampSet) reset(n int) {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	if len(s.keys) < size {
		s.keys = make([]uint64, size)
		s.gens = make([]uint32, size)
		s.gen = 0
	}
	s.mask = uint64(len(s.keys) - 1)
	s.gen++
	if s.gen == 0 {
		clear(s.gens)
		s.gen = 1
	}
}

// add inserts k and reports whether it was absent.
func (s *stampSet) add(k uint64) bool {
	i := (k * 0x9E3779B97F4A7C15 >> 17) & s.mask
	for s.gens[i] == s.gen {
		if s.keys[i] == k {
			return false
		}
		i = (i + 1) & s.mask
	}
	s.keys[i], s.gens[i] = k, s.gen
	return true
}
