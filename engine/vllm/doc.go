// Package vllm is the worker adapter for vLLM engines: it turns an
// engine's KV cache events into normalised flashindex events, reads its KV
// capacity, forwards OpenAI requests to it and tokenizes prompts the way
// the engine does.
//
// # Wire format
//
// The format was checked against vLLM's vllm/distributed/kv_events.py
// (ZmqEventPublisher, KVEventBatch, BlockStored, BlockRemoved,
// AllBlocksCleared) and SGLang's python/sglang/srt/disaggregation/kv_events.py,
// which copies it.
//
//   - Transport: a ZeroMQ PUB socket per data-parallel rank, at the
//     configured endpoint's port + rank (default tcp://*:5557). Each message
//     is three frames: topic, the batch sequence number as 8 bytes
//     big-endian, and a msgpack payload.
//   - Replay: an optional ROUTER socket (also port + rank) keeps the last
//     buffer_steps batches. A client sends [empty delimiter, start seq as 8
//     bytes big-endian] and receives [empty, seq, payload] for every buffered
//     batch with seq >= start, then [empty, -1 as 8 bytes, empty]. This
//     package asks from a DEALER socket (a REQ socket would accept only the
//     first reply).
//   - Payload: msgspec's encoding of an EventBatch: the array
//     [ts, [events], data_parallel_rank] (older vLLM and SGLang, whose rank
//     field is attn_dp_rank), or, in the newest vLLM, the map
//     {"ts", "events", "data_parallel_rank"}. Trailing fields with defaults
//     may be missing.
//   - Events: tagged arrays ["BlockStored", block_hashes, parent_block_hash,
//     token_ids, block_size, lora_id, medium, lora_name, extra_keys,
//     group_idx, ...], ["BlockRemoved", block_hashes, medium, group_idx],
//     ["AllBlocksCleared"] (older vLLM, SGLang); or maps with the same field
//     names and "type" holding the tag (newer vLLM). Both are decoded;
//     missing trailing fields are normal and unknown fields are skipped.
//     [Schema] holds the positional order ([VLLM]; engine/sglang has its own).
//
// # Normalisation
//
// Hashes arrive as msgpack integers (non-negative, up to 2^64-1, or
// negative int64 as SGLang sends them) and are kept as their 64-bit two's
// complement bits, or as byte strings (vLLM's 32-byte SHA-256 digests),
// reduced by [HashBytes] to their first 8 bytes read big-endian; SGLang's
// int64 hashes are that same prefix of its SHA-256 digest, so both engines
// agree. Engine hashes are opaque to the router: each StoredBlock keeps its
// block's token_ids so the index computes its own Dynamo-compatible hashes.
// block_size goes to Event.BlockSize (the index must reject a mismatch
// loudly), lora_name to Event.LoRA (lora_id alone becomes "lora_id:<n>" or
// a name from DecodeOptions.LoRANames), medium to a tier through
// flashindex.TierFromMedium. extra_keys are ignored unless
// DecodeOptions.ExtraKeys is set.
//
// Bad input never panics and never stops a subscriber. A payload that is
// not well-formed msgpack is dropped whole before any of its events is
// emitted (a *MalformedError, ErrMalformed); an event with an unknown tag,
// an unknown medium, a field of the wrong type, or token_ids that do not
// make len(block_hashes) × block_size tokens (the Mamba groups of hybrid
// models) is dropped alone (an *EventError) and counted.
//
// # Untrusted input
//
// Engine endpoints are untrusted. Decode validates a whole payload, and its
// envelope (ts, dp rank, one events array), before emitting any event, so
// a bad payload emits nothing; it allocates at most 64 times the payload
// (buffers are sized once from validated array lengths and reused). The
// zmq4 library allocates each frame at the size its header announces, so
// sockets are dialled over a transport that follows ZMTP framing and drops
// the connection at a header past Config.MaxMessageBytes (64 MiB, all
// frames of a message together; at most 64 frames, commands 64 KiB) with
// ErrMessageTooLarge, before anything is allocated; the rank reconnects.
// LimitZMQ and LimitEndpoint give other packages' sockets the same cap.
//
// # Layers
//
//   - [Decoder] decodes one payload. It is synchronous, allocation-free in
//     the steady state and not safe for concurrent use; the *Event it
//     passes to emit, and every slice in it, are reused after emit returns.
//     The msgpack walk is a small hand-written reader over the payload
//     bytes (vmihailenco/msgpack/v5 encodes the test fixtures and is the
//     reference the reader is checked against), so hostile lengths cannot
//     cause large allocations and no value is copied.
//   - [Stream] is the synchronous core of one rank's subscription: it
//     checks sequence numbers, fills gaps through a [Replayer], detects
//     publisher restarts (the live sequence number does not rise, or, for
//     SGLang, the topic's epoch changes), and stamps Worker and consecutive
//     EventIDs on the events it hands to the [EventSink]. A gap it cannot
//     fill, and a restart, make it emit a Cleared event for the worker: the
//     index then under-reports rather than keeping stale blocks. Handle is
//     single-goroutine; Stats is safe from any goroutine.
//   - [Subscriber] is the thin concurrent wrapper: one goroutine and one
//     go-zeromq/zmq4 SUB socket per DP rank, reconnection with exponential
//     backoff, replay over a DEALER socket, Start/Close. Its Sink is called
//     from one goroutine per rank.
//   - [Client] forwards OpenAI requests over HTTP, streaming the reply
//     through while extracting usage, finish reason and tool calls; it
//     reads vllm:cache_config_info from /metrics ([ParseCacheConfigs]) and
//     tokenizes through /tokenize, which applies the chat template, with
//     [ApproxTokens] as the documented fallback. For an http:// engine the
//     /tokenize round trip runs on the caller's goroutine over kept
//     HTTP/1.1 connections of its own (kept.go), not net/http's loops.
//   - [Worker] bundles identity, DP ranks, block size, KV capacity, the
//     client and the subscriber, for the root router's Worker interface.
//   - [Encoding] writes payloads in the engine format, for tests, simulated
//     engines and replay tools.
//
// The package does not import the root agentkv package; the sink interface
// is defined here, where it is consumed, and *flashindex.Index satisfies
// it. engine/enginetest holds the conformance suite this adapter passes.
package vllm
