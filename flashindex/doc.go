// Package flashindex hashes token sequences into KV block hashes and indexes
// which worker holds which blocks on which tier.
//
// # Overview
//
// A router asks one question of this package for every request: how much
// of the request's prompt does each worker already hold in its KV cache,
// and on which tier? Answering it takes two parts.
//
//   - Block hashing turns a prompt's token ids into one sequence hash per
//     full block, bit-compatible with NVIDIA Dynamo ([Hasher], [Chain]).
//   - The [Index] records, from the engines' KV events, which worker holds
//     which blocks on which tier (device, host, disk; External belongs to
//     the sharedpool package), and answers, for a request's sequence
//     hashes, how deep each worker's cached prefix goes on each tier.
//
// In code:
//
//	ix, _ := flashindex.New(flashindex.Config{BlockSize: 16})
//	err := ix.Apply(ev)                        // Stored / Removed / Cleared
//	matches = ix.FindMatches(seq, matches[:0]) // per worker: Device, Host, Disk, Resident
//
// For engines that publish no events, [Index.Record] stands in for them
// (see Approximate mode). [Index.Snapshot] and [Restore] save and load the
// whole index. The sections below are: Block hashing, Events, Queries,
// Approximate mode, Snapshots, Bounds, Concurrency, Ownership, and, for
// readers of the code, Data structure and Engine-hash maps.
//
// # Block hashing
//
// Hashes are bit-compatible with NVIDIA Dynamo's router, so an agentkv
// router and a Dynamo deployment agree on every block:
//
//   - the local hash of a block is XXH3-64 over its token ids as
//     little-endian u32, seeded with [Seed] (1337);
//   - a LoRA adapter changes that seed to 1337 + XXH3-64(adapter name),
//     wrapping ([LoRASeed]), so adapters never share blocks with the base
//     model or each other;
//   - optional extra keys (multimodal content hashes) are sorted and appended
//     to the token bytes as little-endian u64 ([Hasher.LocalHashExtra]);
//   - the sequence hash of block 0 is its local hash; block i's is
//     XXH3-64(le64(seq[i-1]) ‖ le64(local[i])) with seed 1337
//     ([NextSequenceHash]), whatever the adapter;
//   - a partial tail block is never hashed or routed.
//
// [Hasher.AppendHashes] hashes a whole prompt into caller-owned slices with
// no allocation. [Chain] hashes incrementally: an agent's next turn resends
// its context plus an append, and only the blocks the append completes cost
// anything. The golden vectors in testdata come from Debian's python3-xxhash,
// an independent implementation; testdata/gen_hash_vectors.py regenerates
// them.
//
// The agentkv CLI prints the same hashes: agentkv hash --block-size 16 1,2,3...
//
// # Events
//
// [Event] is a KV cache event normalised from an engine's wire format
// (engine/vllm and engine/sglang decode those). A worker is a (ID, DP rank)
// pair ([Worker]); a block lives on a [Tier]. [Index.Apply] applies one
// event: Stored, Removed or Cleared.
//
// Engine hashes are opaque. A Stored event's blocks are rehashed from their
// tokens (or taken from StoredBlock.LocalHash) and chained onto the parent's
// own sequence hash, which the index finds through a per (worker, tier) map
// from engine hash to own hash. So routing works whatever hash an engine
// uses, and a block-size mismatch is a loud [*BlockSizeError] instead of a
// silent zero overlap. A Stored event whose parent the worker does not hold
// is rejected ([*UnknownParentError]), never re-rooted.
//
// Rules Apply enforces, each checked against a naive reference model by the
// differential test:
//
//   - Event ids are tracked per worker (ID, DP rank). An id at or below the
//     last one is a duplicate: skipped, counted, harmless. An id that jumps
//     is a [Gap], passed to Config.OnGap (outside any lock) and counted; the
//     event is still applied, and the adapter should resync. RemoveWorker
//     resets the ids, for engine restarts.
//   - A rejected event changes nothing but the worker's last event id, and
//     is counted by reason in [Stats].Rejected. Nothing panics on input.
//   - The same block on two tiers of a worker is two residencies; the same
//     block stored twice on one tier under two engine hashes stays resident
//     until both are removed.
//   - Removed hashes a worker does not hold on that tier are skipped and
//     counted (Stats.UnknownRemoved).
//   - Cleared drops every tier of every DP rank of the event's worker ID.
//   - Config.MaxBlocksPerWorker bounds the residencies of one worker (see
//     Bounds).
//
// # Queries
//
// [Index.FindMatches] returns, for every worker that holds any prefix of
// the request, its depth on each tier. It counts tiers exclusively, as
// Dynamo's lower-tier indexer does: Device is the longest prefix of the
// request on the worker's device tier; Host counts the blocks that continue
// on the host tier from where the device prefix ended; Disk counts the
// blocks that continue on the disk tier from where the host run ended. A
// block held on device and host counts once, in the tier the walk is in.
// Resident is the worker's total number of residencies, for tie-breaking.
//
// [Index.FindMatchesEarlyExit] stops as soon as at most one worker still
// matches; that worker's depths are then a prefix of its exact ones.
//
// A query's cost grows with the number of nodes the request enters and the
// residency changes along it, not with its length in blocks times workers
// (see Data structure).
//
// # Approximate mode
//
// For engines that publish no events, [Index.Record] inserts what a routing
// decision implies: the request's blocks, speculatively on the worker's
// device, for a TTL. Events win: a Stored on device confirms (replaces) a
// speculative entry, and blocks a worker holds on device from events are
// not recorded. Expiry runs at every Record, Apply and [Index.Expire]; an
// index without writes should call Expire periodically. The clock is
// Config.Now. Adding, refreshing, pruning and expiring an entry cost O(1)
// (entries with one TTL and a clock that does not step back are kept in a
// queue; others in a heap, O(log n)), and the entries hold no pointers, so
// a million of them add nothing to a garbage collection's marking. The
// number of entries is bounded (see Bounds). [Index.RecordTail] records
// only the blocks past a prefix the caller knows is recorded and recent
// (an agent's next turn: its context plus a few new blocks), chained after
// the prefix's last block, so a turn costs its new blocks, not its
// context; the prefix keeps its expiry, and the caller refreshes it whole
// from time to time (the router does at a quarter of the TTL).
//
// # Snapshots
//
// [Index.Snapshot] writes the whole index (residencies, engine-hash maps,
// event ids, approximate entries) as a versioned, canonical, zstd-compressed
// stream; [Restore] reads it back, so a restarted router or a new replica
// starts warm. Snapshot(Restore(s)) reproduces s byte for byte. The format
// is at version 2, which adds the node links queries use (see Data
// structure); version 1 snapshots still restore, and answer the same, with
// queries comparing hashes at every node until new nodes are linked. An
// unknown version fails with [ErrSnapshotVersion], damage with
// [ErrSnapshotFormat].
//
// Snapshots are untrusted input (they travel through object stores and
// files); see Bounds for what Restore accepts.
//
// # Bounds
//
// Every input that could grow the index without limit is bounded:
//
//   - Config.MaxBlocksPerWorker bounds the residencies of one worker: a
//     Stored beyond it is a [*CapacityError] (the engine cannot hold that
//     much, so removals were missed).
//   - Config.ApproxMaxEntries bounds approximate entries; they are pruned
//     earliest expiry first (oldest first when TTLs are equal).
//   - Restore caps the decompressed body at Config.MaxSnapshotBytes
//     (default 8 GiB) and at Config.MaxSnapshotExpansion (default 64) times
//     the compressed bytes read plus 1 MiB; a body past either fails with
//     [ErrSnapshotTooLarge] as it crosses, without reading further. Every
//     count is checked against what the cap leaves before it is used,
//     repeated block hashes fail as they arrive, and allocations grow with
//     the items read, so a 32 KB frame of RLE blocks claiming a node of
//     2^27 hashes fails after allocating about 5 MiB (the zstd decoder's
//     state) instead of 3 GB. What Restore allocates is at most 64 times
//     its input plus 12 MiB (TestRestoreBombBounded).
//   - Snapshots of workers holding mostly different blocks expand 1.5 to
//     3-fold; one where many workers hold the very same blocks expands
//     about as many times as there are such workers: raise
//     MaxSnapshotExpansion for such fleets.
//
// # Concurrency
//
// An Index is safe for concurrent use. Queries take no lock and write
// nothing shared, so read throughput scales with cores: node contents are
// immutable snapshots swapped by atomic pointer (copy-on-write), the node
// table is read with atomic loads, and the head map is read under a
// sequence lock (a reader retries if the writer changed the table
// meanwhile; the writer changes it only when a node is created or freed),
// each slot under its own (a node's new contents rewrite its slot in
// place, and a reader never pairs one snapshot's hashes with another's
// sets).
//
// Writers (Apply, Record, Expire, RemoveWorker, Snapshot, Stats) serialise
// on one writer mutex. A query concurrent with a write sees each node
// before or after the write, so it may see part of an event; a query that
// starts after a write returned sees all of it.
//
// # Ownership
//
// Apply and Record do not retain the event, the sequence or any slice in
// them. FindMatches appends to dst[:0] and returns it; the caller owns the
// result and may pass it back to reuse the memory.
//
// # Data structure
//
// Blocks are stored in nodes: a node is a run of sequence hashes laid out
// contiguously (a chain segment, usually what one Stored event added), with
// its residency as runs of blocks sharing one residency set. A set is a
// bitset over worker slots with four planes (device, host, disk,
// approximate). Blocks resident nowhere are dropped when they end a node
// (vLLM evicts chain tails first); a node with no resident block is freed.
//
// The writer finds any block through a block map (sequence hash -> node,
// offset); blocks never move once indexed, so it is written only when
// blocks are created or dropped. A Stored event rarely needs to look in it:
// its blocks continue a chain, so each is found next to its predecessor
// or, by the same chain argument, can only be the first block of a node,
// which the small head map answers (see Index.head); new blocks are then
// inserted a batch at a time, their slots loaded ahead. The maps grow
// fourfold, so an entry moves a third as often as with doubling.
//
// Queries need only a head map (first hash of a node -> the node's current
// contents), one 64-byte slot per node: a request's first block is a chain
// root, which can only start a node, and where a request leaves a node it
// continues with a child of a block it matched, which cannot sit inside
// another node. Each node also keeps its kids, the offsets at which other
// nodes continue it (kids.go), and its head slot copies the node's hashes,
// its first run (set and end) and its first three kid offsets.
//
// A query runs in three steps:
//
//   - It finds its path: from a node's slot it looks up, all at once, the
//     request's block after each listed kid offset, and the first that
//     starts a node is where the request goes on; so crossing a node costs
//     one dependent head-map lookup, not a search through the node's
//     blocks. Where no kid answers (the node where the request ends, or one
//     with more kids than listed) it compares the request with the node at
//     a few sampled positions (in a chain, equal hashes at a position mean
//     equal blocks before it: one comparison when the request runs through
//     the node, an 8-way search where it leaves it).
//   - With every node on the path known, it confirms each kid answer with
//     one comparison and loads each node's first set, all these loads
//     issued together (a stale kid entry fails its comparison and the path
//     is searched again from there, so kid lists are hints that never
//     change an answer).
//   - Last it advances a three-state walk (device, host, disk) over whole
//     runs at once: the first run of each node it enters is read as a
//     whole set (one bitset word per 64 workers), and each later run
//     through its change list, the few workers whose residency differs
//     from the run before; workers that drop out of every tier at once are
//     recorded a word at a time.
//
// # Engine-hash maps
//
// Engine-hash maps cost a hash-map probe per stored and removed block.
// While a worker's engine hashes on a tier equal the index's own hashes
// (an engine that hashes as Dynamo does), its map for that tier is not
// kept: the residency bits are the map. The first engine hash that differs
// builds the map from the bits, and the tier uses it from then on (until
// it is emptied or the worker is cleared).
package flashindex
