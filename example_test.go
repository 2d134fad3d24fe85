package agentkv_test

import (
	"fmt"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/session"
)

// Two workers; worker 2 reports (through a KV event) that it holds the first
// 32 tokens of the session's context, so the session's next turn goes there.
func ExampleRouter() {
	r, err := agentkv.New(agentkv.Config{BlockSize: 16})
	if err != nil {
		panic(err)
	}
	for _, id := range []uint64{1, 2} {
		r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
			return agentkv.WorkerInfo{ID: id, BlockSize: 16, KVCapacityTokens: 100_000}
		}))
	}
	prompt := make([]uint32, 40)
	for i := range prompt {
		prompt[i] = uint32(1000 + i)
	}
	r.ApplyEvent(&flashindex.Event{
		Worker: flashindex.Worker{ID: 2}, EventID: 1, Kind: flashindex.Stored, Tier: flashindex.Device, BlockSize: 16,
		Blocks: []flashindex.StoredBlock{{EngineHash: 0xa, Tokens: prompt[:16]}, {EngineHash: 0xb, Tokens: prompt[16:32]}},
	})

	d, err := r.TryRoute(&agentkv.Request{Tokens: prompt, Agent: session.AgentContext{SessionID: "agent-1"}})
	if err != nil {
		panic(err)
	}
	fmt.Println("worker", d.Worker.ID, "cached on device", d.Cached.Device, "tokens")
	d.Done(agentkv.Usage{PromptTokens: 40, CompletionTokens: 12})
	// Output: worker 2 cached on device 32 tokens
}
