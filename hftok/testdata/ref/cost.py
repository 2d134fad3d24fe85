"""The engine's side of a /tokenize call, timed: the chat template rendered
by Python's jinja2 in the environment transformers compiles chat templates
in, from the conversation vLLM builds of a chat completions request
(testdata/chat/render.py), as vLLM's API server does for every request
before it encodes the text. Run by .ci/engine-tokenize-cost.sh:

  python3 cost.py MODEL_DIR REPS < turns.jsonl > rendered.jsonl

Reads {"ctx", "tokens", "body"} lines (hftok's writeTurns), writes
{"ctx", "tokens", "text", "render_us"} lines: the process CPU time of one
render, the median of REPS (the compiled template cached, as
transformers' lru_cache keeps it)."""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat"))
import render  # noqa: E402


def main():
    model_dir, reps = sys.argv[1], int(sys.argv[2])
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    template = cfg["chat_template"]
    special = {}
    for k in ("bos_token", "eos_token", "unk_token", "pad_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if v is not None:
            special[k] = v
    env, cache = render.environment(), {}
    for line in sys.stdin:
        turn = json.loads(line)
        req = {"template": template, "special": special, "body": turn["body"]}
        text = render.render(req, env, cache)
        times = []
        for _ in range(reps):
            t0 = time.process_time_ns()
            render.render(req, env, cache)
            times.append(time.process_time_ns() - t0)
        sys.stdout.write(json.dumps({"ctx": turn["ctx"], "tokens": turn["tokens"], "text": text,
                                     "render_us": statistics.median(times) / 1000}) + "\n")


if __name__ == "__main__":
    main()
