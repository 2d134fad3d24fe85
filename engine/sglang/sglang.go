package sglang

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/agentkv/agentkv/engine/vllm"
)

// Schema is SGLang's positional event layout
// (python/sglang/srt/disaggregation/kv_events.py): BlockStored is
// [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
// medium] with BlockStoredWithMetadata appending a {"cache_salt"} map, and
// BlockRemoved is [tag, block_hashes, medium].
var Schema = &vllm.Schema{
	Name: "sglang",
	Stored: []vllm.Field{vllm.FieldBlockHashes, vllm.FieldParentBlockHash, vllm.FieldTokenIDs,
		vllm.FieldBlockSize, vllm.FieldLoRAID, vllm.FieldMedium, vllm.FieldMetadata},
	Removed: []vllm.Field{vllm.FieldBlockHashes, vllm.FieldMedium},
}

// DecodeOptions returns opts with SGLang's Schema.
func DecodeOptions(opts vllm.DecodeOptions) vllm.DecodeOptions {
	opts.Schema = Schema
	return opts
}

// NewDecoder returns a vllm.Decoder for SGLang payloads.
func NewDecoder(opts vllm.DecodeOptions) *vllm.Decoder {
	return vllm.NewDecoder(DecodeOptions(opts))
}

// NewStream returns a vllm.Stream for one SGLang publisher: SGLang's
// schema, and its topic epoch as the restart signal.
func NewStream(cfg vllm.StreamConfig) (*vllm.Stream, error) {
	cfg.Decode = DecodeOptions(cfg.Decode)
	if cfg.Epoch == nil {
		cfg.Epoch = Epoch
	}
	return vllm.NewStream(cfg)
}

// NewSubscriber returns a vllm.Subscriber configured for SGLang. DP ranks
// follow SGLang's select_kv_publisher_dp_rank: attention-DP rank when DP
// attention is on, else the DP replica index, on port + rank either way.
func NewSubscriber(cfg vllm.Config) (*vllm.Subscriber, error) {
	cfg.Decode = DecodeOptions(cfg.Decode)
	if cfg.Epoch == nil {
		cfg.Epoch = Epoch
	}
	return vllm.NewSubscriber(cfg)
}

var (
	epochMarker    = []byte("\x00sgl-kv-epoch=")
	snapshotMarker = []byte("\x00sgl-kv-snapshot=")
)

// Epoch returns the publisher-lifetime token a snapshot-capable SGLang
// publisher appends to its topic (topic + "\x00sgl-kv-epoch=" + epoch,
// optionally followed by "\x00sgl-kv-snapshot=" + barrier id), or nil for
// a plain topic. A new epoch means a new publisher, hence an empty cache.
func Epoch(topic []byte) []byte {
	i := bytes.Index(topic, epochMarker)
	if i < 0 {
		return nil
	}
	e := topic[i+len(epochMarker):]
	if j := bytes.Index(e, snapshotMarker); j >= 0 {
		e = e[:j]
	}
	return e
}

// ErrBadHash reports a hash string that is not at least 16 hex digits.
var ErrBadHash = errors.New("sglang: hash is not a hex digest")

// HashFromHex returns the 64-bit block hash SGLang publishes for a
// SHA-256 hex digest (its hash_str_to_int64: the first 16 hex digits as a
// signed int64), as the uint64 with the same bits. It equals
// vllm.HashBytes of the raw digest.
func HashFromHex(digest string) (uint64, error) {
	if len(digest) < 16 {
		return 0, ErrBadHash
	}
	var b [8]byte
	if _, err := hex.Decode(b[:], []byte(digest[:16])); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadHash, err)
	}
	return vllm.HashBytes(b[:]), nil
}

// Metric names SGLang exports on /metrics.
const (
	CapacityMetric = "sglang:max_total_num_tokens"
	PageSizeMetric = "sglang:page_size"
)

// Capacity is an SGLang server's KV cache size.
type Capacity struct {
	Tokens   int // sglang:max_total_num_tokens, summed over every series (DP ranks)
	PageSize int // sglang:page_size, 0 when the server does not export it
}

// ParseCapacity reads /metrics text. Without a positive
// sglang:max_total_num_tokens it returns an error wrapping vllm.ErrNoMetric
// or vllm.ErrNoCapacity.
func ParseCapacity(r io.Reader) (Capacity, error) {
	text, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return Capacity{}, fmt.Errorf("sglang: reading metrics: %w", err)
	}
	ss, err := vllm.ParseSamples(bytes.NewReader(text), CapacityMetric)
	if err != nil {
		return Capacity{}, err
	}
	if len(ss) == 0 {
		return Capacity{}, fmt.Errorf("%w: %s", vllm.ErrNoMetric, CapacityMetric)
	}
	var c Capacity
	for _, s := range ss {
		if !(s.Value > 0 && s.Value < math.MaxInt32) || s.Value != math.Trunc(s.Value) {
			return Capacity{}, fmt.Errorf("%w: %s = %v", vllm.ErrNoCapacity, CapacityMetric, s.Value)
		}
		c.Tokens += int(s.Value)
	}
	ps, err := vllm.ParseSamples(bytes.NewReader(text), PageSizeMetric)
	if err == nil && len(ps) > 0 && ps[0].Value >= 1 && ps[0].Value < math.MaxInt32 {
		c.PageSize = int(ps[0].Value)
	}
	return c, nil
}
