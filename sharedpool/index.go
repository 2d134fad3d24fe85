package sharedpool

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
)

// DefaultTenant is the Mooncake tenant SGLang uses unless configured.
const DefaultTenant = "default"

// DefaultMaxPages is the default bound on tracked pages (complete or not).
const DefaultMaxPages = 1 << 21

// Config configures an [Index]. Zero fields mean the documented defaults.
type Config struct {
	// Layout is the initial layout. The zero Layout means none yet: events
	// are counted as Stats.NoLayout and queries fail with ErrNoLayout until
	// SetLayout or SyncLayouts provides one.
	Layout Layout
	// Tenant selects the Mooncake tenant to index; "" means "default".
	// Events for other tenants are ignored; events without a tenant count
	// as this tenant.
	Tenant string
	// Backend, when set, ignores events whose backend_id is set and
	// different.
	Backend string
	// MaxPages bounds the pages tracked (a page is tracked while at least
	// one of its objects is present). Storing an object of a new page when
	// the bound is reached clears the index and is reported
	// (Report.Overflows, Stats.Overflows). 0 means DefaultMaxPages.
	MaxPages int
	// InitialPages sizes the hash table up front; 0 means 1024.
	InitialPages int
	// Seed keys the table's hash so that crafted page hashes cannot pile
	// into one probe run; 0 draws a random seed.
	Seed uint64
}

// SeqGap describes a break in the batch sequence: the batch numbered Got
// arrived after Last, so at least one batch was lost. The index was cleared
// before applying batch Got; the caller should resync (Mooncake has no
// replay, so resync means rebuilding from later events or an external
// query).
type SeqGap struct {
	Last, Got uint64
}

func (g SeqGap) String() string { return fmt.Sprintf("sequence gap: %d after %d", g.Got, g.Last) }

// Report says what applying one batch did.
type Report struct {
	Seq uint64
	// Duplicate: the batch repeated the previous sequence number and was
	// skipped whole.
	Duplicate bool
	// Gap is non-nil when a sequence gap cleared the index before the batch
	// was applied.
	Gap *SeqGap
	// Overflows counts how often the MaxPages bound cleared the index while
	// applying the batch.
	Overflows int
	// ClearEvents counts clear events for this index's tenant.
	ClearEvents int
	// Applied counts store and remove events for objects of the layout.
	Applied int
	// Ignored counts events that could not affect the index: other tenant or
	// backend, no object key, a key outside the layout, or no layout.
	Ignored int
	// Rejected counts the batch's malformed events.
	Rejected int
}

// Cleared reports whether the batch cleared the index for any reason.
func (r Report) Cleared() bool { return r.Gap != nil || r.Overflows > 0 || r.ClearEvents > 0 }

// Stats are cumulative counters and current sizes of an Index.
type Stats struct {
	Batches, Duplicates, Gaps, Overflows uint64
	ClearEvents                          uint64
	// Stores and Removes count applied object events.
	Stores, Removes uint64
	// RemovesUnknown counts removes of objects (or media) not present.
	RemovesUnknown uint64
	// Foreign counts events whose key this layout never writes.
	Foreign uint64
	// NoKey counts store/remove events without an object key.
	NoKey uint64
	// OtherTenant counts events filtered by tenant or backend.
	OtherTenant uint64
	// NoLayout counts events dropped while the index had no layout.
	NoLayout uint64
	// Malformed counts rejected events; BadFrames counts undecodable
	// messages ([Index.ApplyFrames]).
	Malformed, BadFrames uint64
	// GroupMismatch counts events whose group id names a different page than
	// their object key (applied by key, the source of truth).
	GroupMismatch uint64
	// LayoutChanges counts layout changes that cleared the index.
	LayoutChanges uint64
	// Pages is the number of tracked pages; Present those with every object.
	Pages, Present int
	// Objects is the number of present objects.
	Objects int
}

// slot is one entry of the open-addressing page table. have == 0 marks an
// empty slot: a page whose last object goes is deleted.
type slot struct {
	d    [4]uint64 // page digest, little-endian words
	rec  uint32    // record index into media
	have uint16    // objects present on at least one medium
	_    uint16
}

// Media bits. Bit 0 is "medium not given"; named media get bits 1..6 in
// order of first appearance; every further name shares bit 7.
const (
	mediumNone  = 1
	mediumOther = 1 << 7
	allMedia    = 0xff
)

// Index is the synchronous core: the set of complete pages of one Mooncake
// event stream for one layout. It is NOT safe for concurrent use; [Pool] is
// the locked wrapper.
//
// Memory: one 40-byte slot per table entry (the table stays between 3/8 and
// 3/4 full) plus one byte per object of each tracked page. Queries allocate
// nothing; Apply allocates only when the table grows.
type Index struct {
	cfg    Config
	maxPg  int
	tenant string

	sch       *schema // nil when layoutErr != nil
	layoutErr error

	slots   []slot
	initial int  // table size New allocated
	shift   uint // 64 - log2(len(slots))
	mask    uint64
	seed    uint64
	pages   int // tracked
	full    int // present (have == n)
	objs    int

	media []uint8 // rec*n .. rec*n+n: media bits per object
	free  []uint32
	nrec  uint32

	mediumNames [6]string
	nMedia      int

	hasSeq  bool
	lastSeq uint64

	pre   [2][applyChunk]parsedKey // Apply's parse-ahead buffers
	touch uint64                   // sink for prepare's loads

	stats Stats
}

// New returns an empty Index. It fails with [ErrInvalidConfig] for a
// negative bound, or with the layout's validation error.
func New(cfg Config) (*Index, error) {
	if cfg.MaxPages < 0 || cfg.InitialPages < 0 {
		return nil, fmt.Errorf("%w: MaxPages %d, InitialPages %d", ErrInvalidConfig, cfg.MaxPages, cfg.InitialPages)
	}
	ix := &Index{cfg: cfg, maxPg: cfg.MaxPages, tenant: cfg.Tenant, seed: cfg.Seed, layoutErr: ErrNoLayout}
	if ix.maxPg == 0 {
		ix.maxPg = DefaultMaxPages
	}
	if ix.tenant == "" {
		ix.tenant = DefaultTenant
	}
	if ix.seed == 0 {
		ix.seed = rand.Uint64() | 1
	}
	initial := cfg.InitialPages
	if initial == 0 {
		initial = 1024
	}
	ix.initial = tableSize(min(initial, ix.maxPg))
	ix.alloc(ix.initial)
	if cfg.Layout != (Layout{}) {
		if _, err := ix.SetLayout(cfg.Layout); err != nil {
			return nil, err
		}
	}
	return ix, nil
}

// tableSize returns the power of two holding n pages under 3/4 load.
func tableSize(n int) int {
	size := 16
	for size*3/4 < n {
		size *= 2
	}
	return size
}

func (ix *Index) alloc(size int) {
	ix.slots = make([]slot, size)
	ix.shift = uint(64 - bits.TrailingZeros(uint(size)))
	ix.mask = uint64(size - 1)
}

// home is the slot where a page's probe run starts: Fibonacci hashing of
// the seeded first digest word.
func (ix *Index) home(d0 uint64) uint64 {
	return ((d0 ^ ix.seed) * 0x9e3779b97f4a7c15) >> ix.shift
}

// find returns the slot of digest d and whether it holds d (else the empty
// slot where d would go).
func (ix *Index) find(d *[4]uint64) (uint64, bool) {
	i := ix.home(d[0])
	for {
		s := &ix.slots[i]
		if s.have == 0 {
			return i, false
		}
		if s.d == *d {
			return i, true
		}
		i = (i + 1) & ix.mask
	}
}

// Layout returns the layout in force and nil, or the zero Layout and the
// reason there is none (ErrNoLayout or a *MismatchError).
func (ix *Index) Layout() (Layout, error) {
	if ix.sch == nil {
		return Layout{}, ix.layoutErr
	}
	return ix.sch.layout, nil
}

// SetLayout makes l the layout. If it differs from the current one (or the
// index had none, or a mismatch), the index is cleared, since objects
// already counted may belong to pages of another shape; changed reports
// that. An invalid layout returns an error and changes nothing.
func (ix *Index) SetLayout(l Layout) (changed bool, err error) {
	if ix.sch != nil && ix.sch.layout.Equal(l) {
		return false, nil
	}
	sch, err := compile(l)
	if err != nil {
		return false, err
	}
	ix.clearPages()
	ix.sch, ix.layoutErr = sch, nil
	ix.stats.LayoutChanges++
	return true, nil
}

// SyncLayouts takes the layouts the workers currently advertise (worker id
// → layout) and applies their [Consensus]. When they disagree, or none is
// valid, the index is cleared and disabled: events are counted as NoLayout
// and queries return the error, until a later call agrees again. Workers
// that advertise no HiCache layout should be left out of the map.
func (ix *Index) SyncLayouts(workers map[uint64]Layout) error {
	l, err := Consensus(workers)
	if err != nil {
		if ix.sch != nil {
			ix.stats.LayoutChanges++
		}
		ix.clearPages()
		ix.sch, ix.layoutErr = nil, err
		return err
	}
	_, err = ix.SetLayout(l)
	return err
}

// Reset clears the index and forgets the sequence number, as after
// reconnecting to the publisher: the next batch starts a new sequence.
func (ix *Index) Reset() {
	ix.clearPages()
	ix.hasSeq, ix.lastSeq = false, 0
}

// clearPages empties the table, keeping the layout and sequence state.
func (ix *Index) clearPages() {
	if len(ix.slots) > 4*ix.initial {
		// Give back the memory of a table the stream no longer fills.
		ix.alloc(ix.initial)
		ix.media = nil
	} else {
		clear(ix.slots)
		clear(ix.media)
		ix.media = ix.media[:0]
	}
	ix.free = ix.free[:0]
	ix.nrec = 0
	ix.pages, ix.full, ix.objs = 0, 0, 0
}

// Apply applies one batch in order and reports what happened.
//
// Sequence numbers: the first batch is accepted whatever its number. Then a
// batch repeating the previous number is a duplicate and is skipped; any
// other number but previous+1 is a gap: the index is cleared (the lost
// batches may have removed anything) and the batch is applied on the empty
// index, with Report.Gap set.
//
// Events and rejections are applied in their original order (a Rejection's
// Index is its position in the publisher's list). Rejected events count as
// Stats.Malformed; one whose object key is known drops that object on
// every medium (see [Rejection]).
//
// Apply retains nothing from b.
func (ix *Index) Apply(b *Batch) Report {
	rep := Report{Seq: b.Seq}
	ix.stats.Batches++
	if ix.hasSeq {
		if b.Seq == ix.lastSeq {
			rep.Duplicate = true
			ix.stats.Duplicates++
			return rep
		}
		if b.Seq != ix.lastSeq+1 {
			rep.Gap = &SeqGap{Last: ix.lastSeq, Got: b.Seq}
			ix.stats.Gaps++
			ix.clearPages()
		}
	}
	ix.hasSeq, ix.lastSeq = true, b.Seq
	// Events and rejections interleave in publisher order: a rejection
	// with Index i stood at position i of the original list.
	//
	// Events are parsed a chunk ahead of being applied, and the home slots
	// of the next chunk are loaded before the current chunk is applied, so
	// the cache misses of a table much larger than the caches overlap
	// instead of being paid one after another (see prepare).
	ri := 0
	cur, next := &ix.pre[0], &ix.pre[1]
	curStart, nextEnd := 0, ix.prepare(b.Events, 0, cur)
	curEnd := nextEnd
	nextEnd = ix.prepare(b.Events, curEnd, next)
	for pos, ei := 0, 0; ei < len(b.Events) || ri < len(b.Rejected); pos++ {
		if ri < len(b.Rejected) && (b.Rejected[ri].Index <= pos || ei == len(b.Events)) {
			ix.reject(&b.Rejected[ri], &rep)
			ri++
			continue
		}
		if ei == curEnd {
			cur, next = next, cur
			curStart, curEnd = curEnd, nextEnd
			nextEnd = ix.prepare(b.Events, curEnd, next)
		}
		ix.applyEvent(&b.Events[ei], &cur[ei-curStart], &rep)
		ei++
	}
	return rep
}

// applyChunk is how many events Apply parses, and whose home slots it
// loads, ahead of applying them.
const applyChunk = 32

// parsedKey is an event's object key parsed ahead of time: the page digest
// as table words and the object's slot in the page; ok is false when the
// event has no key the layout writes (or is not a store or remove).
type parsedKey struct {
	d    [4]uint64
	slot int32
	ok   bool
}

// prepare parses the keys of evs[start:start+applyChunk] into dst and
// loads the home slot of each, returning the end of the chunk. Parsing is
// pure and the loads only warm the cache, so applying the events later in
// order gives exactly the result of parsing each as it is applied: the
// table may grow or be cleared in between, and the real probe recomputes
// the home slot. The loads are independent of one another, so the CPU
// keeps many of them in flight at once (memory-level parallelism) instead
// of waiting for each miss in turn.
func (ix *Index) prepare(evs []Event, start int, dst *[applyChunk]parsedKey) int {
	end := min(start+applyChunk, len(evs))
	if ix.sch == nil {
		for j := range end - start {
			dst[j].ok = false
		}
		return end
	}
	for j := range end - start {
		e, p := &evs[start+j], &dst[j]
		p.ok = false
		if (e.Kind == Store || e.Kind == Remove) && e.Key != "" {
			d, s, ok := ix.sch.parseWords(e.Key)
			p.d, p.slot, p.ok = d, int32(s), ok
		}
	}
	var touch uint64
	for j := range end - start {
		if p := &dst[j]; p.ok {
			i := ix.home(p.d[0])
			s, t := &ix.slots[i], &ix.slots[(i+2)&ix.mask]
			touch += s.d[0] + uint64(s.have) + uint64(t.have)
		}
	}
	ix.touch += touch
	return end
}

func (ix *Index) reject(r *Rejection, rep *Report) {
	rep.Rejected++
	ix.stats.Malformed++
	if r.Key != "" && ix.sch != nil {
		if d, s, ok := ix.sch.parseWords(r.Key); ok {
			ix.remove(&d, s, allMedia)
		}
	}
}

// ApplyFrames decodes one ZMQ message ([DecodeFrames]) and applies it. An
// undecodable message counts as Stats.BadFrames and returns the decode
// error with the index unchanged; the next batch's sequence number then
// shows the loss as a gap.
func (ix *Index) ApplyFrames(frames [][]byte) (Report, error) {
	b, err := DecodeFrames(frames)
	if err != nil {
		ix.stats.BadFrames++
		return Report{}, err
	}
	return ix.Apply(&b), nil
}

// applyEvent applies one event whose key p holds parsed.
func (ix *Index) applyEvent(e *Event, p *parsedKey, rep *Report) {
	if (e.Tenant != "" && e.Tenant != ix.tenant) || (ix.cfg.Backend != "" && e.Backend != "" && e.Backend != ix.cfg.Backend) {
		ix.stats.OtherTenant++
		rep.Ignored++
		return
	}
	switch e.Kind {
	case Clear:
		ix.stats.ClearEvents++
		rep.ClearEvents++
		ix.clearPages()
		return
	case Store, Remove:
	default:
		ix.stats.Malformed++
		rep.Rejected++
		return
	}
	if e.Key == "" {
		ix.stats.NoKey++
		rep.Ignored++
		return
	}
	if ix.sch == nil {
		ix.stats.NoLayout++
		rep.Ignored++
		return
	}
	if !p.ok {
		ix.stats.Foreign++
		rep.Ignored++
		return
	}
	if e.GroupID != "" && !ix.sch.groupMatches(e.GroupID, e.Key) {
		ix.stats.GroupMismatch++
	}
	rep.Applied++
	if e.Kind == Store {
		ix.stats.Stores++
		if ix.store(&p.d, int(p.slot), ix.mediumBit(e.Medium, true)) {
			rep.Overflows++
		}
		return
	}
	ix.stats.Removes++
	bitsToClear := uint8(allMedia)
	if e.Medium != "" {
		bitsToClear = ix.mediumBit(e.Medium, false)
	}
	if bitsToClear == 0 || !ix.remove(&p.d, int(p.slot), bitsToClear) {
		ix.stats.RemovesUnknown++
	}
}

// mediumBit returns the bit of a medium name; with intern unset an unseen
// name returns 0 (nothing can be stored there) unless the named bits are
// exhausted.
func (ix *Index) mediumBit(name string, intern bool) uint8 {
	if name == "" {
		return mediumNone
	}
	for i := range ix.nMedia {
		if ix.mediumNames[i] == name {
			return 2 << i
		}
	}
	if ix.nMedia == len(ix.mediumNames) {
		return mediumOther
	}
	if !intern {
		return 0
	}
	ix.mediumNames[ix.nMedia] = name
	ix.nMedia++
	return 2 << (ix.nMedia - 1)
}

// store marks object s of page h present on the media in bit; it reports
// whether the page bound forced a clear first.
func (ix *Index) store(d *[4]uint64, s int, bit uint8) (overflow bool) {
	i, found := ix.find(d)
	if !found {
		if ix.pages >= ix.maxPg {
			ix.stats.Overflows++
			ix.clearPages()
			overflow = true
		}
		if (ix.pages+1)*4 > len(ix.slots)*3 {
			ix.grow()
		}
		i, _ = ix.find(d)
		rec := ix.newRecord()
		ix.slots[i] = slot{d: *d, rec: rec}
		ix.pages++
	}
	sl := &ix.slots[i]
	n := ix.sch.n()
	m := &ix.media[int(sl.rec)*n+s]
	if *m == 0 {
		sl.have++
		ix.objs++
		if int(sl.have) == n {
			ix.full++
		}
	}
	*m |= bit
	return overflow
}

// remove clears the media in bitsToClear for object s of page h; it reports
// whether the object was present on any of them.
func (ix *Index) remove(d *[4]uint64, s int, bitsToClear uint8) bool {
	i, found := ix.find(d)
	if !found {
		return false
	}
	sl := &ix.slots[i]
	n := ix.sch.n()
	m := &ix.media[int(sl.rec)*n+s]
	if *m&bitsToClear == 0 {
		return false
	}
	*m &^= bitsToClear
	if *m == 0 {
		if int(sl.have) == n {
			ix.full--
		}
		sl.have--
		ix.objs--
		if sl.have == 0 {
			ix.free = append(ix.free, sl.rec)
			ix.delete(i)
			ix.pages--
		}
	}
	return true
}

func (ix *Index) newRecord() uint32 {
	if k := len(ix.free); k > 0 {
		r := ix.free[k-1]
		ix.free = ix.free[:k-1]
		return r
	}
	r := ix.nrec
	ix.nrec++
	n := ix.sch.n()
	if need := int(ix.nrec) * n; need > len(ix.media) {
		if need <= cap(ix.media) {
			ix.media = ix.media[:need]
		} else {
			ix.media = append(ix.media, make([]uint8, need-len(ix.media))...)
		}
	}
	return r
}

// delete empties slot i by backward-shift deletion, so probe runs never
// need tombstones.
func (ix *Index) delete(i uint64) {
	j := i
	for {
		j = (j + 1) & ix.mask
		if ix.slots[j].have == 0 {
			break
		}
		k := ix.home(ix.slots[j].d[0])
		// Leave slot j alone when its home lies cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		ix.slots[i] = ix.slots[j]
		i = j
	}
	ix.slots[i] = slot{}
}

func (ix *Index) grow() {
	old := ix.slots
	ix.alloc(2 * len(old))
	for k := range old {
		if old[k].have == 0 {
			continue
		}
		i, _ := ix.find(&old[k].d)
		ix.slots[i] = old[k]
	}
}

// Contains reports whether every object of page h is present.
func (ix *Index) Contains(h PageHash) bool {
	if ix.sch == nil {
		return false
	}
	d := h.words()
	i, found := ix.find(&d)
	return found && int(ix.slots[i].have) == ix.sch.n()
}

// Query returns the shared hits of a request's pages ([Index.QueryInto]).
func (ix *Index) Query(pages []PageHash) (Hits, error) {
	var h Hits
	err := ix.QueryInto(&h, pages)
	return h, err
}

// QueryInto fills h with the contiguous ranges of pages (indices into
// pages) whose every object is present, reusing h.Ranges' storage. It
// allocates nothing once h.Ranges has grown enough. Without a usable layout
// it leaves h empty and returns ErrNoLayout or the *MismatchError.
func (ix *Index) QueryInto(h *Hits, pages []PageHash) error {
	h.Pages, h.Total, h.Ranges = len(pages), 0, h.Ranges[:0]
	if ix.sch == nil {
		return ix.layoutErr
	}
	n := uint16(ix.sch.n())
	start := -1
	for p := range pages {
		pg := &pages[p]
		d := pg.words()
		i := ix.home(d[0])
		hit := false
		for {
			s := &ix.slots[i]
			if s.have == 0 {
				break
			}
			if s.d == d {
				hit = s.have == n
				break
			}
			i = (i + 1) & ix.mask
		}
		switch {
		case hit && start < 0:
			start = p
		case !hit && start >= 0:
			h.Ranges = append(h.Ranges, Range{Start: start, End: p})
			h.Total += p - start
			start = -1
		}
	}
	if start >= 0 {
		h.Ranges = append(h.Ranges, Range{Start: start, End: len(pages)})
		h.Total += len(pages) - start
	}
	return nil
}

// Len returns the number of complete pages.
func (ix *Index) Len() int { return ix.full }

// Stats returns the counters and current sizes.
func (ix *Index) Stats() Stats {
	s := ix.stats
	s.Pages, s.Present, s.Objects = ix.pages, ix.full, ix.objs
	return s
}

// MemoryBytes estimates the bytes the index holds: the slot table and the
// per-object media bytes.
func (ix *Index) MemoryBytes() int {
	return len(ix.slots)*40 + cap(ix.media) + cap(ix.free)*4
}
