#!/usr/bin/env python3
"""Golden HiCache page hashes for sharedpool, computed with Python's hashlib.

Page i's hash is SHA-256 over page i-1's digest (absent for page 0) followed
by the page's token ids as little-endian u32 (EAGLE: each bigram as two
u32), hex-encoded in lowercase. Partial tail pages are not hashed. This is
the rule of SGLang's get_hash_str (python/sglang/srt/mem_cache/common.py)
chained page by page, written here from that description, not copied.

Run with /usr/bin/python3 from this directory:
    /usr/bin/python3 gen_page_hashes.py > page_hashes.json
"""
import hashlib
import json
import random


def page_hashes(tokens, page_size, eagle):
    units = [(a, b) for a, b in zip(tokens, tokens[1:])] if eagle else [(t,) for t in tokens]
    out, prior = [], None
    for start in range(0, len(units) - len(units) % page_size, page_size):
        h = hashlib.sha256()
        if prior is not None:
            h.update(prior)
        for unit in units[start:start + page_size]:
            for t in unit:
                h.update(t.to_bytes(4, byteorder="little", signed=False))
        prior = h.digest()
        out.append(h.hexdigest())
    return out


def main():
    rng = random.Random(20250605)
    cases = [
        ("ten tokens page 4 (Dynamo's test vector)", list(range(1, 11)), 4, False),
        ("eagle page 2 (Dynamo's test vector)", [10, 11, 12, 13, 14], 2, True),
        ("empty", [], 4, False),
        ("shorter than a page", [1, 2, 3], 4, False),
        ("page size 1", [0, 1, 4294967295], 1, False),
        ("u32 extremes", [0, 4294967295, 2147483648, 65535], 2, False),
        ("eagle one token", [7], 1, True),
        ("eagle exact", [1, 2, 3, 4, 5], 4, True),
        ("random 16 x 64", [rng.randrange(1 << 32) for _ in range(16 * 64 + 5)], 64, False),
        ("random eagle 3 x 16", [rng.randrange(200000) for _ in range(3 * 16 + 1)], 16, True),
        ("page 512 two pages", [rng.randrange(150000) for _ in range(1030)], 512, False),
    ]
    doc = {
        "generator": "gen_page_hashes.py (Python hashlib)",
        "cases": [
            {"name": n, "tokens": t, "page_size": ps, "eagle": e, "hashes": page_hashes(t, ps, e)}
            for n, t, ps, e in cases
        ],
    }
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
