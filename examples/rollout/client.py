#!/usr/bin/env python3
"""A rollout client for agentkv (or any SGLang router), standard library only.

It speaks SGLang's native token-in, token-out API the way slime's rollout
(slime/rollout/sglang_rollout.py) and ROLL do:

  POST /generate  {"rid", "input_ids": [...], "sampling_params": {...},
                   "return_logprob": true}
  header          X-SMG-Routing-Key: <session>   (SGLang gateway's routing key)
  answer          {"text", "output_ids", "meta_info": {"output_token_logprobs":
                   [[logprob, token_id, text], ...], "finish_reason": {"type"},
                   "prompt_tokens", "completion_tokens", "cached_tokens"}}
  POST /abort_request {"rid"} or {"abort_all": true}

Each session is a multi-turn agent: its next turn's input_ids are the last
turn's input_ids + the generated ids (read from output_token_logprobs, as
slime does) + a synthetic tool result. It checks what an RL trainer relies
on: the ids and logprobs come back one per generated token, a session's
later turns find their earlier context cached, and an aborted streaming
request ends with finish_reason "abort" keeping the tokens it produced.

  python3 examples/rollout/client.py --url http://127.0.0.1:8000 --sessions 4 --turns 3

It prints one line per turn and a final JSON summary; it exits 1 when a
check fails.
"""

import argparse
import json
import random
import sys
import threading
import urllib.error
import urllib.request
import uuid


def post(url, payload, headers=None, timeout=120):
    """POST JSON and return the decoded answer (slime's http_utils.post)."""
    data = json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method="POST")
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return json.loads(body) if body else {}


def generate(base, input_ids, session, max_new_tokens, rid=None):
    """One /generate call, slime's payload: input_ids, sampling_params, logprobs."""
    payload = {
        "rid": rid or uuid.uuid4().hex,
        "input_ids": input_ids,
        "sampling_params": {
            "max_new_tokens": max_new_tokens,
            "temperature": 1.0,
            "top_p": 1.0,
            "ignore_eos": True,
            "no_stop_trim": True,
            "skip_special_tokens": False,
        },
        "return_logprob": True,
    }
    return post(base + "/generate", payload, headers={"X-SMG-Routing-Key": session})


def run_session(base, session, turns, max_new_tokens, rng, results, lock):
    ids = [rng.randrange(16, 50000) for _ in range(96)]
    for turn in range(turns):
        out = generate(base, ids, session, max_new_tokens)
        meta = out["meta_info"]
        pairs = meta.get("output_token_logprobs") or []
        tokens = [p[1] for p in pairs]
        logprobs = [p[0] for p in pairs]
        problems = []
        if len(tokens) != meta["completion_tokens"]:
            problems.append("%d logprob entries for %d tokens" % (len(tokens), meta["completion_tokens"]))
        if "output_ids" in out and out["output_ids"] != tokens:
            problems.append("output_ids differ from output_token_logprobs")
        if any(lp is None or lp > 0 for lp in logprobs):
            problems.append("a logprob is missing or positive")
        if turn > 0 and meta["cached_tokens"] == 0:
            problems.append("turn %d found none of its context cached" % turn)
        with lock:
            print("%s turn %d: prompt %d, cached %d, generated %d, finish %s%s" % (
                session, turn, meta["prompt_tokens"], meta["cached_tokens"], len(tokens),
                meta["finish_reason"]["type"], "; " + "; ".join(problems) if problems else ""))
            results["turns"] += 1
            results["cached_tokens"] += meta["cached_tokens"]
            results["problems"] += problems
        ids = ids + tokens + [rng.randrange(16, 50000) for _ in range(32)]  # the tool's result


def abort_demo(base, session):
    """Stream a long request, abort it by rid after its first chunk."""
    rid = "abort-" + uuid.uuid4().hex
    payload = {"rid": rid, "input_ids": list(range(100, 164)), "stream": True, "return_logprob": True,
               "sampling_params": {"max_new_tokens": 8000, "ignore_eos": True}}
    req = urllib.request.Request(base + "/generate", data=json.dumps(payload).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("X-SMG-Routing-Key", session)
    last, aborted_sent = None, False
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            last = json.loads(data)
            if not aborted_sent:
                post(base + "/abort_request", {"rid": rid})
                aborted_sent = True
    fin = (last or {}).get("meta_info", {}).get("finish_reason") or {}
    n = (last or {}).get("meta_info", {}).get("completion_tokens", -1)
    ok = fin.get("type") == "abort" and 0 <= n < 8000
    print("abort %s: finish %s after %d tokens" % (rid, fin.get("type"), n))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="agentkv proxy (or SGLang router) base URL")
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-abort", action="store_true", help="skip the abort check")
    args = ap.parse_args()
    base = args.url.rstrip("/")
    results = {"turns": 0, "cached_tokens": 0, "problems": []}
    lock = threading.Lock()
    threads = []
    for s in range(args.sessions):
        rng = random.Random(args.seed * 1000 + s)
        session = "session-%d-%s" % (s, uuid.uuid4().hex[:8])
        t = threading.Thread(target=run_session, args=(base, session, args.turns, args.max_new_tokens, rng, results, lock))
        t.start()
        threads.append(t)
    errors = []
    for t in threads:
        t.join()
    if results["turns"] != args.sessions * args.turns:
        errors.append("%d of %d turns finished" % (results["turns"], args.sessions * args.turns))
    results["aborted"] = None
    if not args.no_abort:
        try:
            results["aborted"] = abort_demo(base, "abort-session")
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors.append("abort: %s" % e)
            results["aborted"] = False
        if not results["aborted"]:
            errors.append("the aborted request did not end with finish_reason abort")
    results["ok"] = not errors and not results["problems"]
    results["errors"] = errors
    print(json.dumps(results))
    return 0 if results["ok"] else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except urllib.error.HTTPError as e:
        print("HTTP %d: %s" % (e.code, e.read()[:300]), file=sys.stderr)
        sys.exit(1)
