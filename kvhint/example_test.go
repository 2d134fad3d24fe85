package kvhint_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentkv/agentkv/kvhint"
)

func ExampleEnvelope_AppendJSON() {
	e := kvhint.Envelope{MessageID: "router-1-7", SessionID: "sess-42", Actions: []kvhint.Action{{
		ID: "router-1-7.0", Kind: kvhint.KindRetain, SessionID: "sess-42",
		Target:   kvhint.Target{Blocks: []uint64{11, 22}},
		TTL:      90 * time.Second,
		Priority: 60,
	}}}
	if err := e.Validate(kvhint.Bounds{}); err != nil {
		fmt.Println(err)
		return
	}
	b, _ := e.AppendJSON(nil)
	fmt.Println(string(b))
	// Output:
	// {"protocol_version":"0.1","message_id":"router-1-7","session_id":"sess-42","actions":[{"action_id":"router-1-7.0","action_type":"kv.retain","action_version":"1.0","payload":{"session_id":"sess-42","block_hashes":[11,22],"ttl_seconds":90,"priority":60}}]}
}

func ExampleDecodeJSON() {
	// An envelope from a newer router: one action this package does not
	// know, one of a newer major version, and a Dynamo kv.fetch.
	doc := `{"protocol_version":"0.1","message_id":"m","actions":[
	  {"action_id":"a0","action_type":"kv.future_action","action_version":"7.3","payload":{}},
	  {"action_id":"a1","action_type":"kv.pin","action_version":"2.0","payload":{}},
	  {"action_id":"a2","action_type":"kv.fetch","action_version":"1.0",
	   "payload":{"source_control_endpoint":"tcp://127.0.0.1:23280","block_hashes":[11,22]}}]}`
	var e kvhint.Envelope
	if err := kvhint.DecodeJSON([]byte(doc), &e); err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range e.Actions {
		fmt.Println(a.Kind, a.ID, a.Target.Blocks, a.Sources[0].Endpoint)
	}
	for _, s := range e.Skipped {
		fmt.Println("skipped", s.ActionID, s.ActionType, s.Reason)
	}
	// Output:
	// share a2 [11 22] tcp://127.0.0.1:23280
	// skipped a0 kv.future_action unknown-type
	// skipped a1 kv.pin unsupported-version
}

func ExampleTailOffload() {
	p, err := kvhint.NewTailOffload(kvhint.TailOffloadConfig{After: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	w := kvhint.WorkerID{ID: 7}
	session := kvhint.Session{
		ID: "sess-42", Worker: w,
		Shared: []uint64{1, 2}, SharedRefs: []int32{12, 12}, // a system prompt
		Unique: []uint64{3, 4, 5},
	}

	// A tick while the session has been running a tool for two minutes:
	// demote its unique tail to host.
	tick := kvhint.Input{Event: kvhint.EventTick, Session: session}
	tick.Session.Phase, tick.Session.Acting = kvhint.PhaseActing, 2*time.Minute
	for _, h := range p.Evaluate(nil, &tick) {
		fmt.Println(h.Worker, h.Action.Kind, h.Action.Dest, h.Action.Target.Blocks)
	}

	// Its next turn is admitted on the same worker, which now holds the
	// tail on host: prefetch it back to device.
	admit := kvhint.Input{Event: kvhint.EventAdmit, Session: session, Worker: w,
		Prefix: []uint64{1, 2, 3, 4, 5},
		Cached: []kvhint.Residency{{Worker: w, Device: 2, Host: 3}}}
	for _, h := range p.Evaluate(nil, &admit) {
		fmt.Println(h.Worker, h.Action.Kind, h.Action.Dest, h.Action.Target.Blocks)
	}
	// Output:
	// 7/0 demote host [3 4 5]
	// 7/0 prefetch device [3 4 5]
}

func ExampleBatcher() {
	hints := []kvhint.Hint{
		{Worker: kvhint.WorkerID{ID: 1}, Action: kvhint.Action{Kind: kvhint.KindRelease, SessionID: "s"}},
		{Worker: kvhint.WorkerID{ID: 2}, Action: kvhint.Action{Kind: kvhint.KindPin, SessionID: "s", TTL: time.Minute}},
		{Worker: kvhint.WorkerID{ID: 1}, Action: kvhint.Action{Kind: kvhint.KindDemote, SessionID: "s", Dest: kvhint.TierDisk}},
	}
	for _, ob := range kvhint.NewBatcher("r1").Batch(nil, hints) {
		fmt.Print(ob.Worker, " ", ob.Envelope.MessageID, ":")
		for _, a := range ob.Envelope.Actions {
			fmt.Print(" ", a.ID, "=", a.Kind)
		}
		fmt.Println()
	}
	// Output:
	// 1/0 r1-1: r1-1.0=release r1-1.1=demote
	// 2/0 r1-2: r1-2.0=pin
}

func ExampleQueue() {
	inner := kvhint.SinkFunc(func(ctx context.Context, e *kvhint.Envelope) error {
		fmt.Println("delivered", e.MessageID)
		return nil
	})
	q, err := kvhint.NewQueue(inner, kvhint.QueueConfig{Capacity: 64})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Send never blocks: a full queue drops and counts.
	_ = q.Send(context.Background(), &kvhint.Envelope{MessageID: "m-1"})
	_ = q.Send(context.Background(), &kvhint.Envelope{MessageID: "m-2"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.Close(ctx); err != nil {
		fmt.Println(err)
	}
	s := q.Stats()
	fmt.Println(s.Enqueued, s.Delivered, s.Dropped)
	// Output:
	// delivered m-1
	// delivered m-2
	// 2 2 0
}

func ExampleReply_Counts() {
	rep := kvhint.Reply{MessageID: "m-1", Results: []kvhint.Result{
		{ActionID: "m-1.0", Outcome: kvhint.OutcomeAccepted, Blocks: 12},
		{ActionID: "m-1.1", Outcome: kvhint.OutcomeClipped, Blocks: 4, Reason: "lease capped at 60s"},
		{ActionID: "m-1.2", Outcome: kvhint.OutcomeMissing},
	}}
	c := rep.Counts()
	fmt.Printf("accepted=%d clipped=%d missing=%d blocks=%d\n", c.Accepted, c.Clipped, c.Missing, c.Blocks)
	// Output:
	// accepted=1 clipped=1 missing=1 blocks=16
}
