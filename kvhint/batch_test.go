package kvhint

import (
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
	for n := range 500 {
		r := rand.New(rand.NewPCG(uint64(n), 3))
		hints := make([]Hint, r.IntN(30))
		for i := range hints {
			hints[i] = Hint{Worker: WorkerID{ID: uint64(r.IntN(3)), DPRank: uint32(r.IntN(2))},
				Action: Action{Kind: KindRelease, SessionID: fmt.Sprint("s", r.IntN(2))}}
			if r.IntN(5) == 0 {
				hints[i].Action.ID = fmt.Sprint("named", i)
			}
		}
		want := refBatch(b.prefix, &seq, hints)
		lead := Outbound{Worker: WorkerID{ID: 99}}
		got := b.Batch([]Outbound{lead}, hints)
		if !reflect.DeepEqual(got[0], lead) || len(got)-1 != len(want) {
			t.Fatalf("case %d: %d envelopes after dst's, want %d", n, len(got)-1, len(want))
		}
		for i := range want {
			if w, g := want[i], got[i+1]; !reflect.DeepEqual(g, w) {
				t.Fatalf("case %d envelope %d:\n got %+v\nwant %+v", n, i, g, w)
			}
		}
	}
}

// TestBatchAllocs: an envelope of one action takes one allocation, one
// of several takes two (the envelope, its actions), and its ids one more.
func TestBatchAllocs(t *testing.T) {
	b := NewBatcher("agentkv")
	hints := []Hint{{WorkerID{ID: 1}, Action{Kind: KindShare, SessionID: "s"}}, {WorkerID{ID: 1}, Action{Kind: KindPin, SessionID: "s"}},
		{WorkerID{ID: 1}, Action{Kind: KindDemote, SessionID: "s"}}, {WorkerID{ID: 2}, Action{Kind: KindRelease, SessionID: "s"}}}
	dst := make([]Outbound, 0, 4)
	if a := testing.AllocsPerRun(100, func() { _ = b.Batch(dst[:0], hints) }); a > 5 {
		t.Fatalf("%v allocations for an envelope of three actions and one of one, want 5", a)
	}
}
