package kvhint

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

func replyEqual(a, b Reply) bool {
	if a.ProtocolVersion == "" {
		a.ProtocolVersion = ProtocolVersion
	}
	if len(a.Results) == 0 {
		a.Results = nil
	}
	if len(b.Results) == 0 {
		b.Results = nil
	}
	return reflect.DeepEqual(a, b)
}

func randReply(r *rand.Rand) Reply {
	rep := Reply{MessageID: "m-" + randString(r, true)}
	if r.IntN(2) == 0 {
		rep.ProtocolVersion = ProtocolVersion
	}
	for i := range r.IntN(20) {
		res := Result{ActionID: fmt.Sprintf("%s.%d", rep.MessageID, i), Outcome: Outcome(1 + r.IntN(5)), Blocks: uint32(r.IntN(5000))}
		if r.IntN(3) == 0 {
			res.Reason = randString(r, true)
		}
		rep.Results = append(rep.Results, res)
	}
	return rep
}

func TestReplyRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		r := rand.New(rand.NewPCG(seed, 5))
		rep := randReply(r)
		js, err := rep.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got Reply
		if err := DecodeReplyJSON(js, &got); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, js)
		}
		if !replyEqual(rep, got) {
			t.Fatalf("seed %d: JSON\nwant %+v\ngot  %+v", seed, rep, got)
		}
		bin, err := rep.AppendBinary(nil)
		if err != nil {
			t.Fatal(err)
		}
		got = Reply{}
		if err := DecodeBinaryReply(bin, &got); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !replyEqual(rep, got) {
			t.Fatalf("seed %d: binary\nwant %+v\ngot  %+v", seed, rep, got)
		}
		for n := range len(bin) {
			if err := DecodeBinaryReply(bin[:n], &got); err == nil {
				t.Fatalf("seed %d: prefix %d decoded", seed, n)
			}
		}
	}
}

// TestReplyCounts compares Counts with a naive tally.
func TestReplyCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	var total Counts
	naive := map[Outcome]int{}
	var blocks uint64
	for range 50 {
		rep := randReply(r)
		rep.Results = append(rep.Results, Result{ActionID: "bogus", Outcome: 0, Blocks: 1000}) // not counted
		c := rep.Counts()
		if c.Total() != len(rep.Results)-1 {
			t.Fatalf("Total %d, want %d", c.Total(), len(rep.Results)-1)
		}
		total.Add(c)
		for _, res := range rep.Results {
			if res.Outcome.Valid() {
				naive[res.Outcome]++
				blocks += uint64(res.Blocks)
			}
		}
	}
	want := Counts{Accepted: naive[OutcomeAccepted], Clipped: naive[OutcomeClipped], Deferred: naive[OutcomeDeferred],
		Rejected: naive[OutcomeRejected], Missing: naive[OutcomeMissing], Blocks: blocks}
	if total != want {
		t.Fatalf("Counts = %+v, want %+v", total, want)
	}
}

func TestReplyUnknownOutcomeSkipped(t *testing.T) {
	doc := `{"protocol_version":"0.1","message_id":"m","results":[
	  {"action_id":"a","outcome":"accepted","blocks":4},
	  {"action_id":"b","outcome":"teleported","blocks":9},
	  {"action_id":"c","outcome":"missing"}],"counts":{"accepted":99}}`
	var rep Reply
	if err := DecodeReplyJSON([]byte(doc), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Skipped != 1 || len(rep.Results) != 2 || rep.Results[1] != (Result{ActionID: "c", Outcome: OutcomeMissing}) {
		t.Fatalf("%+v", rep)
	}
	if c := rep.Counts(); c.Accepted != 1 || c.Missing != 1 || c.Blocks != 4 {
		t.Fatalf("counts %+v (the document's \"counts\" must be ignored)", c)
	}
	bin := vmEncode(t, []any{1, "0.1", "m", []any{[]any{"a", 1, 4, ""}, []any{"b", 77, 9, "", "extra"}, []any{"c", 5, 0, "", 1, 2}}, "trailing"}, true)
	if err := DecodeBinaryReply(bin, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Skipped != 1 || len(rep.Results) != 2 || rep.Results[1].Outcome != OutcomeMissing {
		t.Fatalf("%+v", rep)
	}
	for _, bad := range []string{``, `[]`, `{"message_id":"m"}`, `{"protocol_version":"0.1","message_id":"m","results":[{"outcome":"accepted"}]}`} {
		if err := DecodeReplyJSON([]byte(bad), &rep); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if err := DecodeBinaryReply(vmEncode(t, []any{2, "0.1", "m", []any{}}, true), &rep); !errors.Is(err, ErrVersion) {
		t.Errorf("format 2: %v", err)
	}
	bad := Reply{MessageID: "m", Results: []Result{{ActionID: "a"}}}
	if _, err := bad.AppendJSON(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendJSON invalid outcome: %v", err)
	}
	if _, err := bad.AppendBinary(nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("AppendBinary invalid outcome: %v", err)
	}
}
