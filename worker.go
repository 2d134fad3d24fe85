package agentkv

import (
	"fmt"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// WorkerInfo is what the router needs to know about a worker.
type WorkerInfo struct {
	// ID identifies the engine instance; it is the WorkerID of its KV events.
	ID uint64
	// DPRanks is the number of data-parallel ranks, each with its own KV
	// cache and routed separately. Zero means 1.
	DPRanks int
	// BlockSize is the engine's KV block size in tokens. It must equal the
	// router's; a mismatch is an error, never silent zero overlap.
	BlockSize int
	// KVCapacityTokens is the KV cache capacity of one DP rank, in tokens.
	KVCapacityTokens int
	// Endpoint is the worker's control endpoint for peer KV transfers, as
	// Share hints name their sources; "" when the worker cannot serve as a
	// source.
	Endpoint string
}

func (wi WorkerInfo) ranks() int {
	if wi.DPRanks <= 0 {
		return 1
	}
	return wi.DPRanks
}

// Worker is the adapter a GPU engine supplies to the router: its identity,
// DP ranks, block size and KV capacity. The router never imports an engine
// package: wrap an engine/vllm or engine/sglang worker (or any adapter of
// your own) in a type with an Info method, or in a WorkerFunc; Info is
// called again by AddWorker when capacity is refreshed.
type Worker interface {
	Info() WorkerInfo
}

// WorkerFunc adapts a function to Worker.
type WorkerFunc func() WorkerInfo

// Info calls f.
func (f WorkerFunc) Info() WorkerInfo { return f() }

// HintReceiver is implemented by workers that accept KV hints. The router
// asks for the sink once, when the worker is added (AddWorker), and calls
// its Send on the request path, so Send must not block: wrap a sink that
// does I/O in kvhint.NewQueue (bounded, drops counted).
type HintReceiver interface {
	HintSink() kvhint.Sink
}

// BlockSizeMismatchError reports a worker whose block size differs from the
// router's.
type BlockSizeMismatchError struct {
	Worker         uint64
	Router, Engine int
}

func (e *BlockSizeMismatchError) Error() string {
	return fmt.Sprintf("agentkv: worker %d has block size %d, router has %d: overlap would silently be zero",
		e.Worker, e.Engine, e.Router)
}

// workerState is the router's record of one (worker, DP rank).
type workerState struct {
	key      flashindex.Worker
	info     WorkerInfo
	adapter  Worker
	capBlock int                // KV capacity in blocks
	admID    admission.WorkerID // the rank's admission id (with admission)
	hints    kvhint.Sink        // the adapter's HintSink when it is a HintReceiver, else nil
}
