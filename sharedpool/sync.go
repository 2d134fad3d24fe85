package sharedpool

import "sync"

// Pool is the concurrency-safe wrapper of an [Index]: one event-stream
// goroutine applies batches while any number of routing goroutines query.
// Every method is safe for concurrent use. Queries share a read lock, so
// they run in parallel with each other and wait only for the batch being
// applied. Pool calls no user code while holding its lock.
type Pool struct {
	mu sync.RWMutex // guards ix (all of its state)
	ix *Index
}

// NewPool returns an empty Pool ([New]).
func NewPool(cfg Config) (*Pool, error) {
	ix, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Pool{ix: ix}, nil
}

// Apply applies one batch ([Index.Apply]).
func (p *Pool) Apply(b *Batch) Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ix.Apply(b)
}

// ApplyFrames decodes a ZMQ message outside the lock, then applies it
// ([Index.ApplyFrames]).
func (p *Pool) ApplyFrames(frames [][]byte) (Report, error) {
	b, err := DecodeFrames(frames)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.ix.stats.BadFrames++
		return Report{}, err
	}
	return p.ix.Apply(&b), nil
}

// Query returns the shared hits of a request's pages ([Index.Query]).
func (p *Pool) Query(pages []PageHash) (Hits, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Query(pages)
}

// QueryInto is [Index.QueryInto]; h must not be shared between goroutines.
func (p *Pool) QueryInto(h *Hits, pages []PageHash) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.QueryInto(h, pages)
}

// Contains is [Index.Contains].
func (p *Pool) Contains(h PageHash) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Contains(h)
}

// Layout is [Index.Layout].
func (p *Pool) Layout() (Layout, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Layout()
}

// SetLayout is [Index.SetLayout].
func (p *Pool) SetLayout(l Layout) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ix.SetLayout(l)
}

// SyncLayouts is [Index.SyncLayouts].
func (p *Pool) SyncLayouts(workers map[uint64]Layout) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ix.SyncLayouts(workers)
}

// Reset is [Index.Reset].
func (p *Pool) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ix.Reset()
}

// Len is [Index.Len].
func (p *Pool) Len() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Len()
}

// Stats is [Index.Stats].
func (p *Pool) Stats() Stats {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ix.Stats()
}
