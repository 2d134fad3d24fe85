package flashindex

import (
	"bytes"
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmarks run on the Mooncake conversation trace expanded to 16-token
// blocks (see trace_test.go), with request i on worker i mod W and each
// worker's engine holding 65,536 blocks (1M tokens), least recently used
// tails evicted.
//
//	go test -run XXX -bench . -benchtime 1x -cpu 1 ./flashindex   (apply)
//	go test -run XXX -bench FindMatches -benchtime 20000x -cpu 1 ./flashindex

const benchCapacity = 1 << 16

type benchStream struct {
	evs    []*Event
	blocks int
}

var (
	streamMu sync.Mutex
	streams  = map[int]*benchStream{}
)

func traceStream(b *testing.B, workers int) *benchStream {
	b.Helper()
	locals, seqs := traceSequences(b)
	streamMu.Lock()
	defer streamMu.Unlock()
	if s := streams[workers]; s != nil {
		return s
	}
	evs, _, n := traceEvents(locals, seqs, workers, benchCapacity)
	s := &benchStream{evs: evs, blocks: n}
	streams[workers] = s
	return s
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkApplyFromTokens applies the first 2,000 events of the trace's
// stream (16 workers) twice: from=local as BenchmarkApply does (the events
// carry Dynamo local hashes), from=tokens with each stored block carrying
// its 16 token ids instead, as vLLM's events do, so Apply hashes every
// block (XXH3 over 64 bytes) before indexing it. The traces are
// content-free, so each distinct local hash gets 16 made-up tokens of its
// own; the chain structure is the trace's.
func BenchmarkApplyFromTokens(b *testing.B) {
	s := traceStream(b, 16)
	evs := s.evs[:min(2000, len(s.evs))]
	pool := map[uint64][]uint32{}
	tokenEvs := make([]*Event, len(evs))
	blocks := 0
	for i, ev := range evs {
		te := *ev
		te.Blocks = make([]StoredBlock, len(ev.Blocks))
		for j, blk := range ev.Blocks {
			toks, ok := pool[blk.LocalHash]
			if !ok {
				toks = make([]uint32, traceBlockSize)
				for k := range toks {
					toks[k] = uint32(mix64(blk.LocalHash + uint64(k)))
				}
				pool[blk.LocalHash] = toks
			}
			te.Blocks[j] = StoredBlock{EngineHash: blk.EngineHash, Tokens: toks}
		}
		tokenEvs[i] = &te
		blocks += len(ev.Blocks) + len(ev.Hashes)
	}
	for _, tc := range []struct {
		from string
		evs  []*Event
	}{{"local", evs}, {"tokens", tokenEvs}} {
		b.Run("from="+tc.from, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				b.StopTimer()
				ix, _ := New(Config{BlockSize: traceBlockSize, MaxBlocksPerWorker: benchCapacity})
				b.StartTimer()
				c0 := processCPU()
				for _, ev := range tc.evs {
					if err := ix.Apply(ev); err != nil {
						b.Fatal(err)
					}
				}
				cpu += processCPU() - c0
			}
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Nanoseconds())/(float64(blocks)*float64(b.N)), "cpu-ns/block")
			}
			b.ReportMetric(float64(blocks)*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
		})
	}
}

// BenchmarkApply applies the whole trace's event stream (stores and
// evictions) to a fresh index per iteration and reports blocks applied per
// second on one goroutine, and the index's heap bytes per resident
// (block, worker, tier) pair after the replay.
func BenchmarkApply(b *testing.B) {
	for _, workers := range []int{16, 256} {
		b.Run(fmt.Sprintf("w=%d", workers), func(b *testing.B) {
			s := traceStream(b, workers)
			var elapsed, cpu, sys time.Duration
			var perPair, perBlock float64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				before := heapInUse()
				ix, _ := New(Config{BlockSize: traceBlockSize, MaxBlocksPerWorker: benchCapacity})
				b.StartTimer()
				t0, c0, s0 := time.Now(), processCPU(), processSys()
				for _, ev := range s.evs {
					if err := ix.Apply(ev); err != nil {
						b.Fatal(err)
					}
				}
				elapsed += time.Since(t0)
				cpu += processCPU() - c0
				sys += processSys() - s0
				b.StopTimer()
				if i == 0 {
					st := ix.Stats()
					used := float64(heapInUse() - before)
					perPair = used / float64(st.Residencies)
					perBlock = used / float64(st.Blocks)
					b.Logf("w=%d: %d events, %d blocks; index holds %d blocks in %d nodes, %d residencies, %.0f MiB",
						workers, len(s.evs), s.blocks, st.Blocks, st.Nodes, st.Residencies, used/(1<<20))
				}
				runtime.KeepAlive(ix)
				b.StartTimer()
			}
			b.ReportMetric(float64(s.blocks)*float64(b.N)/elapsed.Seconds(), "blocks/s")
			if cpu > 0 {
				// CPU time of the whole process (GC included): what the
				// target means on a machine shared with other jobs.
				b.ReportMetric(float64(s.blocks)*float64(b.N)/cpu.Seconds(), "cpu-blocks/s")
				b.ReportMetric(float64(cpu.Nanoseconds())/(float64(s.blocks)*float64(b.N)), "cpu-ns/block")
				// The kernel's part: page faults on the fresh memory the
				// growing index touches (zeroing it, on this VM).
				b.ReportMetric(float64(sys.Nanoseconds())/(float64(s.blocks)*float64(b.N)), "sys-ns/block")
			}
			b.ReportMetric(perPair, "B/pair")
			b.ReportMetric(perBlock, "B/block")
		})
	}
}

// snapshotState returns the index the trace's stream for 16 workers leaves,
// with the engines' hashes as they are (the blocks' own: identity-mode
// engine maps) or, with salted, xored with a per-worker salt (full engine
// maps, as from an engine that hashes blocks its own way).
func snapshotState(b *testing.B, salted bool) *Index {
	b.Helper()
	s := traceStream(b, 16)
	ix, _ := New(Config{BlockSize: traceBlockSize, MaxBlocksPerWorker: benchCapacity})
	for _, ev := range s.evs {
		if salted {
			ev = saltEngine(ev)
		}
		if err := ix.Apply(ev); err != nil {
			b.Fatal(err)
		}
	}
	return ix
}

// saltEngine returns a copy of ev with every engine hash xored with a salt
// of its worker's.
func saltEngine(ev *Event) *Event {
	salt := mix64(ev.Worker.ID + 1)
	c := *ev
	c.Parent ^= salt
	c.Blocks = slices.Clone(ev.Blocks)
	for i := range c.Blocks {
		c.Blocks[i].EngineHash ^= salt
	}
	c.Hashes = slices.Clone(ev.Hashes)
	for i := range c.Hashes {
		c.Hashes[i] ^= salt
	}
	return &c
}

// BenchmarkSnapshot writes the index of snapshotState (engine=own and
// engine=salted) and reports the time per (block, worker, tier) residency
// and the snapshot's bytes.
func BenchmarkSnapshot(b *testing.B) {
	for _, salted := range []bool{false, true} {
		b.Run("engine="+map[bool]string{false: "own", true: "salted"}[salted], func(b *testing.B) {
			ix := snapshotState(b, salted)
			var buf bytes.Buffer
			b.ResetTimer()
			for b.Loop() {
				buf.Reset()
				if err := ix.Snapshot(&buf); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(ix.Stats().Residencies), "ns/pair")
			b.ReportMetric(float64(buf.Len()), "bytes")
		})
	}
}

// BenchmarkRestore reads the snapshots BenchmarkSnapshot writes and reports
// the time per residency.
func BenchmarkRestore(b *testing.B) {
	for _, salted := range []bool{false, true} {
		b.Run("engine="+map[bool]string{false: "own", true: "salted"}[salted], func(b *testing.B) {
			ix := snapshotState(b, salted)
			var buf bytes.Buffer
			if err := ix.Snapshot(&buf); err != nil {
				b.Fatal(err)
			}
			pairs := ix.Stats().Residencies
			ix = nil
			b.ResetTimer()
			for b.Loop() {
				rx, err := Restore(bytes.NewReader(buf.Bytes()), Config{})
				if err != nil {
					b.Fatal(err)
				}
				if got := rx.Stats().Residencies; got != pairs {
					b.Fatalf("restored %d residencies, want %d", got, pairs)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(pairs), "ns/pair")
		})
	}
}

// deepIndex is the trace state plus deepContexts distinct 8,192-block agent
// contexts, each resident on every worker at a different depth: in context
// c, worker k with r = (k+c) mod W holds a device prefix of 4096(r+1)/W
// blocks, a host run of 512(r mod 4) blocks after it and a disk run of
// 1024(r mod 3) blocks after that. Every worker overlaps and every one ends
// its tiers at its own positions, different in each context: the worst
// case for a walk. Context 0 is the trace's longest request extended with
// fresh blocks (the trace state holds parts of its prefix, so it is checked
// against the naive baseline, which holds it too); the others are fresh
// blocks, checked against the depths above.
type deepIndex struct {
	ix      *Index
	naive   *naiveIndex
	queries [][]uint64 // per context, its 8,192 sequence hashes
}

// deepContexts is how many distinct contexts the deep benchmarks cycle
// over, so that no query finds the runs and hashes of the one before it in
// cache, as a router serving many sessions would not: at w=256 a context
// is one node of 8,192 blocks and about 370 runs, whose walk reads 14 KB
// of runs and change lists, 3.6 MB over all contexts (several times a
// core's L2), besides the queries' own hashes (16 MB at n=8192, read at
// the positions the walk compares).
const deepContexts = 256

var (
	deepMu sync.Mutex
	deeps  = map[int]*deepIndex{}
)

// deepDepths returns where worker rank r of W ends its device prefix, host
// run and disk run in a deep context of n blocks.
func deepDepths(r, workers, n int) (d, h, dk int) {
	d = 4096 * (r + 1) / workers
	h = min(n, d+512*(r%4))
	dk = min(n, h+1024*(r%3))
	return d, h, dk
}

func benchDeep(b *testing.B, workers int) *deepIndex {
	b.Helper()
	s := traceStream(b, workers)
	locals, _ := traceSequences(b)
	deepMu.Lock()
	defer deepMu.Unlock()
	if d := deeps[workers]; d != nil {
		return d
	}
	ix, _ := New(Config{BlockSize: traceBlockSize})
	nv := newNaive()
	for _, ev := range s.evs {
		if err := ix.Apply(ev); err != nil {
			b.Fatal(err)
		}
		nv.apply(ev)
	}
	ids := map[Worker]uint64{}
	for _, ev := range s.evs {
		ids[ev.Worker] = ev.EventID + 1
	}
	var naive bool // whether the baseline takes the events too
	apply := func(ev *Event) {
		ev.EventID = ids[ev.Worker]
		ids[ev.Worker]++
		if err := ix.Apply(ev); err != nil {
			b.Fatal(err)
		}
		if naive {
			nv.apply(ev)
		}
	}
	longest := slices.MaxFunc(locals, func(a, b []uint64) int { return cmp.Compare(len(a), len(b)) })
	var queries [][]uint64
	for c := 0; c < deepContexts; c++ {
		naive = c == 0
		queries = append(queries, deepContext(deepLocals(c, longest), c, workers, apply))
	}
	// The baselines must agree with the index before timing either.
	got, want := ix.FindMatches(queries[0], nil), nv.find(queries[0])
	for i := range got {
		got[i].Resident = 0
	}
	sortMatches(got)
	sortMatches(want)
	if !matchesEqual(got, want) || len(got) != workers {
		b.Fatalf("deep query: index %v, naive %v", got, want)
	}
	for c := 1; c < len(queries); c++ {
		checkDeep(b, ix, queries[c], c, workers)
	}
	d := &deepIndex{ix: ix, naive: nv, queries: queries}
	deeps[workers] = d
	return d
}

// deepLocals returns the 8,192 local hashes of deep context c: for c = 0
// prefix (the trace's longest request) extended with fresh blocks, for the
// others fresh blocks only.
func deepLocals(c int, prefix []uint64) []uint64 {
	const n = 8192
	var local []uint64
	if c == 0 {
		local = slices.Clone(prefix)
	}
	for len(local) < n {
		local = append(local, mix64(uint64(c)<<32|uint64(len(local))^0xdeadbeef))
	}
	return local
}

// deepContext stores context c, the chain of local hashes local, on every
// worker at the depths deepDepths gives rank (k+c) mod W: each tier's run
// in one Stored event, chained to the block before it (on the device tier
// or the host run), under the blocks' own hashes. It returns the
// context's sequence hashes.
func deepContext(local []uint64, c, workers int, apply func(*Event)) []uint64 {
	query := AppendSequenceHashes(nil, local)
	var blocks []StoredBlock // Apply retains none of an event
	for k := 0; k < workers; k++ {
		w := Worker{ID: uint64(k)}
		d, h, dk := deepDepths((k+c)%workers, workers, len(query))
		for _, tier := range []struct {
			t        Tier
			from, to int
		}{{Device, 0, d}, {Host, d, h}, {Disk, h, dk}} {
			if tier.from == tier.to {
				continue
			}
			blocks = blocks[:0]
			for j := tier.from; j < tier.to; j++ {
				blocks = append(blocks, StoredBlock{EngineHash: query[j], LocalHash: local[j], HasLocalHash: true})
			}
			ev := &Event{Worker: w, Kind: Stored, Tier: tier.t, Blocks: blocks}
			if tier.from > 0 {
				ev.HasParent, ev.Parent = true, query[tier.from-1]
			}
			apply(ev)
		}
	}
	return query
}

// prefixes returns the contexts' first n blocks.
func (d *deepIndex) prefixes(n int) [][]uint64 {
	qs := make([][]uint64, len(d.queries))
	for i, q := range d.queries {
		qs[i] = q[:n]
	}
	return qs
}

// checkDeep fails b unless FindMatches on context c's first 1,024 and all
// 8,192 blocks reports every worker at the depths deepContext stored.
func checkDeep(b *testing.B, ix *Index, query []uint64, c, workers int) {
	b.Helper()
	for _, n := range []int{1024, len(query)} {
		got := ix.FindMatches(query[:n], nil)
		if len(got) != workers {
			b.Fatalf("deep context %d, n=%d: %d matches, want %d", c, n, len(got), workers)
		}
		for _, m := range got {
			d, h, dk := deepDepths((int(m.Worker.ID)+c)%workers, workers, len(query))
			d, h, dk = min(d, n), min(h, n), min(dk, n)
			if m.Device != d || m.Host != h-d || m.Disk != dk-h {
				b.Fatalf("deep context %d, n=%d: worker %v got %d/%d/%d, want %d/%d/%d",
					c, n, m.Worker, m.Device, m.Host, m.Disk, d, h-d, dk-h)
			}
		}
	}
}

// latency records per-call durations and reports percentiles from their
// distribution (every sample kept and sorted: an exact histogram).
type latency struct{ ns []int64 }

func (l *latency) report(b *testing.B, prefix string) (p50, p99 float64) {
	slices.Sort(l.ns)
	q := func(f float64) float64 { return float64(l.ns[int(f*float64(len(l.ns)-1))]) }
	p50, p99 = q(0.50), q(0.99)
	b.ReportMetric(p50, prefix+"p50-ns")
	b.ReportMetric(p99, prefix+"p99-ns")
	return p50, p99
}

// threadCPUOverhead estimates the cost of one threadCPU pair, to subtract
// from CPU-time samples.
func threadCPUOverhead() int64 {
	best := int64(1 << 62)
	for i := 0; i < 200; i++ {
		t0 := threadCPU()
		if d := threadCPU() - t0; d < best {
			best = d
		}
	}
	return best
}

// benchQueries times FindMatches over queries, round robin. It reports
// wall-clock p50/p99 and, where the thread CPU clock is readable, p50/p99
// of the thread's CPU time per query (time preempted by other processes
// not counted: the figure a loaded shared machine can still measure).
//
// Each query is followed by a control: a memory-free arithmetic spin
// calibrated to the query's median, timed the same way (ctl-p50/p99). The
// control's work never varies and touches no memory, so its tail is the
// machine's (interrupts, a busy sibling hyperthread, a descheduled vCPU),
// measured under the same conditions as the queries, interleaved.
//
// The timer runs throughout (stopping it per call reads the runtime's
// memory statistics, which disturbs the caches the next query sees), so
// ns/op includes the control and the copy below; the percentiles are the
// figures to read.
//
// With fresh, each query is first copied into a scratch buffer outside the
// timed call, the way a router calls FindMatches right after hashing the
// prompt into its buffer: the request's hashes are in cache, the index is
// not. Without it the queries are read from their list as they are.
//
// The naive baseline, when given, is timed on naiveQueries (the queries
// whose state it holds), round robin, and its p50 compared with the index's.
func benchQueries(b *testing.B, ix *Index, queries [][]uint64, naive *naiveIndex, naiveQueries [][]uint64, fresh bool) {
	var dst []Match
	var buf []uint64
	var lat, cpuLat, ctl latency
	lat.ns = make([]int64, 0, b.N)
	cpuLat.ns = make([]int64, 0, b.N)
	ctl.ns = make([]int64, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	over := threadCPUOverhead()
	spins := calibrateSpin(func() {
		for i := 0; i < 64; i++ {
			dst = ix.FindMatches(queries[i%len(queries)], dst)
		}
	}, 64)
	hits := 0
	runtime.GC() // no collection of the setup's garbage running during the timed loop
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q := queries[i%len(queries)]
		if fresh {
			buf = append(buf[:0], q...)
			q = buf
		}
		c0 := threadCPU()
		t0 := time.Now()
		dst = ix.FindMatches(q, dst)
		lat.ns = append(lat.ns, int64(time.Since(t0)))
		if c0 >= 0 {
			cpuLat.ns = append(cpuLat.ns, max(0, threadCPU()-c0-over))
		}
		hits += len(dst)
		t0 = time.Now()
		spin(spins)
		ctl.ns = append(ctl.ns, int64(time.Since(t0)))
	}
	b.StopTimer()
	p50, _ := lat.report(b, "")
	if len(cpuLat.ns) > 0 {
		cpuLat.report(b, "cpu-")
	}
	ctl.report(b, "ctl-")
	b.ReportMetric(float64(hits)/float64(b.N), "workers/op")
	if naive != nil {
		var nl latency
		runs := min(b.N, 200)
		for i := 0; i < runs; i++ {
			q := naiveQueries[i%len(naiveQueries)]
			t0 := time.Now()
			naive.find(q)
			nl.ns = append(nl.ns, int64(time.Since(t0)))
		}
		np50, _ := nl.report(b, "naive-")
		b.ReportMetric(np50/p50, "speedup-p50")
	}
}

// BenchmarkFindMatches reports p50/p99 latency of FindMatches.
//
// trace: the state after replaying the trace; queries are the trace's
// requests of at least n blocks, cut to n, each freshly written to a buffer
// as a router's hashing leaves it (trace-coldquery: read cold from the list
// of 2,732 queries, 22 MB). deep: the deepContexts 8,192-block contexts of
// deepIndex (every worker overlapping at its own depths in each), queried
// in turn, never the same one twice in a row; n=1024 queries their first
// 1,024 blocks. The naive baseline (a map from block to its (worker, tier)
// list, walked block by block) runs on the same state; in deep it holds
// context 0 only (all of them would take gigabytes) and is timed on it.
func BenchmarkFindMatches(b *testing.B) {
	for _, workers := range []int{16, 256} {
		for _, n := range []int{1024, 8192} {
			b.Run(fmt.Sprintf("deep/w=%d/n=%d", workers, n), func(b *testing.B) {
				d := benchDeep(b, workers)
				qs := d.prefixes(n)
				benchQueries(b, d.ix, qs, d.naive, qs[:1], false)
			})
		}
		for _, mode := range []string{"trace", "trace-coldquery"} {
			b.Run(fmt.Sprintf("%s/w=%d/n=1024", mode, workers), func(b *testing.B) {
				d := benchDeep(b, workers)
				_, seqs := traceSequences(b)
				var qs [][]uint64
				for _, s := range seqs {
					if len(s) >= 1024 {
						qs = append(qs, s[:1024])
					}
				}
				benchQueries(b, d.ix, qs, d.naive, qs, mode == "trace")
			})
		}
	}
}

// BenchmarkFindMatchesParallel measures read throughput with concurrent
// readers, each cycling over the deep contexts from its own starting
// point; compare ns/op between -cpu 1 and -cpu 2.
func BenchmarkFindMatchesParallel(b *testing.B) {
	for _, n := range []int{1024, 8192} {
		b.Run(fmt.Sprintf("deep/w=256/n=%d", n), func(b *testing.B) {
			d := benchDeep(b, 256)
			qs := d.prefixes(n)
			var start atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var dst []Match
				i := int(start.Add(deepContexts / 2)) // readers apart
				for pb.Next() {
					dst = d.ix.FindMatches(qs[i%len(qs)], dst)
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}

// naiveIndex is the baseline: block -> list of (worker slot, tier), walked
// one block at a time with a hash lookup per block.
type naiveIndex struct {
	blocks  map[uint64][]uint32 // value: slot<<2 | tier
	engine  map[uint64]uint64   // (engine hash ^ slot) -> own hash
	slots   map[Worker]uint32
	workers []Worker
}

func newNaive() *naiveIndex {
	return &naiveIndex{blocks: map[uint64][]uint32{}, engine: map[uint64]uint64{}, slots: map[Worker]uint32{}}
}

func (n *naiveIndex) slot(w Worker) uint32 {
	s, ok := n.slots[w]
	if !ok {
		s = uint32(len(n.workers))
		n.slots[w] = s
		n.workers = append(n.workers, w)
	}
	return s
}

func (n *naiveIndex) apply(ev *Event) {
	s := n.slot(ev.Worker)
	code := s<<2 | uint32(ev.Tier)
	key := func(e uint64) uint64 { return e ^ uint64(code)*0x9E3779B97F4A7C15 }
	switch ev.Kind {
	case Stored:
		var prev uint64
		has := false
		if ev.HasParent {
			for t := uint32(0); t < 3 && !has; t++ {
				prev, has = n.engine[ev.Parent^uint64(s<<2|t)*0x9E3779B97F4A7C15]
			}
		}
		for _, blk := range ev.Blocks {
			if has {
				prev = NextSequenceHash(prev, blk.LocalHash)
			} else {
				prev, has = blk.LocalHash, true
			}
			if _, dup := n.engine[key(blk.EngineHash)]; !dup {
				n.engine[key(blk.EngineHash)] = prev
				n.blocks[prev] = append(n.blocks[prev], code)
			}
		}
	case Removed:
		for _, e := range ev.Hashes {
			seq, ok := n.engine[key(e)]
			if !ok {
				continue
			}
			delete(n.engine, key(e))
			l := n.blocks[seq]
			if i := slices.Index(l, code); i >= 0 {
				l = slices.Delete(l, i, i+1)
			}
			if len(l) == 0 {
				delete(n.blocks, seq)
			} else {
				n.blocks[seq] = l
			}
		}
	}
}

func (n *naiveIndex) find(seq []uint64) []Match {
	state := make([]int8, len(n.workers)) // 0 device, 1 host, 2 disk, 3 done
	depth := make([][3]int, len(n.workers))
	has := make([][3]bool, len(n.workers))
	live := len(n.workers)
	for pos := 0; pos < len(seq) && live > 0; pos++ {
		for i := range has {
			has[i] = [3]bool{}
		}
		for _, c := range n.blocks[seq[pos]] {
			has[c>>2][c&3] = true
		}
		for i := range state {
			for state[i] < 3 && !has[i][state[i]] {
				state[i]++
				if state[i] == 3 {
					live--
				}
			}
			if state[i] < 3 {
				depth[i][state[i]]++
			}
		}
	}
	var out []Match
	for i, d := range depth {
		if d[0]+d[1]+d[2] > 0 {
			out = append(out, Match{Worker: n.workers[i], Device: d[0], Host: d[1], Disk: d[2]})
		}
	}
	return out
}

// BenchmarkTimingControl times a fixed, memory-free arithmetic loop of
// about the length of a query with the same harness as BenchmarkFindMatches
// (wall and thread CPU time per call, goroutine locked to its thread). Its
// work never changes and touches no memory, so any spread between its p50
// and p99 comes from the machine (preemption, interrupts, a sibling
// hyperthread, steal), not from cache misses: the floor under the query
// percentiles on the box the run is on.
func BenchmarkTimingControl(b *testing.B) {
	for _, n := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var lat, cpuLat latency
			lat.ns = make([]int64, 0, b.N)
			cpuLat.ns = make([]int64, 0, b.N)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			over := threadCPUOverhead()
			x := uint64(1)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := threadCPU()
				t0 := time.Now()
				x += spin(n)
				lat.ns = append(lat.ns, int64(time.Since(t0)))
				if c0 >= 0 {
					cpuLat.ns = append(cpuLat.ns, max(0, threadCPU()-c0-over))
				}
			}
			b.StopTimer()
			lat.report(b, "")
			if len(cpuLat.ns) > 0 {
				cpuLat.report(b, "cpu-")
			}
			benchSink = x
		})
	}
}

var benchSink uint64

// spin does n dependent multiply-adds: fixed work, no memory.
func spin(n int) uint64 {
	x := uint64(1)
	for j := 0; j < n; j++ {
		x = x*0x9E3779B97F4A7C15 + uint64(j)
	}
	benchSink += x
	return x
}

// calibrateSpin returns the spin count that takes as long as one of
// calls f makes (f makes calls calls), from medians of a few trials.
func calibrateSpin(f func(), calls int) int {
	med := func(g func()) int64 {
		var l latency
		for i := 0; i < 15; i++ {
			t0 := time.Now()
			g()
			l.ns = append(l.ns, int64(time.Since(t0)))
		}
		slices.Sort(l.ns)
		return l.ns[len(l.ns)/2]
	}
	const probe = 100000
	perSpin := float64(med(func() { spin(probe) })) / probe
	perCall := float64(med(f)) / float64(calls)
	return max(1, int(perCall/perSpin))
}
