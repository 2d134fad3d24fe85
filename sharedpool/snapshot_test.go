package sharedpool

import (
	"bufio"
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/agentkv/agentkv/internal/zframe"
)

func snapshotBytes(t testing.TB, ix *Index) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// requireSameState checks that two indexes answer alike and snapshot to
// the same bytes.
func requireSameState(t *testing.T, a, b *Index, universe []PageHash, what string) {
	t.Helper()
	if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, b)) {
		t.Fatalf("%s: snapshots differ: %+v vs %+v", what, a.Stats(), b.Stats())
	}
	ha, erra := a.Query(universe)
	hb, errb := b.Query(universe)
	if (erra == nil) != (errb == nil) || ha.Total != hb.Total || len(ha.Ranges) != len(hb.Ranges) {
		t.Fatalf("%s: queries differ: %+v %v vs %+v %v", what, ha, erra, hb, errb)
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Pages != sb.Pages || sa.Present != sb.Present || sa.Objects != sb.Objects || a.Len() != b.Len() {
		t.Fatalf("%s: sizes differ: %+v vs %+v", what, sa, sb)
	}
}

// applyOp applies one differential-test op.
func applyOp(ix *Index, o op) {
	switch o.kind {
	case opSetLayout:
		ix.SetLayout(o.layout)
	case opSync:
		ix.SyncLayouts(o.workers)
	case opReset:
		ix.Reset()
	case opBatch:
		ix.Apply(&o.batch)
	}
}

// An index restored from a snapshot at any point of a random op stream
// (stores and removes on several media, partial pages, duplicates, gaps,
// layout changes, clears, rejections) then follows the original exactly:
// same snapshot bytes, same answers, after every later op. Two indexes
// with different table seeds fed the same ops snapshot identically.
func TestSnapshotRestoreFollowsTheOriginal(t *testing.T) {
	universe := diffUniverse()
	for seed := uint64(1); seed <= 16; seed++ {
		g := &gen{r: rand.New(rand.NewPCG(seed, 3)), universe: universe, maxEvents: 12}
		cfg := diffConfig
		cfg.MaxPages = 8
		cfg.Seed = seed*2 + 1
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Seed = seed*7 + 3
		twin, _ := New(cfg)
		var b *Index
		for i := range 300 {
			o := g.op()
			applyOp(a, o)
			applyOp(twin, o)
			if b != nil {
				applyOp(b, o)
				requireSameState(t, a, b, universe, "restored copy")
			}
			if i%60 == 20 {
				cfg.Seed = seed*13 + uint64(i)
				b, _ = New(cfg)
				if err := b.Restore(bytes.NewReader(snapshotBytes(t, a))); err != nil {
					t.Fatalf("seed %d op %d: %v", seed, i, err)
				}
				requireSameState(t, a, b, universe, "just restored")
				if !bytes.Equal(snapshotBytes(t, b), snapshotBytes(t, a)) {
					t.Fatal("Snapshot(Restore(s)) != s")
				}
			}
			if i%5 == 0 {
				requireSameState(t, a, twin, universe, "twin with another seed")
			}
		}
	}
}

// A restored index keeps the batch sequence: the next batch is contiguous,
// a repeat is a duplicate, a jump is a gap, as on the original.
func TestSnapshotKeepsTheSequence(t *testing.T) {
	l := Layout{PageSize: 2, TPSize: 2}
	pages := randomPages(3, 9)
	a, _ := New(Config{Layout: l})
	var seq uint64 = 40
	fill(t, a, l, pages, &seq)
	b, _ := New(Config{})
	if err := b.Restore(bytes.NewReader(snapshotBytes(t, a))); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Layout(); err != nil || !got.Equal(l) {
		t.Fatalf("layout %+v %v", got, err)
	}
	if b.Len() != 3 || !b.Contains(pages[1]) {
		t.Fatalf("restored %d pages", b.Len())
	}
	if r := b.Apply(&Batch{Seq: seq}); !r.Duplicate {
		t.Fatalf("repeat of %d: %+v", seq, r)
	}
	if r := b.Apply(&Batch{Seq: seq + 1}); r.Gap != nil || b.Len() != 3 {
		t.Fatalf("next batch: %+v, %d pages", r, b.Len())
	}
	if r := b.Apply(&Batch{Seq: seq + 5}); r.Gap == nil || b.Len() != 0 {
		t.Fatalf("jump: %+v, %d pages", r, b.Len())
	}
}

func TestSnapshotWithoutLayout(t *testing.T) {
	a, _ := New(Config{})
	b, _ := New(Config{Layout: Layout{PageSize: 4, MLA: true}})
	var seq uint64
	fill(t, b, Layout{PageSize: 4, MLA: true}, randomPages(2, 1), &seq)
	if err := b.Restore(bytes.NewReader(snapshotBytes(t, a))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Layout(); !errors.Is(err, ErrNoLayout) {
		t.Fatalf("layout error %v", err)
	}
	if b.Len() != 0 {
		t.Fatalf("%d pages", b.Len())
	}
}

// Bad input is an error wrapping ErrSnapshotFormat (or ErrSnapshotVersion),
// never a panic, and the index is left as it was.
func TestRestoreBadInput(t *testing.T) {
	l := Layout{PageSize: 2, TPSize: 2}
	src, _ := New(Config{Layout: l})
	var seq uint64
	fill(t, src, l, randomPages(50, 4), &seq)
	good := snapshotBytes(t, src)

	dst, _ := New(Config{Layout: Layout{PageSize: 2, MLA: true}})
	fill(t, dst, Layout{PageSize: 2, MLA: true}, randomPages(7, 5), &seq)
	before := snapshotBytes(t, dst)
	check := func(data []byte, want error, what string) {
		t.Helper()
		err := dst.Restore(bytes.NewReader(data))
		if !errors.Is(err, want) {
			t.Fatalf("%s: error %v, want %v", what, err, want)
		}
		if !bytes.Equal(snapshotBytes(t, dst), before) {
			t.Fatalf("%s: a failed restore changed the index", what)
		}
	}
	for i := 0; i < len(good); i += 1 + i/8 {
		check(good[:i], ErrSnapshotFormat, "truncated")
	}
	bad := bytes.Clone(good)
	bad[4] = 9
	check(bad, ErrSnapshotVersion, "version")
	bad = bytes.Clone(good)
	bad[0] = 'X'
	check(bad, ErrSnapshotFormat, "magic")
	check(append(bytes.Clone(good), 0), ErrSnapshotFormat, "trailing garbage after the frame")
	for i := 5; i < len(good); i++ {
		bad = bytes.Clone(good)
		bad[i] ^= 0x55
		if err := dst.Restore(bytes.NewReader(bad)); err == nil {
			// A flipped byte inside the compressed frame may still decode
			// to a valid body; then the index took it, which is fine, but
			// reset for the next case.
			if err := dst.Restore(bytes.NewReader(before)); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, ErrSnapshotFormat) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	// More pages than this index may hold.
	small, _ := New(Config{MaxPages: 10})
	if err := small.Restore(bytes.NewReader(good)); !errors.Is(err, ErrSnapshotFormat) {
		t.Fatalf("50 pages into MaxPages 10: %v", err)
	}
}

// Bodies crafted by hand: every check in the decoder is reachable and
// answers with ErrSnapshotFormat.
func TestRestoreCraftedBodies(t *testing.T) {
	l := Layout{PageSize: 2, MLA: true}
	pg := randomPages(2, 8)
	w := func(body func(e *zframe.FieldWriter)) []byte {
		var raw bytes.Buffer
		bw := bufio.NewWriter(&raw)
		e := zframe.FieldWriter{W: bw}
		body(&e)
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		return append([]byte(snapshotMagic+"\x01"), compress(t, raw.Bytes())...)
	}
	layoutOf := func(e *zframe.FieldWriter, backend string) {
		e.S(backend)
		e.U(uint64(l.PageSize))
		e.U(1)
		e.U(1)
		e.U(1)
		e.U(1)
		e.S("")
		e.S("")
	}
	layout := func(e *zframe.FieldWriter) { layoutOf(e, "mooncake") }
	digest := func(e *zframe.FieldWriter, p PageHash) {
		for _, x := range p.words() {
			e.H(x)
		}
	}
	lo, hi := pg[0], pg[1]
	if compareDigest(ptr(lo.words()), ptr(hi.words())) > 0 {
		lo, hi = hi, lo
	}
	// twoPages is a body with a layout, no media, and pages a then b, each
	// with one object stored without a medium.
	twoPages := func(a, b PageHash) func(e *zframe.FieldWriter) {
		return func(e *zframe.FieldWriter) {
			e.U(1)
			layout(e)
			e.U(0)
			e.U(2)
			for _, p := range []PageHash{a, b} {
				digest(e, p)
				e.B([]byte{1})
			}
		}
	}
	cases := map[string]func(e *zframe.FieldWriter){
		"flags": func(e *zframe.FieldWriter) { e.U(8) },
		"invalid layout": func(e *zframe.FieldWriter) {
			e.U(1)
			layoutOf(e, "redis")
		},
		"pages without layout": func(e *zframe.FieldWriter) {
			e.U(0)
			e.U(0)
			e.U(1)
			digest(e, lo)
		},
		"repeated medium": func(e *zframe.FieldWriter) { e.U(0); e.U(2); e.S("cpu"); e.S("cpu"); e.U(0) },
		"too many media":  func(e *zframe.FieldWriter) { e.U(0); e.U(7) },
		"unknown medium bit": func(e *zframe.FieldWriter) {
			e.U(1)
			layout(e)
			e.U(1)
			e.S("cpu")
			e.U(1)
			digest(e, lo)
			e.B([]byte{4})
		},
		"empty page": func(e *zframe.FieldWriter) {
			e.U(1)
			layout(e)
			e.U(0)
			e.U(1)
			digest(e, lo)
			e.B([]byte{0})
		},
		"pages out of order": twoPages(hi, lo),
		"repeated page":      twoPages(lo, lo),
		"long string":        func(e *zframe.FieldWriter) { e.U(1); e.U(1 << 20) },
	}
	for name, body := range cases {
		ix, _ := New(Config{})
		if err := ix.Restore(bytes.NewReader(w(body))); !errors.Is(err, ErrSnapshotFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// And the well-formed one decodes.
	ok := w(func(e *zframe.FieldWriter) {
		e.U(1)
		layout(e)
		e.U(1)
		e.S("cpu")
		e.U(2)
		digest(e, lo)
		e.B([]byte{2})
		digest(e, hi)
		e.B([]byte{1 | 2})
	})
	ix, _ := New(Config{})
	if err := ix.Restore(bytes.NewReader(ok)); err != nil || ix.Len() != 2 || !ix.Contains(lo) {
		t.Fatalf("well-formed body: %v, %d pages", err, ix.Len())
	}
}

func ptr(w [4]uint64) *[4]uint64 { return &w }

func compress(t testing.TB, body []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithWindowSize(zframe.Window))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A tiny frame that expands to 64 MiB of zeros after a valid header fails
// at once, having allocated little.
func TestRestoreBombBounded(t *testing.T) {
	var raw bytes.Buffer
	raw.WriteString("\x01\x08mooncake\x02\x01\x01\x01\x01\x00\x00") // flags, MLA layout, page size 2
	raw.WriteString("\x00\x80\x80\x10")                             // no media, 262,144 pages
	raw.Write(make([]byte, 64<<20))
	data := append([]byte(snapshotMagic+"\x01"), compress(t, raw.Bytes())...)
	if len(data) > 1<<16 {
		t.Fatalf("bomb is %d bytes", len(data))
	}
	var err error
	alloc := allocDuring(func() {
		ix, _ := New(Config{})
		err = ix.Restore(bytes.NewReader(data))
	})
	if !errors.Is(err, ErrSnapshotFormat) {
		t.Fatalf("bomb: %v", err)
	}
	if alloc > 16<<20 {
		t.Fatalf("bomb allocated %d bytes", alloc)
	}
	t.Logf("%d-byte bomb: %v after %d bytes allocated", len(data), err, alloc)
}

// Pool.Snapshot and Pool.Restore run alongside queries and batches.
func TestPoolSnapshotConcurrent(t *testing.T) {
	l := Layout{PageSize: 2, TPSize: 2}
	pages := randomPages(200, 2)
	src, _ := NewPool(Config{Layout: l})
	dst, _ := NewPool(Config{})
	var seq uint64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = dst.Query(pages)
			_ = dst.Len()
		}
	})
	for i := 0; i < len(pages); i += 20 {
		var evs []Event
		for _, k := range l.AppendObjectKeys(nil, pages[i]) {
			evs = append(evs, Event{Kind: Store, Key: k, Medium: "cpu"})
		}
		seq++
		src.Apply(&Batch{Seq: seq, Events: evs})
		var buf bytes.Buffer
		if err := src.Snapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if err := dst.Restore(&buf); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if dst.Len() != src.Len() || dst.Len() != 10 {
		t.Fatalf("restored %d pages, source %d", dst.Len(), src.Len())
	}
}

func FuzzRestore(f *testing.F) {
	l := Layout{PageSize: 2, TPSize: 2}
	ix, _ := New(Config{Layout: l})
	var seq uint64
	fill(f, ix, l, randomPages(5, 1), &seq)
	f.Add(snapshotBytes(f, ix))
	empty, _ := New(Config{})
	f.Add(snapshotBytes(f, empty))
	f.Fuzz(func(t *testing.T, data []byte) {
		ix, _ := New(Config{MaxPages: 1 << 12})
		if err := ix.Restore(bytes.NewReader(data)); err != nil {
			if !errors.Is(err, ErrSnapshotFormat) && !errors.Is(err, ErrSnapshotVersion) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		// Whatever restored is canonical: its snapshot restores to itself.
		again, _ := New(Config{MaxPages: 1 << 12})
		s := snapshotBytes(t, ix)
		if err := again.Restore(bytes.NewReader(s)); err != nil {
			t.Fatalf("re-restore: %v", err)
		}
		if !bytes.Equal(snapshotBytes(t, again), s) {
			t.Fatal("not canonical")
		}
	})
}

// BenchmarkSnapshot measures the snapshot of one million complete pages
// (what a restarting router replica loads besides its block index): size,
// time to write it and time to restore it.
func BenchmarkSnapshot(b *testing.B) {
	for _, l := range []Layout{{PageSize: 64, MLA: true}, {PageSize: 64, TPSize: 2}} {
		name := "layout=MLA"
		if !l.MLA {
			name = "layout=TP2"
		}
		b.Run(name, func(b *testing.B) {
			ix, err := New(Config{Layout: l, MaxPages: 2 << 20, Seed: 3})
			if err != nil {
				b.Fatal(err)
			}
			var seq uint64
			fill(b, ix, l, randomPages(benchPages, 21), &seq)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				t0, c0 := time.Now(), cpuNanos()
				if err := ix.Snapshot(&buf); err != nil {
					b.Fatal(err)
				}
				write, writeCPU := time.Since(t0), cpuNanos()-c0
				dst, _ := New(Config{MaxPages: 2 << 20})
				t1, c1 := time.Now(), cpuNanos()
				if err := dst.Restore(bytes.NewReader(buf.Bytes())); err != nil {
					b.Fatal(err)
				}
				restore, restoreCPU := time.Since(t1), cpuNanos()-c1
				if dst.Len() != benchPages {
					b.Fatalf("restored %d pages", dst.Len())
				}
				b.ReportMetric(float64(buf.Len())/(1<<20), "MiB/1M-pages")
				b.ReportMetric(write.Seconds()*1000, "snapshot-ms")
				b.ReportMetric(restore.Seconds()*1000, "restore-ms")
				b.ReportMetric(float64(writeCPU)/1e6, "snapshot-cpu-ms")
				b.ReportMetric(float64(restoreCPU)/1e6, "restore-cpu-ms")
			}
		})
	}
}
