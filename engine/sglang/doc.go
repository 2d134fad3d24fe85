// Package sglang is the worker adapter for SGLang engines' KV events.
//
// SGLang publishes KV events exactly the way vLLM does, because its
// publisher (python/sglang/srt/disaggregation/kv_events.py) is a copy of
// vLLM's: a ZeroMQ PUB socket per DP rank at port + rank, messages
// [topic, seq as 8 bytes big-endian, msgpack payload], and a ROUTER replay
// socket that streams buffered batches from a start sequence and ends with
// seq −1. The differences this package encodes:
//
//   - the batch is the array [ts, events, attn_dp_rank];
//   - events are always tagged arrays, in the field order of [Schema]:
//     BlockStored [tag, block_hashes, parent_block_hash, token_ids,
//     block_size, lora_id, medium] (BlockStoredWithMetadata appends a
//     {"cache_salt": ...} map, mixed into the blocks' extra keys only with
//     vllm.DecodeOptions.ExtraKeys), BlockRemoved [tag, block_hashes,
//     medium];
//   - block hashes are signed int64: the first 16 hex digits of the
//     block's SHA-256 digest (hash_str_to_int64). They are kept as the
//     uint64 with the same bits, which is also what vllm.HashBytes makes of
//     the raw digest, so [HashFromHex] and vllm agree;
//   - medium is one of SGLang's StorageMedium values, GPU, CPU_PINNED,
//     DISK and EXTERNAL, mapped by flashindex.TierFromMedium;
//   - a snapshot-capable publisher appends "\x00sgl-kv-epoch=<epoch>" to
//     its topic; [Epoch] extracts it, and the stream treats a new epoch as a
//     publisher restart (a Cleared event), even when the sequence number
//     happens to keep rising;
//   - KV capacity is the sglang:max_total_num_tokens gauge ([ParseCapacity]).
//
// Everything else (decoding, gap replay, reconnection, statistics, the
// Stream and Subscriber types, thread-safety and slice ownership) is
// engine/vllm's, configured here; see that package's documentation.
//
// # HiCache + Mooncake store events
//
// With HiCache on a Mooncake store, SGLang workers write KV pages into a
// shared pool that every worker can load from. The Mooncake master
// publishes object-level store events over ZeroMQ ([topic, seq, msgpack]);
// [StoreSubscriber] feeds them into a sharedpool.Pool, which the router
// queries for the shared-pool credit beyond each worker's own prefix. The
// master keeps no replay buffer, so a sequence gap clears the pool's state
// (reported through StoreConfig.OnReport and counted) and the pool refills
// as pages are stored again. Undecodable messages are counted and skipped.
// With StoreConfig.OnBatch the decoded batches are handed on instead of
// (or before) being applied: "agentkv relay --store" forwards them to the
// event plane, so every router replica indexes the same pool.
//
// # Concurrency
//
// The functions ([DecodeOptions], [NewDecoder], [NewStream],
// [NewSubscriber], [Epoch], [HashFromHex], [ParseCapacity]) keep no state
// and are safe for concurrent use. What NewDecoder, NewStream and
// NewSubscriber return are engine/vllm's types under its rules: a Decoder
// serves one goroutine; a Stream's Handle one goroutine, its Stats any; a
// Subscriber is safe for concurrent use, its Start launches one goroutine
// per DP rank (each with its own SUB socket, calling the Sink
// concurrently with the other ranks'), and its Close ends them and waits.
//
// [Names] is safe for concurrent use (one mutex, held for one event or one
// lookup) and starts no goroutine.
//
// Every [StoreSubscriber] method is safe for concurrent use. Start
// launches one goroutine, the connection loop: it dials the master,
// receives messages and passes each to Handle, and after a failure
// redials with backoff (StoreConfig.ReconnectMin, ReconnectMax). A second
// Start, or one after Close, is an error. OnBatch, OnReport and the Pool's
// writes run on that goroutine, one batch at a time, in the master's
// order; a caller of Handle runs them on its own goroutine, and only one
// goroutine feeding Handle keeps that order. Stats reads atomic counters
// from any goroutine. Close, or the end of the context given to Start,
// cancels the loop: the socket closes, the receive returns, no redial
// follows. Close then waits for the goroutine to return, so no callback
// runs after it; it is safe to call more than once, and before Start.
package sglang
