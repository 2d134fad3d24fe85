package admission_test

import (
	"context"
	"fmt"
	"time"

	"github.com/agentkv/agentkv/admission"
)

// A simulator drives the synchronous RawAdmitter with its own clock and
// releases held turns when a Resume decision says so.
func Example() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var released []string
	ctl, err := admission.NewRawAdmitter(admission.Config{
		OnDecision: func(d admission.Decision) {
			if d.Kind == admission.KindResume && d.Released {
				released = append(released, d.Program)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	_ = ctl.AddWorker(1, 10_000)

	a, _ := ctl.StartRequest(t0, "agent-a", 6_000)
	fmt.Println("a runs:", a.Run, "on", a.Worker)
	b, _ := ctl.StartRequest(t0, "agent-b", 3_000) // 6000+3000+100 > 8500
	fmt.Println("b:", ctl.Status("agent-b"), b.Run)

	// a's turn ends (usage from the engine); its tool runs; then the session ends.
	_ = ctl.EndRequest(t0.Add(2*time.Second), "agent-a", 6_000, 400)
	_ = ctl.EndSession(t0.Add(3*time.Second), "agent-a")

	ctl.Tick(t0.Add(5 * time.Second))
	fmt.Println("released:", released, "b now", ctl.Status("agent-b"))
	// Output:
	// a runs: true on 1
	// b: queued false
	// released: [agent-b] b now runnable
}

// The upstream flaw, fixed: with nothing ACTING, only as many REASONING
// programs are marked as the excess needs.
func ExampleRawAdmitter_Tick() {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ctl, _ := admission.NewRawAdmitter(admission.Config{})
	_ = ctl.AddWorker(1, 100_000)
	for _, id := range []string{"p1", "p2", "p3", "p4", "p5"} {
		_, _ = ctl.StartRequest(t0, id, 10_000)
	}
	_ = ctl.SetCapacity(1, 50_000) // U = 1.0, every program mid-turn
	ctl.Drain(nil)                 // drop the five admit decisions
	r := ctl.Tick(t0.Add(5 * time.Second))
	fmt.Println("paused:", r.Paused, "marked:", r.Marked)
	for _, d := range ctl.Drain(nil) {
		fmt.Println(d.Kind, d.Program, d.Reason)
	}
	// Output:
	// paused: 0 marked: 1
	// mark p1 over-threshold
}

// A server uses the thread-safe Admitter; Admit blocks until the turn may run.
func ExampleAdmitter_Admit() {
	adm, _ := admission.New(admission.Config{}, nil)
	_ = adm.AddWorker(7, 32_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a, err := adm.Admit(ctx, "session-1", 2_000)
	fmt.Println(a.Run, a.Worker, err)
	_ = adm.EndRequest("session-1", 2_000, 150)
	p, _ := adm.Program("session-1")
	fmt.Println(p.Phase, p.Tokens)
	// Output:
	// true 7 <nil>
	// acting 2150
}
