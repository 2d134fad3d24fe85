package flashindex

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"testing"

	"github.com/agentkv/agentkv/internal/shareddata"
)

// The Mooncake conversation trace (../shared/data relative to the project
// root) drives the replay test and the benchmarks. Its hash ids name
// 512-token blocks; the index is exercised at 16 tokens per block, so each
// id expands to 32 derived block hashes (a 12K-token request is ~750
// blocks), chained into sequence hashes as a router would compute them.

const (
	traceFile      = "mooncake_conversation_trace.jsonl"
	traceIDTokens  = 512
	traceBlockSize = 16
	traceSubBlocks = traceIDTokens / traceBlockSize
)

type mooncakeRequest struct {
	Timestamp   int64    `json:"timestamp"`
	InputLength int      `json:"input_length"`
	HashIDs     []uint64 `json:"hash_ids"`
}

var (
	traceOnce sync.Once
	traceSeqs [][]uint64 // per request: sequence hashes
	traceLocs [][]uint64 // per request: local hashes
	traceErr  error
)

// traceSequences returns every request of the trace as the local and
// sequence hashes of its 16-token blocks (partial tail blocks dropped), in
// trace order.
func traceSequences(tb testing.TB) (local, seq [][]uint64) {
	tb.Helper()
	path := shareddata.Path(tb, traceFile)
	traceOnce.Do(func() {
		f, err := os.Open(path)
		if err != nil {
			traceErr = err
			return
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			var r mooncakeRequest
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				traceErr = err
				return
			}
			local, seq := expandRequest(r)
			traceLocs = append(traceLocs, local)
			traceSeqs = append(traceSeqs, seq)
		}
		traceErr = sc.Err()
	})
	if traceErr != nil {
		tb.Fatalf("reading %s: %v", path, traceErr)
	}
	return traceLocs, traceSeqs
}

// expandRequest turns a request's 512-token ids into the sequence hashes of
// its full 16-token blocks: block j of id h gets the local hash
// mix(h, j), and the locals chain as Dynamo chains them.
func expandRequest(r mooncakeRequest) (locals, seq []uint64) {
	n := min(r.InputLength/traceBlockSize, len(r.HashIDs)*traceSubBlocks)
	seq = make([]uint64, 0, n)
	locals = make([]uint64, 0, n)
	for i := 0; i < n; i++ {
		local := mix64(r.HashIDs[i/traceSubBlocks]*traceSubBlocks + uint64(i%traceSubBlocks) + 1)
		locals = append(locals, local)
		if i == 0 {
			seq = append(seq, local)
		} else {
			seq = append(seq, NextSequenceHash(seq[i-1], local))
		}
	}
	return locals, seq
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// lruEngine simulates one engine's prefix cache for building event streams:
// a fixed capacity in blocks, least recently used evicted first. A request
// touches its blocks from the tail to the head, so the head of a chain is
// the most recent and tails are evicted first, as vLLM frees them.
type lruEngine struct {
	cap   int
	index u64map    // block -> position in items
	items []lruItem // items[0] is the sentinel: items[0].next is the most recent
	free  []int32
}

type lruItem struct {
	key        uint64
	prev, next int32
}

func newLRUEngine(capacity int) *lruEngine {
	return &lruEngine{cap: capacity, items: []lruItem{{}}}
}

func (e *lruEngine) has(k uint64) bool { _, ok := e.index.get(k); return ok }

func (e *lruEngine) touch(k uint64) {
	it := e.items
	v, ok := e.index.get(k)
	i := int32(v)
	if !ok {
		if n := len(e.free); n > 0 {
			i = e.free[n-1]
			e.free = e.free[:n-1]
		} else {
			e.items = append(e.items, lruItem{})
			it = e.items
			i = int32(len(it) - 1)
		}
		it[i].key = k
		e.index.put(k, uint64(i))
	} else {
		it[it[i].prev].next, it[it[i].next].prev = it[i].next, it[i].prev
	}
	it[i].next, it[i].prev = it[0].next, 0
	it[it[0].next].prev = i
	it[0].next = i
}

// evict removes least recently used blocks until room more fit, and
// returns them.
func (e *lruEngine) evict(dst []uint64, room int) []uint64 {
	it := e.items
	for e.index.Len() > 0 && e.index.Len()+room > e.cap {
		i := it[0].prev
		it[it[i].prev].next, it[it[i].next].prev = it[i].next, it[i].prev
		e.index.del(it[i].key)
		dst = append(dst, it[i].key)
		e.free = append(e.free, i)
	}
	return dst
}

// traceEvents turns the trace into the event stream of workers engines:
// request i runs on worker i mod workers, whose engine stores the blocks
// past its cached prefix (one Stored event, engine hash = own hash, local
// hashes given) and then publishes what it evicted (one Removed event).
// It returns the events, the request each came from, and the number of
// blocks they carry.
func traceEvents(locals, seqs [][]uint64, workers, capacity int) (evs []*Event, req []int, blocks int) {
	engines := make([]*lruEngine, workers)
	ids := make([]uint64, workers)
	for i := range engines {
		engines[i] = newLRUEngine(capacity)
	}
	for i, seq := range seqs {
		if len(seq) == 0 {
			continue
		}
		wi := i % workers
		e := engines[wi]
		w := Worker{ID: uint64(wi)}
		k := 0
		for k < len(seq) && e.has(seq[k]) {
			k++
		}
		// Make room first (an engine evicts before it allocates), keeping
		// the cached prefix this request is about to reuse.
		for j := k - 1; j >= 0; j-- {
			e.touch(seq[j])
		}
		if gone := e.evict(nil, len(seq)-k); len(gone) > 0 {
			evs = append(evs, &Event{Worker: w, EventID: ids[wi], Kind: Removed, Hashes: gone})
			req = append(req, i)
			ids[wi]++
			blocks += len(gone)
		}
		if k < len(seq) {
			ev := &Event{Worker: w, EventID: ids[wi], Kind: Stored, BlockSize: traceBlockSize}
			ids[wi]++
			if k > 0 {
				ev.HasParent, ev.Parent = true, seq[k-1]
			}
			ev.Blocks = make([]StoredBlock, 0, len(seq)-k)
			for j := k; j < len(seq); j++ {
				ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[j], LocalHash: locals[i][j], HasLocalHash: true})
			}
			evs, req = append(evs, ev), append(req, i)
			blocks += len(ev.Blocks)
		}
		for j := len(seq) - 1; j >= 0; j-- {
			e.touch(seq[j])
		}
	}
	return evs, req, blocks
}
