package eventplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// Wire format, version 1 (msgpack, integers in their shortest form).
//
// A KV message carries consecutive events of one worker rank:
//
//	[1, worker id, dp rank, [event, ...]]
//	event: [event id, kind, tier, parent or nil, block size, lora, blocks, removed]
//	blocks: [engine hash, content, engine hash, content, ...]
//	content: the block's local hash (an integer), or its token ids (an
//	         array) when the relay could not hash them (a block-size
//	         mismatch, which the index then rejects loudly)
//	removed: [engine hash, ...]
//
// Local hashes replace token ids (8 bytes instead of 4 per token), so a
// stored block costs about 18 bytes. A shared-pool message carries one
// store batch and, when the relay was given one, the pool's layout (so
// every replica reads the object keys alike, and a layout change takes
// effect at the same point of the stream on all of them):
//
//	[1, batch seq, ts millis, dp rank, [[kind, key, group, tenant, backend, medium, id, [seq hash, ...]], ...] (, layout)]
//	layout: [backend, page size, tp, pp, tp_lcm, bits (1 MLA, 2 Eagle, 4 split heads), extra backend tag, key prefix]
const wireVersion = 1

// Decoder bounds: a message larger than these is malformed, never a large
// allocation.
const (
	maxEvents     = 1 << 16
	maxBlocks     = 1 << 16
	maxExtraKeys  = 64
	maxStringLen  = 1 << 12
	maxSeqHashes  = 1 << 16
	maxPoolEvents = 1 << 16
)

// ErrMalformed reports a message that is not a well-formed event-plane
// message of a known version. The message is dropped whole and counted.
var ErrMalformed = errors.New("eventplane: malformed message")

// KVBatch is the decoded form of one KV message: consecutive events of one
// worker rank. The events and their slices belong to the batch.
type KVBatch struct {
	Worker flashindex.Worker
	Events []flashindex.Event
}

// AppendKV appends the encoding of events (all of worker w) to dst. Stored
// blocks that carry tokens are hashed with hash (the relay's hasher for the
// event's LoRA); hash may return ok=false to send the tokens instead.
func AppendKV(dst []byte, w flashindex.Worker, events []flashindex.Event, hash func(lora string, b *flashindex.StoredBlock) (uint64, bool)) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	e := msgpack.NewEncoder(buf)
	e.UseCompactInts(true)
	try := func(err error) {
		if err != nil {
			panic(encodeErr{err})
		}
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				ee, ok := r.(encodeErr)
				if !ok {
					panic(r)
				}
				err = ee.err
			}
		}()
		try(e.EncodeArrayLen(4))
		try(e.EncodeUint(wireVersion))
		try(e.EncodeUint(w.ID))
		try(e.EncodeUint(uint64(w.DPRank)))
		try(e.EncodeArrayLen(len(events)))
		for i := range events {
			ev := &events[i]
			try(e.EncodeArrayLen(8))
			try(e.EncodeUint(ev.EventID))
			try(e.EncodeUint(uint64(ev.Kind)))
			try(e.EncodeUint(uint64(ev.Tier)))
			if ev.HasParent {
				try(e.EncodeUint(ev.Parent))
			} else {
				try(e.EncodeNil())
			}
			try(e.EncodeUint(uint64(max(ev.BlockSize, 0))))
			try(e.EncodeString(ev.LoRA))
			try(e.EncodeArrayLen(2 * len(ev.Blocks)))
			for j := range ev.Blocks {
				b := &ev.Blocks[j]
				try(e.EncodeUint(b.EngineHash))
				local, ok := b.LocalHash, b.HasLocalHash
				if !ok && hash != nil {
					local, ok = hash(ev.LoRA, b)
				}
				if ok {
					try(e.EncodeUint(local))
					continue
				}
				try(e.EncodeArrayLen(len(b.Tokens)))
				for _, t := range b.Tokens {
					try(e.EncodeUint(uint64(t)))
				}
			}
			try(e.EncodeArrayLen(len(ev.Hashes)))
			for _, h := range ev.Hashes {
				try(e.EncodeUint(h))
			}
		}
		return nil
	}()
	if err != nil {
		return dst, fmt.Errorf("eventplane: encode: %w", err)
	}
	return buf.Bytes(), nil
}

type encodeErr struct{ err error }

// DecodeKV decodes one KV message into b, reusing its slices. A malformed
// message returns an error wrapping ErrMalformed and leaves b unspecified.
func DecodeKV(data []byte, b *KVBatch) error {
	d := reader{d: msgpack.NewDecoder(bytes.NewReader(data))}
	d.arrayLen(4, 4, "message")
	if v := d.uint("version"); d.err == nil && v != wireVersion {
		d.fail("version %d", v)
	}
	b.Worker.ID = d.uint("worker")
	b.Worker.DPRank = uint32(d.bounded(1<<32-1, "dp rank"))
	n := d.arrayLen(0, maxEvents, "events")
	if d.err != nil {
		return d.err
	}
	if cap(b.Events) < n {
		b.Events = make([]flashindex.Event, n)
	}
	b.Events = b.Events[:n]
	for i := range b.Events {
		ev := &b.Events[i]
		blocks, hashes := ev.Blocks[:0], ev.Hashes[:0]
		*ev = flashindex.Event{Worker: b.Worker}
		d.arrayLen(8, 8, "event")
		ev.EventID = d.uint("event id")
		ev.Kind = flashindex.EventKind(d.bounded(255, "kind"))
		ev.Tier = flashindex.Tier(d.bounded(255, "tier"))
		if d.isNil() {
			d.skipNil()
		} else {
			ev.Parent, ev.HasParent = d.uint("parent"), true
		}
		ev.BlockSize = int(d.bounded(flashindex.MaxBlockSize, "block size"))
		ev.LoRA = d.str("lora")
		nb := d.arrayLen(0, 2*maxBlocks, "blocks")
		if nb%2 != 0 {
			d.fail("odd block array %d", nb)
		}
		for j := 0; j < nb/2 && d.err == nil; j++ {
			blocks = append(blocks, flashindex.StoredBlock{})
			sb := &blocks[len(blocks)-1]
			tokens := sb.Tokens[:0]
			*sb = flashindex.StoredBlock{EngineHash: d.uint("engine hash")}
			if d.isArray() {
				nt := d.arrayLen(0, flashindex.MaxBlockSize, "tokens")
				for k := 0; k < nt && d.err == nil; k++ {
					tokens = append(tokens, uint32(d.bounded(1<<32-1, "token")))
				}
				sb.Tokens = tokens
			} else {
				sb.LocalHash, sb.HasLocalHash = d.uint("local hash"), true
			}
		}
		ev.Blocks = blocks
		nh := d.arrayLen(0, maxBlocks, "removed")
		for j := 0; j < nh && d.err == nil; j++ {
			hashes = append(hashes, d.uint("removed hash"))
		}
		ev.Hashes = hashes
		if d.err != nil {
			return d.err
		}
	}
	d.end()
	return d.err
}

// PoolBatch is the decoded form of one shared-pool message: a Mooncake
// store batch and the pool layout the relay was given (the zero Layout
// when the message carries none).
type PoolBatch struct {
	Batch  sharedpool.Batch
	Layout sharedpool.Layout
}

// AppendPool appends the encoding of a shared-pool store batch to dst,
// with the pool's layout unless it is the zero Layout. A rejected event
// whose object key is known is carried, in its place, as a remove of that
// object on every medium (what the index does with a rejection: a lost
// event may have removed it); one without a key is not carried.
func AppendPool(dst []byte, b *sharedpool.Batch, layout sharedpool.Layout) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	e := msgpack.NewEncoder(buf)
	e.UseCompactInts(true)
	var err error
	put := func(f error) {
		if err == nil {
			err = f
		}
	}
	hasLayout := layout != (sharedpool.Layout{})
	put(e.EncodeArrayLen(5 + b2i(hasLayout)))
	put(e.EncodeUint(wireVersion))
	put(e.EncodeUint(b.Seq))
	put(e.EncodeInt(b.TimestampMillis))
	put(e.EncodeInt(b.DPRank))
	n := len(b.Events)
	for i := range b.Rejected {
		if b.Rejected[i].Key != "" {
			n++
		}
	}
	put(e.EncodeArrayLen(n))
	event := func(ev *sharedpool.Event) {
		put(e.EncodeArrayLen(8))
		put(e.EncodeUint(uint64(ev.Kind)))
		put(e.EncodeString(ev.Key))
		put(e.EncodeString(ev.GroupID))
		put(e.EncodeString(ev.Tenant))
		put(e.EncodeString(ev.Backend))
		put(e.EncodeString(ev.Medium))
		put(e.EncodeUint(ev.ID))
		put(e.EncodeArrayLen(len(ev.SeqHashes)))
		for _, h := range ev.SeqHashes {
			put(e.EncodeUint(h))
		}
	}
	// Events and rejections interleave in publisher order: a rejection
	// with Index i stood at position i of the original list.
	ri := 0
	for pos, ei := 0, 0; ei < len(b.Events) || ri < len(b.Rejected); pos++ {
		if ri < len(b.Rejected) && (b.Rejected[ri].Index <= pos || ei == len(b.Events)) {
			if k := b.Rejected[ri].Key; k != "" {
				event(&sharedpool.Event{Kind: sharedpool.Remove, Key: k})
			}
			ri++
			continue
		}
		event(&b.Events[ei])
		ei++
	}
	if hasLayout {
		l := layout
		put(e.EncodeArrayLen(8))
		put(e.EncodeString(l.Backend))
		put(e.EncodeUint(uint64(max(l.PageSize, 0))))
		put(e.EncodeUint(uint64(max(l.TPSize, 0))))
		put(e.EncodeUint(uint64(max(l.PPSize, 0))))
		put(e.EncodeUint(uint64(max(l.TPLCMSize, 0))))
		put(e.EncodeUint(uint64(b2i(l.MLA) | b2i(l.Eagle)<<1 | b2i(l.SplitHeads)<<2)))
		put(e.EncodeString(l.ExtraBackendTag))
		put(e.EncodeString(l.KeyPrefix))
	}
	if err != nil {
		return dst, fmt.Errorf("eventplane: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DecodePool decodes one shared-pool message into b, reusing its slices.
// A malformed message returns an error wrapping ErrMalformed.
func DecodePool(data []byte, pb *PoolBatch) error {
	d := reader{d: msgpack.NewDecoder(bytes.NewReader(data))}
	fields := d.arrayLen(5, 6, "message")
	if v := d.uint("version"); d.err == nil && v != wireVersion {
		d.fail("version %d", v)
	}
	b := &pb.Batch
	b.Topic = ""
	b.Seq = d.uint("seq")
	b.TimestampMillis = d.int("ts")
	b.DPRank = d.int("dp rank")
	b.Rejected = b.Rejected[:0]
	pb.Layout = sharedpool.Layout{}
	n := d.arrayLen(0, maxPoolEvents, "events")
	if d.err != nil {
		return d.err
	}
	evs := b.Events[:0]
	for i := 0; i < n && d.err == nil; i++ {
		evs = append(evs, sharedpool.Event{})
		ev := &evs[len(evs)-1]
		hashes := ev.SeqHashes[:0]
		d.arrayLen(8, 8, "event")
		*ev = sharedpool.Event{
			Kind: sharedpool.Kind(d.bounded(255, "kind")),
			Key:  d.str("key"), GroupID: d.str("group"), Tenant: d.str("tenant"),
			Backend: d.str("backend"), Medium: d.str("medium"), ID: d.uint("id"),
		}
		nh := d.arrayLen(0, maxSeqHashes, "seq hashes")
		for j := 0; j < nh && d.err == nil; j++ {
			hashes = append(hashes, d.uint("seq hash"))
		}
		ev.SeqHashes = hashes
	}
	b.Events = evs
	if fields == 6 {
		d.arrayLen(8, 8, "layout")
		l := &pb.Layout
		l.Backend = d.str("backend")
		l.PageSize = int(d.bounded(flashindex.MaxBlockSize, "page size"))
		l.TPSize = int(d.bounded(1<<16, "tp"))
		l.PPSize = int(d.bounded(1<<16, "pp"))
		l.TPLCMSize = int(d.bounded(1<<16, "tp_lcm"))
		bits := d.bounded(7, "layout bits")
		l.MLA, l.Eagle, l.SplitHeads = bits&1 != 0, bits&2 != 0, bits&4 != 0
		l.ExtraBackendTag = d.str("extra backend tag")
		l.KeyPrefix = d.str("key prefix")
		if d.err == nil && *l == (sharedpool.Layout{}) {
			d.fail("empty layout")
		}
	}
	d.end()
	return d.err
}

// reader wraps a msgpack decoder with sticky errors and bounds.
type reader struct {
	d   *msgpack.Decoder
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

func (r *reader) wrap(what string, err error) {
	if err != nil {
		r.fail("%s: %v", what, err)
	}
}

func (r *reader) arrayLen(lo, hi int, what string) int {
	if r.err != nil {
		return 0
	}
	n, err := r.d.DecodeArrayLen()
	if err != nil {
		r.wrap(what, err)
		return 0
	}
	if n < lo || n > hi {
		r.fail("%s: %d elements, want %d to %d", what, n, lo, hi)
		return 0
	}
	return n
}

func (r *reader) uint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	c, err := r.d.PeekCode()
	if err != nil {
		r.wrap(what, err)
		return 0
	}
	if !msgpcode.IsFixedNum(c) && c != msgpcode.Uint8 && c != msgpcode.Uint16 && c != msgpcode.Uint32 && c != msgpcode.Uint64 {
		r.fail("%s: not an unsigned integer (code %#x)", what, c)
		return 0
	}
	if int8(c) < 0 && msgpcode.IsFixedNum(c) { // negative fixnum
		r.fail("%s: negative", what)
		return 0
	}
	v, err := r.d.DecodeUint64()
	r.wrap(what, err)
	return v
}

func (r *reader) int(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, err := r.d.DecodeInt64()
	r.wrap(what, err)
	return v
}

func (r *reader) bounded(hi uint64, what string) uint64 {
	v := r.uint(what)
	if v > hi {
		r.fail("%s: %d > %d", what, v, hi)
		return 0
	}
	return v
}

func (r *reader) str(what string) string {
	if r.err != nil {
		return ""
	}
	c, err := r.d.PeekCode()
	if err != nil {
		r.wrap(what, err)
		return ""
	}
	if !msgpcode.IsString(c) {
		r.fail("%s: not a string (code %#x)", what, c)
		return ""
	}
	n, err := r.d.DecodeBytesLen()
	if err != nil || n > maxStringLen {
		r.fail("%s: string length %d: %v", what, n, err)
		return ""
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.d.Buffered(), b); err != nil {
		r.wrap(what, err)
		return ""
	}
	return string(b)
}

func (r *reader) isNil() bool {
	if r.err != nil {
		return false
	}
	c, err := r.d.PeekCode()
	return err == nil && c == msgpcode.Nil
}

func (r *reader) isArray() bool {
	if r.err != nil {
		return false
	}
	c, err := r.d.PeekCode()
	return err == nil && (msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32)
}

func (r *reader) skipNil() { r.wrap("nil", r.d.DecodeNil()) }

func (r *reader) end() {
	if r.err != nil {
		return
	}
	if _, err := r.d.PeekCode(); err == nil {
		r.fail("trailing data")
	}
}
