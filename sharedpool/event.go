package sharedpool

import (
	"errors"
	"fmt"
)

// Sentinel errors. Errors returned by this package wrap one of these; test
// with errors.Is.
var (
	// ErrInvalidLayout: a layout field is out of range.
	ErrInvalidLayout = errors.New("sharedpool: invalid layout")
	// ErrUnsupportedBackend: the HiCache backend is not Mooncake.
	ErrUnsupportedBackend = errors.New("sharedpool: unsupported HiCache backend")
	// ErrNoLayout: the index has no layout yet, so it cannot tell which
	// objects make a page.
	ErrNoLayout = errors.New("sharedpool: no layout")
	// ErrLayoutMismatch: workers disagree on the layout ([MismatchError]).
	ErrLayoutMismatch = errors.New("sharedpool: layout mismatch")
	// ErrPageSizeMismatch: the router's block size is not the page size.
	ErrPageSizeMismatch = errors.New("sharedpool: page size mismatch")
	// ErrInvalidPageHash: a page hash is not 64 lowercase hex characters.
	ErrInvalidPageHash = errors.New("sharedpool: invalid page hash")
	// ErrInvalidConfig: a Config field is out of range.
	ErrInvalidConfig = errors.New("sharedpool: invalid config")
	// ErrMalformedFrame: a ZMQ message could not be decoded at all.
	ErrMalformedFrame = errors.New("sharedpool: malformed frame")
	// ErrMalformedEvent: one event of an otherwise readable batch was
	// rejected ([Rejection]).
	ErrMalformedEvent = errors.New("sharedpool: malformed event")
)

// Kind says what an [Event] does.
type Kind uint8

const (
	// Store makes an object available on the event's medium.
	Store Kind = iota + 1
	// Remove makes an object unavailable on the event's medium, or on every
	// medium when the event has none.
	Remove
	// Clear empties the store for the event's tenant.
	Clear
)

func (k Kind) String() string {
	switch k {
	case Store:
		return "store"
	case Remove:
		return "remove"
	case Clear:
		return "clear"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one object-level event from the Mooncake master, in either of the
// two map shapes it has published ([DecodeFrames]).
type Event struct {
	Kind Kind
	// Key is the physical object key; "" when the publisher omitted it
	// (Mooncake with kv_events_emit_object_key off). Such events cannot be
	// indexed and are counted as Stats.NoKey.
	Key string
	// GroupID is Mooncake's object group ("sglang-hicache:<logical key>"
	// for SGLang HiCache), "" when absent.
	GroupID string
	// Tenant is the Mooncake tenant; "" when absent.
	Tenant string
	// Backend is the publisher's backend_id; "" when absent.
	Backend string
	// Medium is where the object became (un)available ("cpu", "disk");
	// "" when absent.
	Medium string
	// ID is the publisher's event_id (0 when absent). Informational.
	ID uint64
	// SeqHashes are the publisher's 64-bit block hashes (seq_hashes, or
	// legacy block_hashes). Informational: SGLang keys carry none.
	SeqHashes []uint64
}

// Batch is one decoded ZMQ message: the events of one publisher batch and
// the transport sequence number that orders batches.
type Batch struct {
	Topic string
	// Seq is the transport sequence number. The publisher adds one per
	// batch; a repeat is a duplicate, any other jump a gap.
	Seq uint64
	// TimestampMillis is the batch time in milliseconds since the Unix epoch
	// (older publishers send float seconds, converted here); 0 when absent.
	TimestampMillis int64
	// DPRank is the trailing data-parallel rank, -1 when absent or nil.
	DPRank int64
	// Events are the well-formed events, in publisher order.
	Events []Event
	// Rejected are the malformed events, with the reason.
	Rejected []Rejection
}

// Rejection is one malformed event of a batch. The index counts it and, when
// Key is known, drops that object: a lost event could have removed it, and
// crediting a page that is not there is worse than missing one.
type Rejection struct {
	Index int    // position in the batch's event list
	Key   string // object key if it could be read, else ""
	Err   error  // wraps ErrMalformedEvent
}
