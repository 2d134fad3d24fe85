package sharedpool

import (
	"errors"
	"sync"
	"testing"
)

// TestPoolConcurrent applies batches from one goroutine while others query;
// run with -race. Each batch stores whole pages, so a reader must see the
// hit count grow monotonically and never exceed what was written.
func TestPoolConcurrent(t *testing.T) {
	l := Layout{PageSize: 4, TPSize: 2}
	p, err := NewPool(Config{Layout: l, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	pages := tokenPages(200, 4)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i, pg := range pages {
			var evs []any
			for _, k := range l.AppendObjectKeys(nil, pg) {
				evs = append(evs, objEvent("stored", k, "default", l.GroupID(pg)))
			}
			if _, err := p.ApplyFrames(frames("", uint64(i+1), batchPayload(t, evs...))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h Hits
			last := 0
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := p.QueryInto(&h, pages); err != nil {
					t.Error(err)
					return
				}
				if h.Total < last || h.Total > len(pages) {
					t.Errorf("hits went from %d to %d", last, h.Total)
					return
				}
				last = h.Total
				// Pages are written in order, so hits are one prefix range.
				if h.Total > 0 && (len(h.Ranges) != 1 || h.Ranges[0].Start != 0) {
					t.Errorf("ranges %+v", h.Ranges)
					return
				}
				_ = p.Contains(pages[0])
				_ = p.Stats()
				_ = p.Len()
			}
		}()
	}
	wg.Wait()
	h, err := p.Query(pages)
	if err != nil || h.Total != len(pages) || p.Len() != len(pages) {
		t.Fatalf("final %+v %v", h, err)
	}
}

func TestPoolMethods(t *testing.T) {
	if _, err := NewPool(Config{MaxPages: -3}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatal(err)
	}
	l := Layout{PageSize: 4}
	p, err := NewPool(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Layout(); !errors.Is(err, ErrNoLayout) {
		t.Fatal(err)
	}
	if changed, err := p.SetLayout(l); !changed || err != nil {
		t.Fatal(changed, err)
	}
	pg := tokenPages(1, 4)[0]
	if r := p.Apply(&Batch{Seq: 1, Events: storeAll(l, "", pg)}); r.Applied != 2 || !p.Contains(pg) {
		t.Fatal(r)
	}
	if _, err := p.ApplyFrames([][]byte{{}}); !errors.Is(err, ErrMalformedFrame) || p.Stats().BadFrames != 1 {
		t.Fatal(err)
	}
	if err := p.SyncLayouts(map[uint64]Layout{1: l, 2: {PageSize: 8}}); !errors.Is(err, ErrLayoutMismatch) || p.Len() != 0 {
		t.Fatal(err)
	}
	if err := p.SyncLayouts(map[uint64]Layout{1: l}); err != nil {
		t.Fatal(err)
	}
	p.Apply(&Batch{Seq: 2, Events: storeAll(l, "", pg)})
	p.Reset()
	if p.Len() != 0 {
		t.Fatal("Reset kept pages")
	}
	if r := p.Apply(&Batch{Seq: 99}); r.Gap != nil {
		t.Fatal("gap after Reset")
	}
}
