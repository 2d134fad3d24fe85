package kvhint

import (
	"errors"
	"fmt"
)

// Sentinel errors. Typed errors below wrap them, so callers branch with
// errors.Is and read details with errors.As.
var (
	// ErrMalformed: the bytes are not a well-formed envelope or reply.
	ErrMalformed = errors.New("kvhint: malformed input")
	// ErrVersion: the binary format version is newer than this decoder.
	ErrVersion = errors.New("kvhint: unsupported format version")
	// ErrInvalid: an action or envelope breaks the taxonomy's rules or bounds.
	ErrInvalid = errors.New("kvhint: invalid hint")
	// ErrConfig: a Config or Bounds value is out of range.
	ErrConfig = errors.New("kvhint: invalid config")
	// ErrQueueFull: a Queue dropped the envelope because it was full.
	ErrQueueFull = errors.New("kvhint: queue full")
	// ErrClosed: the Queue is closed.
	ErrClosed = errors.New("kvhint: queue closed")
)

// DecodeError reports input a decoder could not read. It wraps ErrMalformed,
// or ErrVersion for a binary envelope of a newer format.
type DecodeError struct {
	Format string // "json" or "msgpack"
	Offset int    // byte offset where decoding stopped (msgpack), or -1
	Msg    string
	err    error
}

func (e *DecodeError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("kvhint: %s at byte %d: %s", e.Format, e.Offset, e.Msg)
	}
	return fmt.Sprintf("kvhint: %s: %s", e.Format, e.Msg)
}

func (e *DecodeError) Unwrap() error {
	if e.err != nil {
		return e.err
	}
	return ErrMalformed
}

// ValidationError reports one rule an action or envelope breaks. It wraps
// ErrInvalid.
type ValidationError struct {
	Index    int    // index of the action in its envelope; -1 for the envelope itself
	ActionID string // the action's id, if any
	Field    string // the offending field, in wire (JSON) spelling
	Msg      string
}

func (e *ValidationError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("kvhint: invalid envelope: %s: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("kvhint: invalid action %d (%q): %s: %s", e.Index, e.ActionID, e.Field, e.Msg)
}

func (e *ValidationError) Unwrap() error { return ErrInvalid }

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
}
