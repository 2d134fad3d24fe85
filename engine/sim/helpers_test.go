package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/internal/shareddata"
	"github.com/agentkv/agentkv/trace"
)

// rrRouter sends requests to workers in turn.
type rrRouter struct{ n, next int }

func (r *rrRouter) Route(time.Duration, *Request) (Decision, error) {
	w := r.next
	r.next = (r.next + 1) % r.n
	return Decision{Worker: w}, nil
}
func (r *rrRouter) Finished(time.Duration, *Request) []uint64 { return nil }
func (r *rrRouter) Tick(time.Duration) []uint64               { return nil }

// prefixRouter is a small KV-aware router for tests and benchmarks: it
// keeps, from the engines' events, which workers hold which device block
// (a bit per worker), and sends a request where its cached prefix is
// longest net of the worker's outstanding prompt tokens, in blocks.
type prefixRouter struct {
	bs      int
	holders *table // hash → bit mask of workers
	load    []int  // outstanding uncached prompt tokens per worker
	byReq   map[uint64]int
}

func newPrefixRouter(workers, bs int) *prefixRouter {
	return &prefixRouter{bs: bs, holders: newTable(1 << 16), load: make([]int, workers), byReq: make(map[uint64]int)}
}

// sink returns the event sink of worker w.
func (p *prefixRouter) sink(w int) EventSink {
	bit := int32(1) << w
	return EventSinkFunc(func(ev *flashindex.Event) error {
		if ev.Tier != flashindex.Device {
			return nil
		}
		switch ev.Kind {
		case flashindex.Stored:
			for _, b := range ev.Blocks {
				if m, fresh := p.holders.putIfAbsent(b.EngineHash, bit); !fresh {
					p.holders.put(b.EngineHash, m|bit)
				}
			}
		case flashindex.Removed:
			for _, h := range ev.Hashes {
				m, _ := p.holders.get(h)
				if m &^= bit; m == 0 {
					p.holders.del(h)
				} else {
					p.holders.put(h, m)
				}
			}
		}
		return nil
	})
}

func (p *prefixRouter) Route(_ time.Duration, req *Request) (Decision, error) {
	depth := make([]int, len(p.load))
	live := int32(1)<<len(p.load) - 1
	for j, h := range req.SeqHashes {
		m, _ := p.holders.get(h)
		live &= m
		if live == 0 {
			break
		}
		for m := live; m != 0; m &= m - 1 {
			depth[bits.TrailingZeros32(uint32(m))] = j + 1
		}
	}
	best, bestCost := 0, 0
	for w := range p.load {
		miss := req.InputTokens - depth[w]*p.bs
		cost := miss + p.load[w]
		if w == 0 || cost < bestCost {
			best, bestCost = w, cost
		}
	}
	miss := req.InputTokens - depth[best]*p.bs
	p.load[best] += miss
	p.byReq[req.ID] = miss
	return Decision{Worker: best}, nil
}

func (p *prefixRouter) Finished(_ time.Duration, req *Request) []uint64 {
	if req.Worker >= 0 {
		p.load[req.Worker] -= p.byReq[req.ID]
	}
	delete(p.byReq, req.ID)
	return nil
}
func (p *prefixRouter) Tick(time.Duration) []uint64 { return nil }

// naiveIndex rebuilds a worker's cache from its event stream the simplest
// way: a set of engine hashes per tier, and an engine → own hash map
// chained from the published local hashes, which must reproduce the
// engine hashes (the sim uses sequence hashes as engine hashes).
type naiveIndex struct {
	t      testing.TB
	tiers  [flashindex.NumTiers]map[uint64]bool
	own    map[uint64]uint64
	nextID uint64
	events int
}

func newNaiveIndex(t testing.TB) *naiveIndex {
	n := &naiveIndex{t: t, own: make(map[uint64]uint64)}
	for i := range n.tiers {
		n.tiers[i] = make(map[uint64]bool)
	}
	return n
}

func (n *naiveIndex) Apply(ev *flashindex.Event) error {
	if ev.EventID != n.nextID {
		return fmt.Errorf("event id %d, want %d", ev.EventID, n.nextID)
	}
	n.nextID++
	n.events++
	set := n.tiers[ev.Tier]
	switch ev.Kind {
	case flashindex.Stored:
		if len(ev.Blocks) == 0 {
			return fmt.Errorf("empty stored event")
		}
		parent, has := uint64(0), ev.HasParent
		if has {
			p, ok := n.own[ev.Parent]
			if !ok {
				return fmt.Errorf("stored event %d: unknown parent %x", ev.EventID, ev.Parent)
			}
			if !n.tiers[flashindex.Device][ev.Parent] && !n.tiers[flashindex.Host][ev.Parent] {
				return fmt.Errorf("stored event %d on %v: parent %x is on no tier", ev.EventID, ev.Tier, ev.Parent)
			}
			parent = p
		}
		for _, b := range ev.Blocks {
			if !b.HasLocalHash {
				return fmt.Errorf("block without local hash")
			}
			o := b.LocalHash
			if has {
				o = flashindex.NextSequenceHash(parent, b.LocalHash)
			}
			if o != b.EngineHash {
				return fmt.Errorf("stored event %d: chained hash %x != engine hash %x", ev.EventID, o, b.EngineHash)
			}
			if set[b.EngineHash] {
				return fmt.Errorf("stored event %d: %x already on %v", ev.EventID, b.EngineHash, ev.Tier)
			}
			set[b.EngineHash] = true
			n.own[b.EngineHash] = o
			parent, has = o, true
		}
	case flashindex.Removed:
		for _, h := range ev.Hashes {
			if !set[h] {
				return fmt.Errorf("removed event %d: %x not on %v", ev.EventID, h, ev.Tier)
			}
			delete(set, h)
		}
	default:
		return fmt.Errorf("unexpected event kind %v", ev.Kind)
	}
	return nil
}

func (n *naiveIndex) hashes(t flashindex.Tier) []uint64 {
	var out []uint64
	for h := range n.tiers[t] {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// readMooncake is a tiny local reader of the Mooncake JSONL format (the
// trace package's readers are built elsewhere): one open-loop session per
// line, 512-token blocks. limit ≤ 0 reads everything.
func readMooncake(t testing.TB, name string, limit int) *trace.Workload {
	t.Helper()
	f, err := os.Open(filepath.Join(shareddata.Dir(t), name))
	if err != nil {
		t.Skipf("mooncake trace: %v", err)
	}
	defer f.Close()
	w := &trace.Workload{Name: name, BlockTokens: 512, OpenLoop: true}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var rec struct {
			Timestamp    int64    `json:"timestamp"`
			InputLength  int      `json:"input_length"`
			OutputLength int      `json:"output_length"`
			HashIDs      []uint64 `json:"hash_ids"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s line %d: %v", name, len(w.Sessions)+1, err)
		}
		w.Sessions = append(w.Sessions, trace.Session{
			ID: strconv.Itoa(len(w.Sessions)), ParentTurn: -1,
			Turns: []trace.Turn{{
				Arrival:     time.Duration(rec.Timestamp) * time.Millisecond,
				InputTokens: rec.InputLength, OutputTokens: rec.OutputLength, HashIDs: rec.HashIDs,
			}},
		})
		if limit > 0 && len(w.Sessions) == limit {
			break
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return w
}
