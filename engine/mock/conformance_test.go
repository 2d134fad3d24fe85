package mock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/agentkv/agentkv/engine/enginetest"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

// The conformance suite (engine/enginetest) run against mock workers as
// against a vLLM: every batch the suite publishes leaves a mock worker's
// own ZeroMQ PUB socket and is buffered in its replay ring, and
// engine/vllm's Subscriber (the adapter a router runs) reads it over real
// TCP, filling gaps from the mock's ROUTER replay socket; the KV capacity
// comes from a mock worker's /metrics over HTTP.
//
// Three adaptations, because the suite drives an adapter synchronously
// (Adapter.Deliver) with batches it encodes itself:
//
//   - The batches are the suite's, not the simulated engine's: the suite
//     needs events an engine never produces on demand (unknown media and
//     types, LoRA names, random hashes, truncated payloads). They go out
//     through the mock's publisher (publisher.put below, test code: the
//     same ring and socket publish uses), so what is under test is the
//     mock's wire (frames, sequence numbers, replay ring and protocol,
//     restarts) and the adapter reading it. That the mock's own events
//     describe its cache exactly is TestEventsDescribeCache.
//   - Deliver returns once the subscriber has handled the message (its
//     stream counters account for it), and a batch the suite "loses" is
//     buffered in the ring without being sent, as Faults.DropEvents does.
//     A message of no frames cannot exist on the wire; the suite's empty
//     frame list goes out as one empty frame (equally malformed).
//   - The suite's worker is DP rank 2 of its engine; a mock is one rank,
//     so the harness's sink stamps rank 0's events with the suite's
//     worker (the per-rank endpoints are engine/vllm's own tests).
func TestConformance(t *testing.T) {
	variants := []vllm.Encoding{
		{},                                 // older vLLM: tagged arrays, int hashes
		{MapEvents: true, HasDPRank: true}, // newer vLLM: tagged maps
		{MapEvents: true, MapBatch: true, BytesHashes: true, HasDPRank: true, DPRank: 2}, // newest, sha256 bytes
		{BytesHashes: true, Full: true}, // arrays, every trailing field present
	}
	enginetest.Run(t, enginetest.Harness{
		Variants: len(variants),
		Encode: func(v int, evs []enginetest.Event) ([]byte, error) {
			return variants[v].Append(nil, 1.7e9, confWire(evs))
		},
		New:      newConfAdapter,
		Metrics:  confMetrics(t),
		Capacity: confCapacity,
	})
}

func confWire(evs []enginetest.Event) []vllm.WireEvent {
	out := make([]vllm.WireEvent, len(evs))
	for i, e := range evs {
		out[i] = vllm.WireEvent{Kind: e.Kind, Tag: e.Type, Hashes: e.Hashes, Parent: e.Parent, HasParent: e.HasParent,
			Tokens: e.Tokens, BlockSize: e.BlockSize, Medium: e.Medium, LoRAName: e.LoRA}
	}
	return out
}

// confAdapter is one mock worker and the vllm.Subscriber reading its
// events.
type confAdapter struct {
	t      *testing.T
	s      *Server
	sub    *vllm.Subscriber
	replay enginetest.ReplayFunc // the suite's record of what was published; nil: no replay socket
	next   uint64                // the next sequence number the ring lacks
	sent   uint64                // messages sent live
	bad    atomic.Value          // string: an event stamped with an unexpected worker
}

func newConfAdapter(t *testing.T, w flashindex.Worker, sink func(*flashindex.Event) error, replay enginetest.ReplayFunc) enginetest.Adapter {
	t.Helper()
	cfg := Config{Events: "tcp://127.0.0.1:0", Engine: simConfig(16, 64, 0)}
	if replay != nil {
		cfg.Replay = "tcp://127.0.0.1:0"
	}
	a := &confAdapter{t: t, s: start(t, cfg), replay: replay}
	const id = 9
	vc := vllm.Config{WorkerID: id, Endpoint: a.s.EventsEndpoint(), ReplayEndpoint: a.s.ReplayEndpoint(),
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, ReplayTimeout: 20 * time.Second,
		Sink: vllm.SinkFunc(func(ev *flashindex.Event) error {
			if ev.Worker != (flashindex.Worker{ID: id}) {
				a.bad.Store(ev.Worker.String())
			}
			ev.Worker = w
			return sink(ev)
		})}
	var err error
	if a.sub, err = vllm.NewSubscriber(vc); err != nil {
		t.Fatal(err)
	}
	if err := a.sub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.sub.Close()
		if b := a.bad.Load(); b != nil {
			t.Errorf("the subscriber stamped an event with worker %s", b)
		}
	})
	// A subscriber misses what is published before its subscription has
	// reached the publisher: wait until the PUB socket knows it.
	pub := a.s.pub.pub.(zmq4.Topics)
	a.await("the subscription to reach the mock's PUB socket", func() bool { return len(pub.Topics()) > 0 })
	return a
}

// await polls cond until it holds, failing the test after a generous
// deadline (the machine may be loaded).
func (a *confAdapter) await(what string, cond func() bool) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			a.t.Fatalf("timed out waiting for %s (subscriber %+v)", what, a.sub.Stats()[0])
		}
		time.Sleep(time.Millisecond)
	}
}

// handled is how many live messages the subscriber's stream has finished
// with: each ends as a bad frame, a duplicate, or a batch applied live
// (batches applied from replay are counted apart). Reading the counters
// under the stream's lock also orders the sink's writes before the
// suite's reads.
func (a *confAdapter) handled() uint64 {
	st := a.sub.Stats()[0].StreamStats
	return st.BadFrames + st.Duplicates + st.Batches - st.Replayed
}

// send sends one message on the mock's PUB socket and waits until the
// subscriber has handled it.
func (a *confAdapter) send(frames ...[]byte) error {
	a.t.Helper()
	a.handled() // orders the suite's writes (the sink's failure switch) before the subscriber's reads
	if err := a.s.pub.pub.SendMulti(zmq4.NewMsgFrom(frames...)); err != nil {
		return err
	}
	a.sent++
	a.await(fmt.Sprintf("the subscriber to handle message %d", a.sent), func() bool { return a.handled() >= a.sent })
	if got := a.handled(); got != a.sent {
		a.t.Fatalf("the subscriber handled %d messages, %d were sent", got, a.sent)
	}
	return nil
}

func (a *confAdapter) Deliver(ctx context.Context, topic []byte, seq uint64, payload []byte) error {
	a.t.Helper()
	if a.replay != nil && seq > a.next {
		// The batches the suite published without delivering them are in
		// the publisher's buffer, not on the wire (Faults.DropEvents).
		err := a.replay(ctx, a.next, func(s uint64, p []byte) {
			if s < seq {
				a.s.pub.put(s, p)
			}
		})
		if err != nil {
			return err
		}
	}
	a.s.pub.put(seq, payload)
	a.next = seq + 1
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return a.send(topic, s[:], payload)
}

func (a *confAdapter) DeliverFrames(ctx context.Context, frames [][]byte) error {
	if len(frames) == 0 {
		frames = [][]byte{{}}
	}
	return a.send(frames...)
}

func (a *confAdapter) Stats() enginetest.Stats {
	st := a.sub.Stats()[0].StreamStats
	return enginetest.Stats{Malformed: st.Malformed, Dropped: st.Dropped, BadFrames: st.BadFrames,
		Gaps: st.Gaps, GapsRecovered: st.GapsRecovered, GapsUnrecovered: st.GapsUnrecovered,
		Restarts: st.Restarts, Rejected: st.Rejected}
}

// put buffers payload in the replay ring as batch seq (what publish does
// for the engine's batches before sending them); a sequence number that
// does not continue the ring starts it over, as a restarted publisher's
// does.
func (p *publisher) put(seq uint64, payload []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.ring) == 0 || seq != p.first+uint64(len(p.ring)) {
		p.ring, p.first = nil, seq
	}
	p.ring = append(p.ring, payload)
	p.seq = seq + 1
}

// confMetrics serves the suite's capacity check from mock workers: the
// /metrics text of a worker with numBlocks device blocks of blockSize
// tokens, over HTTP.
func confMetrics(t *testing.T) func(numBlocks, blockSize int) string {
	return func(numBlocks, blockSize int) string {
		s, err := Start(Config{Engine: simConfig(blockSize, numBlocks, 0), MaxModelLen: max(2, numBlocks*blockSize)})
		if err != nil {
			t.Fatalf("mock with %d blocks of %d: %v", numBlocks, blockSize, err)
		}
		defer s.Close()
		resp, err := http.Get(s.URL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
		}
		return string(b)
	}
}

func confCapacity(text string) (int, error) {
	cs, err := vllm.ParseCacheConfigs(strings.NewReader(text))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range cs {
		n += c.CapacityTokens()
	}
	return n, nil
}

// TestConformanceWorker: engine/vllm's Worker (what a Stack builds per
// worker) reads a mock worker as it reads vLLM over HTTP and ZeroMQ: block
// size and capacity from /metrics, a block-size mismatch refused, exact
// tokens from /tokenize for chat and completions bodies (the same as the
// in-process tokenizer), and the KV events of a request it serves put its
// prompt's blocks in a router's index under the hashes the router computes
// from those tokens.
func TestConformanceWorker(t *testing.T) {
	s := start(t, Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Engine: simConfig(16, 2048, 0)})
	ctx := context.Background()
	ix, err := flashindex.New(flashindex.Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	w, err := vllm.NewWorker(ctx, vllm.WorkerConfig{ID: 3, URL: s.URL(),
		Events: &vllm.Config{Endpoint: s.EventsEndpoint(), ReplayEndpoint: s.ReplayEndpoint(), Sink: ix,
			ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if w.BlockSize() != 16 || w.KVCapacityTokens() != 2048*16 {
		t.Fatalf("block size %d capacity %d, want 16 and %d", w.BlockSize(), w.KVCapacityTokens(), 2048*16)
	}
	if _, err := vllm.NewWorker(ctx, vllm.WorkerConfig{ID: 4, URL: s.URL(), BlockSize: 32}); !errors.Is(err, vllm.ErrBlockSizeMismatch) {
		t.Fatalf("block size 32 against a 16-token mock: %v", err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pub := s.pub.pub.(zmq4.Topics)
	for deadline := time.Now().Add(30 * time.Second); len(pub.Topics()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the subscription never reached the mock")
		}
	}

	comp := mustJSON(map[string]any{"model": s.Model(), "prompt": words(50, "k"), "max_tokens": 2})
	toks, exact, err := w.Tokens(ctx, vllm.CompletionPath, comp)
	if err != nil || !exact || len(toks) != 50 {
		t.Fatalf("completions tokens: %d exact %v err %v", len(toks), exact, err)
	}
	body := mustJSON(chatBody(s, words(90, "z"), 3))
	toks, exact, err = w.Tokens(ctx, vllm.ChatPath, body)
	if err != nil || !exact {
		t.Fatalf("chat tokens: exact %v err %v", exact, err)
	}
	if inproc, _ := s.TokenizeChat(body); !slices.Equal(toks, inproc) || len(toks) != 93 {
		t.Fatalf("/tokenize %d tokens, in process %d", len(toks), len(inproc))
	}
	if st, raw := post(t, s.URL()+"/v1/chat/completions", chatBody(s, words(90, "z"), 3)); st != 200 {
		t.Fatalf("%d %s", st, raw)
	}
	h, _ := flashindex.NewHasher(16, "")
	_, seq := h.AppendHashes(nil, nil, toks[:len(toks)/16*16], 0, false)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		m := ix.FindMatches(seq, nil)
		if len(m) == 1 && m[0].Worker == (flashindex.Worker{ID: 3}) && m[0].Device == len(seq) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index matches %+v for the prompt's %d blocks (subscriber %+v)", m, len(seq), w.Subscriber().Stats())
		}
	}
}
