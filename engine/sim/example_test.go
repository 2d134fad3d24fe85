package sim_test

import (
	"fmt"
	"time"

	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/trace"
)

// stickyRouter sends every session to one worker, chosen round-robin on
// the session's first request: the simplest session-affinity policy.
type stickyRouter struct {
	workers int
	next    int
	home    map[string]int
}

func (r *stickyRouter) Route(_ time.Duration, req *sim.Request) (sim.Decision, error) {
	w, ok := r.home[req.Root]
	if !ok {
		w = r.next % r.workers
		r.next++
		r.home[req.Root] = w
	}
	return sim.Decision{Worker: w}, nil
}

func (r *stickyRouter) Finished(time.Duration, *sim.Request) []uint64 { return nil }
func (r *stickyRouter) Tick(time.Duration) []uint64                   { return nil }

func Example() {
	// Two agent sessions of three turns each; every turn resends the
	// context (blocks of 64 tokens) plus 128 new tokens.
	w := &trace.Workload{Name: "example", BlockTokens: 64}
	for s, base := range []uint64{100, 200} {
		sess := trace.Session{ID: fmt.Sprint("agent-", s), ParentTurn: -1}
		var ctx []uint64
		for k := range 3 {
			ctx = append(ctx, base+uint64(2*k), base+uint64(2*k+1))
			sess.Turns = append(sess.Turns, trace.Turn{
				Delay:       2 * time.Second, // tool time before the call
				InputTokens: 64 * len(ctx), OutputTokens: 50,
				HashIDs: append([]uint64(nil), ctx...),
			})
		}
		w.Sessions = append(w.Sessions, sess)
	}

	var engines []*sim.Engine
	stored := 0
	for i := range 2 {
		e, err := sim.New(sim.Config{Worker: flashindex.Worker{ID: uint64(i)}},
			sim.EventSinkFunc(func(ev *flashindex.Event) error {
				if ev.Kind == flashindex.Stored {
					stored += len(ev.Blocks)
				}
				return nil
			}))
		if err != nil {
			panic(err)
		}
		engines = append(engines, e)
	}
	rp, err := sim.NewReplay(w, engines, &stickyRouter{workers: 2, home: map[string]int{}}, sim.ReplayConfig{})
	if err != nil {
		panic(err)
	}
	res, err := rp.Run()
	if err != nil {
		panic(err)
	}
	fmt.Printf("requests %d, prompt tokens %d, cached %d (hit rate %.2f)\n",
		res.Finished, res.PromptTokens, res.CachedTokens, res.HitRate)
	// 48 prompt blocks of 16 tokens, and 3 full blocks of generated
	// tokens per turn (private to the request).
	fmt.Printf("blocks stored %d, re-prefill tokens %d\n", stored, res.RePrefillTokens)
	turn := map[int]*sim.Request{}
	for _, r := range rp.Requests() {
		if r.Session == "agent-0" {
			turn[r.Turn] = r
		}
	}
	fmt.Printf("agent-0 turn 1 arrived %v after turn 0 finished, found %d cached tokens\n",
		turn[1].Arrival-turn[0].Finished, turn[1].CachedTokens)
	// Output:
	// requests 6, prompt tokens 1536, cached 768 (hit rate 0.50)
	// blocks stored 66, re-prefill tokens 0
	// agent-0 turn 1 arrived 2s after turn 0 finished, found 128 cached tokens
}
