package mock

import (
	"context"
	"fmt"
	"github.com/go-zeromq/zmq4"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

// tierSets rebuilds a worker's cache from its KV events.
type tierSets struct {
	mu     sync.Mutex // guards sets
	sets   map[flashindex.Tier]map[uint64]bool
	bad    []string
	clears int
}

func newTierSets() *tierSets {
	return &tierSets{sets: map[flashindex.Tier]map[uint64]bool{flashindex.Device: {}, flashindex.Host: {}}}
}

func (ts *tierSets) Apply(ev *flashindex.Event) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch ev.Kind {
	case flashindex.Stored:
		for _, b := range ev.Blocks {
			ts.sets[ev.Tier][b.EngineHash] = true
		}
	case flashindex.Removed:
		for _, h := range ev.Hashes {
			if !ts.sets[ev.Tier][h] {
				ts.bad = append(ts.bad, fmt.Sprintf("removed %x from tier %v, which does not hold it", h, ev.Tier))
			}
			delete(ts.sets[ev.Tier], h)
		}
	case flashindex.Cleared:
		ts.clears++
		for _, s := range ts.sets {
			clear(s)
		}
	}
	return nil
}

func (ts *tierSets) sorted(t flashindex.Tier) []uint64 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return slices.Sorted(maps.Keys(ts.sets[t]))
}

// converge waits until the sets rebuilt from the events equal the
// engine's cache on both tiers.
func converge(t *testing.T, s *Server, ts *tierSets) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sn := s.drv.snapshot()
		dev, host := s.drv.cached(flashindex.Device), s.drv.cached(flashindex.Host)
		gotDev, gotHost := ts.sorted(flashindex.Device), ts.sorted(flashindex.Host)
		if sn.running == 0 && sn.waiting == 0 && slices.Equal(dev, gotDev) && slices.Equal(host, gotHost) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events describe %d device and %d host blocks, the cache holds %d and %d", len(gotDev), len(gotHost), len(dev), len(host))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func subscribe(t *testing.T, s *Server, ts *tierSets) *vllm.Subscriber {
	t.Helper()
	sub, err := vllm.NewSubscriber(vllm.Config{WorkerID: 1, Endpoint: s.EventsEndpoint(), ReplayEndpoint: s.ReplayEndpoint(),
		Sink: ts, CatchUp: true, ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	awaitSubscribed(t, s)
	return sub
}

// awaitSubscribed waits until a subscription has reached s's PUB socket:
// a dial that succeeded is not enough, the SUB socket's subscription
// travels after it, and a batch published before it arrives is lost with
// no later batch to reveal the gap (under -race on a loaded machine this
// took long enough for a whole test's events to go missing).
func awaitSubscribed(t *testing.T, s *Server) {
	t.Helper()
	pub := s.pub.pub.(zmq4.Topics)
	for deadline := time.Now().Add(30 * time.Second); len(pub.Topics()) == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the subscription never reached the mock's PUB socket")
		}
	}
}

func chatBody(s *Server, text string, maxTokens int) map[string]any {
	return map[string]any{"model": s.Model(), "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": text}}}
}

// TestEventsDescribeCache drives a small cache (evictions to the host
// tier and out of it) with concurrent requests sharing prefixes, then
// checks through engine/vllm's subscriber over real ZMQ that the events
// describe exactly the blocks the cache holds; then again after a dropped
// batch (a gap, filled from the replay socket) and after a restart.
func TestEventsDescribeCache(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0",
		Engine: simConfig(4, 96, 16)})
	ts := newTierSets()
	sub := subscribe(t, s, ts)
	run := func(n int, salt string) {
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				text := words(20+i%3*10, "p") + " " + words(10+i, salt+fmt.Sprint(i%4))
				if st, raw := post(t, s.URL()+"/v1/chat/completions", chatBody(s, text, 3+i%5)); st != 200 {
					t.Errorf("status %d: %s", st, raw)
				}
			}()
		}
		wg.Wait()
	}
	run(24, "a")
	converge(t, s, ts)
	if st := s.drv.eng.Stats(); st.Evictions == 0 || st.HostEvicted == 0 {
		t.Fatalf("the cache was not pressed: %+v", st)
	}

	// A batch that no subscriber receives is replayed.
	if err := s.SetFaults(Faults{DropEvents: 1}); err != nil {
		t.Fatal(err)
	}
	run(1, "b")
	run(1, "c")
	converge(t, s, ts)
	if st := sub.Stats()[0]; st.GapsRecovered < 1 || st.GapsUnrecovered != 0 {
		t.Fatalf("gap not replayed: %+v", st)
	}

	// A restart empties the cache; the events say so and start over.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	run(3, "d")
	converge(t, s, ts)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.clears < 1 {
		t.Fatalf("restart not seen: %+v", sub.Stats()[0])
	}
	if len(ts.bad) > 0 {
		t.Fatalf("inconsistent events: %v", ts.bad[:min(5, len(ts.bad))])
	}
}

// TestRouterHashesAgree: a router hashing the tokens /tokenize returns
// with flashindex's hasher gets the hashes the events carry, and the
// capacity parses from /metrics.
func TestRouterHashesAgree(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0", Engine: simConfig(16, 4096, 0)})
	ts := newTierSets()
	subscribe(t, s, ts)
	c, err := vllm.NewClient(s.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cc, err := c.CacheConfigs(ctx)
	if err != nil || len(cc) != 1 || cc[0].BlockSize != 16 || cc[0].NumGPUBlocks != 4096 {
		t.Fatalf("capacity %+v %v", cc, err)
	}
	body := chatBody(s, words(100, "r"), 5)
	b := mustJSON(body)
	toks, err := c.Tokenize(ctx, vllm.ChatPath, b)
	if err != nil {
		t.Fatal(err)
	}
	inproc, _ := s.TokenizeChat(b)
	if !slices.Equal(toks, inproc) || len(toks) != 103 {
		t.Fatalf("/tokenize %d tokens, in process %d", len(toks), len(inproc))
	}
	if st, raw := post(t, s.URL()+"/v1/chat/completions", body); st != 200 {
		t.Fatalf("%d %s", st, raw)
	}
	converge(t, s, ts)
	h, _ := flashindex.NewHasher(16, "")
	_, seq := h.AppendHashes(nil, nil, toks[:len(toks)/16*16], 0, false)
	have := ts.sorted(flashindex.Device)
	for _, x := range seq {
		if _, ok := slices.BinarySearch(have, x); !ok {
			t.Fatalf("prompt block %x not in the events", x)
		}
	}
	// The reply's blocks are cached too: 103 + 5 tokens, the last never
	// computed, fill 6 blocks.
	if len(have) != 6 {
		t.Fatalf("%d blocks cached, want 6", len(have))
	}
}
