package vllm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/zeebo/xxh3"
)

// Sentinel errors. Per-event errors arrive wrapped in an *EventError and
// batch-level ones in a *MalformedError; test them with errors.Is.
var (
	// ErrMalformed reports a payload that is not well-formed msgpack or
	// not shaped like an event batch. The whole batch is dropped.
	ErrMalformed = errors.New("vllm: malformed event batch")
	// ErrUnknownEventType reports an event whose tag is none of
	// BlockStored, BlockRemoved and AllBlocksCleared.
	ErrUnknownEventType = errors.New("vllm: unknown event type")
	// ErrUnknownMedium reports a medium that flashindex.TierFromMedium does
	// not know. The event is dropped rather than guessed onto a tier.
	ErrUnknownMedium = errors.New("vllm: unknown medium")
	// ErrBadField reports an event field of the wrong type or range.
	ErrBadField = errors.New("vllm: bad event field")
	// ErrTokenCount reports a BlockStored event whose token_ids do not make
	// exactly len(block_hashes) blocks of block_size tokens (for example the
	// Mamba groups of a hybrid model, which report one hash for many blocks).
	ErrTokenCount = errors.New("vllm: token_ids do not match block_hashes × block_size")
)

// MalformedError is a batch-level decoding failure. It matches ErrMalformed.
type MalformedError struct {
	Offset int    // byte offset in the payload where decoding stopped
	Reason string // what was wrong
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("vllm: malformed event batch at byte %d: %s", e.Offset, e.Reason)
}

// Is makes errors.Is(err, ErrMalformed) true.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// EventError is a failure to decode one event of a batch. The event is
// dropped and the rest of the batch is still applied. Unwrap returns one of
// ErrUnknownEventType, ErrUnknownMedium, ErrBadField and ErrTokenCount.
type EventError struct {
	Index int    // position of the event in the batch
	Type  string // the event's tag, if it was read
	Field string // the offending field, if any
	Err   error
}

func (e *EventError) Error() string {
	s := "vllm: event " + strconv.Itoa(e.Index)
	if e.Type != "" {
		s += " (" + e.Type + ")"
	}
	if e.Field != "" {
		s += " field " + e.Field
	}
	return s + ": " + e.Err.Error()
}

func (e *EventError) Unwrap() error { return e.Err }

// Field names an event field a Schema can place.
type Field uint8

// Fields of the engines' events. A Schema lists them in positional order.
const (
	FieldUnknown Field = iota // ignored
	FieldBlockHashes
	FieldParentBlockHash
	FieldTokenIDs
	FieldBlockSize
	FieldLoRAID
	FieldMedium
	FieldLoRAName
	FieldExtraKeys
	FieldGroupIdx
	// FieldMetadata is SGLang's BlockStoredWithMetadata map; its cache_salt
	// becomes an extra key when DecodeOptions.ExtraKeys is set.
	FieldMetadata
)

var fieldNames = map[string]Field{
	"block_hashes":      FieldBlockHashes,
	"parent_block_hash": FieldParentBlockHash,
	"token_ids":         FieldTokenIDs,
	"block_size":        FieldBlockSize,
	"lora_id":           FieldLoRAID,
	"medium":            FieldMedium,
	"lora_name":         FieldLoRAName,
	"extra_keys":        FieldExtraKeys,
	"group_idx":         FieldGroupIdx,
	"metadata":          FieldMetadata,
}

// Schema is the positional field order of an engine's tagged-array events;
// map-encoded events carry their field names and need no schema. Fields
// past the end of a list are ignored; a shorter event is normal (trailing
// fields with defaults are omitted on the wire).
type Schema struct {
	Name    string  // for messages: "vllm", "sglang"
	Stored  []Field // BlockStored fields after the tag
	Removed []Field // BlockRemoved fields after the tag
}

// VLLM is vLLM's event layout (vllm/distributed/kv_events.py): BlockStored
// is [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind, ...] and
// BlockRemoved is [tag, block_hashes, medium, group_idx, ...].
var VLLM = &Schema{
	Name: "vllm",
	Stored: []Field{FieldBlockHashes, FieldParentBlockHash, FieldTokenIDs, FieldBlockSize,
		FieldLoRAID, FieldMedium, FieldLoRAName, FieldExtraKeys, FieldGroupIdx},
	Removed: []Field{FieldBlockHashes, FieldMedium, FieldGroupIdx},
}

// DecodeOptions tunes a Decoder. The zero value decodes vLLM's layout,
// ignores extra keys and keeps every KV cache group.
type DecodeOptions struct {
	// Schema is the positional layout; nil means VLLM.
	Schema *Schema

	// ExtraKeys copies each block's extra_keys (multimodal hashes, cache
	// salt, LoRA name, ...) into StoredBlock.ExtraKeys, so the index mixes
	// them into the block's local hash. An integer element is taken as its
	// 64-bit value, any other element as XXH3-64 of its msgpack encoding.
	// Off by default: requests hashed without the same keys would then
	// never match those blocks.
	ExtraKeys bool

	// FilterGroup keeps only events whose group_idx is Group (events
	// without group_idx are kept). Hybrid models publish one event per KV
	// cache group; only the full-attention group is a prefix-cache signal.
	FilterGroup bool
	Group       int

	// LoRANames names adapters of events that carry lora_id but no
	// lora_name (older vLLM). Without an entry such an event gets the LoRA
	// name "lora_id:<n>": a namespace of its own, so its blocks never match
	// base-model requests.
	LoRANames map[int64]string
}

// Batch describes one decoded payload.
type Batch struct {
	TS          float64 // publisher timestamp, seconds since the epoch
	DPRank      int     // data_parallel_rank / attn_dp_rank; -1 when absent
	Events      int     // events in the payload
	Emitted     int     // events passed to emit
	Dropped     int     // events dropped with an *EventError
	UnknownType int     // of Dropped: ErrUnknownEventType
	UnknownMed  int     // of Dropped: ErrUnknownMedium
	Filtered    int     // events dropped by DecodeOptions.FilterGroup
	Rejected    int     // events emit returned an error for
	FirstDrop   error   // the first *EventError, if any
	FirstReject error   // the first error emit returned, if any
}

// Decoder turns engine payloads into flashindex events. The zero Decoder
// is not usable; build one with NewDecoder. A Decoder is not safe for
// concurrent use; it reuses its buffers from one payload to the next.
type Decoder struct {
	opts DecodeOptions
	r    reader
	ev   flashindex.Event
	raw  rawEvent

	blocks []flashindex.StoredBlock
	extras []uint64
}

// rawEvent is one event's fields as read, before validation.
type rawEvent struct {
	kind      flashindex.EventKind
	hashes    []uint64
	parent    uint64
	hasParent bool
	tokens    []uint32
	blockSize int64
	hasBS     bool
	medium    []byte
	loraName  []byte
	hasName   bool
	loraID    int64
	hasLoRAID bool
	group     int64
	hasGroup  bool
	extra     [][]uint64 // per block, from extra_keys (only with ExtraKeys)
	hasExtra  bool       // extra_keys was present (extra keeps its buffer across events)
	salt      []byte     // SGLang metadata.cache_salt
}

func (e *rawEvent) reset() {
	hashes, tokens, extra := e.hashes[:0], e.tokens[:0], e.extra[:0]
	*e = rawEvent{hashes: hashes, tokens: tokens, extra: extra}
}

// NewDecoder returns a Decoder.
func NewDecoder(opts DecodeOptions) *Decoder {
	if opts.Schema == nil {
		opts.Schema = VLLM
	}
	return &Decoder{opts: opts}
}

// Options returns the options the Decoder was built with.
func (d *Decoder) Options() DecodeOptions { return d.opts }

// HashBytes reduces a byte-string block hash (vLLM's 32-byte SHA-256
// digests) to 64 bits: its first 8 bytes read big-endian. SGLang publishes
// exactly that prefix of its SHA-256 hex digest as a signed int64, so the
// two engines' hashes of one digest agree. A string shorter than 8 bytes is
// read as a big-endian integer.
func HashBytes(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// Decode decodes one payload, [ts, [events], dp_rank?] or the map form
// {"ts", "events", "data_parallel_rank"}, and calls emit for every event in
// order. The *Event and every slice in it are reused: they are valid only
// during the call to emit. Worker and EventID are left zero for the caller
// to fill. An event that fails to decode is dropped (counted in the Batch)
// and the next one is decoded. A payload that is not well-formed msgpack,
// has trailing bytes, or whose envelope is bad (a ts that is not a number, a
// dp rank that is not a small non-negative integer, events missing, not an
// array or given twice) is dropped whole with a *MalformedError before any
// event is emitted, wherever in the payload the fault lies. An error from
// emit is counted and does not stop the batch.
func (d *Decoder) Decode(payload []byte, emit func(*flashindex.Event) error) (Batch, error) {
	b := Batch{DPRank: -1}
	// Validate the whole document and the batch envelope (ts, dp rank, an
	// events array) first, so that a bad payload emits nothing rather than
	// a prefix of its events. envelope walks the document once, the same
	// work as skipping it, and remembers where the events start.
	d.r.reset(payload)
	events, err := d.envelope(&b)
	if err != nil {
		return b, err
	}
	d.r.off = events
	return b, d.events(&b, emit)
}

// envelope reads the batch envelope, [ts, [events], dp_rank?, ...] or
// {"ts", "events", "data_parallel_rank", ...}, validating every byte of the
// payload (the events are skipped, not decoded) and filling b.TS and
// b.DPRank. It returns the offset of the events array.
func (d *Decoder) envelope(b *Batch) (int, error) {
	r := &d.r
	events := -1
	// eventsArray records the events' offset and skips them; they must be
	// an array.
	eventsArray := func() error {
		if events >= 0 {
			return r.errf("batch has two events entries")
		}
		if c, err := r.peek(); err != nil {
			return err
		} else if !(c >= 0x90 && c <= 0x9f || c == 0xdc || c == 0xdd) {
			return r.errf("batch events is not an array")
		}
		events = r.off
		return r.skip()
	}
	ts := func() error {
		f, ok, err := r.floatValue()
		if err != nil {
			return err
		}
		if !ok {
			return r.errf("batch ts is not a number")
		}
		b.TS = f
		return nil
	}
	if n, ok, err := r.arrayLen(); err != nil {
		return 0, err
	} else if ok {
		for i := 0; i < n; i++ {
			var err error
			switch i {
			case 0:
				err = ts()
			case 1:
				err = eventsArray()
			case 2:
				err = d.rank(b)
			default:
				err = r.skip()
			}
			if err != nil {
				return 0, err
			}
		}
	} else {
		n, ok, err := r.mapLen()
		if err != nil {
			return 0, err
		}
		if !ok {
			return 0, r.errf("batch is neither an array nor a map")
		}
		for i := 0; i < n; i++ {
			k, ok, err := r.bytesValue()
			if err != nil {
				return 0, err
			}
			if !ok {
				if err := r.skip(); err != nil {
					return 0, err
				}
				if err := r.skip(); err != nil {
					return 0, err
				}
				continue
			}
			switch string(k) {
			case "ts":
				err = ts()
			case "events":
				err = eventsArray()
			case "data_parallel_rank", "attn_dp_rank", "dp_rank":
				err = d.rank(b)
			default:
				err = r.skip()
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if r.off != len(r.b) {
		return 0, r.errf("trailing bytes after the batch")
	}
	if events < 0 {
		return 0, r.errf("batch has no events")
	}
	return events, nil
}

func (d *Decoder) rank(b *Batch) error {
	r := &d.r
	if r.nilValue() {
		return nil
	}
	v, neg, ok, err := r.intValue()
	if err != nil {
		return err
	}
	if !ok || neg || v > 1<<31 {
		return r.errf("batch dp rank is not a small non-negative integer")
	}
	b.DPRank = int(v)
	return nil
}

func (d *Decoder) events(b *Batch, emit func(*flashindex.Event) error) error {
	r := &d.r
	n, ok, err := r.arrayLen()
	if err != nil {
		return err
	}
	if !ok {
		return r.errf("batch events is not an array")
	}
	for i := 0; i < n; i++ {
		b.Events++
		start := r.off
		typ, err := d.event()
		if err != nil {
			// The document is well-formed (validated above), so the event
			// can always be skipped whole from its start.
			r.off = start
			if serr := r.skip(); serr != nil {
				return serr
			}
			var ee *EventError
			if !errors.As(err, &ee) {
				ee = &EventError{Err: err}
			}
			ee.Index, ee.Type = i, string(typ)
			b.drop(ee)
			continue
		}
		ev, keep, err := d.normalise()
		if err != nil {
			ee := err.(*EventError)
			ee.Index, ee.Type = i, string(typ)
			b.drop(ee)
			continue
		}
		if !keep {
			b.Filtered++
			continue
		}
		b.Emitted++
		if err := emit(ev); err != nil {
			b.Rejected++
			if b.FirstReject == nil {
				b.FirstReject = err
			}
		}
	}
	return nil
}

func (b *Batch) drop(ee *EventError) {
	b.Dropped++
	switch {
	case errors.Is(ee, ErrUnknownEventType):
		b.UnknownType++
	case errors.Is(ee, ErrUnknownMedium):
		b.UnknownMed++
	}
	if b.FirstDrop == nil {
		b.FirstDrop = ee
	}
}

func fieldErr(f string, err error) error { return &EventError{Field: f, Err: err} }

// event reads one event into d.raw and returns its tag (a sub-slice of
// the payload).
func (d *Decoder) event() ([]byte, error) {
	r := &d.r
	e := &d.raw
	e.reset()
	if n, ok, err := r.arrayLen(); err != nil {
		return nil, err
	} else if ok {
		if n == 0 {
			return nil, fieldErr("", ErrUnknownEventType)
		}
		tag, ok, err := r.bytesValue()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fieldErr("tag", ErrBadField)
		}
		var fields []Field
		switch string(tag) {
		case "BlockStored":
			e.kind, fields = flashindex.Stored, d.opts.Schema.Stored
		case "BlockRemoved":
			e.kind, fields = flashindex.Removed, d.opts.Schema.Removed
		case "AllBlocksCleared":
			e.kind = flashindex.Cleared
		default:
			return tag, fieldErr("", ErrUnknownEventType)
		}
		for i := 1; i < n; i++ {
			f := FieldUnknown
			if i-1 < len(fields) {
				f = fields[i-1]
			}
			if err := d.field(f); err != nil {
				return tag, err
			}
		}
		return tag, nil
	}
	n, ok, err := r.mapLen()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fieldErr("", ErrUnknownEventType)
	}
	// msgspec writes the tag first; find it anywhere to be safe.
	start := r.off
	tag, err := d.mapTag(n)
	if err != nil {
		return nil, err
	}
	r.off = start
	switch string(tag) {
	case "BlockStored":
		e.kind = flashindex.Stored
	case "BlockRemoved":
		e.kind = flashindex.Removed
	case "AllBlocksCleared":
		e.kind = flashindex.Cleared
	default:
		return tag, fieldErr("", ErrUnknownEventType)
	}
	for i := 0; i < n; i++ {
		k, ok, err := r.bytesValue()
		if err != nil {
			return tag, err
		}
		f := FieldUnknown
		if ok {
			f = fieldNames[string(k)]
		} else if err := r.skip(); err != nil {
			return tag, err
		}
		if err := d.field(f); err != nil {
			return tag, err
		}
	}
	return tag, nil
}

// mapTag finds the "type" entry of an n-entry map and leaves the reader
// somewhere inside the map.
func (d *Decoder) mapTag(n int) ([]byte, error) {
	r := &d.r
	for i := 0; i < n; i++ {
		k, ok, err := r.bytesValue()
		if err != nil {
			return nil, err
		}
		if ok && string(k) == "type" {
			v, ok, err := r.bytesValue()
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fieldErr("type", ErrBadField)
			}
			return v, nil
		}
		if !ok {
			if err := r.skip(); err != nil {
				return nil, err
			}
		}
		if err := r.skip(); err != nil {
			return nil, err
		}
	}
	return nil, fieldErr("type", ErrUnknownEventType)
}

func (d *Decoder) hash() (uint64, bool, error) {
	r := &d.r
	if v, _, ok, err := r.intValue(); err != nil || ok {
		return v, ok, err
	}
	if s, ok, err := r.bytesValue(); err != nil || ok {
		return HashBytes(s), ok, err
	}
	return 0, false, nil
}

func (d *Decoder) field(f Field) error {
	r := &d.r
	e := &d.raw
	switch f {
	case FieldBlockHashes:
		n, ok, err := r.arrayLen()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("block_hashes", ErrBadField)
		}
		// The document is validated, so n elements are really there: size
		// the buffer once (append's 1.25 growth would allocate 5x).
		e.hashes = slices.Grow(e.hashes, n)
		for i := 0; i < n; i++ {
			h, ok, err := d.hash()
			if err != nil {
				return err
			}
			if !ok {
				return fieldErr("block_hashes", ErrBadField)
			}
			e.hashes = append(e.hashes, h)
		}
	case FieldParentBlockHash:
		if r.nilValue() {
			return nil
		}
		h, ok, err := d.hash()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("parent_block_hash", ErrBadField)
		}
		e.parent, e.hasParent = h, true
	case FieldTokenIDs:
		n, ok, err := r.arrayLen()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("token_ids", ErrBadField)
		}
		e.tokens = slices.Grow(e.tokens, n)
		for i := 0; i < n; i++ {
			v, neg, ok, err := r.intValue()
			if err != nil {
				return err
			}
			if !ok || neg || v > 0xffffffff {
				return fieldErr("token_ids", ErrBadField)
			}
			e.tokens = append(e.tokens, uint32(v))
		}
	case FieldBlockSize:
		if r.nilValue() {
			return nil
		}
		v, neg, ok, err := r.intValue()
		if err != nil {
			return err
		}
		if !ok || neg || v < 1 || v > flashindex.MaxBlockSize {
			return fieldErr("block_size", ErrBadField)
		}
		e.blockSize, e.hasBS = int64(v), true
	case FieldLoRAID:
		if r.nilValue() {
			return nil
		}
		v, _, ok, err := r.intValue()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("lora_id", ErrBadField)
		}
		e.loraID, e.hasLoRAID = int64(v), true
	case FieldMedium:
		if r.nilValue() {
			return nil
		}
		s, ok, err := r.bytesValue()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("medium", ErrBadField)
		}
		e.medium = s
	case FieldLoRAName:
		if r.nilValue() {
			return nil
		}
		s, ok, err := r.bytesValue()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("lora_name", ErrBadField)
		}
		e.loraName, e.hasName = s, true
	case FieldGroupIdx:
		if r.nilValue() {
			return nil
		}
		v, _, ok, err := r.intValue()
		if err != nil {
			return err
		}
		if !ok {
			return fieldErr("group_idx", ErrBadField)
		}
		e.group, e.hasGroup = int64(v), true
	case FieldExtraKeys:
		if !d.opts.ExtraKeys {
			return r.skip()
		}
		if r.nilValue() {
			return nil
		}
		return d.extraKeys()
	case FieldMetadata:
		if !d.opts.ExtraKeys {
			return r.skip()
		}
		return d.metadata()
	default:
		return r.skip()
	}
	return nil
}

// extraKeys reads extra_keys: a list with one entry per block, each nil or
// a tuple of values.
func (d *Decoder) extraKeys() error {
	r := &d.r
	e := &d.raw
	n, ok, err := r.arrayLen()
	if err != nil {
		return err
	}
	if !ok {
		return fieldErr("extra_keys", ErrBadField)
	}
	d.extras = d.extras[:0]
	e.hasExtra = true
	type span struct{ lo, hi int }
	var spans [64]span
	sp := spans[:0]
	for i := 0; i < n; i++ {
		lo := len(d.extras)
		if !r.nilValue() {
			m, ok, err := r.arrayLen()
			if err != nil {
				return err
			}
			if !ok {
				return fieldErr("extra_keys", ErrBadField)
			}
			for j := 0; j < m; j++ {
				start := r.off
				if v, _, ok, err := r.intValue(); err != nil {
					return err
				} else if ok {
					d.extras = append(d.extras, v)
					continue
				}
				if err := r.skip(); err != nil {
					return err
				}
				d.extras = append(d.extras, xxh3.Hash(r.b[start:r.off]))
			}
		}
		sp = append(sp, span{lo, len(d.extras)})
	}
	for _, s := range sp {
		e.extra = append(e.extra, d.extras[s.lo:s.hi:s.hi])
	}
	return nil
}

// metadata reads SGLang's {"cache_salt": str} map.
func (d *Decoder) metadata() error {
	r := &d.r
	if r.nilValue() {
		return nil
	}
	n, ok, err := r.mapLen()
	if err != nil {
		return err
	}
	if !ok {
		return fieldErr("metadata", ErrBadField)
	}
	for i := 0; i < n; i++ {
		k, ok, err := r.bytesValue()
		if err != nil {
			return err
		}
		if ok && string(k) == "cache_salt" {
			s, ok, err := r.bytesValue()
			if err != nil {
				return err
			}
			if !ok {
				return fieldErr("metadata.cache_salt", ErrBadField)
			}
			d.raw.salt = s
			continue
		}
		if !ok {
			if err := r.skip(); err != nil {
				return err
			}
		}
		if err := r.skip(); err != nil {
			return err
		}
	}
	return nil
}

// normalise validates d.raw and builds d.ev. keep is false when the group
// filter drops the event.
func (d *Decoder) normalise() (*flashindex.Event, bool, error) {
	e := &d.raw
	ev := &d.ev
	*ev = flashindex.Event{Kind: e.kind}
	if e.kind == flashindex.Cleared {
		return ev, true, nil
	}
	if d.opts.FilterGroup && e.hasGroup && e.group != int64(d.opts.Group) {
		return nil, false, nil
	}
	tier, ok := flashindex.TierFromMedium(string(e.medium))
	if !ok {
		return nil, false, &EventError{Field: "medium", Err: fmt.Errorf("%w %q", ErrUnknownMedium, e.medium)}
	}
	ev.Tier = tier
	if e.kind == flashindex.Removed {
		ev.Hashes = e.hashes
		return ev, true, nil
	}
	if !e.hasBS {
		return nil, false, &EventError{Field: "block_size", Err: ErrBadField}
	}
	bs := int(e.blockSize)
	if len(e.tokens) != len(e.hashes)*bs {
		return nil, false, &EventError{Field: "token_ids", Err: fmt.Errorf("%w: %d tokens, %d hashes of %d",
			ErrTokenCount, len(e.tokens), len(e.hashes), bs)}
	}
	ev.BlockSize = bs
	ev.Parent, ev.HasParent = e.parent, e.hasParent
	switch {
	case e.hasName:
		ev.LoRA = string(e.loraName)
	case e.hasLoRAID:
		if name, ok := d.opts.LoRANames[e.loraID]; ok {
			ev.LoRA = name
		} else {
			ev.LoRA = "lora_id:" + strconv.FormatInt(e.loraID, 10)
		}
	}
	if d.opts.ExtraKeys && e.hasExtra && len(e.extra) != len(e.hashes) {
		return nil, false, &EventError{Field: "extra_keys", Err: ErrBadField}
	}
	var salt uint64
	if d.opts.ExtraKeys && e.salt != nil {
		salt = xxh3.Hash(e.salt)
	}
	blocks := slices.Grow(d.blocks[:0], len(e.hashes))
	for i, h := range e.hashes {
		sb := flashindex.StoredBlock{EngineHash: h, Tokens: e.tokens[i*bs : (i+1)*bs : (i+1)*bs]}
		if d.opts.ExtraKeys {
			if e.hasExtra && len(e.extra[i]) > 0 {
				sb.ExtraKeys = e.extra[i]
			}
			if e.salt != nil {
				sb.ExtraKeys = append(sb.ExtraKeys[:len(sb.ExtraKeys):len(sb.ExtraKeys)], salt)
			}
		}
		blocks = append(blocks, sb)
	}
	d.blocks = blocks
	ev.Blocks = blocks
	return ev, true, nil
}
