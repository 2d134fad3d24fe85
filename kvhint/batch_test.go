package kvhint

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// refBatch is Batch as first written: one worker's envelope grown action
// by action, each id its own string.
func refBatch(prefix string, seq *uint64, hints []Hint) []Outbound {
	var dst []Outbound
	for i := range hints {
		h := &hints[i]
		j := 0
		for ; j < len(dst) && dst[j].Worker != h.Worker; j++ {
		}
		if j == len(dst) {
			*seq++
			dst = append(dst, Outbound{Worker: h.Worker, Envelope: &Envelope{ProtocolVersion: ProtocolVersion,
				MessageID: prefix + "-" + strconv.FormatUint(*seq, 10), SessionID: h.Action.SessionID}})
		}
		env := dst[j].Envelope
		a := h.Action
		if a.ID == "" {
			a.ID = env.MessageID + "." + strconv.Itoa(len(env.Actions))
		}
		if env.SessionID != a.SessionID {
			env.SessionID = ""
		}
		env.Actions = append(env.Actions, a)
	}
	return dst
}

// TestBatchEqualsReference: Batch groups, orders, names and sets session
// ids as the reference does, on random hint lists (several workers,
// sessions, named and unnamed actions, envelopes of more than ten
// actions), and appends after what dst held.
func TestBatchEqualsReference(t *testing.T) {
	b := NewBatcher(strings.Repeat("rt", 40)) // a prefix longer than the id buffer on the stack
	var seq uint64
	var buf []Source
	for n := range 500 {
		r := rand.New(rand.NewPCG(uint64(n), 3))
		hints := make([]Hint, r.IntN(30))
		for i := range hints {
			hints[i] = Hint{Worker: WorkerID{ID: uint64(r.IntN(3)), DPRank: uint32(r.IntN(2))},
				Action: Action{Kind: KindRelease, SessionID: fmt.Sprint("s", r.IntN(2))}}
			if r.IntN(5) == 0 {
				hints[i].Action.ID = fmt.Sprint("named", i)
			}
			for k := range r.IntN(4) * r.IntN(2) { // Sources, in one buffer as Input.SourceBuf holds them
				buf = append(buf, Source{Worker: WorkerID{ID: uint64(k)}, Endpoint: fmt.Sprint("http://w", k), Blocks: uint32(i)})
				hints[i].Action.Sources = buf[len(buf)-1-k : len(buf) : len(buf)]
			}
		}
		want := refBatch(b.prefix, &seq, hints)
		want = cloneSources(want)
		lead := Outbound{Worker: WorkerID{ID: 99}}
		got := b.Batch([]Outbound{lead}, hints)
		if !reflect.DeepEqual(got[0], lead) || len(got)-1 != len(want) {
			t.Fatalf("case %d: %d envelopes after dst's, want %d", n, len(got)-1, len(want))
		}
		// The Sources are the envelopes' own: the buffer's reuse changes nothing.
		for i := range buf {
			buf[i] = Source{Endpoint: "reused"}
		}
		buf = buf[:0]
		for i := range want {
			if w, g := want[i], got[i+1]; !reflect.DeepEqual(g, w) {
				t.Fatalf("case %d envelope %d:\n got %+v\nwant %+v", n, i, g, w)
			}
		}
	}
}

// cloneSources gives each action of out its own copy of its Sources.
func cloneSources(out []Outbound) []Outbound {
	for _, o := range out {
		for i := range o.Envelope.Actions {
			if a := &o.Envelope.Actions[i]; a.Sources != nil {
				a.Sources = append([]Source(nil), a.Sources...)
			}
		}
	}
	return out
}

// TestBatchAllocs: an envelope of one action takes one allocation, its
// Source included; one of several takes two (the envelope, its actions)
// and one more for its actions' Sources; each envelope's ids one more.
func TestBatchAllocs(t *testing.T) {
	b := NewBatcher("agentkv")
	src := []Source{{Worker: WorkerID{ID: 3}, Endpoint: "http://w3"}}
	hints := []Hint{{WorkerID{ID: 1}, Action{Kind: KindShare, SessionID: "s", Sources: src}}, {WorkerID{ID: 1}, Action{Kind: KindPin, SessionID: "s"}},
		{WorkerID{ID: 1}, Action{Kind: KindDemote, SessionID: "s"}}, {WorkerID{ID: 2}, Action{Kind: KindShare, SessionID: "s", Sources: src}}}
	dst := make([]Outbound, 0, 4)
	if a := testing.AllocsPerRun(100, func() { _ = b.Batch(dst[:0], hints) }); a > 6 {
		t.Fatalf("%v allocations for an envelope of three actions and one of one, want 6", a)
	}
}

// TestRecycle: only an envelope of one action that Batch made goes back
// for reuse; a copy of it, a literal or a batch of several is left alone,
// and so is the original a copy was made of.
func TestRecycle(t *testing.T) {
	var b Batcher
	hint := func(id uint64) Hint {
		return Hint{Worker: WorkerID{ID: id}, Action: Action{Kind: KindPin, SessionID: "s", Target: Target{Blocks: []uint64{id, id + 1}}}}
	}
	out := b.Batch(nil, []Hint{hint(1), hint(2), hint(2)})
	one, two := out[0].Envelope, out[1].Envelope
	if len(one.Actions) != 1 || len(two.Actions) != 2 {
		t.Fatalf("batches of %d and %d actions", len(one.Actions), len(two.Actions))
	}
	want, err := one.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	cp := *one
	Recycle(&cp) // a copy: its action is the original's
	lit := &Envelope{MessageID: "lit", Actions: []Action{{ID: "x", Kind: KindPin}}}
	Recycle(lit)
	Recycle(two)
	Recycle(nil)
	if got, _ := one.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Fatalf("a copy's recycling changed the original:\n%s\n%s", got, want)
	}
	if lit.MessageID != "lit" || lit.Actions[0].ID != "x" || len(two.Actions) != 2 || two.Actions[1].Target.Blocks[0] != 2 {
		t.Fatal("an envelope Batch did not make as one action was recycled")
	}
	Recycle(one)
	if one.MessageID != "" || len(one.Actions) != 0 {
		t.Fatalf("a recycled envelope keeps %+v", one)
	}
	// What Batch makes next, from the pool or not, is whole.
	again := b.Batch(nil, []Hint{hint(3)})[0].Envelope
	if len(again.Actions) != 1 || again.Actions[0].Target.Blocks[0] != 3 || again.MessageID == "" {
		t.Fatalf("after recycling: %+v", again)
	}
}
