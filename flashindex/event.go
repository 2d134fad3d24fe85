package flashindex

import "fmt"

// Worker identifies one KV cache: an engine instance and its data-parallel
// rank. A worker without data parallelism has DPRank 0.
type Worker struct {
	ID     uint64
	DPRank uint32
}

func (w Worker) String() string { return fmt.Sprintf("%d/%d", w.ID, w.DPRank) }

// Tier is where a KV block resides on a worker, hottest first.
type Tier uint8

const (
	// Device is GPU memory (vLLM/SGLang medium "GPU" or "DEVICE").
	Device Tier = iota
	// Host is pinned CPU memory ("CPU_PINNED", "CPU_TIER1").
	Host
	// Disk is local disk or a second CPU tier ("CPU_TIER2", "DISK", "NVME").
	Disk
	// External is a store outside the worker ("EXTERNAL", "NETWORK",
	// "REMOTE", "SHARED"); the sharedpool package indexes it.
	External
)

// NumTiers is the number of tiers.
const NumTiers = 4

var tierNames = [NumTiers]string{"device", "host", "disk", "external"}

func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// TierFromMedium maps an engine's medium string to a Tier. An empty medium
// means Device (engines omit it for GPU blocks). ok is false for an unknown
// medium, which callers must count and drop rather than guess.
func TierFromMedium(medium string) (t Tier, ok bool) {
	switch medium {
	case "", "GPU", "DEVICE":
		return Device, true
	case "CPU_PINNED", "CPU_TIER1":
		return Host, true
	case "CPU_TIER2", "DISK", "NVME":
		return Disk, true
	case "EXTERNAL", "NETWORK", "REMOTE", "SHARED":
		return External, true
	}
	return 0, false
}

// EventKind says what an Event does.
type EventKind uint8

const (
	// Stored adds blocks to a worker's tier, chained under a parent block.
	Stored EventKind = iota + 1
	// Removed drops blocks from a worker's tier.
	Removed
	// Cleared drops every block of the worker on every tier and DP rank.
	Cleared
)

func (k EventKind) String() string {
	switch k {
	case Stored:
		return "stored"
	case Removed:
		return "removed"
	case Cleared:
		return "cleared"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// StoredBlock is one block of a Stored event. EngineHash is the engine's own
// opaque hash for the block (adapters reduce 32-byte hashes to 64 bits).
// Either Tokens (exactly one block of token ids, from which the index
// computes the local hash) or LocalHash (when the engine already publishes
// Dynamo-compatible local hashes, HasLocalHash set) identifies the content.
// ExtraKeys are mixed into the local hash as Hasher.LocalHashExtra does.
//
// What Apply rejects at runtime, so an adapter must guarantee it:
//   - EngineHash must be unique per (worker, tier) for as long as the
//     block is stored: an engine hash that already maps to another block
//     is a *HashConflictError (an adapter that shortens wider hashes must
//     keep them collision-free, or key them by content);
//   - Tokens must hold exactly Config.BlockSize ids (*BlockSizeError), and
//     a block needs Tokens or HasLocalHash (ErrNoContent);
//   - a Stored event's parent engine hash must be one the worker holds
//     (*UnknownParentError).
type StoredBlock struct {
	EngineHash   uint64
	Tokens       []uint32
	LocalHash    uint64
	HasLocalHash bool
	ExtraKeys    []uint64
}

// Event is one KV cache event from a worker, normalised from whatever the
// engine's wire format was. EventID increases by one per event per
// (worker ID, DP rank); a jump is a gap the adapter must resync.
//
// The index does not retain an Event or any slice in it after Apply returns,
// so adapters may reuse the buffers.
type Event struct {
	Worker  Worker
	EventID uint64
	Kind    EventKind
	Tier    Tier

	// Stored only.
	Parent    uint64 // engine hash of the parent block, if HasParent
	HasParent bool
	Blocks    []StoredBlock
	BlockSize int    // tokens per block as the engine reports it; 0 if unknown
	LoRA      string // adapter name; changes the local-hash seed

	// Removed only: engine hashes of the removed blocks.
	Hashes []uint64
}
