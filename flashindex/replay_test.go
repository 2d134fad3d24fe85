package flashindex

import (
	"os"
	"testing"
)

// TestReplayMooncake replays the Mooncake conversation trace as engine
// events (request i stored on worker i mod 8, whose engine holds 8,192
// blocks and evicts least recently used tails) and checks, before each
// request's events, that FindMatches for the request equals a naive
// reference: one set of sequence hashes per worker. It replays the first
// 4,000 requests (about 20 minutes of the trace, 4M blocks) to keep the
// suite fast (1,000 with -short); FLASHINDEX_REPLAY_ALL=1 replays all
// 12,031.
func TestReplayMooncake(t *testing.T) {
	locals, seqs := traceSequences(t)
	n := 4000
	if testing.Short() {
		n = 1000
	}
	if os.Getenv("FLASHINDEX_REPLAY_ALL") == "" && len(seqs) > n {
		locals, seqs = locals[:n], seqs[:n]
	}
	const workers, capacity = 8, 8192
	evs, req, _ := traceEvents(locals, seqs, workers, capacity)
	ix, err := New(Config{BlockSize: traceBlockSize, MaxBlocksPerWorker: capacity})
	if err != nil {
		t.Fatal(err)
	}
	ref := make([]map[uint64]bool, workers)
	for i := range ref {
		ref[i] = map[uint64]bool{}
	}
	var got, want []Match
	matched, removed, e := 0, 0, 0
	for i, seq := range seqs {
		want = want[:0]
		for w, set := range ref {
			d := 0
			for d < len(seq) && set[seq[d]] {
				d++
			}
			if d > 0 {
				want = append(want, Match{Worker: Worker{ID: uint64(w)}, Device: d, Resident: len(set)})
			}
			matched += d
		}
		got = ix.FindMatches(seq, got)
		sortMatches(got)
		if !matchesEqual(got, want) {
			t.Fatalf("request %d (%d blocks): FindMatches\n got  %v\n want %v", i, len(seq), got, want)
		}
		for ; e < len(evs) && req[e] == i; e++ {
			ev := evs[e]
			if err := ix.Apply(ev); err != nil {
				t.Fatalf("request %d: Apply: %v", i, err)
			}
			set := ref[ev.Worker.ID]
			for _, b := range ev.Blocks {
				set[b.EngineHash] = true
			}
			for _, h := range ev.Hashes {
				delete(set, h)
				removed++
			}
		}
	}
	st := ix.Stats()
	if st.Rejected.Total() != 0 || st.UnknownRemoved != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if matched == 0 || removed == 0 {
		t.Fatalf("replay exercised nothing: %d blocks matched, %d removed", matched, removed)
	}
	t.Logf("%d requests, %d events, %d blocks matched, %d removed; index: %d blocks in %d nodes, %d residencies",
		len(seqs), len(evs), matched, removed, st.Blocks, st.Nodes, st.Residencies)
}
