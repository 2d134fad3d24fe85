package kvhint

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Envelope is one message of hints for one worker: Dynamo's kv_hints
// envelope {protocol_version, message_id, actions[]} plus an optional
// envelope-level session_id (consumers that do not know it ignore it).
//
// An Envelope is a plain value and not safe for concurrent mutation;
// encoders and Validate only read it, so any number of goroutines may encode
// one Envelope at once. Once handed to a Sink, it belongs to the sink.
type Envelope struct {
	ProtocolVersion string // encoders write ProtocolVersion when empty
	MessageID       string
	SessionID       string // default session of the actions; may be empty
	Actions         []Action

	// SignedHashes makes the JSON encoder write block hashes as signed
	// int64 numbers (the same 64 bits), the way SGLang names blocks
	// (hash_str_to_int64) and compares them: a Python consumer would not
	// match the unsigned spelling of a negative name. Decoders read both
	// spellings into the same uint64 and leave SignedHashes false.
	SignedHashes bool

	// Skipped lists the actions a decoder read but did not return, in input
	// order: action types this package does not implement, unsupported
	// action versions, and malformed payloads. Encoders ignore it.
	Skipped []Skip
}

// SkipReason says why a decoder skipped an action.
type SkipReason uint8

const (
	// SkipUnknownType: an action type this package does not implement,
	// e.g. one added by a newer protocol version.
	SkipUnknownType SkipReason = iota + 1
	// SkipVersion: a known action type with an action version whose major
	// number is not 1.
	SkipVersion
	// SkipMalformed: a known action type whose payload could not be read.
	SkipMalformed
)

func (r SkipReason) String() string {
	switch r {
	case SkipUnknownType:
		return "unknown-type"
	case SkipVersion:
		return "unsupported-version"
	case SkipMalformed:
		return "malformed"
	}
	return "skip(" + strconv.Itoa(int(r)) + ")"
}

// Skip records one action a decoder skipped.
type Skip struct {
	Index         int    // position in the input's action list
	ActionID      string // as read; may be empty
	ActionType    string // as read; "code:N" for an unknown binary kind code
	ActionVersion string
	Reason        SkipReason
	Detail        string // for SkipMalformed: what was wrong
}

// SkipCounts tallies e.Skipped by reason.
func (e *Envelope) SkipCounts() (unknownType, version, malformed int) {
	for i := range e.Skipped {
		switch e.Skipped[i].Reason {
		case SkipUnknownType:
			unknownType++
		case SkipVersion:
			version++
		case SkipMalformed:
			malformed++
		}
	}
	return
}

// Hint is a policy's output: an action addressed to a worker.
type Hint struct {
	Worker WorkerID
	Action Action
}

// Outbound is an envelope addressed to one worker. The envelope is the
// Outbound's own (Batch allocates it), so a sink may keep it.
type Outbound struct {
	Worker   WorkerID
	Envelope *Envelope
}

// oneAction is an envelope with room for one action, in one allocation:
// most envelopes a router sends hold one.
type oneAction struct {
	env Envelope
	one [1]Action
	src [1]Source // its Sources, when one
}

var oneActions = sync.Pool{New: func() any { return new(oneAction) }}

// Recycle gives back for reuse an envelope of one action that Batch made,
// once its last holder is done with it (a request body's encoding, say);
// any other envelope is left to the garbage collector. Nothing may read
// env, or the Action it held, after.
func Recycle(env *Envelope) {
	if env == nil || len(env.Actions) != 1 || cap(env.Actions) != 1 {
		return
	}
	// Batch's layout: the action right after the envelope. A copy of the
	// envelope, or one made otherwise, keeps its action elsewhere.
	if uintptr(unsafe.Pointer(&env.Actions[0])) != uintptr(unsafe.Pointer(env))+unsafe.Offsetof(oneAction{}.one) {
		return
	}
	blk := (*oneAction)(unsafe.Pointer(env))
	*blk = oneAction{}
	oneActions.Put(blk)
}

// Batcher groups hints into one envelope per worker and names them. Message
// ids are Prefix + "-" + a sequence number; an action without an ID gets
// its message id + "." + its index. A Batcher is safe for concurrent use
// (the sequence is atomic).
type Batcher struct {
	prefix string
	seq    atomic.Uint64
}

// NewBatcher returns a Batcher whose message ids start with prefix (use
// something unique per router process, e.g. a host name and start time).
func NewBatcher(prefix string) *Batcher { return &Batcher{prefix: prefix} }

// decimalLen is the length of n >= 0 in decimal.
func decimalLen(n int) int {
	l := 1
	for ; n >= 10; n /= 10 {
		l++
	}
	return l
}

// Batch appends to dst one Outbound per distinct worker in hints, in order of
// first appearance, each holding a new envelope of that worker's actions in
// input order. An
// envelope's SessionID is set when all its actions share one session. The
// actions are copied, their Sources too (a policy may build them in
// Input.SourceBuf); their Target.Blocks slices still alias the hints'.
func (b *Batcher) Batch(dst []Outbound, hints []Hint) []Outbound {
	start := len(dst)
	for i := range hints {
		w := hints[i].Worker
		if slices.ContainsFunc(dst[start:], func(o Outbound) bool { return o.Worker == w }) {
			continue
		}
		// The worker's actions, hints[i] first: counted, so that the
		// envelope's actions take one allocation and its ids one string
		// (the message id, then each unnamed action's "<message id>.<k>").
		n, unnamed := 0, 0
		for k := i; k < len(hints); k++ {
			if hints[k].Worker == w {
				n++
				if hints[k].Action.ID == "" {
					unnamed++
				}
			}
		}
		var buf [64]byte
		var digits [20]byte
		msg := append(buf[:0], b.prefix...)
		msg = append(msg, '-')
		msg = strconv.AppendUint(msg, b.seq.Add(1), 10)
		m := len(msg)
		var ids strings.Builder
		ids.Grow(m + unnamed*(m+1+decimalLen(n)))
		ids.Write(msg)
		k := 0
		for j := i; j < len(hints); j++ {
			if hints[j].Worker == w {
				if hints[j].Action.ID == "" {
					ids.Write(msg)
					ids.WriteByte('.')
					ids.Write(strconv.AppendInt(digits[:0], int64(k), 10))
				}
				k++
			}
		}
		all := ids.String()
		var env *Envelope
		var srcs []Source // room for the actions' Sources
		if n == 1 {
			blk := oneActions.Get().(*oneAction)
			env, blk.env.Actions = &blk.env, blk.one[:0:1]
			if len(hints[i].Action.Sources) <= len(blk.src) {
				srcs = blk.src[:0:len(blk.src)]
			}
		} else {
			env = &Envelope{Actions: make([]Action, 0, n)}
		}
		if srcs == nil {
			k := 0
			for j := i; j < len(hints); j++ {
				if hints[j].Worker == w {
					k += len(hints[j].Action.Sources)
				}
			}
			if k > 0 {
				srcs = make([]Source, 0, k)
			}
		}
		env.ProtocolVersion, env.MessageID, env.SessionID = ProtocolVersion, all[:m], hints[i].Action.SessionID
		at := m
		for j := i; j < len(hints); j++ {
			if hints[j].Worker != w {
				continue
			}
			a := hints[j].Action
			if a.ID == "" {
				end := at + m + 1 + decimalLen(len(env.Actions))
				a.ID, at = all[at:end], end
			}
			if env.SessionID != a.SessionID {
				env.SessionID = ""
			}
			if len(a.Sources) > 0 {
				k := len(srcs)
				srcs = append(srcs, a.Sources...)
				a.Sources = srcs[k:len(srcs):len(srcs)]
			}
			env.Actions = append(env.Actions, a)
		}
		dst = append(dst, Outbound{Worker: w, Envelope: env})
	}
	return dst
}
