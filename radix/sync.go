package radix

import "sync"

// Tree is the Session-Prefix Indexer: a RawTree behind a mutex, safe for
// concurrent use. Queries take the same lock as updates (they use scratch
// fields). OnEvict callbacks run after the lock is released, on the
// goroutine whose update caused the eviction.
type Tree struct {
	mu      sync.Mutex // guards raw and everything it holds
	raw     *RawTree
	onEvict func(string)
}

// New returns an empty Tree.
func New(cfg Config) (*Tree, error) {
	raw, err := NewRawTree(cfg)
	if err != nil {
		return nil, err
	}
	return &Tree{raw: raw, onEvict: cfg.OnEvict}, nil
}

func (t *Tree) unlock() {
	ev := t.raw.TakeEvicted()
	t.mu.Unlock()
	if t.onEvict != nil {
		for _, id := range ev {
			t.onEvict(id)
		}
	}
}

// UpdateFromMatch is RawTree.UpdateFromMatch under the lock.
func (t *Tree) UpdateFromMatch(session string, chain []uint64) error {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.UpdateFromMatch(session, chain)
}

// Stored is RawTree.Stored under the lock.
func (t *Tree) Stored(session string, parent uint64, hasParent bool, blocks []uint64) error {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Stored(session, parent, hasParent, blocks)
}

// RemoveSession is RawTree.RemoveSession under the lock.
func (t *Tree) RemoveSession(session string) bool {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.RemoveSession(session)
}

// Path is RawTree.Path under the lock.
func (t *Tree) Path(session string, dst []Segment) ([]Segment, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Path(session, dst)
}

// Lineage is RawTree.Lineage under the lock.
func (t *Tree) Lineage(session string, dst []uint64) ([]uint64, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Lineage(session, dst)
}

// Frontiers is RawTree.Frontiers under the lock.
func (t *Tree) Frontiers(session string, dst []Frontier) ([]Frontier, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Frontiers(session, dst)
}

// Sessions is RawTree.Sessions under the lock.
func (t *Tree) Sessions(block uint64, dst []string) ([]string, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Sessions(block, dst)
}

// CountSessions is RawTree.CountSessions under the lock.
func (t *Tree) CountSessions(block uint64, limit int) (int, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.CountSessions(block, limit)
}

// Under is RawTree.Under under the lock.
func (t *Tree) Under(session string, dst []string) ([]string, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Under(session, dst)
}

// Split is RawTree.Split under the lock.
func (t *Tree) Split(session string) (Share, error) {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Split(session)
}

// SplitRefs is Split and, when refs is not nil, SharedRefs of the shared
// blocks into (*refs)[:0], under one hold of the lock.
func (t *Tree) SplitRefs(session string, limit int, refs *[]int32) (Share, error) {
	t.mu.Lock()
	defer t.unlock()
	sh, err := t.raw.Split(session)
	if err != nil || refs == nil {
		return sh, err
	}
	*refs, err = t.raw.SharedRefs(session, sh.Shared, limit, (*refs)[:0])
	return sh, err
}

// Contains is RawTree.Contains under the lock.
func (t *Tree) Contains(block uint64) bool {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Contains(block)
}

// Len is RawTree.Len under the lock.
func (t *Tree) Len() int {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Len()
}

// Stats is RawTree.Stats under the lock.
func (t *Tree) Stats() Stats {
	t.mu.Lock()
	defer t.unlock()
	return t.raw.Stats()
}

// Junction is RawTree.Junction under the lock.
func (t *Tree) Junction(chain []uint64) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.raw.Junction(chain)
}

// Branch is RawTree.Branch under the lock.
func (t *Tree) Branch(chain []uint64) Branch {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.raw.Branch(chain)
}
