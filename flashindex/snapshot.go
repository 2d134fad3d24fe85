package flashindex

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math/bits"
	"slices"

	"github.com/klauspost/compress/zstd"

	"github.com/agentkv/agentkv/internal/limitio"
	"github.com/agentkv/agentkv/internal/zframe"
)

// Snapshot format, version 2:
//
//	magic "FLXI" | version byte | zstd frame of the body
//
// The body is a sequence of unsigned varints (u) and little-endian 64-bit
// words (h):
//
//	u blockSize, u approxSeq
//	u workers, then per worker (sorted by ID, DP rank):
//	  u id, u dpRank, u seen, u lastID, u gaps
//	  3x (device, host, disk): u n, n x (h engine, h seq), sorted by engine
//	  3x: u n, n x (h seq, u extra), aliases sorted by seq
//	u nodes, then per node (sorted by first hash):
//	  u n, n x h hash, u runs, runs x (u end, u k, k x (u worker, u planes))
//	u links, then per link (sorted by child):
//	  u child, u parent, u offset in parent
//	u approx, then per entry (sorted by expiry, order):
//	  u worker, h seq, u expiry (zigzag), u order
//
// Worker numbers are positions in the sorted worker list, node numbers in
// the sorted node list; planes is a mask (1 device, 2 host, 4 disk, 8
// approximate). A link says which block of which node a node's first block
// continues (see kids.go). Encoding is canonical, so Snapshot of a
// restored index reproduces the input byte for byte.
//
// Version 1 is version 2 without the links; Restore reads it (queries then
// compare hashes at every node until new nodes are linked).
const (
	snapshotMagic   = "FLXI"
	snapshotVersion = 2
)

// Snapshot writes the whole index (blocks, residencies, engine-hash maps,
// event ids, approximate entries) to w, zstd-compressed. Counters in Stats
// other than sizes are not saved. Snapshot holds the writer lock while it
// runs: events wait, queries do not.
func (ix *Index) Snapshot(w io.Writer) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if err := zframe.WriteHeader(w, snapshotMagic, snapshotVersion); err != nil {
		return err
	}
	zw, err := zframe.Encoder(w, zstd.SpeedDefault)
	if err != nil {
		return err
	}
	defer zframe.PutEncoder(zw, zstd.SpeedDefault)
	bw := bufio.NewWriterSize(zw, 1<<16)
	e := zframe.FieldWriter{W: bw}
	e.U(uint64(ix.blockSize))
	e.U(ix.approxSeq)
	num := ix.snapshotWorkers(&e)
	nodes := ix.snapshotNodes(&e, num)
	snapshotLinks(&e, nodes)
	ix.snapshotApprox(&e, num)
	if e.Err != nil {
		return e.Err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return zw.Close()
}

// kv is a key and a value, for sorting before encoding.
type kv struct{ k, v uint64 }

func compareKeys(a, b kv) int { return cmp.Compare(a.k, b.k) }

// snapshotWorkers writes the workers, sorted, with their event-id state,
// engine maps (an identity-mode map written out in full) and alias counts.
// It returns the worker number of each slot.
func (ix *Index) snapshotWorkers(e *zframe.FieldWriter) map[int]uint64 {
	wss := make([]*workerState, 0, len(ix.workers))
	for _, ws := range ix.workers {
		wss = append(wss, ws)
	}
	slices.SortFunc(wss, func(a, b *workerState) int { return compareWorkers(a.w, b.w) })
	num := make(map[int]uint64, len(wss)) // slot -> worker number
	for i, ws := range wss {
		num[ws.slot] = uint64(i)
	}
	e.U(uint64(len(wss)))
	var tmp []kv
	for _, ws := range wss {
		e.U(ws.w.ID)
		e.U(uint64(ws.w.DPRank))
		e.Bool(ws.seen)
		e.U(ws.lastID)
		e.U(ws.gaps)
		for p := range ws.engine {
			tmp = tmp[:0]
			if ws.full[p] {
				ws.engine[p].each(func(k, v uint64) { tmp = append(tmp, kv{k, v}) })
			} else {
				// Identity mode: the map is implied by the residency bits.
				ix.residentOn(ws.slot, p, func(h uint64) { tmp = append(tmp, kv{h, h}) })
			}
			slices.SortFunc(tmp, compareKeys)
			e.U(uint64(len(tmp)))
			for _, x := range tmp {
				e.H(x.k)
				e.H(x.v)
			}
		}
		for p := range ws.alias {
			tmp = tmp[:0]
			for k, v := range ws.alias[p] {
				tmp = append(tmp, kv{k, uint64(v)})
			}
			slices.SortFunc(tmp, compareKeys)
			e.U(uint64(len(tmp)))
			for _, x := range tmp {
				e.H(x.k)
				e.U(x.v)
			}
		}
	}
	return num
}

// snapshotNodes writes the nodes, sorted by first hash, with their hashes
// and runs (each run's members by worker number, num), and returns them in
// that order.
func (ix *Index) snapshotNodes(e *zframe.FieldWriter, num map[int]uint64) []*node {
	var nodes []*node
	ix.nodes.each(func(n *node) { nodes = append(nodes, n) })
	slices.SortFunc(nodes, func(a, b *node) int { return cmp.Compare(a.data.Load().hashes[0], b.data.Load().hashes[0]) })
	e.U(uint64(len(nodes)))
	var members []kv
	for _, n := range nodes {
		d := n.data.Load()
		e.U(uint64(len(d.hashes)))
		for _, h := range d.hashes {
			e.H(h)
		}
		e.U(uint64(len(d.runs)))
		for _, r := range d.runs {
			e.U(uint64(r.end))
			members = members[:0]
			for i := 0; i*numPlanes < len(r.bits); i++ {
				var any uint64
				for p := 0; p < numPlanes; p++ {
					any |= word(r.bits, i, p)
				}
				for x := any; x != 0; x &= x - 1 {
					s := i<<6 | bits.TrailingZeros64(x)
					members = append(members, kv{num[s], uint64(slotMask(r.bits, s))})
				}
			}
			slices.SortFunc(members, compareKeys)
			e.U(uint64(len(members)))
			for _, m := range members {
				e.U(m.k)
				e.U(m.v)
			}
		}
	}
	return nodes
}

// snapshotLinks writes the links of nodes (in snapshot order), by node
// number.
func snapshotLinks(e *zframe.FieldWriter, nodes []*node) {
	nodeNum := make(map[*node]uint64, len(nodes))
	for i, n := range nodes {
		nodeNum[n] = uint64(i)
	}
	var links []*node
	for _, n := range nodes {
		if n.linked() {
			links = append(links, n)
		}
	}
	e.U(uint64(len(links)))
	for _, n := range links {
		e.U(nodeNum[n])
		e.U(nodeNum[n.parent])
		e.U(uint64(n.poff))
	}
}

// snapshotApprox writes the approximate entries, sorted by expiry and
// order, their workers by number (num).
func (ix *Index) snapshotApprox(e *zframe.FieldWriter, num map[int]uint64) {
	entries := ix.approx.sorted()
	e.U(uint64(len(entries)))
	for _, x := range entries {
		e.U(num[int(x.slot)])
		e.H(x.seq)
		e.U(uint64(x.expiry<<1) ^ uint64(x.expiry>>63))
		e.U(x.order)
	}
}

// decoder reads a snapshot body's fields; lim, under its reader, counts
// and caps the decompressed bytes.
type decoder struct {
	zframe.FieldReader
	lim *limitio.Reader
}

// left is how many more body bytes the size cap allows after what the
// decoder has consumed.
func (d *decoder) left() int64 {
	return d.lim.Max - (d.lim.Out() - int64(d.R.Buffered()))
}

// count reads a count of items that take at least per bytes each in the
// body: besides limit, the count must fit in what MaxSnapshotBytes leaves,
// so no count can ask for more than the cap (allocations still grow only
// as items arrive).
func (d *decoder) count(limit uint64, per int64, what string) int {
	v := d.N(limit, what)
	if d.Err == nil && int64(v) > d.left()/per {
		d.Err = fmt.Errorf("%w: %s count %d needs at least %d bytes, %d left under MaxSnapshotBytes",
			ErrSnapshotTooLarge, what, v, int64(v)*per, d.left())
		return 0
	}
	return v
}

const maxCount = 1 << 40

// Restore reads a snapshot written by Snapshot into a new Index configured
// by cfg. cfg.BlockSize may be zero (the snapshot's is used); a different
// non-zero one is a *BlockSizeError. A snapshot of another version fails
// with ErrSnapshotVersion, a damaged one with ErrSnapshotFormat; Restore
// never panics on bad input.
//
// Snapshots are untrusted input. The decompressed body is capped by
// cfg.MaxSnapshotBytes and cfg.MaxSnapshotExpansion (a body past either
// fails with ErrSnapshotTooLarge as soon as it crosses), every count is
// checked against the bytes the cap leaves before it is used, and
// allocations grow as items arrive, so what Restore allocates is
// proportional to the body it actually read, and the body to the
// compressed input (TestRestoreBombBounded measures both).
func Restore(r io.Reader, cfg Config) (*Index, error) {
	if cfg.MaxSnapshotBytes < 0 {
		return nil, fmt.Errorf("%w: MaxSnapshotBytes %d < 0", ErrConfig, cfg.MaxSnapshotBytes)
	}
	lim := &limitio.Reader{In: &limitio.Counter{R: r}, Max: cfg.MaxSnapshotBytes,
		Ratio: int64(cfg.MaxSnapshotExpansion), Slack: SnapshotExpansionSlack, Err: ErrSnapshotTooLarge}
	if lim.Max == 0 {
		lim.Max = DefaultMaxSnapshotBytes
	}
	if lim.Ratio == 0 {
		lim.Ratio = DefaultMaxSnapshotExpansion
	}
	r = lim.In
	v, err := zframe.ReadHeader(r, snapshotMagic, ErrSnapshotFormat)
	if err != nil {
		return nil, err
	}
	if v < 1 || v > snapshotVersion {
		return nil, fmt.Errorf("%w: version %d (this build reads 1 to %d)", ErrSnapshotVersion, v, snapshotVersion)
	}
	zr, err := zframe.Decoder(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotFormat, err)
	}
	defer zframe.PutDecoder(zr)
	lim.R = zr
	d := &decoder{FieldReader: zframe.FieldReader{R: bufio.NewReaderSize(lim, 1<<16), Format: ErrSnapshotFormat,
		Keep: ErrSnapshotTooLarge}, lim: lim}
	ix, err := restoreBody(d, cfg, v)
	if err != nil {
		return nil, err
	}
	d.End()
	if d.Err != nil {
		return nil, d.Err
	}
	return ix, nil
}

// restoreBody reads a snapshot body (see the format above) into a new
// Index configured by cfg: the workers with their engine maps, the nodes
// with their residency runs, the links between nodes (version 2), then the
// approximate entries, checking as it goes that the parts agree.
func restoreBody(d *decoder, cfg Config, version byte) (*Index, error) {
	bs := d.N(MaxBlockSize, "block size")
	if d.Err != nil {
		return nil, d.Err
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = bs
	} else if cfg.BlockSize != bs {
		return nil, &BlockSizeError{Block: -1, Got: bs, Want: cfg.BlockSize}
	}
	ix, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSnapshotFormat, err)
	}
	ix.approxSeq = d.U()
	wss := restoreWorkers(d, ix)
	if d.Err != nil {
		return nil, d.Err
	}
	nodes, bitCount := restoreNodes(d, ix, wss)
	if d.Err != nil {
		return nil, d.Err
	}
	if version >= 2 {
		if restoreLinks(d, ix, nodes); d.Err != nil {
			return nil, d.Err
		}
	}
	if err := checkEngineMaps(ix, wss, bitCount); err != nil {
		return nil, err
	}
	if restoreApprox(d, ix, wss); d.Err != nil {
		return nil, d.Err
	}
	for wn, ws := range wss {
		if int(ws.counts.n[planeApprox].Load()) != bitCount[wn][planeApprox] {
			return nil, fmt.Errorf("%w: worker %v: approximate bits without entries", ErrSnapshotFormat, ws.w)
		}
	}
	return ix, nil
}

// restoreWorkers reads the workers, registering each with ix, and returns
// their states by worker number.
func restoreWorkers(d *decoder, ix *Index) []*workerState {
	nw := d.count(1<<32, 11, "worker")
	wss := make([]*workerState, 0, min(nw, 1<<12))
	for i := 0; i < nw && d.Err == nil; i++ {
		id := d.U()
		dp := d.U()
		if dp > 1<<32-1 {
			d.Fail("dp rank %d", dp)
			break
		}
		w := Worker{ID: id, DPRank: uint32(dp)}
		if i > 0 && compareWorkers(wss[i-1].w, w) >= 0 {
			d.Fail("workers out of order")
			break
		}
		ws := ix.worker(w)
		wss = append(wss, ws)
		seen := d.U()
		if seen > 1 {
			d.Fail("seen flag %d", seen)
		}
		ws.seen = seen == 1
		ws.lastID = d.U()
		ws.gaps = d.U()
		restoreEngineMaps(d, ws)
	}
	return wss
}

// restoreEngineMaps reads a worker's engine maps and alias counts, tier by
// tier. The maps are read in full; checkEngineMaps turns those that are
// the identity back into identity mode.
func restoreEngineMaps(d *decoder, ws *workerState) {
	for p := range ws.engine {
		n := d.count(maxCount, 16, "engine entry")
		var last uint64
		for j := 0; j < n && d.Err == nil; j++ {
			k, v := d.H(), d.H()
			if j > 0 && k <= last {
				d.Fail("engine hashes out of order")
			}
			last = k
			ws.engine[p].put(k, v)
		}
		ws.full[p] = true
	}
	for p := range ws.alias {
		n := d.count(maxCount, 9, "alias")
		var last uint64
		for j := 0; j < n && d.Err == nil; j++ {
			k, v := d.H(), d.U()
			if (j > 0 && k <= last) || v == 0 || v > 1<<32-1 {
				d.Fail("bad alias entry")
			}
			last = k
			if ws.alias[p] == nil {
				ws.alias[p] = make(map[uint64]uint32)
			}
			ws.alias[p][k] = uint32(v)
		}
	}
}

// restoreNodes reads the nodes into ix and returns them by node number,
// with the number of blocks each worker (by number) holds on each plane.
func restoreNodes(d *decoder, ix *Index, wss []*workerState) ([]*node, [][numPlanes]int) {
	bitCount := make([][numPlanes]int, len(wss))
	nn := d.count(maxCount, 12, "node")
	var nodes []*node
	var lastFirst uint64
	for i := 0; i < nn && d.Err == nil; i++ {
		hashes := restoreHashes(d, ix)
		if d.Err != nil {
			break
		}
		if i > 0 && hashes[0] <= lastFirst {
			d.Fail("nodes out of order")
			break
		}
		lastFirst = hashes[0]
		runs := restoreRuns(d, wss, bitCount, len(hashes))
		if d.Err != nil {
			break
		}
		n := ix.nodes.alloc(newNodeData(hashes, runs, seal(runs, nil, 0)))
		nodes = append(nodes, n)
		for j, h := range hashes {
			if _, dup := ix.blocks.peek(h); dup {
				d.Fail("block %#x indexed twice", h)
				break
			}
			ix.blocks.put(h, loc(n.id, j))
		}
	}
	return nodes, bitCount
}

// restoreHashes reads a node's hashes, failing on an empty node and on a
// block ix already indexes or the node repeats.
func restoreHashes(d *decoder, ix *Index) []uint64 {
	nh := d.count(1<<32-1, 8, "node length")
	if nh == 0 {
		d.Fail("empty node")
		return nil
	}
	hashes := make([]uint64, 0, min(nh, 1<<16))
	for j := 0; j < nh && d.Err == nil; j++ {
		// Reject repeats as they arrive (the full check is in
		// restoreNodes), so a run of one value fails at its second element.
		h := d.H()
		if _, dup := ix.blocks.peek(h); dup || j > 0 && h == hashes[j-1] {
			d.Fail("block %#x indexed twice", h)
		}
		hashes = append(hashes, h)
	}
	return hashes
}

// restoreRuns reads the runs of a node of nh blocks, which must cover it
// and end in a non-empty set, and adds each member's blocks to bitCount.
func restoreRuns(d *decoder, wss []*workerState, bitCount [][numPlanes]int, nh int) []run {
	nr := d.count(uint64(nh), 2, "run")
	if nr == 0 && d.Err == nil {
		d.Fail("node without runs")
	}
	runs := make([]run, 0, min(nr, 1<<12))
	prevEnd := 0
	for j := 0; j < nr && d.Err == nil; j++ {
		end := d.N(uint64(nh), "run end")
		if end <= prevEnd {
			d.Fail("run ends out of order")
			break
		}
		k := d.count(uint64(len(wss)), 2, "member")
		var set []uint64
		lastW := -1
		for m := 0; m < k && d.Err == nil; m++ {
			wn := d.N(uint64(len(wss))-1, "worker number")
			mask := d.U()
			if wn <= lastW || mask == 0 || mask >= 1<<numPlanes {
				d.Fail("bad run member")
				break
			}
			lastW = wn
			for p := 0; p < numPlanes; p++ {
				if mask>>p&1 != 0 {
					set = setOp{slot: wss[wn].slot, set: 1 << p}.apply(set)
					bitCount[wn][p] += end - prevEnd
				}
			}
		}
		runs = append(runs, run{end: uint32(end), bits: set})
		prevEnd = end
	}
	if d.Err == nil && (prevEnd != nh || len(runs[len(runs)-1].bits) == 0) {
		d.Fail("runs do not cover the node, or its tail is empty")
	}
	return runs
}

// restoreLinks reads the links between nodes (see kids.go).
func restoreLinks(d *decoder, ix *Index, nodes []*node) {
	nl := d.count(uint64(len(nodes)), 3, "link")
	last := -1
	for i := 0; i < nl && d.Err == nil; i++ {
		c := d.N(uint64(len(nodes))-1, "linked node")
		p := d.N(uint64(len(nodes))-1, "parent node")
		if d.Err != nil {
			break
		}
		off := d.N(uint64(len(nodes[p].data.Load().hashes))-1, "parent offset")
		if d.Err == nil && (c <= last || c == p) {
			d.Fail("bad link")
		}
		if d.Err != nil {
			break
		}
		last = c
		ix.nodes.link(nodes[c], nodes[p], off)
	}
}

// checkEngineMaps checks that every worker's engine maps agree with the
// residency bits (bitCount: blocks per worker number and plane), sets the
// workers' counts, and returns the maps that are the identity to identity
// mode.
func checkEngineMaps(ix *Index, wss []*workerState, bitCount [][numPlanes]int) error {
	for wn, ws := range wss {
		for p := 0; p < eventPlanes; p++ {
			if err := ix.checkEngineMap(ws, p, bitCount[wn][p]); err != nil {
				return err
			}
			ws.counts.set(p, int64(bitCount[wn][p]))
			// Back to identity mode where every mapping is one.
			identity := len(ws.alias[p]) == 0
			ws.engine[p].each(func(k, v uint64) { identity = identity && k == v })
			if identity {
				ws.engine[p], ws.full[p] = u64map{}, false
			}
		}
	}
	return nil
}

// checkEngineMap checks plane p of ws: its engine map maps to resident
// blocks only, resident holds as many blocks as the map maps to, and the
// alias counts are the map's extra hashes per block.
func (ix *Index) checkEngineMap(ws *workerState, p, resident int) error {
	refs := make(map[uint64]uint32, ws.engine[p].Len())
	ws.engine[p].each(func(_, s uint64) { refs[s]++ })
	if len(refs) != resident {
		return fmt.Errorf("%w: worker %v %v: %d blocks mapped, %d resident", ErrSnapshotFormat, ws.w, Tier(p), len(refs), resident)
	}
	for s, c := range refs {
		n, off, ok := ix.locate(s, nil, 0)
		if !ok || !hasBit(n.data.Load().bitsAt(off), ws.slot, p) {
			return fmt.Errorf("%w: worker %v %v: mapped block %#x not resident", ErrSnapshotFormat, ws.w, Tier(p), s)
		}
		if ws.alias[p][s] != c-1 {
			return fmt.Errorf("%w: worker %v %v: alias count of %#x", ErrSnapshotFormat, ws.w, Tier(p), s)
		}
	}
	for s := range ws.alias[p] {
		if refs[s] == 0 {
			return fmt.Errorf("%w: worker %v %v: alias of unmapped block %#x", ErrSnapshotFormat, ws.w, Tier(p), s)
		}
	}
	return nil
}

// restoreApprox reads the approximate entries, each of which must match an
// approximate residency bit without a device bit, into ix's entry set.
func restoreApprox(d *decoder, ix *Index, wss []*workerState) {
	na := d.count(maxCount, 11, "approximate entry")
	var prev approxEntry
	if na > 0 && len(wss) == 0 {
		d.Fail("approximate entries without workers")
	}
	if na > MaxApproxEntries {
		d.Fail("%d approximate entries, more than %d", na, MaxApproxEntries)
	}
	for i := 0; i < na && d.Err == nil; i++ {
		wn := d.N(uint64(len(wss))-1, "worker number")
		seq := d.H()
		z := d.U()
		order := d.U()
		if d.Err != nil {
			break
		}
		e := approxEntry{seq: seq, expiry: int64(z>>1) ^ -int64(z&1), order: order}
		if i > 0 && (e.expiry < prev.expiry || (e.expiry == prev.expiry && e.order <= prev.order)) {
			d.Fail("approximate entries out of order")
			break
		}
		prev = e
		ws := wss[wn]
		n, off, ok := ix.locate(seq, nil, 0)
		if _, dup := ws.approx.get(seq); !ok || slotMask(n.data.Load().bitsAt(off), ws.slot)&(1<<planeApprox|1<<planeDevice) != 1<<planeApprox || dup {
			d.Fail("approximate entry %#x does not match the residency bits", seq)
			break
		}
		ws.approx.put(seq, uint64(ix.approx.add(ws.slot, seq, e.expiry, e.order))) // in order: all queued
		ws.counts.add(planeApprox, 1)
	}
}
