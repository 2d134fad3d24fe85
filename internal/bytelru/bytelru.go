// Package bytelru is a least-recently-used cache bounded by the bytes its
// values hold (each Put says how many), for the front door's per-session
// memories (hftok's session encodings, the gateway's body memos).
package bytelru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values of a stated size, forgetting the least
// recently used first once the sizes pass the budget. Safe for concurrent
// use.
type Cache[K comparable, V any] struct {
	budget int
	mu     sync.Mutex // guards the fields below
	m      map[K]*list.Element
	lru    list.List // of *entry[K, V], most recent first
	bytes  int
}

type entry[K comparable, V any] struct {
	key  K
	v    V
	size int
}

// New returns a cache of at most budget bytes.
func New[K comparable, V any](budget int) *Cache[K, V] {
	return &Cache[K, V]{budget: budget, m: map[K]*list.Element{}}
}

// Get returns k's value and marks it used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*entry[K, V]).v, true
	}
	var zero V
	return zero, false
}

// Put sets k's value, of size bytes, and forgets the least recently used
// others until the cache is within its budget. A value larger than the
// whole budget is not kept (an older value of k stays).
func (c *Cache[K, V]) Put(k K, v V, size int) {
	if size > c.budget {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[k]; ok {
		e := el.Value.(*entry[K, V])
		c.bytes += size - e.size
		e.v, e.size = v, size
		c.lru.MoveToFront(el)
	} else {
		c.m[k] = c.lru.PushFront(&entry[K, V]{key: k, v: v, size: size})
		c.bytes += size
	}
	for c.bytes > c.budget {
		el := c.lru.Back()
		e := el.Value.(*entry[K, V])
		c.lru.Remove(el)
		delete(c.m, e.key)
		c.bytes -= e.size
	}
}

// Len is how many values are held.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// Bytes is the sum of the held values' sizes.
func (c *Cache[K, V]) Bytes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
