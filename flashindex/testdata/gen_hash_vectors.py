#!/usr/bin/python3
"""Golden block-hash vectors from an independent XXH3 implementation.

Run with Debian's interpreter and its python3-xxhash package (which wraps the
reference C library), not with anything from this project:

    /usr/bin/python3 flashindex/testdata/gen_hash_vectors.py > flashindex/testdata/hash_vectors.json

The rules follow NVIDIA Dynamo's router: local hash = XXH3-64 over the block's
token ids as little-endian u32 with seed 1337 (plus the unseeded XXH3-64 of the
LoRA name, wrapping, for an adapter); sorted extra keys are appended as
little-endian u64; sequence hash seq[0] = local[0], seq[i] = XXH3-64(le64(seq[i-1])
|| le64(local[i]), seed 1337). Partial tail blocks are not hashed.
"""
import json
import random
import struct
import sys

import xxhash

SEED = 1337
MASK = (1 << 64) - 1


def lora_seed(name):
    if not name:
        return SEED
    return (SEED + xxhash.xxh3_64_intdigest(name.encode())) & MASK


def block_hashes(tokens, block_size, lora, extras):
    seed = lora_seed(lora)
    local, seq = [], []
    for i in range(len(tokens) // block_size):
        blk = tokens[i * block_size:(i + 1) * block_size]
        data = struct.pack("<%dI" % len(blk), *blk)
        ex = extras.get(i)
        if ex:
            data += struct.pack("<%dQ" % len(ex), *sorted(ex))
        h = xxhash.xxh3_64_intdigest(data, seed=seed)
        local.append(h)
        if seq:
            seq.append(xxhash.xxh3_64_intdigest(struct.pack("<QQ", seq[-1], h), seed=SEED))
        else:
            seq.append(h)
    return local, seq


def main():
    rng = random.Random(20261202)
    cases = []
    specs = [
        ("empty", [], 16, "", {}),
        ("partial-only", [1, 2, 3], 16, "", {}),
        ("one-block", list(range(16)), 16, "", {}),
        ("tail-dropped", list(range(37)), 16, "", {}),
        ("max-token", [0xFFFFFFFF] * 32, 16, "", {}),
        ("bs1", [7, 8, 9], 1, "", {}),
        ("bs64", [rng.randrange(1 << 32) for _ in range(200)], 64, "", {}),
        ("lora", list(range(48)), 16, "my-adapter", {}),
        ("lora-other", list(range(48)), 16, "other-adapter", {}),
        ("extra-keys", list(range(48)), 16, "", {1: [99, 3, 42]}),
        ("extra-keys-lora", list(range(48)), 16, "a", {0: [5], 2: [1 << 63, 7]}),
    ]
    for bs in (16, 32, 128):
        toks = [rng.randrange(152064) for _ in range(bs * 9 + 5)]
        specs.append(("random-bs%d" % bs, toks, bs, "", {}))
    for name, tokens, bs, lora, extras in specs:
        local, seq = block_hashes(tokens, bs, lora, extras)
        cases.append({
            "name": name,
            "block_size": bs,
            "lora": lora,
            "tokens": tokens,
            "extra_keys": {str(k): v for k, v in extras.items()},
            "local": [str(x) for x in local],
            "sequence": [str(x) for x in seq],
        })
    gen = "python3-xxhash %s (XXH %s)" % (xxhash.VERSION, xxhash.XXHASH_VERSION)
    sys.stdout.write('{"generator": %s,\n "cases": [\n' % json.dumps(gen))
    sys.stdout.write(",\n".join("  " + json.dumps(c) for c in cases))
    sys.stdout.write("\n ]\n}\n")


if __name__ == "__main__":
    main()
