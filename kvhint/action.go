package kvhint

import (
	"fmt"
	"strconv"
	"time"
)

// WorkerID names one engine worker: an instance id and its data-parallel
// rank (0 without data parallelism). It mirrors Dynamo's WorkerWithDpRank.
type WorkerID struct {
	ID     uint64
	DPRank uint32
}

func (w WorkerID) String() string {
	return strconv.FormatUint(w.ID, 10) + "/" + strconv.FormatUint(uint64(w.DPRank), 10)
}

// Less orders workers by ID, then DPRank. Policies break ties with it so
// that their output does not depend on map or slice order.
func (w WorkerID) Less(o WorkerID) bool {
	if w.ID != o.ID {
		return w.ID < o.ID
	}
	return w.DPRank < o.DPRank
}

// Tier is a KV storage tier, hottest first. The zero value TierNone means
// "not specified".
type Tier uint8

const (
	TierNone     Tier = iota // not specified
	TierDevice               // GPU memory
	TierHost                 // pinned CPU memory
	TierDisk                 // local disk / second CPU tier
	TierExternal             // a store outside the worker (e.g. Mooncake)
)

var tierNames = [...]string{"", "device", "host", "disk", "external"}

// String returns the wire name ("device", "host", "disk", "external"; "" for
// TierNone).
func (t Tier) String() string {
	if int(t) < len(tierNames) {
		return tierNames[t]
	}
	return "tier(" + strconv.Itoa(int(t)) + ")"
}

// Valid reports whether t is one of the defined tiers (TierNone included).
func (t Tier) Valid() bool { return int(t) < len(tierNames) }

// Hotter reports whether t is a hotter tier than o. TierNone is neither
// hotter nor colder than anything.
func (t Tier) Hotter(o Tier) bool { return t != TierNone && o != TierNone && t < o }

// ParseTier maps a wire name to a Tier. ok is false for an unknown name.
func ParseTier(s string) (t Tier, ok bool) {
	for i := 1; i < len(tierNames); i++ {
		if tierNames[i] == s {
			return Tier(i), true
		}
	}
	return TierNone, false
}

// Kind is the verb of a hint.
type Kind uint8

const (
	// KindShare tells a worker that other workers hold a prefix it lacks and
	// names them (the source locations), so it can fetch instead of
	// recompute. Wire type "kv.fetch" (Dynamo's current name; the older
	// "kv.source_locations" is accepted on input).
	KindShare Kind = iota + 1
	// KindPrefetch asks to move blocks to a hotter tier (Dest) before they
	// are needed. Wire type "kv.prefetch".
	KindPrefetch
	// KindDemote asks to move blocks to a colder tier (Dest) without
	// dropping them. Wire type "kv.demote".
	KindDemote
	// KindPin asks to protect blocks from ordinary eviction for a lease of
	// TTL; re-sending renews the lease. Wire type "kv.pin".
	KindPin
	// KindRetain biases eviction: blocks with a higher Priority (1..100)
	// are evicted later, for TTL. Not a lease. Wire type "kv.retain".
	KindRetain
	// KindRelease says the session no longer needs the blocks; the engine
	// may reclaim them first. Wire type "kv.deref".
	KindRelease

	numKinds = int(KindRelease) + 1
)

// Wire action types (JSON "action_type").
const (
	ActionTypeShare       = "kv.fetch"
	ActionTypeShareLegacy = "kv.source_locations"
	ActionTypePrefetch    = "kv.prefetch"
	ActionTypeDemote      = "kv.demote"
	ActionTypePin         = "kv.pin"
	ActionTypeRetain      = "kv.retain"
	ActionTypeRelease     = "kv.deref"
)

// ActionVersion is the version this package writes in "action_version".
// Decoders read any 1.x action with the 1.0 schema (unknown payload fields
// are ignored) and skip other major versions.
const ActionVersion = "1.0"

// ProtocolVersion is the envelope "protocol_version" written when an
// Envelope leaves it empty; it is the version of Dynamo's kv_hints envelope.
const ProtocolVersion = "0.1"

var kindTypes = [numKinds]string{"", ActionTypeShare, ActionTypePrefetch, ActionTypeDemote, ActionTypePin, ActionTypeRetain, ActionTypeRelease}
var kindNames = [numKinds]string{"", "share", "prefetch", "demote", "pin", "retain", "release"}

// String returns the taxonomy name ("share", "prefetch", ...).
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Valid reports whether k is one of the six kinds.
func (k Kind) Valid() bool { return k >= KindShare && k <= KindRelease }

// ActionType returns the wire "action_type" of k, or "" for an invalid kind.
func (k Kind) ActionType() string {
	if k.Valid() {
		return kindTypes[k]
	}
	return ""
}

// KindOf maps a wire action type to a Kind; ok is false for a type this
// package does not implement.
func KindOf(actionType string) (k Kind, ok bool) {
	switch actionType {
	case ActionTypeShare, ActionTypeShareLegacy:
		return KindShare, true
	case ActionTypePrefetch:
		return KindPrefetch, true
	case ActionTypeDemote:
		return KindDemote, true
	case ActionTypePin:
		return KindPin, true
	case ActionTypeRetain:
		return KindRetain, true
	case ActionTypeRelease:
		return KindRelease, true
	}
	return 0, false
}

// Unit is the unit of a Range.
type Unit uint8

const (
	UnitNone   Unit = iota // no range
	UnitBlocks             // block indexes in the session's chain
	UnitTokens             // token offsets in the session's sequence
)

func (u Unit) String() string {
	switch u {
	case UnitNone:
		return ""
	case UnitBlocks:
		return "blocks"
	case UnitTokens:
		return "tokens"
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// Range is a half-open span [Start, End) of a session's blocks or tokens,
// counted from the root of the session's chain. End == 0 means "to the end
// of the session". The zero Range (Unit == UnitNone) means no range.
type Range struct {
	Unit       Unit
	Start, End uint64
}

// Target says which blocks an action is about. Exactly one form is used:
//   - Blocks: explicit block hashes (root-aligned sequence hashes, root
//     first, as the router indexes them): consecutive blocks of one chain,
//     from its root or, for an action split in parts, from a later block;
//   - Range: a span of the action's session, in blocks or tokens;
//   - neither (the zero Target): every block the session references.
type Target struct {
	Blocks []uint64
	Range  Range
}

// WholeSession reports whether t is the zero target (the whole session).
func (t Target) WholeSession() bool { return len(t.Blocks) == 0 && t.Range.Unit == UnitNone }

// Source is one location a Share action names for its blocks.
type Source struct {
	Worker   WorkerID
	Endpoint string // the source's control endpoint ("source_control_endpoint")
	Tier     Tier   // where the source holds the blocks; TierNone if unknown
	Blocks   uint32 // how many leading target blocks the source holds; 0 = all
}

// Action is one hint. Which parameters apply depends on Kind:
//
//	kind      Dest                 TTL        Priority  Sources
//	Share     Device|Host (opt.)   -          -         1..MaxSources
//	Prefetch  Device|Host (req.)   -          -         -
//	Demote    Host|Disk|External   -          -         -
//	Pin       -                    lease      -         -
//	Retain    -                    required   1..Max    -
//	Release   -                    -          -         -
//
// Limit (optional, any kind) caps how many blocks the engine should act on.
// Parameters that do not apply must be zero (Validate enforces it).
//
// An Action holds its slices by reference: encoders and Validate only read
// them; decoders allocate fresh ones.
type Action struct {
	ID        string // "action_id"; unique within its envelope
	Kind      Kind
	SessionID string // decoders fill an empty one from the envelope
	Target    Target
	Dest      Tier
	TTL       time.Duration
	Priority  int32
	Limit     uint32
	Sources   []Source
}

func (a *Action) String() string {
	return fmt.Sprintf("%s(%s, session=%q, blocks=%d)", a.Kind, a.ID, a.SessionID, len(a.Target.Blocks))
}
