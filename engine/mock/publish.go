package mock

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/agentkv/agentkv/engine/vllm"
)

var quietZMQ = zmq4.WithLogger(log.New(io.Discard, "", 0))

// publisher publishes KV event batches as vLLM's ZmqEventPublisher does:
// PUB frames [topic, seq (8 bytes big-endian), msgpack batch], seq from 0
// and one higher per batch, and a ROUTER replay socket answering
// [identity, "", start seq] with every buffered batch from start
// ([identity, "", seq, payload] each) and then [identity, "", -1, ""].
type publisher struct {
	topic  []byte
	enc    vllm.Encoding
	keep   int
	pub    zmq4.Socket
	router zmq4.Socket // nil: no replay socket
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex // guards seq, ring, first, send order
	seq   uint64
	ring  [][]byte // the last keep payloads; ring[i] has sequence first+i
	first uint64
	drop  int // fault: live batches to skip sending (still buffered)
	sent  uint64
}

func newPublisher(endpoint, replay, topic string, enc vllm.Encoding, keep int) (*publisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &publisher{topic: []byte(topic), enc: enc, keep: keep, cancel: cancel}
	p.pub = zmq4.NewPub(ctx, quietZMQ)
	if err := p.pub.Listen(endpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("mock: events endpoint %s: %w", endpoint, err)
	}
	if replay != "" {
		p.router = zmq4.NewRouter(ctx, quietZMQ)
		if err := p.router.Listen(replay); err != nil {
			cancel()
			p.pub.Close()
			p.router.Close()
			return nil, fmt.Errorf("mock: replay endpoint %s: %w", replay, err)
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serveReplay()
		}()
	}
	return p, nil
}

// endpoints returns the bound tcp:// addresses.
func (p *publisher) endpoints() (events, replay string) {
	events = "tcp://" + p.pub.Addr().String()
	if p.router != nil {
		replay = "tcp://" + p.router.Addr().String()
	}
	return events, replay
}

func (p *publisher) close() {
	p.cancel()
	p.pub.Close()
	if p.router != nil {
		p.router.Close()
	}
	p.wg.Wait()
}

// publish encodes events as one batch, buffers it and sends it.
func (p *publisher) publish(events []vllm.WireEvent) {
	ts := float64(time.Now().UnixNano()) / 1e9
	payload, err := p.enc.Append(nil, ts, events)
	if err != nil {
		return // only for an event kind the encoder does not know; the driver emits none
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.seq++
	p.ring = append(p.ring, payload)
	if len(p.ring) > p.keep {
		p.ring[0] = nil
		p.ring = p.ring[1:]
		p.first++
	}
	if p.drop > 0 {
		p.drop--
		return
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	// Sent under mu so that batches leave in sequence order.
	if p.pub.SendMulti(zmq4.NewMsgFrom(p.topic, s[:], payload)) == nil {
		p.sent++
	}
}

// restart starts the sequence over with an empty buffer.
func (p *publisher) restart() {
	p.mu.Lock()
	p.seq, p.first, p.ring = 0, 0, nil
	p.mu.Unlock()
}

// dropNext makes the next n live batches go unsent (they stay buffered,
// so a subscriber sees a gap it can replay).
func (p *publisher) dropNext(n int) {
	p.mu.Lock()
	p.drop = n
	p.mu.Unlock()
}

func (p *publisher) serveReplay() {
	for {
		msg, err := p.router.Recv()
		if err != nil {
			return
		}
		f := msg.Frames
		if len(f) != 3 || len(f[1]) != 0 || len(f[2]) != 8 {
			continue
		}
		id := f[0]
		from := binary.BigEndian.Uint64(f[2])
		p.mu.Lock()
		var out [][]byte
		var seqs []uint64
		for i, b := range p.ring {
			if s := p.first + uint64(i); s >= from {
				out = append(out, b)
				seqs = append(seqs, s)
			}
		}
		p.mu.Unlock()
		for i, b := range out {
			var s [8]byte
			binary.BigEndian.PutUint64(s[:], seqs[i])
			if p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, s[:], b)) != nil {
				break
			}
		}
		var end [8]byte
		binary.BigEndian.PutUint64(end[:], vllm.EndSeq)
		p.router.SendMulti(zmq4.NewMsgFrom(id, []byte{}, end[:], []byte{}))
	}
}
