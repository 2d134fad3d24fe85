package vllm

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

const python = "/usr/bin/python3"

// needPython skips the test when Debian's python3 with zmq and msgpack is
// missing (.ci/run installs python3-zmq and python3-msgpack).
func needPython(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import zmq, msgpack").Run(); err != nil {
		t.Skipf("skipping: %s lacks the zmq and msgpack modules (apt-get install python3-zmq python3-msgpack): %v", python, err)
	}
}

type pyEvent struct {
	Kind      string   `json:"kind"`
	Hashes    []uint64 `json:"hashes"`
	Parent    *uint64  `json:"parent"`
	Tokens    []uint32 `json:"tokens"`
	BlockSize int      `json:"block_size"`
	Medium    string   `json:"medium"`
	LoRA      string   `json:"lora"`
}

func (p pyEvent) norm(t *testing.T, w flashindex.Worker, id uint64) norm {
	n := norm{Worker: w, EventID: id, LoRA: p.LoRA, BlockSize: p.BlockSize}
	switch p.Kind {
	case "stored":
		n.Kind = flashindex.Stored
		n.Hashes = p.Hashes
		for i := range p.Hashes {
			n.Tokens = append(n.Tokens, p.Tokens[i*p.BlockSize:(i+1)*p.BlockSize])
		}
		if p.Parent != nil {
			n.Parent, n.HasParent = *p.Parent, true
		}
	case "removed":
		n.Kind = flashindex.Removed
		n.Hashes = p.Hashes
	case "cleared":
		n.Kind = flashindex.Cleared
	default:
		t.Fatalf("publisher sent kind %q", p.Kind)
	}
	if n.Kind != flashindex.Cleared {
		tier, ok := flashindex.TierFromMedium(p.Medium)
		if !ok {
			t.Fatalf("publisher used medium %q", p.Medium)
		}
		n.Tier = tier
	}
	return n
}

// collector is a concurrency-safe sink that records events per DP rank and
// signals every arrival.
type collector struct {
	mu     sync.Mutex // guards events
	events map[uint32][]norm
	note   chan struct{}
}

func newCollector() *collector {
	return &collector{events: map[uint32][]norm{}, note: make(chan struct{}, 1)}
}

func (c *collector) Apply(ev *flashindex.Event) error {
	n := copyEvent(ev)
	c.mu.Lock()
	c.events[ev.Worker.DPRank] = append(c.events[ev.Worker.DPRank], n)
	c.mu.Unlock()
	select {
	case c.note <- struct{}{}:
	default:
	}
	return nil
}

func (c *collector) snapshot() map[uint32][]norm {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[uint32][]norm{}
	for k, v := range c.events {
		out[k] = slices.Clone(v)
	}
	return out
}

// waitFor blocks until cond holds on the collected events or the deadline
// passes; it wakes on every applied event, never sleeping blind.
func (c *collector) waitFor(t *testing.T, d time.Duration, cond func(map[uint32][]norm) bool) map[uint32][]norm {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s := c.snapshot()
		if cond(s) {
			return s
		}
		select {
		case <-c.note:
		case <-tick.C: // counters move without events (duplicates)
		case <-deadline.C:
			return s
		}
	}
}

// TestInteropPythonPublisher runs a real ZeroMQ peer (pyzmq + msgpack-python,
// testdata/publisher.py) that publishes vLLM-format batches on two DP ranks
// in every layout, withholds one batch per rank from the live socket and
// serves it from its ROUTER replay socket; the events the Go subscriber
// emits must be exactly the ones the publisher declares.
func TestInteropPythonPublisher(t *testing.T) {
	needPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "publisher.py"), "7", "2")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReaderSize(stdout, 1<<20).ReadBytes('\n')
	if err != nil {
		t.Fatalf("reading the publisher's handshake: %v", err)
	}
	var hs struct {
		Pub      string      `json:"pub"`
		Replay   string      `json:"replay"`
		Ranks    int         `json:"ranks"`
		Topic    string      `json:"topic"`
		Expected [][]pyEvent `json:"expected"`
		Unknown  []int       `json:"unknown"`
		Live     []int       `json:"live"`
	}
	if err := json.Unmarshal(line, &hs); err != nil {
		t.Fatalf("handshake %q: %v", line, err)
	}
	col := newCollector()
	sub, err := NewSubscriber(Config{
		WorkerID:       42,
		Endpoint:       hs.Pub,
		ReplayEndpoint: hs.Replay,
		DPRanks:        hs.Ranks,
		Topic:          hs.Topic,
		Sink:           col,
		ReconnectMin:   10 * time.Millisecond,
		ReplayTimeout:  10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := col.waitFor(t, 30*time.Second, func(m map[uint32][]norm) bool {
		st := sub.Stats()
		for r := 0; r < hs.Ranks; r++ {
			if len(m[uint32(r)]) < len(hs.Expected[r]) || st[r].Frames < uint64(hs.Live[r]) {
				return false
			}
		}
		return true
	})
	stdin.Write([]byte("done\n"))
	stats := sub.Stats()
	for r := 0; r < hs.Ranks; r++ {
		w := flashindex.Worker{ID: 42, DPRank: uint32(r)}
		g := got[uint32(r)]
		exp := hs.Expected[r]
		for i := range exp {
			wantN := exp[i].norm(t, w, uint64(i+1))
			if i >= len(g) {
				t.Fatalf("rank %d: only %d of %d events arrived; next wanted %v\nstats %+v", r, len(g), len(exp), wantN, stats[r])
			}
			if !equalNorm(g[i], wantN) {
				t.Fatalf("rank %d event %d:\n got %v\nwant %v", r, i, g[i], wantN)
			}
		}
		if len(g) != len(exp) {
			t.Fatalf("rank %d: %d events, want %d", r, len(g), len(exp))
		}
		st := stats[r]
		if st.Gaps != 1 || st.GapsRecovered != 1 || st.GapsUnrecovered != 0 || st.Replayed == 0 {
			t.Errorf("rank %d: gap stats %+v", r, st)
		}
		if st.UnknownType != uint64(hs.Unknown[r]) || st.Malformed != 0 || st.BadFrames != 0 || st.DPRankMismatch != 0 {
			t.Errorf("rank %d: stats %+v, want %d unknown-type drops", r, st, hs.Unknown[r])
		}
	}
}
