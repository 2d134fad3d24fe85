package kvhint

import (
	"math"
	"strconv"
	"time"
)

// Binary (MessagePack) layout, format version 1. Every record is an array,
// so a reader skips what it does not know by skipping whole values, and a
// newer writer may append trailing elements that older readers ignore.
//
//	envelope: [format=1, protocol_version, message_id, session_id, [action...]]
//	action:   [kind, version_major, version_minor, action_id, session_id|nil,
//	           [block_hash...]|nil, [unit, start, end]|nil, dest_tier,
//	           ttl_ns, priority, limit_blocks, [source...]|nil]
//	source:   [worker_id, dp_rank, endpoint, tier, prefix_blocks]
//
// kind, unit and tier are the numeric values of Kind, Unit and Tier. An
// action's session_id is nil when it equals the envelope's. Integers use the
// smallest MessagePack width; readers accept any width.

// BinaryFormat is the format version AppendBinary writes and DecodeBinary
// reads.
const BinaryFormat = 1

const (
	binEnvelopeFields = 5
	binActionFields   = 12
	binSourceFields   = 5
)

// AppendBinary appends e's MessagePack encoding to dst. It fails (ErrInvalid)
// in the same cases as AppendJSON, so the two encodings accept the same
// envelopes.
func (e *Envelope) AppendBinary(dst []byte) ([]byte, error) {
	pv := e.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	dst = append(dst, 0x90|binEnvelopeFields, BinaryFormat)
	dst = mpAppendStr(dst, pv)
	dst = mpAppendStr(dst, e.MessageID)
	dst = mpAppendStr(dst, e.SessionID)
	dst = mpAppendArrayLen(dst, len(e.Actions))
	for i := range e.Actions {
		a := &e.Actions[i]
		if err := encodeCheck(a, i); err != nil {
			return dst, err
		}
		dst = append(dst, 0x90|binActionFields, byte(a.Kind), 1, 0)
		dst = mpAppendStr(dst, a.ID)
		if a.SessionID == e.SessionID {
			dst = mpAppendNil(dst)
		} else {
			dst = mpAppendStr(dst, a.SessionID)
		}
		if len(a.Target.Blocks) == 0 {
			dst = mpAppendNil(dst)
		} else {
			dst = mpAppendArrayLen(dst, len(a.Target.Blocks))
			for _, h := range a.Target.Blocks {
				dst = mpAppendUint(dst, h)
			}
		}
		if r := a.Target.Range; r.Unit == UnitNone {
			dst = mpAppendNil(dst)
		} else {
			dst = append(dst, 0x93, byte(r.Unit))
			dst = mpAppendUint(dst, r.Start)
			dst = mpAppendUint(dst, r.End)
		}
		dst = append(dst, byte(a.Dest))
		dst = mpAppendInt(dst, int64(a.TTL))
		dst = mpAppendInt(dst, int64(a.Priority))
		dst = mpAppendUint(dst, uint64(a.Limit))
		if len(a.Sources) == 0 {
			dst = mpAppendNil(dst)
		} else {
			dst = mpAppendArrayLen(dst, len(a.Sources))
			for j := range a.Sources {
				s := &a.Sources[j]
				dst = append(dst, 0x90|binSourceFields)
				dst = mpAppendUint(dst, s.Worker.ID)
				dst = mpAppendUint(dst, uint64(s.Worker.DPRank))
				dst = mpAppendStr(dst, s.Endpoint)
				dst = append(dst, byte(s.Tier))
				dst = mpAppendUint(dst, uint64(s.Blocks))
			}
		}
	}
	return dst, nil
}

// DecodeBinary decodes a MessagePack envelope into e, replacing its contents.
// It follows the same rules as DecodeJSON: a broken envelope is a
// *DecodeError (ErrMalformed; ErrVersion for a format newer than
// BinaryFormat) and leaves e zero; unknown kind codes, action major versions
// other than 1 and malformed actions are skipped and listed in e.Skipped.
// Trailing bytes after the envelope are an error. Strings are copied out of
// b; the result does not alias b.
func DecodeBinary(b []byte, e *Envelope) error {
	*e = Envelope{}
	r := mpReader{b: b}
	n := r.arrayLen()
	format := r.uint()
	if r.err == nil && n < binEnvelopeFields {
		r.fail("envelope has " + strconv.Itoa(n) + " fields, want " + strconv.Itoa(binEnvelopeFields))
	}
	if r.err == nil && format != BinaryFormat {
		r.fail("format " + strconv.FormatUint(format, 10) + ", this decoder reads " + strconv.Itoa(BinaryFormat))
		r.err.err = ErrVersion
	}
	out := Envelope{ProtocolVersion: r.str(), MessageID: r.str(), SessionID: r.str()}
	na := r.arrayLen()
	if r.err == nil && na > MaxWireActions {
		r.fail(strconv.Itoa(na) + " actions, more than MaxWireActions (" + strconv.Itoa(MaxWireActions) + ")")
	}
	if r.err != nil {
		return r.err
	}
	if na > 0 {
		out.Actions = make([]Action, 0, min(na, DefaultMaxActions))
	}
	for i := 0; i < na; i++ {
		start := r.off
		a, skip, ok := decodeActionBinary(&r, i)
		if r.err != nil {
			// A malformed action: skip it whole if it is at least a
			// well-formed value.
			skip = Skip{Index: i, Reason: SkipMalformed, Detail: r.err.Msg, ActionID: skip.ActionID, ActionType: skip.ActionType, ActionVersion: skip.ActionVersion}
			r.err, r.off = nil, start
			if r.skip(0); r.err != nil {
				return r.err
			}
			ok = false
		}
		if !ok {
			out.Skipped = append(out.Skipped, skip)
			continue
		}
		if a.SessionID == "" {
			a.SessionID = out.SessionID
		}
		out.Actions = append(out.Actions, a)
	}
	for i := binEnvelopeFields; i < n && r.err == nil; i++ {
		r.skip(0)
	}
	if r.err == nil && r.off != len(b) {
		r.fail("trailing bytes after envelope")
	}
	if r.err != nil {
		return r.err
	}
	*e = out
	return nil
}

// decodeActionBinary reads one action. ok is false when the action is
// skipped (skip says why); on a read error r.err is set and skip carries what
// was read so far.
func decodeActionBinary(r *mpReader, index int) (a Action, skip Skip, ok bool) {
	n := r.arrayLen()
	if r.err == nil && n < 3 {
		r.fail("action has " + strconv.Itoa(n) + " fields")
	}
	code, major, minor := r.uint(), r.uint(), r.uint()
	skip = Skip{Index: index}
	if r.err != nil {
		return a, skip, false
	}
	skip.ActionVersion = strconv.FormatUint(major, 10) + "." + strconv.FormatUint(minor, 10)
	kind := Kind(code)
	if code > math.MaxUint8 || !kind.Valid() {
		skip.ActionType = "code:" + strconv.FormatUint(code, 10)
	} else {
		skip.ActionType = kind.ActionType()
	}
	read := 3
	if n > 3 {
		skip.ActionID = r.str()
		read++
	}
	switch {
	case r.err != nil:
		return a, skip, false
	case code > math.MaxUint8 || !kind.Valid():
		skip.Reason = SkipUnknownType
	case major != 1:
		skip.Reason = SkipVersion
	case n < binActionFields:
		r.fail("action has " + strconv.Itoa(n) + " fields, want " + strconv.Itoa(binActionFields))
		return a, skip, false
	}
	if skip.Reason != 0 {
		for ; read < n && r.err == nil; read++ {
			r.skip(0)
		}
		return a, skip, false
	}
	a.Kind, a.ID = kind, skip.ActionID
	if !r.peekNil() {
		a.SessionID = r.str()
	}
	if !r.peekNil() {
		nb := r.arrayLen()
		if nb > 0 {
			a.Target.Blocks = make([]uint64, nb)
			for j := range a.Target.Blocks {
				a.Target.Blocks[j] = r.uint()
			}
		}
	}
	if !r.peekNil() {
		if r.arrayLen() != 3 && r.err == nil {
			r.fail("range is not [unit, start, end]")
		}
		unit := r.uint()
		a.Target.Range = Range{Unit: Unit(unit), Start: r.uint(), End: r.uint()}
		if r.err == nil && (unit < uint64(UnitBlocks) || unit > uint64(UnitTokens)) {
			r.fail("unknown range unit " + strconv.FormatUint(unit, 10))
		}
	}
	a.Dest = r.tier()
	ttl := r.int()
	if r.err == nil && (ttl < 0 || ttl > int64(MaxWireTTL)) {
		r.fail("ttl outside [0, MaxWireTTL]")
	}
	a.TTL = time.Duration(ttl)
	prio := r.int()
	if r.err == nil && (prio < math.MinInt32 || prio > math.MaxInt32) {
		r.fail("priority overflows int32")
	}
	a.Priority = int32(prio)
	a.Limit = r.uint32()
	if !r.peekNil() {
		ns := r.arrayLen()
		if ns > 0 {
			a.Sources = make([]Source, ns)
		}
		for j := 0; j < ns && r.err == nil; j++ {
			m := r.arrayLen()
			if r.err == nil && m < binSourceFields {
				r.fail("source has " + strconv.Itoa(m) + " fields")
			}
			s := &a.Sources[j]
			s.Worker.ID = r.uint()
			s.Worker.DPRank = r.uint32()
			s.Endpoint = r.str()
			s.Tier = r.tier()
			s.Blocks = r.uint32()
			for k := binSourceFields; k < m && r.err == nil; k++ {
				r.skip(0)
			}
		}
	}
	for read = binActionFields; read < n && r.err == nil; read++ {
		r.skip(0)
	}
	if r.err != nil {
		return Action{}, skip, false
	}
	return a, skip, true
}

func (r *mpReader) uint32() uint32 {
	v := r.uint()
	if r.err == nil && v > math.MaxUint32 {
		r.fail("integer overflows uint32")
	}
	return uint32(v)
}

func (r *mpReader) tier() Tier {
	v := r.uint()
	if r.err == nil && (v > math.MaxUint8 || !Tier(v).Valid()) {
		r.fail("unknown tier " + strconv.FormatUint(v, 10))
	}
	return Tier(v)
}
