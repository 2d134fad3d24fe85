// Package kvhint tells engines what the router knows about a session's KV
// cache.
//
// The router knows things an engine cannot: which sessions are alive, which
// blocks are a prefix many sessions share and which a tail only one session
// uses, whether a tool call will take milliseconds or minutes, when a
// subagent opens and closes. A hint carries that intent to one worker. The
// engine keeps ownership of its memory and scheduling and may clip, defer or
// refuse any hint; it says what it did in a Reply.
//
// # Taxonomy
//
// An Action is one hint. Every action carries a session id and a Target: a
// list of block hashes (root-aligned sequence hashes, root first), a Range of
// the session's blocks or tokens, or nothing (the whole session). Six kinds:
//
//	Share     (kv.fetch)     the blocks exist on other workers: Sources names
//	                         them, best first, with control endpoints
//	Prefetch  (kv.prefetch)  move to a hotter tier (Dest: device or host)
//	Demote    (kv.demote)    move to a colder tier (Dest: host, disk, external)
//	Pin       (kv.pin)       protect from eviction for a lease of TTL
//	Retain    (kv.retain)    evict later: Priority 1..100, for TTL
//	Release   (kv.deref)     the session no longer needs these blocks
//
// Limit optionally caps how many blocks the engine should act on.
// Action.Validate and Envelope.Validate enforce the per-kind rules and the
// Bounds (TTL range, priority range, destination tiers, block and limit
// caps, id lengths); Action.Clip brings numbers inside Bounds the way an
// engine would. Validation is separate from decoding: decoders check syntax,
// engines validate against their own Bounds and reply "rejected".
//
// # Wire format and compatibility
//
// The JSON envelope uses the field names of the kv_hints envelope that
// Dynamo, SGLang and vLLM share. What was checked, and where:
//
//   - ai-dynamo/dynamo lib/kv-router/src/kv_hints.rs: KvHint
//     {protocol_version: "0.1", message_id, actions[]}; KvHintAction
//     {action_id, action_type, action_version, payload}; the transfer action
//     "kv.fetch" version "1.0" with payload {source_control_endpoint,
//     block_hashes} where block hashes are bare JSON numbers (u64). Unknown
//     action types deserialize as opaque data. An earlier revision of the
//     same module typed two actions: "kv.deref" (no payload) and
//     "kv.source_locations" (the pre-rename spelling of kv.fetch).
//   - ai-dynamo/dynamo lib/llm/src/kv_router/kv_hint_policy.rs: the
//     KvHintPolicy trait, evaluated after worker selection with the agent
//     context, the selected worker, the session lineage, the prefix length
//     and the cached prefix length. Policy and Input here follow that shape.
//   - sgl-project/sglang python/sglang/srt/managers/kv_hints.py and
//     vllm-project/vllm vllm/v1/kv_hints/protocol.py: the same envelope as
//     msgspec structs; a consumer ignores actions it does not implement. An
//     SGLang cache manager dispatches "kv.deref", "kv.demote" (payload
//     {session_id, session_generation}) and "kv.prefetch", caps an envelope
//     at 64 actions and ids at 512 bytes (the Bounds defaults). SGLang's
//     HiCache router-hint reader reads the legacy "kv.source_locations" on
//     input only, skips a newer action_version rather than misparse it, and
//     does not let the envelope's protocol_version gate actions.
//   - "kv.retain" with payload {priority, ttl_seconds, block_hashes} appears
//     in an example policy built on Dynamo's KvHintPolicy and in a vLLM
//     retention overlay (priority 1..100, TTL in float seconds).
//   - No upstream spelling of a pin was found; "kv.pin" is this package's.
//
// This package writes "kv.fetch" and reads both spellings. It adds fields
// that consumers of the shared schema ignore: an envelope-level session_id,
// and payload fields session_id, block_range / token_range {start, end},
// dest_tier, ttl_seconds, priority, limit_blocks, and sources [{worker_id,
// dp_rank, endpoint, tier, prefix_blocks}] next to Dynamo's single
// source_control_endpoint. testdata/golden holds one document per kind.
//
// The binary encoding (AppendBinary, DecodeBinary) is MessagePack, for an
// engine side channel: positional arrays, each record self-delimiting, so a
// reader skips what it does not know and a newer writer may append fields.
// It is 2.5-3.5× smaller than the JSON and 4-6× faster to write (see the
// package benchmarks). Both codecs are written by hand (no reflection) and
// allocate nothing when encoding into a reused buffer; the MessagePack codec
// is tested byte for byte against github.com/vmihailenco/msgpack/v5.
//
// # Versioning
//
// Each action carries its own version. Decoders read action_version 1.x with
// the 1.0 schema (unknown payload fields ignored) and skip, without failing,
// actions of an unknown type, of another major version, or with a payload
// they cannot read; Envelope.Skipped lists them with a SkipReason and
// SkipCounts counts them. Only a broken envelope (not an object or array,
// missing protocol_version or message_id, an action without its three
// header fields) is an error, a *DecodeError wrapping ErrMalformed. The
// binary format has its own version (BinaryFormat); a newer one is
// ErrVersion.
//
// # Replies
//
// An engine answers an envelope with a Reply: one Result per action with an
// Outcome (accepted, clipped, deferred, rejected, missing), the blocks it
// acted on and an optional reason. Reply.Counts tallies them and Counts.Add
// aggregates across replies. Replies have JSON and MessagePack encodings with
// the same versioning rules (unknown outcomes are skipped and counted).
//
// # Policies
//
// A Policy turns an Input into Hints (actions addressed to workers). The
// Input is plain data the router assembles: the triggering Event (tick,
// admit, resume, finish); the Session with its lineage (parent id, its chain
// split into a Shared prefix with per-block live reference counts and a
// Unique tail, its Phase REASONING or ACTING, how long it has been acting,
// whether it is finished, its home worker); the parent Session; the selected
// worker; the request's prefix blocks; and, per worker, how deep into that
// prefix it holds blocks on device, host and disk. kvhint imports no other
// agentkv package: hashes are uint64, sessions strings, workers WorkerID.
//
// Built-in policies:
//
//   - TailOffload: demote a session's unique tail to host after it has been
//     ACTING longer than a threshold; prefetch colder blocks of the request
//     prefix back to device when its next turn is admitted or it resumes.
//   - PrefixPin: pin the leading shared blocks that at least N live sessions
//     reference (a system prompt), renewing the lease as turns use it: with
//     the router's Renewals (Input.Renewals, Input.Now), at most every
//     quarter of the lease per worker and prefix while the worker holds it,
//     not on every turn of every session that shares it.
//   - PeerShare: when the selected worker lacks a prefix another worker
//     holds, name the best sources (longest prefix, ties to the smaller
//     worker, as Dynamo's best_source does).
//   - FinishRelease: when a session finishes, release every block only it
//     referenced, never one on a live parent's chain.
//
// Policies combines several; PolicyFunc adapts a function. A Batcher groups
// hints into one Envelope per worker and names messages and actions. A
// policy that says what it reads (Needer) is given only that; one that
// reads Session.SharedRefs only against thresholds (RefsBounder: PrefixPin's
// MinSessions, FinishRelease's 2) lets the router stop counting a shared
// block's sessions at the largest of them (RefsBound), so a system prompt
// every session shares costs a turn the same with ten sessions or ten
// thousand.
//
// # Delivery
//
// A Sink delivers envelopes to one worker; SinkFunc adapts a function. Queue
// wraps a Sink so routing never waits: Send enqueues or drops at once (the
// new envelope, or with DropOldest the oldest queued one), one goroutine
// delivers in order with an optional per-call timeout, Stats counts
// everything, and Close(ctx) drains, or gives up when ctx ends and cancels
// the delivery in flight.
//
// # Delivery to engines over HTTP
//
// NamedPolicies builds the built-ins from a flag ("share,tail,pin,release").
// AppendToBody adds an envelope to a request body as its "kv_hints" field,
// where vLLM (PR #53423) and SGLang read it. A proxy keeps route-time hints
// in a Mailbox until the worker's request takes them, and Split sends
// between-request actions (BetweenRequests: demote, release) to a control
// channel instead, such as an HTTPSink behind a Queue. Envelope.SignedHashes
// writes block hashes as signed int64, the way SGLang names blocks
// (engine/sglang.Names translates the router's hashes to SGLang's).
// HashText caches each session's block-hash lists as JSON, and its
// BodyTail encodes a body's hint tail into a pooled Tail whose parts share
// those lists: each reader of the parts holds the Tail and the last
// Release returns it. Recycle gives back a one-action envelope Batcher
// made once its last holder has encoded it. A policy builds its actions'
// Sources in Input.SourceBuf when the caller gives one, and Batch copies
// them into the envelope (a one-action envelope's into its pooled block).
// With all three, a hinted request allocates one string for its hints
// (the envelope's ids).
//
// # Thread safety and ownership
//
// Envelope, Action, Reply, Input and Session are plain values: any number of
// goroutines may read, encode or validate one at a time, but mutation needs
// external synchronisation. Decoders return fresh slices that do not alias
// their input. Encoders append to the caller's buffer and keep nothing.
// Policy outputs may alias the Input's slices (Target.Blocks is a subslice
// of Session or Prefix blocks): copy before mutating the Input. The built-in
// policies, Bounds and Batcher are safe for concurrent use; Queue is safe
// for concurrent use and never calls its inner Sink while holding a lock.
// Send hands the envelope to the sink: do not modify it afterwards.
package kvhint
