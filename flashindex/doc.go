// Package flashindex hashes token sequences into KV block hashes and indexes
// which worker holds which blocks on which tier.
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
// pair ([Worker]); a block lives on a [Tier].
package flashindex
