package kvhint

import (
	"strconv"
	"time"
)

// MaxWireActions bounds the actions of one envelope and the results of one
// reply that the decoders accept, whatever Bounds say: a longer array is a
// *DecodeError before anything is allocated for it. It keeps an untrusted
// message from costing more than a fixed multiple of its size (see
// TestDecodersAllocationBounded) and is 64 times DefaultMaxActions.
const MaxWireActions = 1 << 12

// MaxWireTTL is the longest TTL either encoding carries (10 days). JSON
// writes TTLs as float seconds ("ttl_seconds", as Dynamo and vLLM do); below
// this limit nanoseconds survive the float round trip exactly. Decoders treat
// a longer or negative TTL as a malformed action.
const MaxWireTTL = 240 * time.Hour

// Bounds are the limits Validate and Clip enforce. The zero value of each
// field means its documented default; use Bounds{} for all defaults. Bounds
// is a plain value, safe to copy and to share between goroutines.
type Bounds struct {
	MinTTL      time.Duration // shortest Pin/Retain TTL; default 1s
	MaxTTL      time.Duration // longest Pin/Retain TTL; default 24h, at most MaxWireTTL
	MaxPriority int32         // highest Retain priority; default 100 (vLLM's retention scale)
	MaxBlocks   int           // block hashes in one target; default 8192
	MaxLimit    uint32        // largest Limit; default 1<<20
	MaxSources  int           // Sources of one Share action; default 8
	MaxActions  int           // actions in one envelope; default 64 (SGLang's cap), at most MaxWireActions
	MaxIDLen    int           // bytes in ids, session ids and endpoints; default 512 (SGLang's cap)
}

// Defaults of Bounds.
const (
	DefaultMinTTL      = time.Second
	DefaultMaxTTL      = 24 * time.Hour
	DefaultMaxPriority = 100
	DefaultMaxBlocks   = 8192
	DefaultMaxLimit    = 1 << 20
	DefaultMaxSources  = 8
	DefaultMaxActions  = 64
	DefaultMaxIDLen    = 512
)

func (b Bounds) withDefaults() Bounds {
	if b.MinTTL == 0 {
		b.MinTTL = DefaultMinTTL
	}
	if b.MaxTTL == 0 {
		b.MaxTTL = DefaultMaxTTL
	}
	if b.MaxPriority == 0 {
		b.MaxPriority = DefaultMaxPriority
	}
	if b.MaxBlocks == 0 {
		b.MaxBlocks = DefaultMaxBlocks
	}
	if b.MaxLimit == 0 {
		b.MaxLimit = DefaultMaxLimit
	}
	if b.MaxSources == 0 {
		b.MaxSources = DefaultMaxSources
	}
	if b.MaxActions == 0 {
		b.MaxActions = DefaultMaxActions
	}
	if b.MaxIDLen == 0 {
		b.MaxIDLen = DefaultMaxIDLen
	}
	return b
}

// Check reports whether b itself is consistent (after defaults): no negative
// field, MinTTL <= MaxTTL <= MaxWireTTL. The error wraps ErrConfig.
func (b Bounds) Check() error {
	d := b.withDefaults()
	switch {
	case b.MinTTL < 0 || b.MaxTTL < 0 || b.MaxPriority < 0 || b.MaxBlocks < 0 || b.MaxSources < 0 || b.MaxActions < 0 || b.MaxIDLen < 0:
		return configErr("bounds: negative field")
	case d.MinTTL > d.MaxTTL:
		return configErr("bounds: MinTTL %v above MaxTTL %v", d.MinTTL, d.MaxTTL)
	case d.MaxTTL > MaxWireTTL:
		return configErr("bounds: MaxTTL %v above MaxWireTTL %v", d.MaxTTL, MaxWireTTL)
	case d.MaxActions > MaxWireActions:
		return configErr("bounds: MaxActions %d above MaxWireActions %d", d.MaxActions, MaxWireActions)
	}
	return nil
}

// Validate checks e and every action against b (zero fields: defaults):
// a message id, at most MaxActions actions with distinct ids, and each
// action as Action.Validate checks it. An action with an empty SessionID is
// checked against the envelope's. The first violation is returned as a
// *ValidationError.
func (e *Envelope) Validate(b Bounds) error {
	b = b.withDefaults()
	if e.MessageID == "" {
		return &ValidationError{Index: -1, Field: "message_id", Msg: "empty"}
	}
	if len(e.MessageID) > b.MaxIDLen {
		return &ValidationError{Index: -1, Field: "message_id", Msg: "longer than " + strconv.Itoa(b.MaxIDLen) + " bytes"}
	}
	if len(e.SessionID) > b.MaxIDLen {
		return &ValidationError{Index: -1, Field: "session_id", Msg: "longer than " + strconv.Itoa(b.MaxIDLen) + " bytes"}
	}
	if len(e.Actions) > b.MaxActions {
		return &ValidationError{Index: -1, Field: "actions", Msg: strconv.Itoa(len(e.Actions)) + " actions, more than " + strconv.Itoa(b.MaxActions)}
	}
	for i := range e.Actions {
		a := &e.Actions[i]
		if err := a.validate(b, i, e.SessionID); err != nil {
			return err
		}
		for j := 0; j < i; j++ {
			if e.Actions[j].ID == a.ID {
				return &ValidationError{Index: i, ActionID: a.ID, Field: "action_id", Msg: "duplicate of action " + strconv.Itoa(j)}
			}
		}
	}
	return nil
}

// Validate checks a against b (zero fields: defaults) and the per-kind rules
// in the Action table: non-empty id and session id, a well-formed target
// within MaxBlocks, the kind's required parameters inside their bounds, and
// zero values for parameters the kind does not use. The error is a
// *ValidationError wrapping ErrInvalid.
func (a *Action) Validate(b Bounds) error { return a.validate(b.withDefaults(), 0, "") }

func (a *Action) validate(b Bounds, index int, envSession string) error {
	bad := func(field, msg string) error {
		return &ValidationError{Index: index, ActionID: a.ID, Field: field, Msg: msg}
	}
	if a.ID == "" {
		return bad("action_id", "empty")
	}
	if len(a.ID) > b.MaxIDLen {
		return bad("action_id", "longer than "+strconv.Itoa(b.MaxIDLen)+" bytes")
	}
	if !a.Kind.Valid() {
		return bad("action_type", "unknown kind "+a.Kind.String())
	}
	session := a.SessionID
	if session == "" {
		session = envSession
	}
	if session == "" {
		return bad("session_id", "empty")
	}
	if len(session) > b.MaxIDLen {
		return bad("session_id", "longer than "+strconv.Itoa(b.MaxIDLen)+" bytes")
	}
	t := &a.Target
	if len(t.Blocks) > 0 && t.Range.Unit != UnitNone {
		return bad("block_hashes", "both block hashes and a range")
	}
	if len(t.Blocks) > b.MaxBlocks {
		return bad("block_hashes", strconv.Itoa(len(t.Blocks))+" blocks, more than "+strconv.Itoa(b.MaxBlocks))
	}
	switch t.Range.Unit {
	case UnitNone:
		if t.Range.Start != 0 || t.Range.End != 0 {
			return bad("range", "bounds without a unit")
		}
	case UnitBlocks, UnitTokens:
		if t.Range.End != 0 && t.Range.Start >= t.Range.End {
			return bad(rangeKey(t.Range.Unit), "empty: start "+strconv.FormatUint(t.Range.Start, 10)+" >= end "+strconv.FormatUint(t.Range.End, 10))
		}
	default:
		return bad("range", "unknown unit "+t.Range.Unit.String())
	}
	if a.Limit > b.MaxLimit {
		return bad("limit_blocks", strconv.FormatUint(uint64(a.Limit), 10)+" above "+strconv.FormatUint(uint64(b.MaxLimit), 10))
	}
	if !a.Dest.Valid() {
		return bad("dest_tier", "unknown tier "+a.Dest.String())
	}
	usesTTL := a.Kind == KindPin || a.Kind == KindRetain
	if !usesTTL && a.TTL != 0 {
		return bad("ttl_seconds", "not used by "+a.Kind.String())
	}
	if usesTTL && (a.TTL < b.MinTTL || a.TTL > b.MaxTTL) {
		return bad("ttl_seconds", a.TTL.String()+" outside ["+b.MinTTL.String()+", "+b.MaxTTL.String()+"]")
	}
	if a.Kind != KindRetain && a.Priority != 0 {
		return bad("priority", "not used by "+a.Kind.String())
	}
	if a.Kind != KindShare && len(a.Sources) != 0 {
		return bad("sources", "not used by "+a.Kind.String())
	}
	switch a.Kind {
	case KindShare:
		if len(t.Blocks) == 0 {
			return bad("block_hashes", "share needs block hashes")
		}
		if a.Dest != TierNone && a.Dest != TierDevice && a.Dest != TierHost {
			return bad("dest_tier", "share destination must be device or host, not "+a.Dest.String())
		}
		if len(a.Sources) == 0 {
			return bad("sources", "share needs at least one source")
		}
		if len(a.Sources) > b.MaxSources {
			return bad("sources", strconv.Itoa(len(a.Sources))+" sources, more than "+strconv.Itoa(b.MaxSources))
		}
		for i := range a.Sources {
			s := &a.Sources[i]
			switch {
			case s.Endpoint == "":
				return bad("sources", "source "+strconv.Itoa(i)+": empty endpoint")
			case len(s.Endpoint) > b.MaxIDLen:
				return bad("sources", "source "+strconv.Itoa(i)+": endpoint longer than "+strconv.Itoa(b.MaxIDLen)+" bytes")
			case !s.Tier.Valid():
				return bad("sources", "source "+strconv.Itoa(i)+": unknown tier "+s.Tier.String())
			case int(s.Blocks) > len(t.Blocks):
				return bad("sources", "source "+strconv.Itoa(i)+": holds "+strconv.FormatUint(uint64(s.Blocks), 10)+" of "+strconv.Itoa(len(t.Blocks))+" blocks")
			}
		}
	case KindPrefetch:
		if a.Dest != TierDevice && a.Dest != TierHost {
			return bad("dest_tier", "prefetch destination must be device or host, not "+quoteTier(a.Dest))
		}
	case KindDemote:
		if a.Dest != TierHost && a.Dest != TierDisk && a.Dest != TierExternal {
			return bad("dest_tier", "demote destination must be host, disk or external, not "+quoteTier(a.Dest))
		}
	case KindPin, KindRelease:
		if a.Dest != TierNone {
			return bad("dest_tier", "not used by "+a.Kind.String())
		}
	case KindRetain:
		if a.Dest != TierNone {
			return bad("dest_tier", "not used by retain")
		}
		if a.Priority < 1 || a.Priority > b.MaxPriority {
			return bad("priority", strconv.Itoa(int(a.Priority))+" outside [1, "+strconv.Itoa(int(b.MaxPriority))+"]")
		}
	}
	return nil
}

func quoteTier(t Tier) string {
	if t == TierNone {
		return "none"
	}
	return t.String()
}

// Clip brings a's numeric parameters inside b (zero fields: defaults), the
// way an engine clips a hint it accepts: TTL and Retain priority are clamped
// to their ranges, a target with more than MaxBlocks hashes keeps its
// root-most MaxBlocks, Limit is clamped to MaxLimit, Sources are cut to
// MaxSources and each source's Blocks to the target's length. It reports
// whether anything changed. Structural faults (unknown kind, missing session,
// wrong tier) are not clipped; run Validate afterwards. Clip reslices
// a.Target.Blocks and a.Sources but never writes their elements.
func (a *Action) Clip(b Bounds) (clipped bool) {
	b = b.withDefaults()
	if a.Kind == KindPin || a.Kind == KindRetain {
		if a.TTL < b.MinTTL {
			a.TTL, clipped = b.MinTTL, true
		} else if a.TTL > b.MaxTTL {
			a.TTL, clipped = b.MaxTTL, true
		}
	}
	if a.Kind == KindRetain {
		if a.Priority < 1 {
			a.Priority, clipped = 1, true
		} else if a.Priority > b.MaxPriority {
			a.Priority, clipped = b.MaxPriority, true
		}
	}
	if len(a.Target.Blocks) > b.MaxBlocks {
		a.Target.Blocks, clipped = a.Target.Blocks[:b.MaxBlocks], true
	}
	if a.Limit > b.MaxLimit {
		a.Limit, clipped = b.MaxLimit, true
	}
	if len(a.Sources) > b.MaxSources {
		a.Sources, clipped = a.Sources[:b.MaxSources], true
	}
	for i := range a.Sources {
		if int(a.Sources[i].Blocks) > len(a.Target.Blocks) {
			// Copy on write: the caller's Sources array stays untouched.
			s := make([]Source, len(a.Sources))
			copy(s, a.Sources)
			for j := range s {
				if int(s[j].Blocks) > len(a.Target.Blocks) {
					s[j].Blocks = uint32(len(a.Target.Blocks))
				}
			}
			a.Sources, clipped = s, true
			break
		}
	}
	return clipped
}
