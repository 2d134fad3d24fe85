package vllm

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/zeebo/xxh3"
)

// WireEvent is one event as an engine would publish it, for Encoding. It is
// the inverse of what Decoder produces, and exists for tests, simulated
// engines and replay tools.
type WireEvent struct {
	Kind      flashindex.EventKind
	Tag       string   // overrides the kind's tag (to publish an unknown type)
	Hashes    []uint64 // engine block hashes
	Parent    uint64
	HasParent bool
	Tokens    []uint32 // len(Hashes) × BlockSize token ids (Stored)
	BlockSize int
	Medium    string // "" writes nil
	LoRAName  string // "" writes nil
	// ExtraKeys holds each block's extra keys as strings (vLLM writes a
	// request's cache_salt as the first block's); nil writes nil, a nil
	// entry an empty list.
	ExtraKeys [][]string
	LoRAID    int64
	HasLoRAID bool
	Group     int
	HasGroup  bool
}

// Encoding chooses the wire shape Append writes. The zero value is the
// older vLLM shape: a [ts, events] array of tagged arrays with integer
// hashes.
type Encoding struct {
	Schema      *Schema // positional field order; nil means VLLM
	MapEvents   bool    // events as {"type": tag, field: value, ...} maps
	MapBatch    bool    // the batch as {"ts", "events", "data_parallel_rank"}
	BytesHashes bool    // hashes as 32-byte strings, reduced by HashBytes
	// SignedHashes writes hashes as int64, as SGLang does; otherwise a hash
	// of 2^63 or more is written as an unsigned integer.
	SignedHashes bool
	DPRank       int // written when HasDPRank
	HasDPRank    bool
	// Full writes every schema field even when trailing ones are nil;
	// otherwise trailing nil fields are omitted, as msgspec does.
	Full bool
}

// HashString returns the 32-byte string Encoding writes for hash h when
// BytesHashes is set: h big-endian followed by 24 bytes derived from h.
func HashString(h uint64) []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint64(b, h)
	for i := 8; i < 32; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], xxh3.HashSeed(b[:8], uint64(i)))
	}
	return b
}

// Append appends one encoded batch to dst.
func (c Encoding) Append(dst []byte, ts float64, events []WireEvent) ([]byte, error) {
	var buf bytes.Buffer
	buf.Write(dst)
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true)
	e.UseCompactFloats(false)
	if err := c.batch(e, ts, events); err != nil {
		return dst, fmt.Errorf("vllm: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func (c Encoding) batch(e *msgpack.Encoder, ts float64, events []WireEvent) error {
	n := 2
	if c.HasDPRank {
		n = 3
	}
	if c.MapBatch {
		if err := e.EncodeMapLen(n); err != nil {
			return err
		}
		if err := e.EncodeString("ts"); err != nil {
			return err
		}
	} else if err := e.EncodeArrayLen(n); err != nil {
		return err
	}
	if err := e.EncodeFloat64(ts); err != nil {
		return err
	}
	if c.MapBatch {
		if err := e.EncodeString("events"); err != nil {
			return err
		}
	}
	if err := e.EncodeArrayLen(len(events)); err != nil {
		return err
	}
	for i := range events {
		if err := c.event(e, &events[i]); err != nil {
			return err
		}
	}
	if c.HasDPRank {
		if c.MapBatch {
			if err := e.EncodeString("data_parallel_rank"); err != nil {
				return err
			}
		}
		return e.EncodeInt(int64(c.DPRank))
	}
	return nil
}

var tags = map[flashindex.EventKind]string{
	flashindex.Stored:  "BlockStored",
	flashindex.Removed: "BlockRemoved",
	flashindex.Cleared: "AllBlocksCleared",
}

var fieldKeys = func() map[Field]string {
	m := map[Field]string{}
	for k, f := range fieldNames {
		m[f] = k
	}
	return m
}()

// has reports whether ev has a non-nil value for f.
func (ev *WireEvent) has(f Field) bool {
	switch f {
	case FieldBlockHashes, FieldTokenIDs, FieldBlockSize:
		return true
	case FieldParentBlockHash:
		return ev.HasParent
	case FieldLoRAID:
		return ev.HasLoRAID
	case FieldMedium:
		return ev.Medium != ""
	case FieldLoRAName:
		return ev.LoRAName != ""
	case FieldExtraKeys:
		return ev.ExtraKeys != nil
	case FieldGroupIdx:
		return ev.HasGroup
	}
	return false
}

func (c Encoding) event(e *msgpack.Encoder, ev *WireEvent) error {
	tag, ok := tags[ev.Kind]
	if !ok {
		return fmt.Errorf("unknown kind %v", ev.Kind)
	}
	if ev.Tag != "" {
		tag = ev.Tag
	}
	schema := c.Schema
	if schema == nil {
		schema = VLLM
	}
	var fields []Field
	switch ev.Kind {
	case flashindex.Stored:
		fields = schema.Stored
	case flashindex.Removed:
		fields = schema.Removed
	}
	if !c.Full {
		n := len(fields)
		for n > 0 && !ev.has(fields[n-1]) {
			n--
		}
		fields = fields[:n]
	}
	if c.MapEvents {
		if err := e.EncodeMapLen(1 + len(fields)); err != nil {
			return err
		}
		if err := e.EncodeString("type"); err != nil {
			return err
		}
	} else if err := e.EncodeArrayLen(1 + len(fields)); err != nil {
		return err
	}
	if err := e.EncodeString(tag); err != nil {
		return err
	}
	for _, f := range fields {
		if c.MapEvents {
			if err := e.EncodeString(fieldKeys[f]); err != nil {
				return err
			}
		}
		if err := c.field(e, ev, f); err != nil {
			return err
		}
	}
	return nil
}

func (c Encoding) hash(e *msgpack.Encoder, h uint64) error {
	if c.BytesHashes {
		return e.EncodeBytes(HashString(h))
	}
	if h >= 1<<63 && !c.SignedHashes {
		return e.EncodeUint(h)
	}
	return e.EncodeInt(int64(h))
}

func (c Encoding) field(e *msgpack.Encoder, ev *WireEvent, f Field) error {
	if !ev.has(f) {
		return e.EncodeNil()
	}
	switch f {
	case FieldBlockHashes:
		if err := e.EncodeArrayLen(len(ev.Hashes)); err != nil {
			return err
		}
		for _, h := range ev.Hashes {
			if err := c.hash(e, h); err != nil {
				return err
			}
		}
		return nil
	case FieldParentBlockHash:
		return c.hash(e, ev.Parent)
	case FieldTokenIDs:
		if err := e.EncodeArrayLen(len(ev.Tokens)); err != nil {
			return err
		}
		for _, t := range ev.Tokens {
			if err := e.EncodeUint(uint64(t)); err != nil {
				return err
			}
		}
		return nil
	case FieldBlockSize:
		return e.EncodeInt(int64(ev.BlockSize))
	case FieldLoRAID:
		return e.EncodeInt(ev.LoRAID)
	case FieldMedium:
		return e.EncodeString(ev.Medium)
	case FieldLoRAName:
		return e.EncodeString(ev.LoRAName)
	case FieldExtraKeys:
		if err := e.EncodeArrayLen(len(ev.ExtraKeys)); err != nil {
			return err
		}
		for _, ks := range ev.ExtraKeys {
			if err := e.EncodeArrayLen(len(ks)); err != nil {
				return err
			}
			for _, k := range ks {
				if err := e.EncodeString(k); err != nil {
					return err
				}
			}
		}
		return nil
	case FieldGroupIdx:
		return e.EncodeInt(int64(ev.Group))
	}
	return e.EncodeNil()
}
