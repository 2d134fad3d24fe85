// Package enginetest is a conformance suite for engine adapters, in the
// manner of testing/slogtest: an adapter package supplies a Harness (how
// to encode events in its engine's wire format, how to build an adapter
// instance, how its engine reports KV capacity) and calls Run from a test.
// The suite then checks, for every wire variant the harness offers, that:
//
//   - published events come out normalised exactly: kind, tier (through
//     flashindex.TierFromMedium), engine hashes, parent, one block of
//     token ids per hash, block size and LoRA name, stamped with the
//     adapter's worker and EventIDs consecutive from 1;
//   - an unknown medium or event type drops that event only, counted;
//   - a sequence gap is filled from the replay source in order, with no
//     Cleared; a gap that cannot be filled, and a publisher restart, emit a
//     Cleared before the events that follow;
//   - malformed payloads, truncated payloads and malformed frames emit
//     nothing, are counted, and the adapter keeps going;
//   - a failing sink does not stop the adapter;
//   - KV capacity parses back from the engine's metrics text.
//
// Every check runs as a subtest, so a failure names the property broken.
// The suite needs no network: adapters are driven through Adapter.Deliver,
// the synchronous core a socket loop would call.
package enginetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// Event is one engine-neutral event the suite publishes.
type Event struct {
	Kind      flashindex.EventKind
	Hashes    []uint64 // engine hashes, as the adapter must report them
	Parent    uint64
	HasParent bool
	Tokens    []uint32 // len(Hashes) × BlockSize, Stored only
	BlockSize int
	Medium    string // "" means the engine's default (device)
	LoRA      string // adapter name, "" for the base model
	// Type, when set, replaces the event's tag with an unknown one the
	// adapter must drop.
	Type string
}

// ReplayFunc serves buffered batches from sequence number from, in order.
type ReplayFunc func(ctx context.Context, from uint64, fn func(seq uint64, payload []byte)) error

// Stats are the counters the suite checks; the harness maps its adapter's
// counters onto them.
type Stats struct {
	Malformed       uint64 // payloads dropped whole
	Dropped         uint64 // single events dropped
	BadFrames       uint64 // messages of the wrong shape
	Gaps            uint64
	GapsRecovered   uint64
	GapsUnrecovered uint64
	Restarts        uint64
	Rejected        uint64 // events the sink returned an error for
}

// Adapter is one adapter instance under test, bound to one worker.
type Adapter interface {
	// Deliver hands over one live message already split into topic,
	// sequence number and payload.
	Deliver(ctx context.Context, topic []byte, seq uint64, payload []byte) error
	// DeliverFrames hands over one raw multi-frame message.
	DeliverFrames(ctx context.Context, frames [][]byte) error
	// Stats returns the adapter's counters.
	Stats() Stats
}

// Harness tells the suite how to drive one adapter.
type Harness struct {
	// Variants is how many wire variants Encode offers (layouts, hash
	// encodings); the suite runs the event checks for each. 0 means 1.
	Variants int
	// Encode encodes one batch of events in variant v of the engine's wire
	// format. It may fail only for an event the format cannot express.
	Encode func(v int, events []Event) ([]byte, error)
	// New returns a fresh adapter for worker w, emitting into sink and
	// filling gaps through replay (nil: gaps cannot be filled).
	New func(t *testing.T, w flashindex.Worker, sink func(*flashindex.Event) error, replay ReplayFunc) Adapter
	// Metrics renders the engine's /metrics text for a KV cache of
	// numBlocks blocks of blockSize tokens; Capacity parses such text into
	// tokens. Leave both nil to skip the capacity checks.
	Metrics  func(numBlocks, blockSize int) string
	Capacity func(metrics string) (int, error)
}

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.Encode == nil || h.New == nil {
		t.Fatal("enginetest: Harness needs Encode and New")
	}
	if h.Variants <= 0 {
		h.Variants = 1
	}
	for v := 0; v < h.Variants; v++ {
		t.Run(fmt.Sprintf("variant=%d", v), func(t *testing.T) {
			t.Run("events", func(t *testing.T) { testEvents(t, h, v) })
			t.Run("tiers", func(t *testing.T) { testTiers(t, h, v) })
			t.Run("unknown", func(t *testing.T) { testUnknown(t, h, v) })
			t.Run("gap-replayed", func(t *testing.T) { testGap(t, h, v, true) })
			t.Run("gap-unrecoverable", func(t *testing.T) { testGap(t, h, v, false) })
			t.Run("restart", func(t *testing.T) { testRestart(t, h, v) })
			t.Run("bad-input", func(t *testing.T) { testBadInput(t, h, v) })
			t.Run("sink-errors", func(t *testing.T) { testSinkErrors(t, h, v) })
		})
	}
	if h.Metrics != nil && h.Capacity != nil {
		t.Run("capacity", func(t *testing.T) { testCapacity(t, h) })
	}
}

var worker = flashindex.Worker{ID: 77, DPRank: 2}

// got is a deep copy of an emitted event.
type got struct {
	Worker    flashindex.Worker
	EventID   uint64
	Kind      flashindex.EventKind
	Tier      flashindex.Tier
	Parent    uint64
	HasParent bool
	Hashes    []uint64
	Tokens    [][]uint32
	BlockSize int
	LoRA      string
}

func (g got) String() string {
	return fmt.Sprintf("{id=%d %v %v tier=%v parent=%x/%v hashes=%x tokens=%v bs=%d lora=%q}",
		g.EventID, g.Worker, g.Kind, g.Tier, g.Parent, g.HasParent, g.Hashes, g.Tokens, g.BlockSize, g.LoRA)
}

func snapshot(ev *flashindex.Event) got {
	g := got{Worker: ev.Worker, EventID: ev.EventID, Kind: ev.Kind, Tier: ev.Tier}
	switch ev.Kind {
	case flashindex.Stored:
		g.Parent, g.HasParent, g.BlockSize, g.LoRA = ev.Parent, ev.HasParent, ev.BlockSize, ev.LoRA
		for _, b := range ev.Blocks {
			g.Hashes = append(g.Hashes, b.EngineHash)
			g.Tokens = append(g.Tokens, slices.Clone(b.Tokens))
		}
	case flashindex.Removed:
		g.Hashes = slices.Clone(ev.Hashes)
	}
	return g
}

// expect is the reference normalisation of a published event.
func expect(ev Event) got {
	g := got{Worker: worker, Kind: ev.Kind}
	if ev.Kind == flashindex.Cleared {
		return g
	}
	g.Tier, _ = flashindex.TierFromMedium(ev.Medium)
	g.Hashes = slices.Clone(ev.Hashes)
	if ev.Kind == flashindex.Stored {
		g.Parent, g.HasParent, g.BlockSize, g.LoRA = ev.Parent, ev.HasParent, ev.BlockSize, ev.LoRA
		for i := range ev.Hashes {
			g.Tokens = append(g.Tokens, ev.Tokens[i*ev.BlockSize:(i+1)*ev.BlockSize])
		}
	}
	return g
}

func same(a, b got) bool {
	if a.Worker != b.Worker || a.Kind != b.Kind || a.Tier != b.Tier || a.Parent != b.Parent ||
		a.HasParent != b.HasParent || a.BlockSize != b.BlockSize || a.LoRA != b.LoRA ||
		!slices.Equal(a.Hashes, b.Hashes) || len(a.Tokens) != len(b.Tokens) {
		return false
	}
	for i := range a.Tokens {
		if !slices.Equal(a.Tokens[i], b.Tokens[i]) {
			return false
		}
	}
	return true
}

// rig is one adapter with a recording sink and a publisher's buffer.
type rig struct {
	t      *testing.T
	h      Harness
	v      int
	a      Adapter
	events []got
	buf    map[uint64][]byte
	failed error // returned by the sink when set
}

func newRig(t *testing.T, h Harness, v int, replay bool) *rig {
	r := &rig{t: t, h: h, v: v, buf: map[uint64][]byte{}}
	var rp ReplayFunc
	if replay {
		rp = func(ctx context.Context, from uint64, fn func(uint64, []byte)) error {
			for s := from; ; s++ {
				p, ok := r.buf[s]
				if !ok {
					return nil
				}
				fn(s, p)
			}
		}
	}
	r.a = h.New(t, worker, func(ev *flashindex.Event) error {
		r.events = append(r.events, snapshot(ev))
		return r.failed
	}, rp)
	return r
}

func (r *rig) encode(evs []Event) []byte {
	r.t.Helper()
	p, err := r.h.Encode(r.v, evs)
	if err != nil {
		r.t.Fatalf("Encode: %v", err)
	}
	return p
}

// publish encodes a batch at seq, keeps it for replay, and delivers it
// live unless lose is set.
func (r *rig) publish(seq uint64, evs []Event, lose bool) {
	r.t.Helper()
	p := r.encode(evs)
	r.buf[seq] = p
	if !lose {
		if err := r.a.Deliver(context.Background(), []byte("kv"), seq, p); err != nil {
			r.t.Fatalf("Deliver(%d): %v", seq, err)
		}
	}
}

// check compares the emitted events with the expected ones and checks the
// EventIDs run 1, 2, 3, ...
func (r *rig) check(want []got) {
	r.t.Helper()
	for i, g := range r.events {
		if g.EventID != uint64(i+1) {
			r.t.Fatalf("event %d has EventID %d, want %d", i, g.EventID, i+1)
		}
	}
	for i := range want {
		if i >= len(r.events) {
			r.t.Fatalf("only %d events; event %d should be %v", len(r.events), i, want[i])
		}
		if !same(r.events[i], want[i]) {
			r.t.Fatalf("event %d (the first that differs):\n got %v\nwant %v", i, r.events[i], want[i])
		}
	}
	if len(r.events) != len(want) {
		r.t.Fatalf("%d events, want %d; extra: %v", len(r.events), len(want), r.events[len(want):])
	}
}

var mediums = []string{"", "GPU", "CPU_PINNED", "DISK", "EXTERNAL"}

func randEvents(rng *rand.Rand, n int) []Event {
	evs := make([]Event, n)
	for i := range evs {
		switch k := rng.IntN(10); {
		case k == 0:
			evs[i] = Event{Kind: flashindex.Cleared}
		case k < 4:
			evs[i] = Event{Kind: flashindex.Removed, Medium: mediums[rng.IntN(len(mediums))],
				Hashes: []uint64{rng.Uint64(), rng.Uint64() >> 1}[:1+rng.IntN(2)]}
		default:
			bs := []int{1, 16, 32}[rng.IntN(3)]
			ev := Event{Kind: flashindex.Stored, BlockSize: bs, Medium: mediums[rng.IntN(len(mediums))]}
			for b := rng.IntN(3); b >= 0; b-- {
				ev.Hashes = append(ev.Hashes, rng.Uint64())
				for j := 0; j < bs; j++ {
					ev.Tokens = append(ev.Tokens, uint32(rng.IntN(1<<17)))
				}
			}
			if rng.IntN(2) == 0 {
				ev.Parent, ev.HasParent = rng.Uint64(), true
			}
			if rng.IntN(3) == 0 {
				ev.LoRA = "adapter-a"
			}
			evs[i] = ev
		}
	}
	return evs
}

func stored(h uint64) Event {
	return Event{Kind: flashindex.Stored, Hashes: []uint64{h}, Tokens: []uint32{uint32(h)}, BlockSize: 1}
}

func testEvents(t *testing.T, h Harness, v int) {
	for seed := uint64(0); seed < 20; seed++ {
		r := newRig(t, h, v, true)
		rng := rand.New(rand.NewPCG(seed, uint64(v)))
		var want []got
		for seq := uint64(0); seq < 8; seq++ {
			evs := randEvents(rng, rng.IntN(5))
			r.publish(seq+100, evs, false)
			for _, e := range evs {
				want = append(want, expect(e))
			}
		}
		r.check(want)
	}
}

func testTiers(t *testing.T, h Harness, v int) {
	r := newRig(t, h, v, true)
	var want []got
	for i, m := range []string{"", "GPU", "DEVICE", "CPU_PINNED", "CPU_TIER1", "CPU_TIER2", "DISK", "NVME", "EXTERNAL", "REMOTE", "SHARED"} {
		ev := stored(uint64(i + 1))
		ev.Medium = m
		r.publish(uint64(i), []Event{ev}, false)
		want = append(want, expect(ev))
	}
	r.check(want)
}

func testUnknown(t *testing.T, h Harness, v int) {
	r := newRig(t, h, v, true)
	bad := stored(1)
	bad.Medium = "QUANTUM_FOAM"
	odd := stored(2)
	odd.Type = "BlockTeleported"
	good := stored(3)
	r.publish(0, []Event{bad, good, odd, good}, false)
	r.check([]got{expect(good), expect(good)})
	if st := r.a.Stats(); st.Dropped != 2 {
		t.Fatalf("Dropped = %d, want 2 (unknown medium, unknown type)", st.Dropped)
	}
}

func testGap(t *testing.T, h Harness, v int, replay bool) {
	r := newRig(t, h, v, replay)
	var want []got
	for seq := uint64(0); seq < 6; seq++ {
		ev := stored(seq + 10)
		lose := seq == 2 || seq == 3
		if !replay && seq == 4 {
			want = append(want, got{Worker: worker, Kind: flashindex.Cleared})
		}
		if replay || !lose {
			want = append(want, expect(ev))
		}
		r.publish(seq, []Event{ev}, lose)
	}
	r.check(want)
	st := r.a.Stats()
	if st.Gaps != 1 {
		t.Fatalf("Gaps = %d, want 1", st.Gaps)
	}
	if replay && (st.GapsRecovered != 1 || st.GapsUnrecovered != 0) {
		t.Fatalf("recovered %d, unrecovered %d; want 1, 0", st.GapsRecovered, st.GapsUnrecovered)
	}
	if !replay && st.GapsUnrecovered != 1 {
		t.Fatalf("unrecovered %d, want 1", st.GapsUnrecovered)
	}
}

func testRestart(t *testing.T, h Harness, v int) {
	r := newRig(t, h, v, true)
	var want []got
	for seq := uint64(0); seq < 3; seq++ {
		r.publish(seq, []Event{stored(seq + 1)}, false)
		want = append(want, expect(stored(seq+1)))
	}
	// A new publisher starts over at 0 with an empty cache.
	r.buf = map[uint64][]byte{}
	r.publish(0, []Event{stored(50)}, false)
	want = append(want, got{Worker: worker, Kind: flashindex.Cleared}, expect(stored(50)))
	r.check(want)
	if st := r.a.Stats(); st.Restarts != 1 {
		t.Fatalf("Restarts = %d, want 1", st.Restarts)
	}
}

func testBadInput(t *testing.T, h Harness, v int) {
	r := newRig(t, h, v, true)
	ctx := context.Background()
	valid := r.encode([]Event{stored(1), {Kind: flashindex.Removed, Hashes: []uint64{1}}})
	seq := uint64(0)
	deliver := func(p []byte) {
		if err := r.a.Deliver(ctx, []byte("kv"), seq, p); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		seq++
	}
	bad := 0
	for n := 0; n < len(valid); n++ { // every truncation
		deliver(valid[:n])
		bad++
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ { // garbage
		g := make([]byte, rng.IntN(64))
		for j := range g {
			g[j] = byte(rng.IntN(256))
		}
		g = append([]byte{0xdc, 0xff, 0xff}, g...) // claims a 65535-element array
		deliver(g)
		bad++
	}
	frames := [][][]byte{nil, {[]byte("kv")}, {[]byte("kv"), {1, 2, 3}, valid}, {[]byte("kv"), make([]byte, 8), valid, valid}}
	for _, f := range frames {
		if err := r.a.DeliverFrames(ctx, f); err != nil {
			t.Fatalf("DeliverFrames: %v", err)
		}
	}
	if len(r.events) != 0 {
		t.Fatalf("bad input emitted %d events: %v", len(r.events), r.events)
	}
	st := r.a.Stats()
	if st.Malformed != uint64(bad) || st.BadFrames != uint64(len(frames)) {
		t.Fatalf("Malformed %d BadFrames %d, want %d and %d", st.Malformed, st.BadFrames, bad, len(frames))
	}
	deliver(valid)
	r.check([]got{expect(stored(1)), expect(Event{Kind: flashindex.Removed, Hashes: []uint64{1}})})
}

func testSinkErrors(t *testing.T, h Harness, v int) {
	r := newRig(t, h, v, true)
	r.failed = fmt.Errorf("index refused")
	r.publish(0, []Event{stored(1), stored(2)}, false)
	r.publish(1, []Event{stored(3)}, false)
	r.check([]got{expect(stored(1)), expect(stored(2)), expect(stored(3))})
	if st := r.a.Stats(); st.Rejected != 3 {
		t.Fatalf("Rejected = %d, want 3", st.Rejected)
	}
}

func testCapacity(t *testing.T, h Harness) {
	for _, c := range []struct{ blocks, bs int }{{1, 1}, {661, 16}, {123456, 64}, {8192, 256}} {
		got, err := h.Capacity(h.Metrics(c.blocks, c.bs))
		if err != nil || got != c.blocks*c.bs {
			t.Errorf("Capacity(%d blocks × %d) = %d, %v; want %d", c.blocks, c.bs, got, err, c.blocks*c.bs)
		}
	}
	for _, text := range []string{"", "# nothing here\n", "garbage{{{\n"} {
		if n, err := h.Capacity(text); err == nil {
			t.Errorf("Capacity(%q) = %d with no error", text, n)
		}
	}
}
