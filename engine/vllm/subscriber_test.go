package vllm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/go-zeromq/zmq4"
)

// waitBound bounds the waits for what must happen (events delivered, a
// replica synced): only a condition that never comes reaches it, so it is
// far above what they take on a loaded 2-core machine.
const waitBound = 2 * time.Minute

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func goPub(t *testing.T, ep string) zmq4.Socket {
	t.Helper()
	p := zmq4.NewPub(context.Background(), quietZMQ)
	if err := p.Listen(ep); err != nil {
		t.Fatal(err)
	}
	return p
}

func send(t *testing.T, p zmq4.Socket, seq uint64, payload []byte) {
	t.Helper()
	s := make([]byte, 8)
	binary.BigEndian.PutUint64(s, seq)
	if err := p.SendMulti(zmq4.NewMsgFrom([]byte("kv"), s, payload)); err != nil {
		t.Fatal(err)
	}
}

// publishUntilSeen sends batches seq, seq+1, ... (each storing hash
// base+seq) until the collector holds an event of hash base+seq for the
// rank; it returns the next sequence number. PUB drops messages until the
// subscription arrives, so the first few may be lost.
func publishUntilSeen(t *testing.T, p zmq4.Socket, col *collector, rank uint32, seq, base uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for time.Now().Before(deadline) {
		send(t, p, seq, stored(base+seq))
		got := col.waitFor(t, 20*time.Millisecond, func(m map[uint32][]norm) bool {
			for _, e := range m[rank] {
				if e.Kind == flashindex.Stored && e.Hashes[0] == base+seq {
					return true
				}
			}
			return false
		})
		seq++
		for _, e := range got[rank] {
			if e.Kind == flashindex.Stored && e.Hashes[0] == base+seq-1 {
				return seq
			}
		}
	}
	t.Fatal("subscriber never received a batch")
	return 0
}

// TestSubscriberReconnectsAndDetectsRestart kills the publisher and starts
// a new one on the same port: the subscriber reconnects by itself, sees the
// sequence start over, clears the worker and applies the new stream.
func TestSubscriberReconnectsAndDetectsRestart(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	pub := goPub(t, ep)
	col := newCollector()
	sub, err := NewSubscriber(Config{WorkerID: 1, Endpoint: ep, Topic: "kv", Sink: col,
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	publishUntilSeen(t, pub, col, 0, 0, 1000)
	// Jump far ahead (a gap, cleared for want of a replay socket) so that
	// whatever the new publisher's first delivered batch is, its sequence
	// number is lower.
	send(t, pub, 50, stored(1))
	col.waitFor(t, 10*time.Second, func(m map[uint32][]norm) bool {
		n := len(m[0])
		return n > 0 && m[0][n-1].Kind == flashindex.Stored && m[0][n-1].Hashes[0] == 1
	})
	pub.Close()

	pub2 := goPub(t, ep)
	defer pub2.Close()
	publishUntilSeen(t, pub2, col, 0, 0, 2000)
	got := col.snapshot()[0]
	sawClear, afterOne := false, false
	for _, e := range got {
		if e.Kind == flashindex.Stored && e.Hashes[0] == 1 {
			afterOne = true
		}
		if afterOne && e.Kind == flashindex.Cleared {
			sawClear = true
		}
	}
	st := sub.Stats()[0]
	if !sawClear || st.Restarts != 1 {
		t.Fatalf("no restart detected: %d events, stats %+v", len(got), st)
	}
	if st.Reconnects < 1 {
		t.Fatalf("Reconnects = %d", st.Reconnects)
	}
	for i, e := range got {
		if e.EventID != uint64(i+1) {
			t.Fatalf("event %d has id %d", i, e.EventID)
		}
	}
}

// TestSubscriberGoReplay exercises the DEALER replay client against a
// ROUTER written with zmq4 that follows vLLM's protocol.
func TestSubscriberGoReplay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rep := zmq4.NewRouter(ctx, quietZMQ)
	defer rep.Close()
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	if err := rep.Listen(ep); err != nil {
		t.Fatal(err)
	}
	buffered := [][]byte{stored(10), stored(11), stored(12)}
	go func() {
		for {
			msg, err := rep.Recv()
			if err != nil {
				return
			}
			f := msg.Frames
			if len(f) != 3 {
				continue
			}
			start := binary.BigEndian.Uint64(f[2])
			for i, p := range buffered {
				if uint64(i) >= start {
					s := make([]byte, 8)
					binary.BigEndian.PutUint64(s, uint64(i))
					rep.SendMulti(zmq4.NewMsgFrom(f[0], []byte{}, s, p))
				}
			}
			end := make([]byte, 8)
			binary.BigEndian.PutUint64(end, EndSeq)
			rep.SendMulti(zmq4.NewMsgFrom(f[0], []byte{}, end, []byte{}))
		}
	}()
	z := &zmqReplayer{endpoint: ep, timeout: 10 * time.Second, dial: time.Second}
	var seqs []uint64
	if err := z.Replay(ctx, 1, func(seq uint64, p []byte) { seqs = append(seqs, seq) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[1 2]" {
		t.Fatalf("replayed %v, want [1 2]", seqs)
	}
}

func TestReplayUnreachable(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	z := &zmqReplayer{endpoint: ep, timeout: time.Second, dial: time.Second}
	if err := z.Replay(context.Background(), 0, func(uint64, []byte) {}); err == nil {
		t.Fatal("replay from a closed port succeeded")
	}
}

func TestSubscriberCloseWhileDisconnected(t *testing.T) {
	ep := fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t))
	sub, err := NewSubscriber(Config{Endpoint: ep, DPRanks: 3, Sink: &recorder{},
		ReconnectMin: time.Millisecond, ReconnectMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	sub.Close()
	sub.Close()
	if err := sub.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	for r, st := range sub.Stats() {
		if st.Connected {
			t.Fatalf("rank %d connected to a closed port", r)
		}
	}
}

func TestNewSubscriberValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  error
	}{
		{"no endpoint", Config{Sink: &recorder{}}, ErrNoEndpoint},
		{"no sink", Config{Endpoint: "tcp://h:1"}, ErrNoSink},
		{"ipc with ranks", Config{Endpoint: "ipc:///tmp/x", DPRanks: 2, Sink: &recorder{}}, ErrEndpoint},
		{"port overflow", Config{Endpoint: "tcp://h:65535", DPRanks: 2, Sink: &recorder{}}, ErrEndpoint},
		{"bad replay", Config{Endpoint: "tcp://h:1", ReplayEndpoint: "tcp://h", DPRanks: 2, Sink: &recorder{}}, ErrEndpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSubscriber(tt.cfg); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestRankEndpoint(t *testing.T) {
	tests := []struct {
		ep   string
		rank int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://10.0.0.1:5557", 3, "tcp://10.0.0.1:5560"},
		{"tcp://[::1]:5557", 1, "tcp://[::1]:5558"},
		{"inproc://cache", 2, "inproc://cache_dp2"},
		{"ipc:///tmp/kv", 0, "ipc:///tmp/kv"},
	}
	for _, tt := range tests {
		got, err := RankEndpoint(tt.ep, tt.rank)
		if err != nil || got != tt.want {
			t.Errorf("RankEndpoint(%q, %d) = %q, %v; want %q", tt.ep, tt.rank, got, err, tt.want)
		}
	}
}
