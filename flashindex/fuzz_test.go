package flashindex

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// fuzzProbes are the sequence hashes of every chain of up to three
// one-token blocks over tokens {0, 1, 2}: all the content a fuzzed stream
// can store (besides random local hashes).
func fuzzProbes() [][]uint64 {
	h, _ := NewHasher(1, "")
	var out [][]uint64
	var walk func(prefix []uint32)
	walk = func(prefix []uint32) {
		if len(prefix) > 0 {
			_, seq := h.AppendHashes(nil, nil, prefix, 0, false)
			out = append(out, seq)
		}
		if len(prefix) == 3 {
			return
		}
		for t := uint32(0); t < 3; t++ {
			walk(append(append([]uint32(nil), prefix...), t))
		}
	}
	walk(nil)
	return out
}

// byteReader hands out fuzz input bytes, then zeros.
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *byteReader) done() bool { return r.i >= len(r.b) }

// FuzzApply decodes the input into a stream of events, records, clock
// steps and removals, applies it to the Index and to the reference model,
// and compares every probe query and the statistics after each operation.
func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 1, 0, 1, 2, 0, 1, 0, 0, 1, 1})
	f.Add([]byte{0, 1, 0, 1, 3, 0, 1, 2, 0, 200, 3, 1, 1, 1, 1, 0, 0, 3, 4, 2, 1, 2})
	f.Add([]byte{0, 0, 1, 1, 2, 200, 1, 9, 0, 0, 2, 1, 4, 7, 1, 5, 3, 0, 1, 1, 6, 0, 2, 0})
	f.Add([]byte{4, 1, 9, 40, 0, 3, 0, 1, 3, 1, 1, 1, 2, 2, 3, 5, 7, 1, 2, 8, 6, 1})
	probes := fuzzProbes()
	f.Fuzz(func(t *testing.T, data []byte) {
		now := time.Unix(0, 0)
		var gaps int
		cfg := Config{BlockSize: 1, MaxBlocksPerWorker: 6, ApproxMaxEntries: 5,
			Now: func() time.Time { return now }, OnGap: func(Gap) { gaps++ }}
		ix, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ref := newRef(cfg)
		h, _ := NewHasher(1, "")
		ids := map[Worker]uint64{}
		r := &byteReader{b: data}
		for op := 0; !r.done() && op < 64; op++ {
			kind := r.next() % 7
			w := Worker{ID: uint64(r.next() % 3), DPRank: uint32(r.next() % 2)}
			id := ids[w] + uint64(r.next()%3) // 0: duplicate (after the first), 1: next, 2: gap
			ids[w] = max(ids[w], id)
			switch kind {
			case 0, 1, 2: // stored
				ev := &Event{Worker: w, EventID: id, Kind: Stored, Tier: Tier(r.next() % 4)}
				if p := r.next(); p >= 128 {
					ev.HasParent, ev.Parent = true, uint64(p%8)
				}
				n := int(r.next()%3) + 1
				for i := 0; i < n; i++ {
					b := StoredBlock{EngineHash: uint64(r.next() % 8)}
					tok := uint32(r.next() % 4)
					switch {
					case tok == 3:
						b.LocalHash, b.HasLocalHash = uint64(r.next()), true
					case r.next()%4 == 0:
						b.LocalHash, b.HasLocalHash = h.LocalHash([]uint32{tok}), true
					default:
						b.Tokens = []uint32{tok}
					}
					ev.Blocks = append(ev.Blocks, b)
				}
				if r.next()%16 == 0 {
					ev.BlockSize = 2
				}
				gaps = 0
				err := ix.Apply(ev)
				rej, gap := ref.apply(ev)
				if (err != nil) != rej || (gap != nil) != (gaps == 1) {
					t.Fatalf("op %d %v: err %v, reference rejected %v, gap %v/%d", op, eventString(ev), err, rej, gap, gaps)
				}
			case 3: // removed
				ev := &Event{Worker: w, EventID: id, Kind: Removed, Tier: Tier(r.next() % 4)}
				for n := int(r.next() % 4); n > 0; n-- {
					ev.Hashes = append(ev.Hashes, uint64(r.next()%8))
				}
				err := ix.Apply(ev)
				if rej, _ := ref.apply(ev); (err != nil) != rej {
					t.Fatalf("op %d %v: err %v, reference rejected %v", op, eventString(ev), err, rej)
				}
			case 4: // cleared, or an invalid kind
				ev := &Event{Worker: w, EventID: id, Kind: Cleared}
				if r.next()%4 == 0 {
					ev.Kind = 0
				}
				err := ix.Apply(ev)
				if rej, _ := ref.apply(ev); (err != nil) != rej {
					t.Fatalf("op %d %v: err %v, reference rejected %v", op, eventString(ev), err, rej)
				}
			case 5: // record
				p := probes[int(r.next())%len(probes)]
				ttl := time.Duration(r.next()%5) * time.Second
				ix.Record(w, p, ttl)
				ref.record(w, p, ttl)
			case 6: // time, expiry, removal
				switch r.next() % 3 {
				case 0:
					now = now.Add(time.Duration(r.next()%4) * time.Second)
				case 1:
					ix.Expire()
					ref.expire()
				case 2:
					ix.RemoveWorker(w)
					ref.removeWorker(w)
					delete(ids, w)
				}
			}
			if err := checkChanges(ix); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
			if err := checkMaps(ix); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
			if _, err := checkKids(ix, nil); err != nil { // Record takes any list: links unchecked
				t.Fatalf("op %d: %v", op, err)
			}
			view := ref.view()
			for _, p := range probes {
				got := ix.FindMatches(p, nil)
				sortMatches(got)
				if want := view.find(p); !matchesEqual(got, want) {
					t.Fatalf("op %d: FindMatches(%s) = %v, want %v", op, hashesString(p), got, want)
				}
			}
			if gs, ws := ix.Stats(), ref.stats(); !statsEqual(gs, ws) {
				t.Fatalf("op %d: stats\n got  %+v\n want %+v", op, gs, ws)
			}
		}
		var a, b bytes.Buffer
		if err := ix.Snapshot(&a); err != nil {
			t.Fatal(err)
		}
		rx, err := Restore(bytes.NewReader(a.Bytes()), Config{})
		if err != nil {
			t.Fatalf("Restore of own snapshot: %v", err)
		}
		if err := rx.Snapshot(&b); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("snapshot round trip not identical: %v", err)
		}
	})
}

// FuzzFindMatches queries an index built from a seeded random stream: a
// prefix of one of its chains (exact answer required), and a fuzzed list
// mixing indexed hashes from anywhere, repeats and unknown values, which is
// no chain (the answer must be well formed and the call must not panic).
func FuzzFindMatches(f *testing.F) {
	f.Add(uint64(1), []byte{0, 1, 2, 3, 4})
	f.Add(uint64(7), []byte{9, 9, 9, 200, 1, 2})
	f.Add(uint64(3), []byte{})
	f.Fuzz(func(t *testing.T, seed uint64, pick []byte) {
		now := time.Unix(0, 0)
		cfg := Config{BlockSize: 4, Now: func() time.Time { return now }}
		ix, _ := New(cfg)
		ref := newRef(cfg)
		g := newGen(seed, 4, ref, 6)
		for i := 0; i < 60; i++ {
			s := g.next()
			switch s.kind {
			case opApply:
				_ = ix.Apply(s.ev)
				ref.apply(s.ev)
			case opRecord:
				ix.Record(s.w, s.seq, s.ttl)
				ref.record(s.w, s.seq, s.ttl)
			case opRemoveWorker:
				ix.RemoveWorker(s.w)
				ref.removeWorker(s.w)
			}
		}
		var known []uint64
		for _, q := range g.seqs {
			known = append(known, q.seq...)
		}
		var seq []uint64
		base := g.seqs[int(seed%uint64(len(g.seqs)))].seq
		for i, p := range pick {
			switch {
			case p < 128 && i < len(base):
				seq = append(seq, base[i])
			case p < 240:
				seq = append(seq, known[int(p)%len(known)])
			default:
				seq = append(seq, uint64(p))
			}
		}
		// A request's sequence hashes from position 0 form a chain: exact.
		view := ref.view()
		chain := base[:min(len(pick), len(base))]
		got := ix.FindMatches(chain, nil)
		sortMatches(got)
		want := view.find(chain)
		if !matchesEqual(got, want) {
			t.Fatalf("FindMatches(%s) = %v, want %v", hashesString(chain), got, want)
		}
		early := ix.FindMatchesEarlyExit(chain, nil)
		sortMatches(early)
		if msg := checkEarly(early, want); msg != "" {
			t.Fatalf("early exit: %s: %v vs %v", msg, early, want)
		}
		// Any other list of hashes is no chain: the answer is unspecified,
		// but well formed (known workers, each once, depths within the list).
		got = ix.FindMatches(seq, got)
		if msg := checkWellFormed(got, len(seq), ix); msg != "" {
			t.Fatalf("FindMatches(%s) = %v: %s", hashesString(seq), got, msg)
		}
	})
}

// checkWellFormed checks what FindMatches promises for any input: each
// worker at most once, every one known to the index, depths non-negative
// and summing to at most n blocks.
func checkWellFormed(got []Match, n int, ix *Index) string {
	known := map[Worker]bool{}
	for _, w := range ix.Workers() {
		known[w] = true
	}
	seen := map[Worker]bool{}
	for _, m := range got {
		switch {
		case seen[m.Worker]:
			return fmt.Sprintf("worker %v listed twice", m.Worker)
		case !known[m.Worker]:
			return fmt.Sprintf("unknown worker %v", m.Worker)
		case m.Device < 0 || m.Host < 0 || m.Disk < 0 || m.Resident < 0:
			return fmt.Sprintf("negative depth %+v", m)
		case m.Total() > n:
			return fmt.Sprintf("depth %d beyond the %d hashes queried", m.Total(), n)
		}
		seen[m.Worker] = true
	}
	return ""
}

// FuzzRestore feeds arbitrary bytes to Restore: it must fail cleanly or
// yield an index whose snapshot restores to the same snapshot.
func FuzzRestore(f *testing.F) {
	now := time.Unix(0, 0)
	cfg := Config{BlockSize: 4, Now: func() time.Time { return now }}
	ix, _ := New(cfg)
	g := newGen(5, 4, newRef(cfg), 4)
	for i := 0; i < 200; i++ {
		if s := g.next(); s.kind == opApply {
			_ = ix.Apply(s.ev)
			g.ref.apply(s.ev)
		} else if s.kind == opRecord {
			ix.Record(s.w, s.seq, s.ttl)
			g.ref.record(s.w, s.seq, s.ttl)
		}
	}
	var buf bytes.Buffer
	if err := ix.Snapshot(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte("FLXI\x01"))
	f.Add([]byte("FLXI\x02garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rx, err := Restore(bytes.NewReader(data), Config{})
		if err != nil {
			return
		}
		var a, b bytes.Buffer
		if err := rx.Snapshot(&a); err != nil {
			t.Fatal(err)
		}
		ry, err := Restore(bytes.NewReader(a.Bytes()), Config{})
		if err != nil {
			t.Fatalf("restoring a canonical snapshot: %v", err)
		}
		if err := ry.Snapshot(&b); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Fatalf("canonical snapshot not stable: %v", err)
		}
	})
}
