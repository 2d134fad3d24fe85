package flashindex

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentReadersWriters runs queries on two goroutines while a
// writer applies a random stream (events, records, expiries, removals) and
// another takes snapshots and stats. Readers check that every answer is
// well formed; at the end the index must equal the reference model that
// saw the same stream. Run it with -race.
func TestConcurrentReadersWriters(t *testing.T) {
	var mu sync.Mutex // guards now
	now := time.Unix(0, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	cfg := Config{BlockSize: 4, ApproxMaxEntries: 50, Now: clock}
	ix := mustNew(t, cfg)
	ref := newRef(cfg)
	g := newGen(42, 4, ref, 70)
	probes := make([][]uint64, 0, 32)
	for _, s := range g.seqs {
		probes = append(probes, s.seq)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var queries atomic.Int64
	errs := make(chan string, 4)
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var dst []Match
			for i := 0; !stop.Load(); i++ {
				p := probes[(i+r)%len(probes)]
				if i%2 == 0 {
					dst = ix.FindMatches(p, dst)
				} else {
					dst = ix.FindMatchesEarlyExit(p, dst)
				}
				seen := map[Worker]bool{}
				for _, m := range dst {
					if m.Total() <= 0 || m.Total() > len(p) || m.Device < 0 || m.Host < 0 || m.Disk < 0 || seen[m.Worker] {
						select {
						case errs <- "malformed match":
						default:
						}
					}
					seen[m.Worker] = true
				}
				queries.Add(1)
			}
		}(r)
	}
	wg.Add(1)
	go func() { // snapshots and stats while events apply
		defer wg.Done()
		for !stop.Load() {
			var buf bytes.Buffer
			if err := ix.Snapshot(&buf); err != nil {
				errs <- err.Error()
				return
			}
			if _, err := Restore(&buf, Config{}); err != nil {
				errs <- err.Error()
				return
			}
			_ = ix.Stats()
		}
	}()
	// Write while the readers query: wait until they have started, and
	// keep writing past the 3,000 operations until they have answered 100
	// queries more (on a loaded machine the writes alone can end before a
	// reader is first scheduled, and then nothing ran concurrently).
	for queries.Load() == 0 {
		runtime.Gosched()
	}
	start := queries.Load()
	for n := 0; n < 3000 || queries.Load() < start+100; n++ {
		s := g.next()
		switch s.kind {
		case opApply:
			_ = ix.Apply(s.ev)
			ref.apply(s.ev)
		case opRecord:
			ix.Record(s.w, s.seq, s.ttl)
			ref.record(s.w, s.seq, s.ttl)
		case opExpire:
			ix.Expire()
			ref.expire()
		case opRemoveWorker:
			ix.RemoveWorker(s.w)
			ref.removeWorker(s.w)
		case opAdvance:
			mu.Lock()
			now = now.Add(s.dt)
			mu.Unlock()
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
	view := ref.view()
	for _, s := range g.seqs {
		got := ix.FindMatches(s.seq, nil)
		sortMatches(got)
		if want := view.find(s.seq); !matchesEqual(got, want) {
			t.Fatalf("final FindMatches = %v, want %v", got, want)
		}
	}
}
