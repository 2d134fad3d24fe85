#!/usr/bin/env bash
# Real harness conformance: the coding agents people run, unmodified, against
# "agentkv proxy --mock-workers 2 --trace-out": Claude Code (claude -p, Anthropic
# Messages), Codex (codex exec, OpenAI Responses) and OpenCode (opencode run, chat
# completions), at pinned npm versions installed into a temporary folder. Each must
# exit 0; the trace must show every request of a harness under one recognised
# session (Claude Code subagents as "<session>/<agent>"), no request failed, and
# each session's requests on one worker (affinity).
#
# Environment:
#   AGENTKV_SKIP_HARNESS=1       skip (say so) instead of failing when npm or the
#                                packages are unavailable
#   AGENTKV_HARNESS_CACHE=DIR    keep the npm install there between runs
#   AGENTKV_HARNESS_PROXY_ARGS   the proxy's worker flags (default --mock-workers 2)
set -euo pipefail
cd "$(dirname "$0")/.."

CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332
CODEX=@openai/codex@0.171.0
OPENCODE=opencode-ai@1.18.33

if [[ -n "${AGENTKV_SKIP_HARNESS:-}" ]]; then
	echo "harness: skipped (AGENTKV_SKIP_HARNESS is set)"
	exit 0
fi
fail() { echo "harness: FAIL: $*" >&2; exit 1; }
for cmd in node npm python3 curl; do
	command -v "$cmd" >/dev/null || fail "$cmd is not installed; install Node.js 20+ and npm, or set AGENTKV_SKIP_HARNESS=1 to skip"
done

tmp=$(mktemp -d)
proxy_pid=
cleanup() {
	[[ -n "$proxy_pid" ]] && kill "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT

npmdir=${AGENTKV_HARNESS_CACHE:-$tmp/npm}
mkdir -p "$npmdir"
echo "harness: npm install $CLAUDE_CODE $CODEX $OPENCODE"
if ! (cd "$npmdir" && timeout 600 npm install --no-audit --no-fund --loglevel=error --prefix "$npmdir" \
	"$CLAUDE_CODE" "$CODEX" "$OPENCODE" >"$tmp/npm.log" 2>&1); then
	tail -5 "$tmp/npm.log" >&2
	fail "npm could not install the harnesses (no registry access?); set AGENTKV_SKIP_HARNESS=1 to skip"
fi
bin=$npmdir/node_modules/.bin

go build -o "$tmp/agentkv" ./cmd/agentkv
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
# shellcheck disable=SC2086
"$tmp/agentkv" proxy --listen "127.0.0.1:$port" ${AGENTKV_HARNESS_PROXY_ARGS:---mock-workers 2} \
	--trace-out "$tmp/trace.jsonl" >"$tmp/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 1 100); do
	curl -fsS -o /dev/null "$base/v1/models" 2>/dev/null && break
	kill -0 "$proxy_pid" 2>/dev/null || { cat "$tmp/proxy.log" >&2; fail "agentkv proxy exited"; }
	sleep 0.1
done
model=$(curl -fsS "$base/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
echo "harness: proxy on $base, model $model"

run() { # name, then the command; its output goes to $tmp/NAME.log
	local name=$1; shift
	echo "harness: $name"
	if ! timeout 300 "$@" >"$tmp/$name.log" 2>&1; then
		tail -20 "$tmp/$name.log" >&2
		fail "$name exited with an error (log above)"
	fi
}

mkdir -p "$tmp/work" "$tmp/home-claude" "$tmp/codex" "$tmp/home-opencode"
cd "$tmp/work"
run claude env HOME="$tmp/home-claude" ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY=sk-local \
	ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" "$bin/claude" -p "Say hello in one word." --model "$model"

cat >"$tmp/codex/config.toml" <<TOML
model = "$model"
model_provider = "agentkv"

[model_providers.agentkv]
name = "agentkv"
base_url = "$base/v1"
wire_api = "responses"
env_key = "AGENTKV_API_KEY"
TOML
run codex env HOME="$tmp/codex" CODEX_HOME="$tmp/codex" AGENTKV_API_KEY=sk-local \
	"$bin/codex" exec --skip-git-repo-check "Say hello in one word."

cat >opencode.json <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "agentkv": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "agentkv",
      "options": { "baseURL": "$base/v1", "apiKey": "sk-local" },
      "models": { "$model": { "name": "$model" } }
    }
  },
  "model": "agentkv/$model"
}
JSON
run opencode env HOME="$tmp/home-opencode" XDG_CONFIG_HOME="$tmp/home-opencode/.config" \
	"$bin/opencode" run "Say hello in one word."
cd - >/dev/null

kill "$proxy_pid"
wait "$proxy_pid" 2>/dev/null || true
proxy_pid=
python3 - "$tmp/trace.jsonl" <<'PY'
import collections, json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_api = collections.defaultdict(list)
for r in recs:
    by_api[r["request"].get("api", "")].append(r)
ok = True
for api, harness in (("messages", "Claude Code"), ("responses", "Codex"), ("chat", "OpenCode")):
    rs = by_api.get(api, [])
    if not rs:
        print("harness: FAIL: no %s request from %s in the trace" % (api, harness)); ok = False; continue
    roots = {r["agent_context"].get("session_id", "").split("/")[0] for r in rs}
    if "" in roots or len(roots) != 1:
        print("harness: FAIL: %s's requests carry %s, want one recognised session id" % (harness, sorted(roots))); ok = False
    errs = [r["request"].get("error_kind") for r in rs if r["request"].get("error_kind")]
    if errs:
        print("harness: FAIL: %s requests failed: %s" % (harness, errs)); ok = False
    workers = collections.defaultdict(set)
    for r in rs:
        w = r["request"].get("worker", {})
        workers[r["agent_context"].get("session_id")].add((w.get("decode_worker_id", 0), w.get("decode_dp_rank", 0)))
    moved = {s: sorted(ws) for s, ws in workers.items() if len(ws) > 1}
    if moved:
        print("harness: FAIL: %s sessions moved between workers: %s" % (harness, moved)); ok = False
    print("harness: %s: %d %s requests, session %s, workers %s" % (harness, len(rs), api, sorted(roots)[0],
          sorted({w for ws in workers.values() for w in ws})))
sys.exit(0 if ok else 1)
PY
echo "harness: ok"
