package flashindex

import (
	"errors"
	"fmt"
)

// Sentinel errors callers branch on. Data errors are typed (below).
var (
	// ErrConfig reports an invalid Config field.
	ErrConfig = errors.New("flashindex: invalid config")
	// ErrNilEvent reports a nil *Event passed to Apply.
	ErrNilEvent = errors.New("flashindex: nil event")
	// ErrKind reports an Event whose Kind is not Stored, Removed or Cleared.
	ErrKind = errors.New("flashindex: unknown event kind")
	// ErrTier reports a Stored or Removed event on a tier this index does
	// not hold (External blocks belong to the sharedpool package) or an
	// out-of-range Tier value.
	ErrTier = errors.New("flashindex: tier not indexed (device, host and disk only)")
	// ErrNoContent reports a StoredBlock with neither Tokens nor a
	// LocalHash.
	ErrNoContent = errors.New("flashindex: stored block has neither tokens nor a local hash")
	// ErrSnapshotVersion reports a snapshot written by an unknown format
	// version.
	ErrSnapshotVersion = errors.New("flashindex: unknown snapshot version")
	// ErrSnapshotFormat reports a snapshot that is not a flashindex
	// snapshot, is truncated, or is internally inconsistent.
	ErrSnapshotFormat = errors.New("flashindex: malformed snapshot")
	// ErrSnapshotTooLarge reports a snapshot whose body decompresses past
	// Config.MaxSnapshotBytes or Config.MaxSnapshotExpansion times its
	// compressed size, or declares a count the rest of the body could not
	// hold within MaxSnapshotBytes. It matches ErrSnapshotFormat too.
	ErrSnapshotTooLarge = fmt.Errorf("%w: too large", ErrSnapshotFormat)
)

// UnknownParentError rejects a Stored event whose parent engine hash is not
// resident on any tier of the worker. The index does not re-root such
// blocks: their sequence hashes would be wrong. The usual cause is a missed
// event; resync the worker.
type UnknownParentError struct {
	Worker Worker
	Parent uint64 // engine hash
}

func (e *UnknownParentError) Error() string {
	return fmt.Sprintf("flashindex: worker %v: stored event's parent engine hash %#x is unknown", e.Worker, e.Parent)
}

// BlockSizeError rejects an event whose block size differs from the index's.
// Routing such blocks would silently report zero overlap, so it is an error.
// Block is the index of the offending block in Event.Blocks, or -1 when the
// event's BlockSize field itself disagrees.
type BlockSizeError struct {
	Worker Worker
	Block  int
	Got    int
	Want   int
}

func (e *BlockSizeError) Error() string {
	if e.Block < 0 {
		return fmt.Sprintf("flashindex: worker %v: event block size %d, index block size %d", e.Worker, e.Got, e.Want)
	}
	return fmt.Sprintf("flashindex: worker %v: stored block %d has %d tokens, index block size %d", e.Worker, e.Block, e.Got, e.Want)
}

// HashConflictError rejects a Stored event that maps an engine hash already
// resident on the worker's tier to different content.
type HashConflictError struct {
	Worker     Worker
	Tier       Tier
	EngineHash uint64
	Have, Got  uint64 // own sequence hashes
}

func (e *HashConflictError) Error() string {
	return fmt.Sprintf("flashindex: worker %v %v: engine hash %#x already maps to block %#x, event says %#x",
		e.Worker, e.Tier, e.EngineHash, e.Have, e.Got)
}

// CapacityError rejects a Stored event that would put more blocks on a
// worker than Config.MaxBlocksPerWorker allows: the engine cannot hold them,
// so the index has missed removals and the worker needs a resync.
type CapacityError struct {
	Worker Worker
	Limit  int
	Would  int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("flashindex: worker %v would hold %d blocks, limit %d", e.Worker, e.Would, e.Limit)
}

// Gap is an event id discontinuity on one worker: events Expected through
// Got-1 never arrived. The event with id Got was still applied; the adapter
// should resync the worker (replay the missed events, or clear and rebuild).
type Gap struct {
	Worker   Worker
	Expected uint64
	Got      uint64
}

func (g Gap) String() string {
	return fmt.Sprintf("worker %v: event id gap, expected %d, got %d", g.Worker, g.Expected, g.Got)
}
