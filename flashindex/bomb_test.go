package flashindex

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// zstdRLEFrame builds a valid zstd frame (no content size, 4 MiB window)
// whose first block is raw and holds head, followed by RLE blocks of fill
// that regenerate rle bytes in all: 4 bytes of input per 128 KiB of output.
func zstdRLEFrame(head []byte, fill byte, rle int) []byte {
	const maxBlock = 128 << 10
	out := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 12 << 3} // magic, descriptor, window 2^22
	block := func(last bool, typ int, size int, payload []byte) {
		h := uint32(size)<<3 | uint32(typ)<<1
		if last {
			h |= 1
		}
		out = append(out, byte(h), byte(h>>8), byte(h>>16))
		out = append(out, payload...)
	}
	block(rle == 0, 0, len(head), head)
	for rle > 0 {
		n := min(rle, maxBlock)
		rle -= n
		block(rle == 0, 1, n, []byte{fill})
	}
	return out
}

// snapshotBomb is issue #22's attack: a snapshot header claiming one node of
// nh hashes, whose hashes are an RLE run. in is the total input size.
func snapshotBomb(nh uint64, rleBytes int) []byte {
	var head []byte
	for _, v := range []uint64{16, 0, 0, 1, nh} { // block size, approxSeq, workers, nodes, node length
		head = binary.AppendUvarint(head, v)
	}
	return append([]byte("FLXI\x02"), zstdRLEFrame(head, 1, rleBytes)...)
}

// repeatedWorkersBomb is a snapshot body that stays valid as it is read for
// as long as it can: workers with identical engine maps of n increasing
// keys (checked against the residencies only once the nodes are read),
// compressed for real, so each repeated map costs a few bytes.
func repeatedWorkersBomb(workers, n int) []byte {
	var body []byte
	for _, v := range []uint64{16, 0, uint64(workers)} {
		body = binary.AppendUvarint(body, v)
	}
	var m []byte
	for i := 0; i < n; i++ {
		m = binary.LittleEndian.AppendUint64(m, uint64(i+1)<<40)
		m = binary.LittleEndian.AppendUint64(m, uint64(i+1)<<40)
	}
	for w := 0; w < workers; w++ {
		for _, v := range []uint64{uint64(w), 0, 1, 0, 0, uint64(n)} { // id, dp, seen, lastID, gaps, device entries
			body = binary.AppendUvarint(body, v)
		}
		body = append(body, m...)
		body = append(body, 0, 0, 0, 0, 0) // host, disk entries, 3 alias counts
	}
	var out bytes.Buffer
	out.WriteString("FLXI\x02")
	zw, _ := zstd.NewWriter(&out, zstd.WithWindowSize(1<<22), zstd.WithEncoderLevel(zstd.SpeedDefault))
	zw.Write(body)
	zw.Close()
	return out.Bytes()
}

// allocDuring reports the bytes f allocated (TotalAlloc delta).
func allocDuring(f func()) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// restoreAllocMultiple and restoreAllocFixed state Restore's allocation
// bound on any input: at most restoreAllocMultiple bytes per input byte,
// plus restoreAllocFixed for the zstd decoder's window and buffers.
const (
	restoreAllocMultiple = 64
	restoreAllocFixed    = 12 << 20
)

// TestRestoreBombBounded: issue #22 item 3. A 32 KB snapshot of RLE blocks
// claiming a node of 2^27 hashes (1 GiB of body) used to make Restore
// allocate 3 GB. It must now fail with ErrSnapshotTooLarge having allocated
// a bounded multiple of its size; so must a 1 MiB one claiming 32 GiB.
func TestRestoreBombBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"issue 32KB, 2^27 hashes", snapshotBomb(1<<27, 1<<30)},
		{"1MiB, 2^32-1 hashes", snapshotBomb(1<<32-1, 32<<30)},
		{"1MiB, fits MaxSnapshotBytes count", snapshotBomb(1<<28, 2<<30)},
		{"repeated engine maps", repeatedWorkersBomb(64, 1<<16)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The frame is real zstd: an unlimited decoder expands it.
			zr, err := zstd.NewReader(bytes.NewReader(tc.data[5:]), zstd.WithDecoderMaxWindow(1<<22))
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.CopyN(io.Discard, zr, 64<<20)
			zr.Close()
			if err != nil || n != 64<<20 {
				t.Fatalf("bomb is not a valid zstd frame: %d bytes, %v", n, err)
			}
			var rerr error
			got := allocDuring(func() { _, rerr = Restore(bytes.NewReader(tc.data), Config{}) })
			if !errors.Is(rerr, ErrSnapshotFormat) {
				t.Fatalf("Restore: %v, want ErrSnapshotFormat", rerr)
			}
			limit := uint64(restoreAllocMultiple*len(tc.data) + restoreAllocFixed)
			t.Logf("%d-byte input: allocated %d bytes (%.1fx input), limit %d: %v", len(tc.data), got, float64(got)/float64(len(tc.data)), limit, rerr)
			if got > limit {
				t.Fatalf("allocated %d bytes for a %d-byte snapshot, limit %d", got, len(tc.data), limit)
			}
		})
	}
}

// TestRestoreCountsChecked: a count that the rest of the body could not
// hold under MaxSnapshotBytes fails before anything is allocated for it,
// and an explicit small cap applies.
func TestRestoreCountsChecked(t *testing.T) {
	raw := func(vals ...uint64) []byte {
		var head []byte
		for _, v := range vals {
			head = binary.AppendUvarint(head, v)
		}
		return append([]byte("FLXI\x02"), zstdRLEFrame(head, 0, 0)...)
	}
	for _, tc := range []struct {
		name string
		data []byte
		cfg  Config
	}{
		{"2^40 nodes", raw(16, 0, 0, 1<<40-1), Config{}},
		{"2^32 workers", raw(16, 0, 1<<32), Config{}},
		{"node length over a small cap", raw(16, 0, 0, 1, 1<<20), Config{MaxSnapshotBytes: 1 << 20}},
		{"approx entries", raw(16, 0, 0, 0, 0, 1<<39), Config{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			got := allocDuring(func() { _, err = Restore(bytes.NewReader(tc.data), tc.cfg) })
			if !errors.Is(err, ErrSnapshotTooLarge) {
				t.Fatalf("Restore: %v, want ErrSnapshotTooLarge", err)
			}
			if got > restoreAllocFixed {
				t.Fatalf("allocated %d bytes rejecting a %d-byte snapshot", got, len(tc.data))
			}
		})
	}
	if _, err := Restore(bytes.NewReader(raw(16)), Config{MaxSnapshotBytes: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative MaxSnapshotBytes: %v", err)
	}
}

// TestRestoreRealSnapshotWithinBounds: a snapshot of a real trace's index
// restores under the default caps, and its expansion is far below
// DefaultMaxSnapshotExpansion; the same snapshot under a cap smaller than
// its body fails cleanly.
func TestRestoreRealSnapshotWithinBounds(t *testing.T) {
	locals, seqs := traceSequences(t)
	evs, _, _ := traceEvents(locals[:min(len(locals), 2000)], seqs[:min(len(seqs), 2000)], 4, 1<<14)
	ix, _ := New(Config{BlockSize: traceBlockSize})
	for _, ev := range evs {
		if err := ix.Apply(ev); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	zr, _ := zstd.NewReader(bytes.NewReader(buf.Bytes()[5:]))
	body, err := io.Copy(io.Discard, zr)
	zr.Close()
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(body) / float64(buf.Len())
	t.Logf("real snapshot: %d bytes compressed, %d body, expansion %.2f", buf.Len(), body, ratio)
	if ratio*4 > DefaultMaxSnapshotExpansion {
		t.Fatalf("a real snapshot expands %.2f-fold, too close to the %d cap", ratio, DefaultMaxSnapshotExpansion)
	}
	if _, err := Restore(bytes.NewReader(buf.Bytes()), Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(bytes.NewReader(buf.Bytes()), Config{MaxSnapshotBytes: body - 1}); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("body of %d under a cap of %d: %v", body, body-1, err)
	}
	if _, err := Restore(bytes.NewReader(buf.Bytes()), Config{MaxSnapshotBytes: body}); err != nil {
		t.Fatalf("body of %d under a cap of %d: %v", body, body, err)
	}
}

// TestRestoreSharedSnapshotExpansion: the most compressible honest shape,
// many workers holding the very same blocks (their engine maps repeat),
// expands past the default cap; it fails with ErrSnapshotTooLarge, and
// restores when MaxSnapshotExpansion is raised (here: off).
func TestRestoreSharedSnapshotExpansion(t *testing.T) {
	ix, _ := New(Config{BlockSize: 1})
	for w := uint64(0); w < 128; w++ {
		for c := uint64(0); c < 500; c++ {
			ev := &Event{Worker: Worker{ID: w}, EventID: c + 1, Kind: Stored, Tier: Device, BlockSize: 1}
			for b := uint64(0); b < 2; b++ {
				ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: c*4 + b + 1, Tokens: []uint32{uint32(c), uint32(b)}[b : b+1]})
			}
			ev.Blocks[0].Tokens = []uint32{uint32(c)}
			if err := ix.Apply(ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	zr, _ := zstd.NewReader(bytes.NewReader(buf.Bytes()[5:]))
	body, _ := io.Copy(io.Discard, zr)
	zr.Close()
	st := ix.Stats()
	ratio := float64(body) / float64(buf.Len())
	t.Logf("shared snapshot: %d residencies, %d compressed, %d body, expansion %.2f", st.Residencies, buf.Len(), body, ratio)
	if st.Residencies != 128*1000 {
		t.Fatalf("%d residencies", st.Residencies)
	}
	// Past the default cap: a clear error, and restorable with a higher one.
	if _, err := Restore(bytes.NewReader(buf.Bytes()), Config{}); !errors.Is(err, ErrSnapshotTooLarge) {
		t.Fatalf("expansion %.0f under the default cap %d: %v", ratio, DefaultMaxSnapshotExpansion, err)
	}
	if _, err := Restore(bytes.NewReader(buf.Bytes()), Config{MaxSnapshotExpansion: -1}); err != nil {
		t.Fatal(err)
	}
}
