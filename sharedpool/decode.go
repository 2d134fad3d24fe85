package sharedpool

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// maxDepth bounds the nesting of values the decoder skips, so a hostile
// payload cannot exhaust the stack.
const maxDepth = 32

// MaxBatchEvents bounds the events of one payload: a longer events array
// is an ErrMalformedFrame before anything is allocated for it. Mooncake's
// publisher batches far fewer; the bound keeps an untrusted payload from
// costing more than a fixed multiple of its size (every event, even a
// one-byte rejected one, costs a record).
const MaxBatchEvents = 1 << 16

// DecodeFrames decodes one ZMQ multipart message of the Mooncake master's KV
// event publisher: [topic, seq (8 bytes, big-endian), msgpack payload].
//
// It is a pure function: no state, no I/O, safe for concurrent use. The
// returned Batch shares no memory with frames, so the caller may reuse them;
// its event strings share one copy of the payload (one allocation per
// batch), which stays alive while any of them is referenced.
//
// A message that cannot be read at all (wrong frame count, bad sequence
// frame, unreadable or truncated payload, trailing bytes) returns an error
// wrapping [ErrMalformedFrame]; the caller should count it and let the next
// batch's sequence number reveal the loss. Events that are readable but
// wrong (unknown event_type, a field of the wrong type, a duplicate field,
// an event that is not a map) are isolated: they appear in Batch.Rejected
// with a reason, and the rest of the batch decodes normally.
//
// The payload is [timestamp, [event, ...], dp_rank] (dp_rank optional). The
// timestamp is integer milliseconds (float seconds from older publishers).
// Each event is a map. Two shapes are understood, and may be mixed:
//
//   - {event_type, object_key, tenant_id, group_id}: what Dynamo's SGLang
//     HiCache consumer reads (MooncakeObjectEvent in shared_cache.rs);
//     event_type is "stored" or "removed".
//   - the RFC #1527 envelope of Mooncake's publisher: event_id, timestamp,
//     event_type ("stored", "removed", "cleared"), tenant_id, backend_id,
//     medium, dp_rank, model_name, ..., and per object group_id, optional
//     object_key and seq_hashes; with legacy compatibility also type
//     ("BlockStored", "BlockRemoved", "AllBlocksCleared") and block_hashes.
//
// An event may also be the positional array [event_type, object_key,
// tenant_id, group_id], the compact encoding of Dynamo's struct. Fields this
// package does not use are skipped whatever their type.
func DecodeFrames(frames [][]byte) (Batch, error) {
	if len(frames) != 3 {
		return Batch{}, fmt.Errorf("%w: %d frames, want 3 (topic, seq, payload)", ErrMalformedFrame, len(frames))
	}
	if len(frames[1]) != 8 {
		return Batch{}, fmt.Errorf("%w: sequence frame has %d bytes, want 8", ErrMalformedFrame, len(frames[1]))
	}
	b, err := DecodePayload(frames[2])
	if err != nil {
		return Batch{}, err
	}
	b.Topic = string(frames[0])
	b.Seq = binary.BigEndian.Uint64(frames[1])
	return b, nil
}

// DecodePayload decodes the msgpack payload frame alone (Seq and Topic are
// left zero). See [DecodeFrames].
func DecodePayload(payload []byte) (Batch, error) {
	r := bytes.NewReader(payload)
	p := parser{buf: payload, r: r, d: msgpack.NewDecoder(r)}
	b, err := p.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("%w: %w", ErrMalformedFrame, err)
	}
	if r.Len() != 0 {
		return Batch{}, fmt.Errorf("%w: %d trailing bytes after payload", ErrMalformedFrame, r.Len())
	}
	return b, nil
}

// mtype is the msgpack type family of a value, read from its first byte.
type mtype uint8

const (
	tInvalid mtype = iota
	tNil
	tBool
	tUint // non-negative integer encodings
	tInt  // signed integer encodings (value may still be >= 0)
	tFloat
	tStr
	tBin
	tArray
	tMap
	tExt
)

func (t mtype) String() string {
	return [...]string{"invalid", "nil", "bool", "integer", "integer", "float", "string", "binary", "array", "map", "extension"}[t]
}

func typeOf(c byte) mtype {
	switch {
	case c <= msgpcode.PosFixedNumHigh:
		return tUint
	case c >= msgpcode.NegFixedNumLow:
		return tInt
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		return tMap
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		return tArray
	case msgpcode.IsString(c):
		return tStr
	case msgpcode.IsBin(c):
		return tBin
	case msgpcode.IsExt(c):
		return tExt
	}
	switch c {
	case msgpcode.Nil:
		return tNil
	case msgpcode.False, msgpcode.True:
		return tBool
	case msgpcode.Uint8, msgpcode.Uint16, msgpcode.Uint32, msgpcode.Uint64:
		return tUint
	case msgpcode.Int8, msgpcode.Int16, msgpcode.Int32, msgpcode.Int64:
		return tInt
	case msgpcode.Float, msgpcode.Double:
		return tFloat
	}
	return tInvalid
}

// parser reads one payload. Structural errors (truncation, invalid codes,
// lengths beyond the payload) are returned as errors and abort the payload;
// type errors in event fields are recorded as rejections.
type parser struct {
	buf []byte // the whole payload; r reads it, d decodes from r unbuffered
	r   *bytes.Reader
	d   *msgpack.Decoder
	// s is one copy of buf, made on first need: event strings are slices of
	// it, so a batch costs one allocation for all its keys.
	s    string
	hasS bool
}

// substr returns buf[off:off+n] as a string sharing the payload copy.
func (p *parser) substr(off, n int) string {
	if !p.hasS {
		p.s, p.hasS = string(p.buf), true
	}
	return p.s[off : off+n]
}

// rawStr reads a string value (the caller has peeked tStr) and returns a
// view into the payload, without allocating.
func (p *parser) rawStr() ([]byte, error) {
	n, err := p.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > p.r.Len() {
		return nil, fmt.Errorf("string of %d bytes exceeds the %d bytes left", n, p.r.Len())
	}
	off := len(p.buf) - p.r.Len()
	if _, err := p.r.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return p.buf[off : off+n : off+n], nil
}

// interned are the values every event repeats.
var interned = [...]string{"", "stored", "removed", "cleared", "BlockStored",
	"BlockRemoved", "AllBlocksCleared", DefaultTenant, "cpu", "disk"}

// intern returns the constant string equal to b, if there is one.
func intern(b []byte) (string, bool) {
	for _, s := range interned {
		if string(b) == s {
			return s, true
		}
	}
	return "", false
}

func (p *parser) peek() (mtype, error) {
	c, err := p.d.PeekCode()
	if err != nil {
		return tInvalid, err
	}
	t := typeOf(c)
	if t == tInvalid {
		return t, fmt.Errorf("invalid msgpack code 0x%02x", c)
	}
	return t, nil
}

// length reads an array or map header and checks that the declared count
// can fit in what remains (every element takes at least perElem bytes).
func (p *parser) length(t mtype, perElem int) (int, error) {
	var n int
	var err error
	if t == tMap {
		n, err = p.d.DecodeMapLen()
	} else {
		n, err = p.d.DecodeArrayLen()
	}
	if err != nil {
		return 0, err
	}
	if n < 0 || n > p.r.Len()/perElem {
		return 0, fmt.Errorf("%s of %d elements exceeds the %d bytes left", t, n, p.r.Len())
	}
	return n, nil
}

// skip skips one value, recursing at most maxDepth levels.
func (p *parser) skip(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("values nested deeper than %d", maxDepth)
	}
	t, err := p.peek()
	if err != nil {
		return err
	}
	switch t {
	case tArray, tMap:
		per := 1
		if t == tMap {
			per = 2
		}
		n, err := p.length(t, per)
		if err != nil {
			return err
		}
		for range n * per {
			if err := p.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	}
	return p.d.Skip()
}

// uint reads a non-negative integer of any encoding.
func (p *parser) uint(t mtype) (uint64, error) {
	switch t {
	case tUint:
		return p.d.DecodeUint64()
	case tInt:
		v, err := p.d.DecodeInt64()
		if err != nil {
			return 0, err
		}
		if v < 0 {
			return 0, errNegative
		}
		return uint64(v), nil
	}
	return 0, errWrongType
}

var (
	errWrongType = errors.New("wrong type")
	errNegative  = errors.New("negative integer")
)

func (p *parser) batch() (Batch, error) {
	b := Batch{DPRank: -1}
	t, err := p.peek()
	if err != nil {
		return b, err
	}
	if t != tArray {
		return b, fmt.Errorf("payload is a %s, want an array [timestamp, events, dp_rank]", t)
	}
	n, err := p.length(t, 1)
	if err != nil {
		return b, err
	}
	if n < 2 || n > 3 {
		return b, fmt.Errorf("payload array has %d elements, want 2 or 3", n)
	}
	if b.TimestampMillis, err = p.timestamp(); err != nil {
		return b, err
	}
	if err := p.events(&b); err != nil {
		return b, err
	}
	if n == 3 {
		if b.DPRank, err = p.dpRank(); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (p *parser) timestamp() (int64, error) {
	t, err := p.peek()
	if err != nil {
		return 0, err
	}
	switch t {
	case tNil:
		return 0, p.d.Skip()
	case tUint, tInt:
		v, err := p.uint(t)
		if err != nil || v > math.MaxInt64 {
			return 0, fmt.Errorf("timestamp: %v", orRange(err))
		}
		return int64(v), nil
	case tFloat:
		f, err := p.d.DecodeFloat64()
		if err != nil {
			return 0, err
		}
		if math.IsNaN(f) || f < 0 || f > math.MaxInt64/1000 {
			return 0, fmt.Errorf("timestamp %v out of range", f)
		}
		return int64(f * 1000), nil
	}
	return 0, fmt.Errorf("timestamp is a %s", t)
}

func (p *parser) dpRank() (int64, error) {
	t, err := p.peek()
	if err != nil {
		return -1, err
	}
	if t == tNil {
		return -1, p.d.Skip()
	}
	v, err := p.uint(t)
	if err != nil || v > math.MaxInt32 {
		return -1, fmt.Errorf("dp_rank: %v", orRange(err))
	}
	return int64(v), nil
}

func orRange(err error) error {
	if err != nil {
		return err
	}
	return errors.New("out of range")
}

func (p *parser) events(b *Batch) error {
	t, err := p.peek()
	if err != nil {
		return err
	}
	if t != tArray {
		return fmt.Errorf("events is a %s, want an array", t)
	}
	n, err := p.length(t, 1)
	if err != nil {
		return err
	}
	if n > MaxBatchEvents {
		return fmt.Errorf("%d events, more than MaxBatchEvents (%d)", n, MaxBatchEvents)
	}
	// Grow as events decode: n is only a claim.
	b.Events = make([]Event, 0, min(n, 1024))
	for i := range n {
		ev, reason, key, err := p.event()
		if err != nil {
			return fmt.Errorf("event %d: %w", i, err)
		}
		if reason != "" {
			if len(b.Rejected) == cap(b.Rejected) { // double: one record per (possibly one-byte) event
				b.Rejected = append(make([]Rejection, 0, max(2*cap(b.Rejected), 8)), b.Rejected...)
			}
			b.Rejected = append(b.Rejected, Rejection{Index: i, Key: key, Err: &eventError{index: i, reason: reason}})
			continue
		}
		b.Events = append(b.Events, ev)
	}
	return nil
}

// notAMap are the rejection reasons of events that are not maps, made once.
var notAMap = func() (r [tExt + 1]string) {
	for t := range r {
		r[t] = fmt.Sprintf("event is a %s, want a map", mtype(t))
	}
	return r
}()

// eventError is a Rejection's error, formatted only when asked for.
type eventError struct {
	index  int
	reason string
}

func (e *eventError) Error() string {
	return fmt.Sprintf("%v: event %d: %s", ErrMalformedEvent, e.index, e.reason)
}

func (e *eventError) Unwrap() error { return ErrMalformedEvent }

// Field bits, to reject duplicates.
const (
	fEventType = 1 << iota
	fType
	fObjectKey
	fTenant
	fGroup
	fBackend
	fMedium
	fEventID
	fSeqHashes
	fBlockHashes
)

var fieldNames = [...]string{"event_type", "type", "object_key", "tenant_id", "group_id",
	"backend_id", "medium", "event_id", "seq_hashes", "block_hashes"}

// fieldBit returns the bit of a known field name, 0 for others.
func fieldBit(name []byte) int {
	for i, n := range fieldNames {
		if string(name) == n {
			return 1 << i
		}
	}
	return 0
}

func fieldName(bit int) string { return fieldNames[bits.TrailingZeros(uint(bit))] }

// event reads one event. A non-empty reason rejects it; key is the object
// key if it was read. err is structural and aborts the payload.
func (p *parser) event() (ev Event, reason, key string, err error) {
	t, err := p.peek()
	if err != nil {
		return ev, "", "", err
	}
	if t == tArray {
		return p.positional()
	}
	if t != tMap {
		if err := p.skip(0); err != nil {
			return ev, "", "", err
		}
		return ev, notAMap[t], "", nil
	}
	n, err := p.length(t, 2)
	if err != nil {
		return ev, "", "", err
	}
	var (
		seen              int
		eventType, legacy string
		blockHashes       []uint64
	)
	fail := func(r string) {
		if reason == "" {
			reason = r
		}
	}
	for range n {
		kt, err := p.peek()
		if err != nil {
			return ev, "", "", err
		}
		if kt != tStr {
			if err := p.skip(0); err != nil {
				return ev, "", "", err
			}
			if err := p.skip(0); err != nil {
				return ev, "", "", err
			}
			fail(fmt.Sprintf("map key is a %s, want a string", kt))
			continue
		}
		nameb, err := p.rawStr()
		if err != nil {
			return ev, "", "", err
		}
		bit := fieldBit(nameb)
		if bit == 0 {
			if err := p.skip(0); err != nil {
				return ev, "", "", err
			}
			continue
		}
		if seen&bit != 0 {
			fail("duplicate field " + fieldName(bit))
			if err := p.skip(0); err != nil {
				return ev, "", "", err
			}
			continue
		}
		seen |= bit
		name := fieldName(bit)
		var bad string
		switch name {
		case "event_type":
			eventType, bad, err = p.str(false)
		case "type":
			legacy, bad, err = p.str(false)
		case "object_key":
			ev.Key, bad, err = p.str(true)
		case "tenant_id":
			ev.Tenant, bad, err = p.str(true)
		case "group_id":
			ev.GroupID, bad, err = p.str(true)
		case "backend_id":
			ev.Backend, bad, err = p.str(true)
		case "medium":
			ev.Medium, bad, err = p.str(true)
		case "event_id":
			ev.ID, bad, err = p.optUint()
		case "seq_hashes":
			ev.SeqHashes, bad, err = p.hashes()
		case "block_hashes":
			blockHashes, bad, err = p.hashes()
		}
		if err != nil {
			return ev, "", "", err
		}
		if bad != "" {
			fail(name + ": " + bad)
		}
	}
	key = ev.Key
	if reason != "" {
		return ev, reason, key, nil
	}
	kind, r := eventKind(eventType, legacy, seen)
	if r != "" {
		return ev, r, key, nil
	}
	ev.Kind = kind
	switch {
	case seen&fSeqHashes == 0:
		ev.SeqHashes = blockHashes
	case seen&fBlockHashes != 0 && !equalHashes(ev.SeqHashes, blockHashes):
		return ev, "block_hashes conflicts with seq_hashes", key, nil
	}
	return ev, "", key, nil
}

func equalHashes(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eventKind(eventType, legacy string, seen int) (Kind, string) {
	var k, lk Kind
	switch eventType {
	case "stored":
		k = Store
	case "removed":
		k = Remove
	case "cleared":
		k = Clear
	case "":
		if seen&fEventType != 0 {
			return 0, "empty event_type"
		}
	default:
		return 0, fmt.Sprintf("unknown event_type %q", eventType)
	}
	switch legacy {
	case "BlockStored":
		lk = Store
	case "BlockRemoved":
		lk = Remove
	case "AllBlocksCleared":
		lk = Clear
	case "":
		if seen&fType != 0 {
			return 0, "empty type"
		}
	default:
		return 0, fmt.Sprintf("unknown type %q", legacy)
	}
	switch {
	case k == 0 && lk == 0:
		return 0, "missing event_type"
	case k == 0:
		return lk, ""
	case lk != 0 && lk != k:
		return 0, fmt.Sprintf("type %q conflicts with event_type %q", legacy, eventType)
	}
	return k, ""
}

// str reads a string (or nil when nullable). A non-empty bad is a type
// problem; the value has been skipped.
func (p *parser) str(nullable bool) (s, bad string, err error) {
	t, err := p.peek()
	if err != nil {
		return "", "", err
	}
	switch {
	case t == tStr:
		b, err := p.rawStr()
		if err != nil {
			return "", "", err
		}
		if s, ok := intern(b); ok {
			return s, "", nil
		}
		return p.substr(len(p.buf)-p.r.Len()-len(b), len(b)), "", nil
	case t == tNil && nullable:
		return "", "", p.d.Skip()
	}
	return "", fmt.Sprintf("is a %s, want a string", t), p.skip(0)
}

func (p *parser) optUint() (v uint64, bad string, err error) {
	t, err := p.peek()
	if err != nil {
		return 0, "", err
	}
	switch t {
	case tNil:
		return 0, "", p.d.Skip()
	case tUint, tInt:
		v, err := p.uint(t)
		if errors.Is(err, errNegative) {
			return 0, "negative", nil
		}
		return v, "", err
	}
	return 0, fmt.Sprintf("is a %s, want an unsigned integer", t), p.skip(0)
}

func (p *parser) hashes() (hs []uint64, bad string, err error) {
	t, err := p.peek()
	if err != nil {
		return nil, "", err
	}
	switch t {
	case tNil:
		return nil, "", p.d.Skip()
	case tArray:
	default:
		return nil, fmt.Sprintf("is a %s, want an array", t), p.skip(0)
	}
	n, err := p.length(t, 1)
	if err != nil {
		return nil, "", err
	}
	hs = make([]uint64, 0, min(n, 1024))
	for i := range n {
		et, err := p.peek()
		if err != nil {
			return nil, "", err
		}
		if et != tUint && et != tInt {
			if err := p.skip(0); err != nil {
				return nil, "", err
			}
			if bad == "" {
				bad = fmt.Sprintf("element %d is a %s, want an unsigned integer", i, et)
			}
			continue
		}
		v, err := p.uint(et)
		if errors.Is(err, errNegative) {
			if bad == "" {
				bad = fmt.Sprintf("element %d is negative", i)
			}
			continue
		}
		if err != nil {
			return nil, "", err
		}
		hs = append(hs, v)
	}
	return hs, bad, nil
}

// positional reads an event encoded as an array in the field order of
// Dynamo's MooncakeObjectEvent struct, [event_type, object_key, tenant_id,
// group_id] (how rmp_serde::to_vec writes a struct); trailing fields may be
// missing. Other arrays, such as the old positional Mooncake events
// (["BlockStoreEvent", key, replicas, ...], which have no remove event and
// so cannot keep an index exact), are rejected.
func (p *parser) positional() (ev Event, reason, key string, err error) {
	n, err := p.length(tArray, 1)
	if err != nil {
		return ev, "", "", err
	}
	fields := [4]*string{nil, &ev.Key, &ev.Tenant, &ev.GroupID}
	var eventType string
	for i := range n {
		if i >= len(fields) || reason != "" {
			if err := p.skip(0); err != nil {
				return ev, "", "", err
			}
			if reason == "" {
				reason = fmt.Sprintf("positional event has %d elements, want at most 4", n)
			}
			continue
		}
		var bad string
		if i == 0 {
			eventType, bad, err = p.str(false)
		} else {
			*fields[i], bad, err = p.str(true)
		}
		if err != nil {
			return ev, "", "", err
		}
		if bad != "" {
			reason = fmt.Sprintf("positional element %d %s", i, bad)
		}
	}
	key = ev.Key
	if reason != "" {
		return ev, reason, key, nil
	}
	switch eventType {
	case "stored":
		ev.Kind = Store
	case "removed":
		ev.Kind = Remove
	case "cleared":
		ev.Kind = Clear
	case "":
		return ev, "positional event without event_type", key, nil
	default:
		return ev, fmt.Sprintf("positional event of unknown type %q", eventType), key, nil
	}
	return ev, "", key, nil
}
