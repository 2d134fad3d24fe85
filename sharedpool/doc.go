// Package sharedpool indexes an external shared KV store — Mooncake behind
// SGLang's HiCache — so a router can credit a worker for KV it could load
// from the pool instead of recomputing, without counting anything twice.
//
// # What the store holds
//
// SGLang with hierarchical caching writes each full page of a request's KV
// to Mooncake as several physical objects. A [Layout] describes how:
//
//   - the page is named by a chained SHA-256: page i's digest is SHA-256 of
//     page i-1's digest (absent for page 0) followed by the page's token ids
//     as little-endian u32, written as 64 lowercase hex characters; partial
//     tail pages are not stored. With EAGLE the unit is a bigram (t[i],
//     t[i+1]), hashed as two u32. [PageHashes] computes these.
//   - the logical key is the hex digest, prefixed "<tag>_" when the worker
//     has an extra_backend_tag (or "<tag>_<model>" when it advertises a
//     combined key prefix, [Layout.KeyPrefix]).
//   - MLA models write one object per PP rank: "<key>__k" with PP 1 (the
//     empty PP suffix leaves a double underscore), "<key>_<pp>_k" otherwise.
//   - other models write K and V per rank: "<key>_<rank>_k" and
//     "<key>_<rank>_v", or "<key>_<rank>_<pp>_k/_v" with PP > 1. The ranks
//     are 0..tp-1, or 0..max(tp_lcm, tp)-1 when heads are split (each TP
//     rank r writes ranks r·(tp_lcm/tp) ... (r+1)·(tp_lcm/tp)-1).
//   - with Mooncake group semantics every object of a page carries the group
//     id "sglang-hicache:<logical key>" ([Layout.GroupID]).
//
// A page is present only when every one of its objects is.
//
// Sources checked (with the search tool, against the stored upstream
// files): SGLang python/sglang/srt/mem_cache/common.py (get_hash_str: prior
// digest, then to_bytes(4, "little") per token, EAGLE tuples element by
// element, hexdigest) and
// python/sglang/srt/mem_cache/storage/mooncake_store/mooncake_store.py
// (mha_suffix "<tp_rank>" or "<tp_rank>_<pp_rank>", mla_suffix "" or
// "<pp_rank>", keys f"{key}_{suffix}_k"/"_v", split_factor =
// tp_lcm_size // tp_size, _tag_keys prefixing "<config_prefix>_", the
// prefix joining extra_backend_tag and the model name with "/" replaced by
// "-", and _make_group_id); Dynamo lib/llm/src/kv_router/shared_cache.rs
// (HicacheSharedKvCache: the same expansion, its published test vectors,
// which testdata/page_hashes.json reproduces with Python's hashlib, the
// sequence-gap and 1M-entry clearing rules, and the layout-mismatch and
// layout-change handling); Mooncake docs/source/design/kv-event/
// subscriber-guide.md and publisher-design.md (the RFC #1527 event maps).
//
// # Events
//
// The Mooncake master publishes object events over ZMQ PUB as
// [topic, seq (8-byte big-endian), msgpack [timestamp, [event...], dp_rank]].
// [DecodeFrames] is a pure decoder for both map shapes seen in the wild:
// {event_type, object_key, tenant_id, group_id} (Dynamo's consumer) and the
// RFC #1527 envelope (event_id, event_type stored/removed/cleared,
// tenant_id, backend_id, medium, seq_hashes, optional object_key, legacy
// type/block_hashes). A message it cannot read is an error wrapping
// [ErrMalformedFrame]; a bad event inside a readable batch becomes a
// [Rejection] with a reason, and the rest of the batch stands. Nothing
// panics on any input (fuzzed).
//
// [Index.Apply] applies a [Batch] in order:
//
//   - sequence numbers: a repeat of the previous number is a duplicate and
//     is skipped; any other jump is a gap, which clears the index (lost
//     batches may have removed anything; Mooncake has no replay) and is
//     reported in [Report].Gap so the caller can resync.
//   - store/remove are per object key and per medium: an object stays
//     present while any medium holds it; a remove without a medium drops
//     all media. Keys the layout never writes (other tags, pools, ranks)
//     are counted and ignored; so are other tenants and backends.
//   - a clear event empties the index; so does reaching Config.MaxPages
//     (reported as Report.Overflows); so does a layout change.
//   - a rejected event whose object key is known drops that object:
//     under-crediting a page is safer than crediting one that is gone.
//
// Apply's cost on a table far larger than the CPU caches is memory
// latency: one random table access per object (one object per page for
// MLA). It therefore parses the keys of the next 32 events (hex decoded
// straight into the table's digest words, no allocation) and loads their
// home slots before applying the current 32, so those misses overlap
// instead of being paid one after another. The result is exactly that of
// applying each event as it comes (tested differentially with batches that
// span many such chunks).
//
// # Layouts across workers
//
// All workers sharing a pool must write pages the same way, or "every
// object present" means nothing. [Consensus] returns the common layout or a
// [*MismatchError] naming two disagreeing workers and the field;
// [Index.SyncLayouts] clears and disables the index on a mismatch (queries
// return the error) and re-enables it when workers agree. [Index.SetLayout]
// clears the index whenever the layout changes. [Layout.CheckPageSize]
// turns a router block size that differs from the page size into
// [ErrPageSizeMismatch] instead of silent zero hits.
//
// # Queries and credit
//
// [Index.QueryInto] maps a request's pages to [Hits]: the contiguous ranges
// of present pages and their total, with no allocation. For a worker whose
// device prefix covers D pages, [Hits.SharedBeyondDevice] is
// |hits ∩ [D, n)|, Dynamo's shared_beyond_device. That credit counts the
// worker's own host and disk hits a second time (they lie beyond D too), so
// [Hits.SharedBeyondTiers] credits only pages beyond device+host+disk, the
// worker's exclusive tier depths. [Hits.RunFrom] gives the stricter run of
// consecutive hits an engine can actually prefetch from a position.
//
// # Snapshots
//
// [Index.Snapshot] writes the index's state (layout, last batch sequence
// number, media names, every tracked page with the media of each object)
// as a versioned, canonical, zstd-compressed stream; [Index.Restore] reads
// it back into an index, keeping that index's Config. Two indexes that
// applied the same batches write the same bytes whatever their table seeds,
// and a restored index continues exactly as the original would (the next
// batch is judged against the saved sequence number). The event plane
// stores these beside the router's index snapshot, so a restarted replica
// has the pool at once. Snapshots are untrusted input: bad ones fail with
// [ErrSnapshotFormat] or [ErrSnapshotVersion], leave the index unchanged
// and never panic; the page count is bounded by MaxPages and the body by
// 256 times the compressed bytes (fuzzed).
//
// # Thread safety and ownership
//
// [Index] is a synchronous core and is not safe for concurrent use. [Pool]
// wraps it with a sync.RWMutex: one goroutine applies batches while any
// number query in parallel under the read lock; no user code runs under the
// lock. [Layout], [PageHash], [Hits] and [Report] are plain values.
// DecodeFrames copies what it keeps, so frame buffers may be reused. Apply
// retains nothing from the Batch. QueryInto reuses the Ranges slice of the
// Hits it is given; copy it before the next query if it must be kept.
//
// # Performance and memory
//
// Pages live in an open-addressing table keyed by the full 32-byte digest
// (40-byte slots, linear probing, backward-shift deletion, a seeded hash so
// crafted digests cannot pile up), plus one byte of media bits per object.
// A 1,024-page query against 1M pages costs one probe run per page; see
// BENCHMARKS.md for measured numbers.
//
// Not covered: SGLang's v2 hybrid pools (Mamba, SWA, DeepSeek V4 side
// pools, EAGLE draft pools) whose extra objects and trailing-page hit
// policies Dynamo reads from hicache_object_layout; and vLLM's Mooncake
// connector keys. Their objects are counted as foreign and ignored.
package sharedpool
