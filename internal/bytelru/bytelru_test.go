package bytelru

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// refLRU is the naive model: a slice, most recent first.
type refLRU struct {
	budget int
	keys   []int
	size   map[int]int
	val    map[int]int
}

func (r *refLRU) touch(k int) {
	r.keys = slices.DeleteFunc(r.keys, func(x int) bool { return x == k })
	r.keys = append([]int{k}, r.keys...)
}

func (r *refLRU) get(k int) (int, bool) {
	v, ok := r.val[k]
	if ok {
		r.touch(k)
	}
	return v, ok
}

func (r *refLRU) put(k, v, size int) {
	if size > r.budget {
		return
	}
	r.val[k], r.size[k] = v, size
	r.touch(k)
	total := 0
	for _, x := range r.keys {
		total += r.size[x]
	}
	for total > r.budget {
		last := r.keys[len(r.keys)-1]
		r.keys = r.keys[:len(r.keys)-1]
		total -= r.size[last]
		delete(r.val, last)
		delete(r.size, last)
	}
}

// TestCacheMatchesReference: random gets and puts give what the naive
// model gives, and the byte count stays within the budget.
func TestCacheMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := New[int, int](100)
	ref := &refLRU{budget: 100, size: map[int]int{}, val: map[int]int{}}
	for i := 0; i < 20000; i++ {
		k := rng.IntN(30)
		if rng.IntN(2) == 0 {
			v, ok := c.Get(k)
			rv, rok := ref.get(k)
			if ok != rok || v != rv {
				t.Fatalf("step %d: Get(%d) = %d, %v; want %d, %v", i, k, v, ok, rv, rok)
			}
			continue
		}
		v, size := rng.Int(), rng.IntN(60)
		c.Put(k, v, size)
		ref.put(k, v, size)
		if c.Len() != len(ref.keys) || c.Bytes() > 100 {
			t.Fatalf("step %d: %d values, %d bytes; want %d values", i, c.Len(), c.Bytes(), len(ref.keys))
		}
	}
}

// TestCacheConcurrent: concurrent use under -race.
func TestCacheConcurrent(t *testing.T) {
	c := New[int, []byte](1 << 10)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				c.Put(i%50, make([]byte, 8), 64)
				c.Get((i + g) % 50)
			}
		}()
	}
	wg.Wait()
	if c.Bytes() > 1<<10 {
		t.Fatalf("%d bytes held", c.Bytes())
	}
}
