package vllm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/agentkv/agentkv/flashindex"
)

// model is a naive index: which engine hashes are on which tier.
type model map[flashindex.Tier]map[uint64]bool

func (m model) apply(n norm) {
	switch n.Kind {
	case flashindex.Cleared:
		clear(m)
	case flashindex.Stored:
		if m[n.Tier] == nil {
			m[n.Tier] = map[uint64]bool{}
		}
		for _, h := range n.Hashes {
			m[n.Tier][h] = true
		}
	case flashindex.Removed:
		for _, h := range n.Hashes {
			delete(m[n.Tier], h)
		}
	}
}

func (m model) applyWire(evs []WireEvent) {
	for _, ev := range evs {
		m.apply(want(ev))
	}
}

func (m model) subsetOf(o model) error {
	for t, hs := range m {
		for h := range hs {
			if !o[t][h] {
				return fmt.Errorf("tier %v hash %x present but not in the reference", t, h)
			}
		}
	}
	return nil
}

func (m model) equal(o model) error {
	if err := m.subsetOf(o); err != nil {
		return err
	}
	if err := o.subsetOf(m); err != nil {
		return fmt.Errorf("missing: %w", err)
	}
	return nil
}

// fakePub is a publisher with a bounded replay buffer.
type fakePub struct {
	seq    uint64
	buf    [][2]any // (seq, payload)
	bufCap int
	fail   bool
}

func (p *fakePub) publish(payload []byte) uint64 {
	s := p.seq
	p.seq++
	p.buf = append(p.buf, [2]any{s, payload})
	if p.bufCap > 0 && len(p.buf) > p.bufCap {
		p.buf = p.buf[1:]
	}
	return s
}

func (p *fakePub) Replay(ctx context.Context, from uint64, fn func(uint64, []byte)) error {
	if p.fail {
		return errors.New("replay socket down")
	}
	for _, e := range p.buf {
		if e[0].(uint64) >= from {
			fn(e[0].(uint64), e[1].([]byte))
		}
	}
	return nil
}

type recorder struct {
	events []norm
	err    error // returned from Apply when set
}

func (r *recorder) Apply(ev *flashindex.Event) error {
	r.events = append(r.events, copyEvent(ev))
	return r.err
}

func (r *recorder) kinds() []flashindex.EventKind {
	var k []flashindex.EventKind
	for _, e := range r.events {
		k = append(k, e.Kind)
	}
	return k
}

func frame(seq uint64, payload []byte) [][]byte {
	s := make([]byte, 8)
	binary.BigEndian.PutUint64(s, seq)
	return [][]byte{[]byte("kv"), s, payload}
}

func removed(h ...uint64) []byte {
	return mustEncode(Encoding{}, 0, []WireEvent{{Kind: flashindex.Removed, Hashes: h}})
}

func stored(h ...uint64) []byte {
	ev := WireEvent{Kind: flashindex.Stored, BlockSize: 1}
	for _, x := range h {
		ev.Hashes = append(ev.Hashes, x)
		ev.Tokens = append(ev.Tokens, uint32(x))
	}
	return mustEncode(Encoding{}, 0, []WireEvent{ev})
}

func TestStreamScenarios(t *testing.T) {
	S, R, C := flashindex.Stored, flashindex.Removed, flashindex.Cleared
	type step struct {
		seq     uint64
		payload []byte
		frames  [][]byte // overrides seq/payload
		topic   string
	}
	tests := []struct {
		name    string
		catchUp bool
		replay  bool // serve from the publisher's buffer
		fail    bool // replay errors
		bufCap  int
		publish int // batches the publisher holds: stored(seq+100) each
		steps   []step
		kinds   []flashindex.EventKind
		hashes  []uint64 // first hash of each non-Cleared event
		check   func(t *testing.T, st StreamStats)
	}{
		{
			name: "in order", publish: 3, replay: true,
			steps: []step{{seq: 0}, {seq: 1}, {seq: 2}},
			kinds: []flashindex.EventKind{S, S, S}, hashes: []uint64{100, 101, 102},
		},
		{
			name: "starts mid-stream without catch-up", publish: 5, replay: true,
			steps: []step{{seq: 3}, {seq: 4}},
			kinds: []flashindex.EventKind{S, S}, hashes: []uint64{103, 104},
			check: func(t *testing.T, st StreamStats) {
				if st.Gaps != 0 {
					t.Errorf("Gaps = %d", st.Gaps)
				}
			},
		},
		{
			name: "catch-up replays from 0", publish: 4, replay: true, catchUp: true,
			steps: []step{{seq: 2}, {seq: 3}},
			kinds: []flashindex.EventKind{S, S, S, S}, hashes: []uint64{100, 101, 102, 103},
		},
		{
			name: "gap recovered by replay", publish: 5, replay: true,
			steps: []step{{seq: 0}, {seq: 3}, {seq: 4}},
			kinds: []flashindex.EventKind{S, S, S, S, S}, hashes: []uint64{100, 101, 102, 103, 104},
			check: func(t *testing.T, st StreamStats) {
				if st.Gaps != 1 || st.GapsRecovered != 1 || st.Replayed != 4 || st.Duplicates != 2 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "gap without replayer clears", publish: 4,
			steps: []step{{seq: 0}, {seq: 2}, {seq: 3}},
			kinds: []flashindex.EventKind{S, C, S, S}, hashes: []uint64{100, 102, 103},
			check: func(t *testing.T, st StreamStats) {
				if st.GapsUnrecovered != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "replay error clears", publish: 3, replay: true, fail: true,
			steps: []step{{seq: 0}, {seq: 2}},
			kinds: []flashindex.EventKind{S, C, S}, hashes: []uint64{100, 102},
			check: func(t *testing.T, st StreamStats) {
				if st.ReplayErrors != 1 || st.GapsUnrecovered != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "replay buffer too short clears then applies what it has", publish: 6, replay: true, bufCap: 3,
			steps: []step{{seq: 0}, {seq: 5}},
			// buffer holds 3,4,5: 1 and 2 are lost.
			kinds: []flashindex.EventKind{S, C, S, S, S}, hashes: []uint64{100, 103, 104, 105},
		},
		{
			name: "live sequence repeating means a new publisher", publish: 2, replay: true,
			steps: []step{{seq: 0}, {seq: 1}, {seq: 1}},
			kinds: []flashindex.EventKind{S, S, C, S, S}, hashes: []uint64{100, 101, 100, 101},
		},
		{
			name: "restart: sequence goes back", publish: 3, replay: true,
			steps: []step{{seq: 1}, {seq: 2}, {seq: 0}},
			kinds: []flashindex.EventKind{S, S, C, S}, hashes: []uint64{101, 102, 100},
			check: func(t *testing.T, st StreamStats) {
				if st.Restarts != 1 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "bad frames counted", publish: 2, replay: true,
			steps: []step{
				{seq: 0},
				{frames: [][]byte{[]byte("kv"), {1, 2}, stored(1)}},
				{frames: [][]byte{[]byte("kv")}},
				{frames: frame(EndSeq, stored(1))},
				{seq: 1},
			},
			kinds: []flashindex.EventKind{S, S}, hashes: []uint64{100, 101},
			check: func(t *testing.T, st StreamStats) {
				if st.BadFrames != 3 || st.Frames != 5 {
					t.Errorf("stats %+v", st)
				}
			},
		},
		{
			name: "malformed payload skipped, stream continues", publish: 3, replay: true,
			steps: []step{{seq: 0}, {seq: 1, payload: []byte{0x92, 0x01}}, {seq: 2}},
			kinds: []flashindex.EventKind{S, S}, hashes: []uint64{100, 102},
			check: func(t *testing.T, st StreamStats) {
				if st.Malformed != 1 || st.Gaps != 0 {
					t.Errorf("stats %+v", st)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pub := &fakePub{bufCap: tt.bufCap, fail: tt.fail}
			var payloads [][]byte
			for i := 0; i < tt.publish; i++ {
				p := stored(uint64(100 + i))
				pub.publish(p)
				payloads = append(payloads, p)
			}
			rec := &recorder{}
			cfg := StreamConfig{Worker: flashindex.Worker{ID: 7, DPRank: 1}, Sink: rec, CatchUp: tt.catchUp}
			if tt.replay {
				cfg.Replayer = pub
			}
			s, err := NewStream(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range tt.steps {
				f := st.frames
				if f == nil {
					p := st.payload
					if p == nil {
						p = payloads[st.seq]
					}
					f = frame(st.seq, p)
				}
				if err := s.Handle(context.Background(), f); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(rec.kinds(), tt.kinds) {
				t.Fatalf("kinds %v, want %v", rec.kinds(), tt.kinds)
			}
			var hs []uint64
			for i, e := range rec.events {
				if e.EventID != uint64(i+1) || e.Worker != cfg.Worker {
					t.Fatalf("event %d: id %d worker %v", i, e.EventID, e.Worker)
				}
				if e.Kind != C {
					hs = append(hs, e.Hashes[0])
				}
			}
			if !slices.Equal(hs, tt.hashes) {
				t.Fatalf("hashes %v, want %v", hs, tt.hashes)
			}
			if tt.check != nil {
				tt.check(t, s.Stats())
			}
			_ = R
		})
	}
}

func TestStreamEpoch(t *testing.T) {
	rec := &recorder{}
	s, _ := NewStream(StreamConfig{Sink: rec, Epoch: func(topic []byte) []byte { return topic }})
	ctx := context.Background()
	s.Offer(ctx, []byte("a"), 0, stored(1))
	s.Offer(ctx, []byte("a"), 1, stored(2))
	s.Offer(ctx, []byte("b"), 7, stored(3)) // new epoch, seq still rising
	want := []flashindex.EventKind{flashindex.Stored, flashindex.Stored, flashindex.Cleared, flashindex.Stored}
	if !slices.Equal(rec.kinds(), want) {
		t.Fatalf("kinds %v, want %v", rec.kinds(), want)
	}
	if st := s.Stats(); st.Restarts != 1 || st.GapsUnrecovered != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStreamSinkErrorsCounted(t *testing.T) {
	rec := &recorder{err: errors.New("block size mismatch")}
	s, _ := NewStream(StreamConfig{Sink: rec})
	s.Handle(context.Background(), frame(0, stored(1, 2)))
	s.Handle(context.Background(), frame(1, stored(3)))
	st := s.Stats()
	if st.Rejected != 2 || st.Events != 2 || len(rec.events) != 2 {
		t.Fatalf("stats %+v, %d applied", st, len(rec.events))
	}
	if s.LastError() == nil {
		t.Fatal("LastError is nil")
	}
}

func TestStreamReplayCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	rp := ReplayFunc(func(ctx context.Context, from uint64, fn func(uint64, []byte)) error {
		cancel()
		return ctx.Err()
	})
	s, _ := NewStream(StreamConfig{Sink: &recorder{}, Replayer: rp})
	s.Handle(ctx, frame(0, stored(1)))
	if err := s.Handle(ctx, frame(5, stored(1))); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestNewStreamNeedsSink(t *testing.T) {
	if _, err := NewStream(StreamConfig{}); !errors.Is(err, ErrNoSink) {
		t.Fatalf("err = %v", err)
	}
}

// TestStreamAgainstModel runs random publisher histories with lost,
// duplicated and reordered-by-replay batches, a bounded replay buffer and
// restarts, and checks the index the stream builds: exactly the publisher's
// state when every gap could be replayed, and never a block the publisher
// does not hold otherwise.
func TestStreamAgainstModel(t *testing.T) {
	for seed := uint64(0); seed < 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 3))
		bufCap := 0
		if seed%2 == 1 {
			bufCap = 1 + r.IntN(6)
		}
		restarts := seed%3 == 2
		pub := &fakePub{bufCap: bufCap}
		truth := model{}
		got := model{}
		lastID := uint64(0)
		sink := SinkFunc(func(ev *flashindex.Event) error {
			if ev.EventID != lastID+1 {
				return fmt.Errorf("event id %d after %d", ev.EventID, lastID)
			}
			lastID = ev.EventID
			got.apply(copyEvent(ev))
			return nil
		})
		s, _ := NewStream(StreamConfig{Sink: sink, Replayer: pub, CatchUp: true})
		steps := 10 + r.IntN(40)
		var log []string
		for i := 0; i < steps; i++ {
			if restarts && r.IntN(15) == 0 && pub.seq > 0 {
				pub = &fakePub{bufCap: bufCap}
				s.cfg.Replayer = pub
				clear(truth)
				log = append(log, "restart")
			}
			evs := make([]WireEvent, 1+r.IntN(3))
			for j := range evs {
				evs[j] = randEvent(r)
				evs[j].Medium = "" // one tier keeps collisions interesting
				if evs[j].Kind == flashindex.Stored || evs[j].Kind == flashindex.Removed {
					for k := range evs[j].Hashes {
						evs[j].Hashes[k] = uint64(r.IntN(12))
					}
				}
			}
			truth.applyWire(evs)
			p := mustEncode(randEncoding(r), 0, evs)
			seq := pub.publish(p)
			last := i == steps-1
			switch k := r.IntN(10); {
			case k < 2 && !last && !(restarts && seq == 0):
				log = append(log, fmt.Sprintf("lose %d", seq))
			default:
				log = append(log, fmt.Sprintf("deliver %d", seq))
				s.Handle(context.Background(), frame(seq, p))
			}
		}
		st := s.Stats()
		if err := s.LastError(); err != nil && st.Rejected > 0 {
			t.Fatalf("seed %d: sink: %v\nlog %v", seed, err, log)
		}
		if st.GapsUnrecovered == 0 {
			if err := got.equal(truth); err != nil {
				t.Fatalf("seed %d (buf %d): %v\nlog %v\nstats %+v", seed, bufCap, err, log, st)
			}
		} else if err := got.subsetOf(truth); err != nil {
			t.Fatalf("seed %d (buf %d): stale block after an unrecovered gap: %v\nlog %v\nstats %+v", seed, bufCap, err, log, st)
		}
	}
}

func TestStreamFirstEventID(t *testing.T) {
	rec := &recorder{}
	s, _ := NewStream(StreamConfig{Sink: rec, FirstEventID: 1000})
	s.Handle(context.Background(), frame(0, stored(1, 2)))
	s.Handle(context.Background(), frame(1, removed(1)))
	if len(rec.events) != 2 || rec.events[0].EventID != 1000 || rec.events[1].EventID != 1001 {
		t.Fatalf("events %v", rec.events)
	}
}
