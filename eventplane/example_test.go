package eventplane_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/eventplane"
	"github.com/agentkv/agentkv/eventplane/embedded"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// A relay publishes a worker's KV events; two router replicas consume
// them, and a session placed by one continues on the same worker through
// the other. A third replica starts warm from the first one's snapshot.
func Example() {
	dir, _ := os.MkdirTemp("", "eventplane-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := eventplane.Config{Model: "llama", SnapshotEvery: time.Hour}
	plane, err := eventplane.Connect(srv.URL(), cfg)
	if err != nil {
		panic(err)
	}
	defer plane.Close()
	if err := plane.Ensure(ctx); err != nil {
		panic(err)
	}

	newRouter := func(snapshot []byte) *agentkv.Router {
		rc := agentkv.Config{BlockSize: 4, Affinity: agentkv.AffinityHard}
		if snapshot != nil {
			rc.IndexSnapshot = bytes.NewReader(snapshot)
		}
		r, _ := agentkv.New(rc)
		for _, id := range []uint64{1, 2} {
			_ = r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
				return agentkv.WorkerInfo{ID: id, BlockSize: 4, KVCapacityTokens: 1 << 16}
			}))
		}
		return r
	}
	replica := func(name string, r *agentkv.Router, start uint64) *eventplane.Replica {
		rp, err := eventplane.NewReplica(plane, eventplane.ReplicaConfig{Name: name, Router: r, StartSeq: start,
			BindTimeout: 10 * time.Second})
		if err != nil {
			panic(err)
		}
		rp.Start(ctx)
		return rp
	}
	a := replica("a", newRouter(nil), 0)
	defer a.Close()
	b := replica("b", newRouter(nil), 0)
	defer b.Close()

	// Worker 2's relay: the engine stored two blocks.
	relay, _ := eventplane.NewPublisher(plane, eventplane.PublisherConfig{
		Worker: eventplane.WorkerInfo{ID: 2, BlockSize: 4}, NoAnnounce: true})
	relay.Start(ctx)
	defer relay.Close()
	prompt := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	_ = relay.Apply(&flashindex.Event{Worker: flashindex.Worker{ID: 2}, Kind: flashindex.Stored, BlockSize: 4,
		Blocks: []flashindex.StoredBlock{{EngineHash: 10, Tokens: prompt[:4]}, {EngineHash: 11, Tokens: prompt[4:]}}})
	_ = relay.Flush(ctx)
	last, _ := plane.LastSeq(ctx)
	_ = a.WaitApplied(ctx, last)
	_ = b.WaitApplied(ctx, last)

	ac := session.AgentContext{SessionID: "agent-1"}
	d, src, _ := a.RouteBinding(ctx, &agentkv.Request{Tokens: prompt, Agent: ac})
	fmt.Println("replica a:", d.Worker, src, "cached", d.Cached.Device)
	d.Done(agentkv.Usage{})
	d, src, _ = b.RouteBinding(ctx, &agentkv.Request{Tokens: append(prompt, 9, 9, 9, 9), Agent: ac})
	fmt.Println("replica b:", d.Worker, src)
	d.Done(agentkv.Usage{})

	if _, err := a.Snapshot(ctx); err != nil {
		panic(err)
	}
	snap, _ := eventplane.LoadSnapshot(ctx, plane)
	c := replica("c", newRouter(snap.Data), snap.Seq+1)
	defer c.Close()
	d, _, _ = c.RouteBinding(ctx, &agentkv.Request{Tokens: prompt})
	fmt.Println("replica c from", snap.Replica+"'s snapshot:", d.Worker, "cached", d.Cached.Device)
	d.Done(agentkv.Usage{})
	// Output:
	// replica a: 2/0 new cached 8
	// replica b: 2/0 shared
	// replica c from a's snapshot: 2/0 cached 8
}
