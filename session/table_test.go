package session

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTestTable(t *testing.T, cfg TableConfig) (*Table, *fakeClock, *[]Removal) {
	t.Helper()
	clk := newClock()
	var removed []Removal
	cfg.Now = clk.Now
	cfg.OnRemove = func(r Removal) { removed = append(removed, r) }
	tb, err := NewTable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tb, clk, &removed
}

func TestTableLifecycle(t *testing.T) {
	tb, clk, removed := newTestTable(t, TableConfig{})
	t0 := clk.Now()
	info, err := tb.Begin(AgentContext{SessionID: "s", Harness: HarnessCodex, AgentID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if info.Phase != Reasoning || !info.PhaseSince.Equal(t0) || info.InFlight != 1 || info.Requests != 1 {
		t.Fatalf("after Begin: %+v", info)
	}
	clk.Advance(2 * time.Second)
	info, err = tb.End("s", Usage{InputTokens: 100, OutputTokens: 10, CachedTokens: 64})
	if err != nil {
		t.Fatal(err)
	}
	if info.Phase != Acting || !info.PhaseSince.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after End: %+v", info)
	}
	clk.Advance(time.Second)
	tb.Begin(AgentContext{SessionID: "s"})
	tb.Begin(AgentContext{SessionID: "s"}) // two in flight
	tb.End("s", Usage{InputTokens: 150, OutputTokens: 20})
	info, _ = tb.Get("s")
	if info.Phase != Reasoning || info.InFlight != 1 {
		t.Fatalf("one of two ended: %+v", info)
	}
	info, _ = tb.End("s", Usage{InputTokens: 1})
	want := Usage{InputTokens: 251, OutputTokens: 30, CachedTokens: 64}
	if info.Usage != want || info.Requests != 3 || info.Phase != Acting || info.Harness != HarnessCodex {
		t.Fatalf("totals: %+v", info)
	}
	if _, err := tb.End("nope", Usage{}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("End unknown: %v", err)
	}
	if _, err := tb.Begin(AgentContext{}); !errors.Is(err, ErrNoSession) {
		t.Fatalf("Begin without id: %v", err)
	}
	if len(*removed) != 0 {
		t.Fatalf("unexpected removals %v", *removed)
	}
}

func TestTableFinal(t *testing.T) {
	tb, _, removed := newTestTable(t, TableConfig{})
	tb.Begin(AgentContext{SessionID: "s"})
	tb.Begin(AgentContext{SessionID: "s", Final: true})
	if info, _ := tb.End("s", Usage{OutputTokens: 5}); info.Final != true {
		t.Fatalf("final flag lost: %+v", info)
	}
	if _, ok := tb.Get("s"); !ok {
		t.Fatal("Final session removed while a request is still in flight")
	}
	info, err := tb.End("s", Usage{OutputTokens: 7})
	if err != nil || info.Usage.OutputTokens != 12 {
		t.Fatalf("last End: %+v %v", info, err)
	}
	if _, ok := tb.Get("s"); ok {
		t.Fatal("Final session still live after its last request")
	}
	if want := []Removal{{"s", Ended}}; !slices.Equal(*removed, want) {
		t.Fatalf("removals %v, want %v", *removed, want)
	}
	tb.Begin(AgentContext{SessionID: "t"})
	if !tb.Finish("t") || tb.Finish("t") {
		t.Fatal("Finish")
	}
}

func TestTableLRU(t *testing.T) {
	tb, clk, removed := newTestTable(t, TableConfig{MaxSessions: 3})
	for _, id := range []string{"a", "b", "c"} {
		tb.Begin(AgentContext{SessionID: id})
		clk.Advance(time.Second)
	}
	tb.End("a", Usage{}) // a is now the most recent; b is least recent
	tb.Begin(AgentContext{SessionID: "d"})
	if want := []Removal{{"b", Evicted}}; !slices.Equal(*removed, want) {
		t.Fatalf("removals %v, want %v", *removed, want)
	}
	tb.Get("c") // Get is not use
	tb.Begin(AgentContext{SessionID: "e"})
	if (*removed)[1] != (Removal{"c", Evicted}) {
		t.Fatalf("removals %v", *removed)
	}
	if tb.Len() != 3 {
		t.Fatalf("Len = %d", tb.Len())
	}
}

func TestTableIdleExpiry(t *testing.T) {
	tb, clk, removed := newTestTable(t, TableConfig{IdleTimeout: time.Minute})
	tb.Begin(AgentContext{SessionID: "old"})
	clk.Advance(30 * time.Second)
	tb.Begin(AgentContext{SessionID: "young"})
	clk.Advance(30 * time.Second) // old is exactly IdleTimeout idle
	if _, ok := tb.Get("old"); ok {
		t.Fatal("old should have expired")
	}
	if _, ok := tb.Get("young"); !ok {
		t.Fatal("young expired early")
	}
	clk.Advance(29 * time.Second)
	if _, err := tb.End("young", Usage{}); err != nil { // End refreshes
		t.Fatal(err)
	}
	clk.Advance(59 * time.Second)
	if n := tb.Expire(); n != 0 {
		t.Fatalf("Expire removed %d", n)
	}
	clk.Advance(time.Second)
	if n := tb.Expire(); n != 1 {
		t.Fatalf("Expire removed %d, want 1", n)
	}
	if want := []Removal{{"old", Expired}, {"young", Expired}}; !slices.Equal(*removed, want) {
		t.Fatalf("removals %v, want %v", *removed, want)
	}
}

func TestTableTree(t *testing.T) {
	tb, _, _ := newTestTable(t, TableConfig{})
	tb.Begin(AgentContext{SessionID: "root"})
	tb.Begin(AgentContext{SessionID: "root/a", ParentSessionID: "root"})
	tb.Begin(AgentContext{SessionID: "root/b", ParentSessionID: "root"})
	tb.Begin(AgentContext{SessionID: "root/b2", ParentSessionID: "root/b"})
	kids := tb.Children("root", nil)
	slices.Sort(kids)
	if !slices.Equal(kids, []string{"root/a", "root/b"}) {
		t.Fatalf("children %v", kids)
	}
	if r, _ := tb.Root("root/b2"); r != "root" {
		t.Fatalf("Root = %q", r)
	}
	if info, _ := tb.Get("root"); info.Children != 2 {
		t.Fatalf("Children count %d", info.Children)
	}
	// The parent is fixed by the first request that names one.
	tb.Begin(AgentContext{SessionID: "root/a", ParentSessionID: "root/b"})
	if info, _ := tb.Get("root/a"); info.Parent != "root" {
		t.Fatalf("parent changed to %q", info.Parent)
	}
	// Removing a parent unlinks its children; they keep the parent id.
	tb.Remove("root")
	if info, _ := tb.Get("root/a"); info.Parent != "root" {
		t.Fatalf("child lost its Parent id: %+v", info)
	}
	if r, _ := tb.Root("root/b2"); r != "root/b" {
		t.Fatalf("Root after removal = %q", r)
	}
	// A child seen before its parent links once it comes back.
	tb.Begin(AgentContext{SessionID: "late/child", ParentSessionID: "late"})
	tb.Begin(AgentContext{SessionID: "late"})
	tb.Begin(AgentContext{SessionID: "late/child"})
	if kids := tb.Children("late", nil); !slices.Equal(kids, []string{"late/child"}) {
		t.Fatalf("late children %v", kids)
	}
	// A parent link that would close a loop is ignored.
	tb.Begin(AgentContext{SessionID: "x", ParentSessionID: "y"})
	tb.Begin(AgentContext{SessionID: "y", ParentSessionID: "x"}) // y under x
	tb.Begin(AgentContext{SessionID: "x"})                       // x under y would loop
	if r, _ := tb.Root("y"); r != "x" {
		t.Fatalf("Root(y) = %q", r)
	}
	if r, _ := tb.Root("x"); r != "x" {
		t.Fatalf("Root(x) = %q", r)
	}
	if kids := tb.Children("y", nil); len(kids) != 0 {
		t.Fatalf("cycle linked: children of y = %v", kids)
	}
}

func TestTableAffinity(t *testing.T) {
	tb, clk, _ := newTestTable(t, TableConfig{AffinityTTL: 10 * time.Second})
	w := Worker{ID: 7, DPRank: 1}
	if err := tb.Bind("s", w, Hard); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Bind unknown: %v", err)
	}
	tb.Begin(AgentContext{SessionID: "s"})
	if err := tb.Bind("s", w, Hard); err != nil {
		t.Fatal(err)
	}
	clk.Advance(9 * time.Second)
	b, ok := tb.Affinity("s")
	if !ok || b.Worker != w || b.Mode != Hard || !b.Expires.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("Affinity = %+v, %v", b, ok)
	}
	clk.Advance(time.Second)
	if b, ok := tb.Affinity("s"); ok {
		t.Fatalf("binding outlived its TTL: %+v", b)
	}
	tb.Bind("s", Worker{ID: 8}, Soft)
	tb.Unbind("s")
	if _, ok := tb.Affinity("s"); ok {
		t.Fatal("Unbind kept the binding")
	}
}

func TestTableConfig(t *testing.T) {
	for _, cfg := range []TableConfig{{MaxSessions: -1}, {IdleTimeout: -1}, {AffinityTTL: -time.Second}} {
		if _, err := NewTable(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewTable(%+v) = %v", cfg, err)
		}
	}
	raw, err := NewRawTable(TableConfig{})
	if err != nil {
		t.Fatal(err)
	}
	raw.Begin(AgentContext{SessionID: "a"})
	raw.Remove("a")
	if r := raw.TakeRemovals(); r != nil {
		t.Fatalf("removals recorded without OnRemove: %v", r)
	}
}

// Reference LRU model: the table must hold exactly the MaxSessions most
// recently begun/ended ids.
func TestTableLRUModel(t *testing.T) {
	const max = 8
	tb, clk, _ := newTestTable(t, TableConfig{MaxSessions: max})
	var order []string // most recent last
	for i := 0; i < 500; i++ {
		id := fmt.Sprint((i * 7919) % 23)
		clk.Advance(time.Millisecond)
		if i%3 == 0 && slices.Contains(order, id) {
			tb.End(id, Usage{})
		} else {
			tb.Begin(AgentContext{SessionID: id})
		}
		if j := slices.Index(order, id); j >= 0 {
			order = slices.Delete(order, j, j+1)
		}
		order = append(order, id)
		if len(order) > max {
			order = order[1:]
		}
		for _, want := range order {
			if _, ok := tb.Get(want); !ok {
				t.Fatalf("step %d: %s missing; model %v", i, want, order)
			}
		}
		if tb.Len() != len(order) {
			t.Fatalf("step %d: Len %d, model %d", i, tb.Len(), len(order))
		}
	}
}

func TestTableConcurrent(t *testing.T) {
	var mu sync.Mutex // guards removed
	removed := 0
	tb, err := NewTable(TableConfig{MaxSessions: 64, OnRemove: func(Removal) {
		mu.Lock()
		removed++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				id := fmt.Sprint("s", (g*131+i)%100)
				tb.Begin(AgentContext{SessionID: id, ParentSessionID: fmt.Sprint("s", i%10)})
				tb.Bind(id, Worker{ID: uint64(g)}, Soft)
				tb.Affinity(id)
				tb.Children("s1", nil)
				tb.End(id, Usage{InputTokens: 1})
			}
		}()
	}
	wg.Wait()
	if tb.Len() > 64 {
		t.Fatalf("Len %d over bound", tb.Len())
	}
	mu.Lock()
	defer mu.Unlock()
	if removed == 0 {
		t.Fatal("no evictions recorded")
	}
}

// A rising Codex window or a compaction marker compacts the session; the
// session and its program continue.
func TestTableCompaction(t *testing.T) {
	tb, err := NewRawTable(TableConfig{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		ac   AgentContext
		want bool
	}{
		{AgentContext{SessionID: "s", Window: 1}, false},
		{AgentContext{SessionID: "s", Window: 1}, false},
		{AgentContext{SessionID: "s", Window: 2}, true},
		{AgentContext{SessionID: "s"}, false},
		{AgentContext{SessionID: "s", Window: 1}, false},
		{AgentContext{SessionID: "s", Compaction: true}, true},
	}
	for i, st := range steps {
		info, err := tb.Begin(st.ac)
		if err != nil {
			t.Fatal(err)
		}
		if info.Compacted != st.want {
			t.Fatalf("step %d: Compacted = %v, want %v", i, info.Compacted, st.want)
		}
		if _, err := tb.End("s", Usage{}); err != nil {
			t.Fatal(err)
		}
	}
	if info, _ := tb.Get("s"); info.Compactions != 2 || info.Window != 2 || info.Requests != 6 || info.Compacted {
		t.Fatalf("info %+v", info)
	}
}
