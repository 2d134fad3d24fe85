package radix

import (
	"fmt"
	"sync"
	"testing"
)

// FuzzOps drives a small tree with arbitrary operations, including chains
// that are not prefix-chained (raw ids that repeat, collide or reorder):
// no panic, and the structural invariants hold after every operation.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 4, 1, 2, 3, 4, 0, 1, 6, 1, 2, 3, 4, 5, 6})
	f.Add([]byte{1, 2, 3, 9, 9, 9, 2, 2, 1, 1, 3, 0, 0})
	f.Add([]byte{0, 0, 3, 5, 6, 7, 1, 0, 3, 5, 6, 8, 4, 0, 2, 1, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := NewRawTree(Config{MaxSessions: 3, MaxFrontiers: 2})
		if err != nil {
			t.Fatal(err)
		}
		for len(data) >= 3 {
			kind, sid, n := data[0]%5, fmt.Sprint(data[1]%5), int(data[2]%12)
			data = data[3:]
			n = min(n, len(data))
			content := make([]uint64, n)
			for i := range content {
				content[i] = uint64(data[i] % 16)
			}
			data = data[n:]
			switch kind {
			case 0: // a proper chain
				err = tr.UpdateFromMatch(sid, chainOf(content))
			case 1: // raw ids: not prefix-chained
				err = tr.UpdateFromMatch(sid, content)
			case 2: // a stored event under a raw parent
				if len(content) > 0 {
					err = tr.Stored(sid, content[0], content[0]%2 == 0, content[1:])
				}
			case 3:
				tr.RemoveSession(sid)
			case 4: // queries
				tr.Lineage(sid, nil)
				tr.Path(sid, nil)
				tr.Split(sid)
				tr.Under(sid, nil)
				tr.Frontiers(sid, nil)
				if len(content) > 0 {
					tr.Sessions(content[0], nil)
				}
				for _, c := range [][]uint64{chainOf(content), content} {
					b := tr.Branch(c)
					if b.Depth > len(c) || b.NOnPath > MaxOnPath || b.Owners > 2 || (b.Owners == 1) != (b.Owner != "") {
						t.Fatalf("Branch(%v) = %+v", c, b)
					}
					for i := 0; i < b.NOnPath; i++ {
						if m := b.OnPath[i]; m.Depth > b.Depth || m.Depth < 1 || i > 0 && m.Depth > b.OnPath[i-1].Depth {
							t.Fatalf("Branch(%v) = %+v", c, b)
						}
					}
				}
			}
			_ = err
			if cerr := tr.check(); cerr != nil {
				t.Fatalf("after op %d on %s: %v", kind, sid, cerr)
			}
		}
	})
}

// TestConcurrent runs updates, removals and queries from several
// goroutines (run with -race); the tree must end consistent.
func TestConcurrent(t *testing.T) {
	tr, err := New(Config{MaxSessions: 16})
	if err != nil {
		t.Fatal(err)
	}
	base := chainOf(seq(1, 64))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				s := fmt.Sprint("g", g, "s", i%7)
				fork := append(base[:8+i%50:8+i%50], chainFrom(base[7+i%50], seq(uint64(g*1_000_000+i*100), 3))...)
				tr.UpdateFromMatch(s, fork)
				tr.Split(s)
				tr.Lineage(s, nil)
				tr.Sessions(base[3], nil)
				if i%11 == 0 {
					tr.RemoveSession(s)
				}
				tr.Stats()
			}
		}()
	}
	wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if err := tr.raw.check(); err != nil {
		t.Fatal(err)
	}
}
