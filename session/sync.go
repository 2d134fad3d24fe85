package session

import "sync"

// Table is the set of live sessions: bounded (LRU out), with idle expiry,
// a parent/child tree, Reasoning/Acting phase, token totals and optional
// worker affinity. It is a RawTable behind a mutex and is safe for
// concurrent use. OnRemove callbacks run after the lock is released, on
// the goroutine whose call caused the removal.
type Table struct {
	mu  sync.Mutex // guards raw and every entry it holds
	raw *RawTable
	on  func(Removal)
}

// NewTable returns an empty Table.
func NewTable(cfg TableConfig) (*Table, error) {
	raw, err := NewRawTable(cfg)
	if err != nil {
		return nil, err
	}
	return &Table{raw: raw, on: cfg.OnRemove}, nil
}

// unlock releases the lock, then reports queued removals.
func (t *Table) unlock() {
	var rs []Removal
	if t.on != nil {
		rs = t.raw.TakeRemovals()
	}
	t.mu.Unlock()
	for _, r := range rs {
		t.on(r)
	}
}

// Begin is RawTable.Begin under the lock.
func (t *Table) Begin(ac AgentContext) (Info, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Begin(ac)
}

// End is RawTable.End under the lock.
func (t *Table) End(id string, u Usage) (Info, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.End(id, u)
}

// Finish is RawTable.Finish under the lock.
func (t *Table) Finish(id string) bool {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Finish(id)
}

// Remove is RawTable.Remove under the lock.
func (t *Table) Remove(id string) bool {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Remove(id)
}

// Get is RawTable.Get under the lock.
func (t *Table) Get(id string) (Info, bool) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Get(id)
}

// Children is RawTable.Children under the lock.
func (t *Table) Children(id string, dst []string) []string {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Children(id, dst)
}

// Root is RawTable.Root under the lock.
func (t *Table) Root(id string) (string, bool) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Root(id)
}

// Bind is RawTable.Bind under the lock.
func (t *Table) Bind(id string, w Worker, m Mode) error {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Bind(id, w, m)
}

// Unbind is RawTable.Unbind under the lock.
func (t *Table) Unbind(id string) {
	t.mu.Lock()
	defer t.unlock()
	t.raw.Unbind(id)
}

// Affinity is RawTable.Affinity under the lock.
func (t *Table) Affinity(id string) (Binding, bool) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Affinity(id)
}

// Expire is RawTable.Expire under the lock.
func (t *Table) Expire() int {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Expire()
}

// Len is RawTable.Len under the lock.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Len()
}
