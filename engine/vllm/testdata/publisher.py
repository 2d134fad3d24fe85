#!/usr/bin/python3
"""A stand-in vLLM KV event publisher for the Go subscriber's interop test.

It speaks vLLM's wire protocol (vllm/distributed/kv_events.py,
ZmqEventPublisher) with pyzmq and msgpack-python, independently of the Go
encoder:

  * one PUB-side socket per DP rank on consecutive ports (port + rank); each
    message is [topic, seq as 8 bytes big-endian, msgpack payload];
  * one ROUTER replay socket per rank: a request [identity, b"", start_seq]
    is answered with [identity, b"", seq, payload] for every buffered batch
    with seq >= start_seq, then [identity, b"", (-1) as 8 bytes, b""];
  * payloads are [ts, [events], dp_rank] (or the newest map form), events
    either tagged arrays (older vLLM, SGLang) or {"type": tag, ...} maps
    (newer vLLM), hashes ints (possibly negative or >= 2**63) or 32-byte
    strings.

The sockets are XPUB rather than PUB only so the script can wait for the
subscription instead of sleeping; on the wire a SUB sees no difference.

Protocol with the test: the script prints one JSON line with the endpoints
and the events the subscriber must end up with (hashes as the Go side
reduces them: ints as 64-bit two's complement, strings as their first 8
bytes big-endian), waits for every rank's subscription, publishes, serves
replay requests, and exits when stdin says "done" (or closes).
"""

import json
import random
import select
import sys

import msgpack
import zmq

MASK = (1 << 64) - 1
END_SEQ = (-1).to_bytes(8, "big", signed=True)
TOPIC = b"kv@test"


def bind_consecutive(ctx, kind, n):
    """Bind n sockets on consecutive free loopback ports."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randint(20000, 60000)
        socks = []
        try:
            for r in range(n):
                s = ctx.socket(kind)
                s.setsockopt(zmq.LINGER, 0)
                socks.append(s)
                s.bind("tcp://127.0.0.1:%d" % (base + r))
            return base, socks
        except zmq.ZMQError:
            for s in socks:
                s.close()
    raise SystemExit("no free ports")


def hash_bytes(h):
    """32 bytes whose first 8, big-endian, are h."""
    return h.to_bytes(8, "big") + bytes((h * 31 + i) & 0xFF for i in range(24))


class Scenario:
    def __init__(self, seed, rank):
        self.rng = random.Random(seed * 1000 + rank)
        self.rank = rank
        self.expected = []
        self.batches = []  # (payload, deliver_live)
        self.unknown = 0
        self.live_hashes = []

    def rand_hash(self, style):
        k = self.rng.randrange(4)
        if k == 0:
            v = self.rng.randrange(1 << 63, 1 << 64)  # msgpack uint64
        elif k == 1:
            v = -self.rng.randrange(1, 1 << 62)  # negative int64 (SGLang)
        elif k == 2:
            v = self.rng.randrange(0, 1 << 16)
        else:
            v = self.rng.randrange(0, 1 << 63)
        want = v & MASK
        if style == "bytes":
            return hash_bytes(want), want
        return v, want

    def stored(self, layout, style):
        bs = self.rng.choice([4, 16])
        n = self.rng.randint(1, 3)
        wire, want = zip(*[self.rand_hash(style) for _ in range(n)])
        tokens = [self.rng.randrange(0, 150000) for _ in range(n * bs)]
        parent_wire, parent_want = (None, None)
        if self.live_hashes and self.rng.random() < 0.6:
            parent_wire, parent_want = self.live_hashes[-1]
        medium = self.rng.choice([None, "GPU", "CPU_PINNED", "DISK"])
        lora = self.rng.choice([None, None, "sql-adapter"])
        self.live_hashes.extend(zip(wire, want))
        self.expected.append({
            "kind": "stored", "hashes": list(want), "parent": parent_want,
            "tokens": tokens, "block_size": bs, "medium": medium or "",
            "lora": lora or "",
        })
        fields = [("block_hashes", list(wire)), ("parent_block_hash", parent_wire),
                  ("token_ids", tokens), ("block_size", bs), ("lora_id", None),
                  ("medium", medium), ("lora_name", lora)]
        if layout == "map":
            ev = {"type": "BlockStored"}
            ev.update(fields)
            ev["extra_keys"] = None
            ev["group_idx"] = 0
            ev["kv_cache_spec_kind"] = "full_attention"  # unknown to the decoder
            return ev
        # Older vLLM: positional; drop trailing None fields like msgspec's
        # omit_defaults, or add an unknown trailing one.
        vals = [v for _, v in fields]
        while vals and vals[-1] is None and self.rng.random() < 0.7:
            vals.pop()
        if len(vals) == 7 and self.rng.random() < 0.3:
            vals += [None, 0, "future-field"]
        return ["BlockStored"] + vals

    def removed(self, layout, style):
        if not self.live_hashes:
            return None
        k = min(len(self.live_hashes), self.rng.randint(1, 2))
        picks = [self.live_hashes.pop(self.rng.randrange(len(self.live_hashes))) for _ in range(k)]
        medium = self.rng.choice([None, "GPU"])
        self.expected.append({"kind": "removed", "hashes": [w for _, w in picks],
                              "medium": medium or ""})
        wire = [w for w, _ in picks]
        if layout == "map":
            return {"type": "BlockRemoved", "block_hashes": wire, "medium": medium}
        ev = ["BlockRemoved", wire]
        if medium is not None:
            ev.append(medium)
        return ev

    def build(self, n_batches, gap_at):
        for seq in range(n_batches):
            layout = "array" if seq % 2 == 0 else "map"
            style = "int" if seq % 3 != 1 else "bytes"
            events = []
            for _ in range(self.rng.randint(1, 4)):
                r = self.rng.random()
                ev = None
                if r < 0.6:
                    ev = self.stored(layout, style)
                elif r < 0.85:
                    ev = self.removed(layout, style)
                elif r < 0.92:
                    self.unknown += 1
                    ev = ["BlockPinned", [1, 2]] if layout == "array" else {"type": "BlockPinned"}
                else:
                    self.expected.append({"kind": "cleared"})
                    self.live_hashes.clear()
                    ev = ["AllBlocksCleared"] if layout == "array" else {"type": "AllBlocksCleared"}
                if ev is not None:
                    events.append(ev)
            ts = 1700000000.0 + seq
            if seq % 4 == 3:
                payload = {"ts": ts, "events": events, "data_parallel_rank": self.rank}
            else:
                payload = [ts, events, self.rank]
            self.batches.append((msgpack.packb(payload, use_bin_type=True), seq != gap_at))


def main():
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    ranks = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ctx = zmq.Context()
    pub_base, pubs = bind_consecutive(ctx, zmq.XPUB, ranks)
    rep_base, reps = bind_consecutive(ctx, zmq.ROUTER, ranks)
    scen = []
    for r in range(ranks):
        s = Scenario(seed, r)
        s.build(n_batches=10 + 2 * r, gap_at=4 + r)
        scen.append(s)
    print(json.dumps({
        "pub": "tcp://127.0.0.1:%d" % pub_base,
        "replay": "tcp://127.0.0.1:%d" % rep_base,
        "ranks": ranks,
        "topic": TOPIC.decode(),
        "expected": [s.expected for s in scen],
        "unknown": [s.unknown for s in scen],
        "live": [sum(1 for _, live in s.batches if live) for s in scen],
    }), flush=True)

    # Wait for each rank's subscription (XPUB delivers it as b"\x01" + topic).
    for p in pubs:
        while True:
            m = p.recv()
            if m[:1] == b"\x01":
                break
    for r, s in enumerate(scen):
        for seq, (payload, live) in enumerate(s.batches):
            if live:
                pubs[r].send_multipart([TOPIC, seq.to_bytes(8, "big"), payload])

    poller = zmq.Poller()
    for rep in reps:
        poller.register(rep, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll(30000))
        if not ready:
            break  # the test went away
        if ready.get(sys.stdin.fileno()) or ready.get(sys.stdin):
            line = sys.stdin.readline()
            if not line or line.strip() == "done":
                break
        for r, rep in enumerate(reps):
            if rep in ready:
                frames = rep.recv_multipart()
                if len(frames) != 3:
                    continue
                ident, _, start = frames
                start = int.from_bytes(start, "big")
                for seq, (payload, _) in enumerate(scen[r].batches):
                    if seq >= start:
                        rep.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
                rep.send_multipart([ident, b"", END_SEQ, b""])
    for s in pubs + reps:
        s.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
