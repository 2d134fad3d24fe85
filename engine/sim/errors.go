package sim

import (
	"errors"
	"fmt"
)

var (
	// ErrConfig reports an invalid engine or replay configuration.
	ErrConfig = errors.New("sim: invalid configuration")
	// ErrBlockSize reports a workload block size and an engine block size
	// neither of which divides the other, or engines of different block
	// sizes in one replay.
	ErrBlockSize = errors.New("sim: incompatible block sizes")
	// ErrRequest reports a request the engine cannot take (no prompt,
	// negative lengths, more block hashes than full prompt blocks).
	ErrRequest = errors.New("sim: invalid request")
	// ErrTooLarge reports a request whose prompt and output need more KV
	// blocks than the engine's whole device pool; vLLM rejects these too.
	ErrTooLarge = errors.New("sim: request larger than the KV pool")
	// ErrDecision reports a router decision naming a worker that does not
	// exist.
	ErrDecision = errors.New("sim: router chose an unknown worker")
	// ErrStalled reports a replay that cannot progress: requests held by
	// the router past the stall timeout with nothing else to do, or turns
	// waiting on sessions that never finish.
	ErrStalled = errors.New("sim: replay stalled")
	// ErrEngine reports an engine that had work but scheduled nothing, an
	// internal invariant; it is returned, never panicked.
	ErrEngine = errors.New("sim: engine made no progress")
)

// WorkloadError reports an invalid session or turn of a workload.
type WorkloadError struct {
	Session string
	Turn    int // -1 when the session itself is invalid
	Reason  string
}

func (e *WorkloadError) Error() string {
	if e.Turn < 0 {
		return fmt.Sprintf("sim: workload session %q: %s", e.Session, e.Reason)
	}
	return fmt.Sprintf("sim: workload session %q turn %d: %s", e.Session, e.Turn, e.Reason)
}
