package sharedpool

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"

	"github.com/agentkv/agentkv/internal/limitio"
	"github.com/agentkv/agentkv/internal/zframe"
)

// Snapshot format, version 1:
//
//	magic "SPIX" | version byte | zstd frame of the body
//
// The body is unsigned varints (u), strings (s: u length, then the bytes)
// and little-endian 64-bit words (h):
//
//	u flags: 1 a layout follows, 2 a batch sequence number follows
//	layout: s backend, u page size, u tp, u pp, u tp_lcm,
//	        u bits (1 MLA, 2 Eagle, 4 split heads), s extra backend tag, s key prefix
//	u last batch sequence number
//	u media, then each s name, in the order the index first saw them
//	u pages, then per page in ascending digest order (its four words):
//	  4 h digest, then one byte per object of the page: its media bits
//	  (0 absent; bit 0 stored without a medium, bit i+1 the i-th name,
//	  bit 7 any further name)
//
// The layout is the normalized one. Pages are the tracked ones, complete
// or not, so a restored index continues exactly as the original would.
// Encoding is canonical: two indexes that applied the same batches write
// the same bytes whatever their table seeds, and Snapshot of a restored
// index reproduces its input.
const (
	snapshotMagic   = "SPIX"
	snapshotVersion = 1
	// snapshotExpansion bounds how far the body may expand the compressed
	// bytes (plus snapshotSlack): a small hostile frame cannot make
	// Restore read, or allocate for, gigabytes.
	snapshotExpansion = 256
	snapshotSlack     = 1 << 20
	maxSnapshotString = 1 << 12
)

// Snapshot errors.
var (
	// ErrSnapshotFormat: the input is not a shared-pool snapshot, or it is
	// damaged, or it does not fit the index (more pages than MaxPages).
	ErrSnapshotFormat = errors.New("sharedpool: bad snapshot")
	// ErrSnapshotVersion: a snapshot of a version this build cannot read.
	ErrSnapshotVersion = errors.New("sharedpool: unsupported snapshot version")
)

// Snapshot writes the index's state — its layout, the last batch sequence
// number, and every tracked page with the media of each object — to w,
// zstd-compressed (see the format above). Counters in Stats are not saved.
func (ix *Index) Snapshot(w io.Writer) error {
	if err := zframe.WriteHeader(w, snapshotMagic, snapshotVersion); err != nil {
		return err
	}
	// The fastest level: page digests (most of the body) are SHA-256
	// output, which no level compresses; the media bytes compress well at
	// any.
	zw, err := zframe.Encoder(w, zstd.SpeedFastest)
	if err != nil {
		return err
	}
	defer zframe.PutEncoder(zw, zstd.SpeedFastest)
	bw := bufio.NewWriterSize(zw, 1<<16)
	e := zframe.FieldWriter{W: bw}

	var flags uint64
	if ix.sch != nil {
		flags |= 1
	}
	if ix.hasSeq {
		flags |= 2
	}
	e.U(flags)
	if ix.sch != nil {
		l := ix.sch.layout
		e.S(l.Backend)
		e.U(uint64(l.PageSize))
		e.U(uint64(l.TPSize))
		e.U(uint64(l.PPSize))
		e.U(uint64(l.TPLCMSize))
		e.U(zframe.Bit(l.MLA) | zframe.Bit(l.Eagle)<<1 | zframe.Bit(l.SplitHeads)<<2)
		e.S(l.ExtraBackendTag)
		e.S(l.KeyPrefix)
	}
	if ix.hasSeq {
		e.U(ix.lastSeq)
	}
	e.U(uint64(ix.nMedia))
	for _, name := range ix.mediumNames[:ix.nMedia] {
		e.S(name)
	}
	// Sort copies of the (digest, record) pairs, not slot indices: the
	// comparisons then read contiguous memory.
	type entry struct {
		d   [4]uint64
		rec uint32
	}
	order := make([]entry, 0, ix.pages)
	for i := range ix.slots {
		if s := &ix.slots[i]; s.have != 0 {
			order = append(order, entry{s.d, s.rec})
		}
	}
	slices.SortFunc(order, func(a, b entry) int { return compareDigest(&a.d, &b.d) })
	e.U(uint64(len(order)))
	n := 0
	if ix.sch != nil {
		n = ix.sch.n()
	}
	for i := range order {
		for _, w := range order[i].d {
			e.H(w)
		}
		rec := int(order[i].rec)
		e.B(ix.media[rec*n : rec*n+n])
	}
	if e.Err != nil {
		return e.Err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

func compareDigest(a, b *[4]uint64) int {
	for k := range a {
		if c := cmp.Compare(a[k], b[k]); c != 0 {
			return c
		}
	}
	return 0
}

// Restore replaces the index's state with a snapshot written by Snapshot:
// layout, last batch sequence number, media names and pages. The index's
// Config (tenant, backend, MaxPages) stays; the snapshot's pages were
// filtered by the writer's. Counters continue. A snapshot without a layout
// leaves the index without one (ErrNoLayout until SetLayout). Bad input
// fails with an error wrapping ErrSnapshotFormat or ErrSnapshotVersion and
// leaves the index as it was; Restore never panics, and what it reads and
// allocates is bounded by its input (the body may expand the compressed
// bytes at most 256-fold, plus 1 MiB) and by MaxPages.
func (ix *Index) Restore(r io.Reader) error {
	tmp, err := restore(r, ix.cfg, ix.seed)
	if err != nil {
		return err
	}
	ix.adopt(tmp)
	return nil
}

// restore decodes a snapshot into a new index with cfg and seed.
func restore(r io.Reader, cfg Config, seed uint64) (*Index, error) {
	in := &limitio.Counter{R: r}
	v, err := zframe.ReadHeader(in, snapshotMagic, ErrSnapshotFormat)
	if err != nil {
		return nil, err
	}
	if v != snapshotVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads %d)", ErrSnapshotVersion, v, snapshotVersion)
	}
	zr, err := zframe.Decoder(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotFormat, err)
	}
	defer zframe.PutDecoder(zr)
	lim := &limitio.Reader{R: zr, In: in, Ratio: snapshotExpansion, Slack: snapshotSlack, Err: ErrSnapshotFormat}
	d := &zframe.FieldReader{R: bufio.NewReaderSize(lim, 1<<16), Format: ErrSnapshotFormat, Keep: ErrSnapshotFormat}
	cfg.Layout, cfg.Seed = Layout{}, seed
	tmp, err := New(cfg)
	if err != nil {
		return nil, err
	}
	restoreBody(d, tmp)
	d.End()
	if d.Err != nil {
		return nil, d.Err
	}
	return tmp, nil
}

// restoreBody decodes the body into tmp, a new empty index; errors are
// left in d.Err.
func restoreBody(d *zframe.FieldReader, tmp *Index) {
	flags := d.U()
	if flags > 3 {
		d.Fail("flags %d", flags)
	}
	if d.Err == nil && flags&1 != 0 {
		var l Layout
		l.Backend = d.S(maxSnapshotString, "backend")
		l.PageSize = d.N(1<<20, "page size")
		l.TPSize = d.N(1<<16, "tp")
		l.PPSize = d.N(1<<16, "pp")
		l.TPLCMSize = d.N(1<<16, "tp_lcm")
		bits := d.N(7, "layout bits")
		l.MLA, l.Eagle, l.SplitHeads = bits&1 != 0, bits&2 != 0, bits&4 != 0
		l.ExtraBackendTag = d.S(maxSnapshotString, "extra backend tag")
		l.KeyPrefix = d.S(maxSnapshotString, "key prefix")
		if d.Err != nil {
			return
		}
		if _, err := tmp.SetLayout(l); err != nil {
			d.Err = fmt.Errorf("%w: layout: %w", ErrSnapshotFormat, err)
			return
		}
	}
	if flags&2 != 0 {
		tmp.hasSeq, tmp.lastSeq = true, d.U()
	}
	nm := d.N(uint64(len(tmp.mediumNames)), "media")
	for i := 0; i < nm && d.Err == nil; i++ {
		name := d.S(maxSnapshotString, "medium")
		if name == "" || slices.Contains(tmp.mediumNames[:tmp.nMedia], name) {
			d.Fail("medium %d %q empty or repeated", i, name)
		}
		tmp.mediumNames[i] = name
		tmp.nMedia++
	}
	valid := uint8(mediumNone)
	for i := range tmp.nMedia {
		valid |= 2 << i
	}
	if tmp.nMedia == len(tmp.mediumNames) {
		valid |= mediumOther
	}
	pages := d.N(uint64(tmp.maxPg), "pages (beyond this index's MaxPages)")
	if pages > 0 && tmp.sch == nil {
		d.Fail("%d pages without a layout", pages)
	}
	if d.Err != nil {
		return
	}
	var prev [4]uint64
	objs := make([]byte, 0, MaxObjectsPerPage)
	for p := 0; p < pages && d.Err == nil; p++ {
		var dg [4]uint64
		for k := range dg {
			dg[k] = d.H()
		}
		if p > 0 && compareDigest(&prev, &dg) >= 0 {
			d.Fail("pages out of order at %d", p)
			break
		}
		prev = dg
		objs = d.B(objs[:0], tmp.sch.n())
		present := false
		for _, m := range objs {
			if m&^valid != 0 {
				d.Fail("page %d: media bits %#x outside %#x", p, m, valid)
			}
			present = present || m != 0
		}
		if !present {
			d.Fail("page %d has no object", p)
		}
		if d.Err != nil {
			break
		}
		for s, m := range objs {
			if m != 0 {
				tmp.store(&dg, s, m)
			}
		}
	}
}

// adopt takes over tmp's state, keeping ix's counters.
func (ix *Index) adopt(tmp *Index) {
	stats := ix.stats
	*ix = *tmp
	ix.stats = stats
}

// Snapshot is [Index.Snapshot] under the read lock: batches wait, queries
// do not.
func (p *Pool) Snapshot(w io.Writer) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Snapshot(w)
}

// Restore is [Index.Restore]; the snapshot is decoded before the write
// lock is taken, so queries wait only for the swap.
func (p *Pool) Restore(r io.Reader) error {
	p.mu.RLock()
	cfg, seed := p.ix.cfg, p.ix.seed
	p.mu.RUnlock()
	tmp, err := restore(r, cfg, seed)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ix.adopt(tmp)
	return nil
}
