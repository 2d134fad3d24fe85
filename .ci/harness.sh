#!/usr/bin/env bash
# Real harness conformance: the coding agents people run, unmodified, against
# "agentkv proxy --mock-workers 2 --infer-sessions --trace-out": Claude Code (claude
# -p, Anthropic Messages), Codex (codex exec, OpenAI Responses), OpenCode (opencode
# run, chat completions) and Pi (pi -p, twice: its openai-completions mode, which
# sends no identity at all, and its openai-responses mode, which sends its own
# session_id), at pinned npm versions installed into a temporary folder.
#
# Two passes: "native" (the mock workers serve every API, so the proxy passes
# Messages and Responses through) and "translated" (--mock-apis chat: the proxy
# translates Messages and Responses to chat completions and back). In each, every
# harness must exit 0 after a tool round trip (the mock calls a read-only tool on
# the user's turn and answers its result with text), and the trace must show: at
# least two requests in the harness's API, all under the session id the harness
# itself reports (Claude Code's session_id, Codex's thread_id, OpenCode's
# sessionID, Pi's session id; Claude Code subagents as "<session>/<agent>") or,
# for Pi without identity, all under one inferred session; none failed, the
# session's requests on one worker (affinity), and cached tokens on a later turn.
#
# Header captures: each harness talks to the proxy through .ci/capture.py, which
# records the headers (and the body fields naming the session) it sends; they
# must equal session/testdata/harness/NAME@VERSION.json, the golden capture of
# the pinned version, which session's TestHarnessCaptures feeds to the session
# extractor. A harness release that changes what it sends fails here, with the
# difference; AGENTKV_HARNESS_UPDATE=1 writes the captures of new pins.
#
# Offline: the harnesses get dummy keys, their telemetry, update checks and
# plugin syncs are switched off, and they run with HTTP(S)_PROXY pointing at a
# local sink that refuses and lists every outbound attempt; where unprivileged
# user namespaces work (unshare -rn), the proxy and the harnesses also run in a
# private network namespace with only loopback, so nothing can reach the
# internet. Only the npm install needs the registry.
#
# Environment:
#   AGENTKV_SKIP_HARNESS=1       skip (say so) instead of running
#   AGENTKV_HARNESS_CACHE=DIR    keep the npm install there between runs (reused
#                                while it holds the pinned versions)
#   AGENTKV_HARNESS_TIMEOUT=S    seconds each harness run may take (default 180)
#   AGENTKV_HARNESS_PROXY_ARGS   one pass with these worker flags instead of the
#                                two above (e.g. --worker URL for real workers)
#   AGENTKV_HARNESS_NETNS=0      do not use a network namespace
#   AGENTKV_HARNESS_UPDATE=1     write missing or changed header captures
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

CLAUDE_CODE=@anthropic-ai/claude-code@2.1.332
CODEX=@openai/codex@0.171.0
OPENCODE=opencode-ai@1.18.33
PI=@mariozechner/pi-coding-agent@0.73.1
MODEL=Qwen/Qwen3-8B # the mock workers' model name: a vLLM-style id with a slash, as in README

fail() { echo "harness: FAIL: $*" >&2; exit 1; }

if [[ "${1:-}" == __passes ]]; then
	tmp=$2
else
	if [[ "${AGENTKV_SKIP_HARNESS:-}" == 1 ]]; then
		echo "harness: skipped (AGENTKV_SKIP_HARNESS=1)"
		exit 0
	fi
	skip="or set AGENTKV_SKIP_HARNESS=1 to skip the harness conformance check"
	for cmd in node npm python3 curl timeout; do
		command -v "$cmd" >/dev/null || fail "$cmd is not installed; install Node.js 18+ with npm, python3 and curl, $skip"
	done
	node_major=$(node -p 'process.versions.node.split(".")[0]')
	((node_major >= 18)) || fail "Node.js $(node --version) is too old (Claude Code needs 18+), $skip"

	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	npmdir=${AGENTKV_HARNESS_CACHE:-$tmp/npm}
	mkdir -p "$npmdir"
	npmdir=$(cd "$npmdir" && pwd)
	# One install at a time in a shared AGENTKV_HARNESS_CACHE (npm installs
	# racing in one node_modules fail).
	exec {lockfd}>"$npmdir/.lock"
	flock "$lockfd"
	pins="$CLAUDE_CODE $CODEX $OPENCODE $PI"
	t0=$SECONDS
	if [[ "$(cat "$npmdir/.agentkv-pins" 2>/dev/null)" == "$pins" && -x "$npmdir/node_modules/.bin/claude" &&
		-x "$npmdir/node_modules/.bin/codex" && -x "$npmdir/node_modules/.bin/opencode" && -x "$npmdir/node_modules/.bin/pi" ]]; then
		echo "harness: $pins (cached in $npmdir)"
	else
		echo "harness: npm install $pins into $npmdir"
		rm -rf "$npmdir/node_modules" "$npmdir/package-lock.json" "$npmdir/.agentkv-pins"
		echo '{"private": true}' >"$npmdir/package.json"
		if ! (cd "$npmdir" && timeout 900 npm install --no-audit --no-fund --save-exact --loglevel=error \
			"$CLAUDE_CODE" "$CODEX" "$OPENCODE" "$PI" >"$tmp/npm.log" 2>&1); then
			tail -15 "$tmp/npm.log" >&2
			fail "npm could not install $pins (no registry access?), $skip"
		fi
		echo "$pins" >"$npmdir/.agentkv-pins"
		echo "harness: installed in $((SECONDS - t0)) s"
	fi
	flock -u "$lockfd"
	ln -s "$npmdir/node_modules/.bin" "$tmp/bin"

	go build -o "$tmp/agentkv" ./cmd/agentkv
	if [[ "${AGENTKV_HARNESS_NETNS:-1}" != 0 ]] && command -v unshare >/dev/null && command -v ip >/dev/null &&
		unshare -rn ip link set lo up 2>/dev/null; then
		echo "harness: offline: a private network namespace with only loopback, and HTTP(S)_PROXY at a refusing sink"
		exec unshare -rn bash -c 'ip link set lo up && exec bash "$0" __passes "$1"' "$0" "$tmp"
	fi
	echo "harness: offline: HTTP(S)_PROXY at a refusing sink (no network namespace here)"
	trap - EXIT
	bash "$0" __passes "$tmp" || { rc=$?; rm -rf "$tmp"; exit $rc; }
	rm -rf "$tmp"
	exit 0
fi

# The passes: proxy, sink and harnesses, all on loopback.
bin=$tmp/bin
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The sink: every outbound connection a harness tries (through HTTP(S)_PROXY)
# gets 403 and is written down.
sinkport=$(freeport)
python3 - "$sinkport" "$tmp/outbound.log" <<'PY' &
import socketserver, sys
class H(socketserver.StreamRequestHandler):
    def handle(self):
        line = self.rfile.readline(4096).decode("latin-1").strip()
        with open(sys.argv[2], "a") as f:
            f.write(line + "\n")
        self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
pids+=($!)
sink=http://127.0.0.1:$sinkport
offline=(HTTP_PROXY="$sink" HTTPS_PROXY="$sink" ALL_PROXY="$sink" http_proxy="$sink" https_proxy="$sink" all_proxy="$sink"
	NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost)

limit=${AGENTKV_HARNESS_TIMEOUT:-180}
run() { # pass, name, then the command; stdout to $dir/NAME.out, stderr to NAME.err
	local pass=$1 name=$2; shift 2
	local t0 rc=0
	: >"$tmp/outbound.log"
	t0=$(date +%s.%N)
	timeout -k 10 "$limit" env "${offline[@]}" "$@" </dev/null >"$dir/$name.out" 2>"$dir/$name.err" || rc=$?
	python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t0" "$(date +%s.%N)" >"$dir/$name.secs"
	if [[ -s "$tmp/outbound.log" ]]; then
		echo "harness: $pass: $name tried to reach (refused): $(awk '{print $2}' "$tmp/outbound.log" | sort -u | tr '\n' ' ')"
	fi
	if ((rc != 0)); then
		echo "--- $name stdout (last 60 lines)" >&2; tail -60 "$dir/$name.out" >&2
		echo "--- $name stderr (last 60 lines)" >&2; tail -60 "$dir/$name.err" >&2
		echo "--- agentkv proxy log (last 20 lines)" >&2; tail -20 "$dir/proxy.log" >&2
		((rc == 124 || rc == 137)) && fail "$pass: $name did not finish within $limit s (AGENTKV_HARNESS_TIMEOUT; output above)"
		fail "$pass: $name exited with status $rc (output above)"
	fi
}

# capture: after harness NAME (pinned as PIN, speaking API) ran, its header
# capture (.ci/capture.py summarise) against the golden one in testdata.
capture() { # pass, name, pin, api, the session id it reported
	local pass=$1 name=$2 pin=$3 api=$4 sid=$5
	local version=${pin##*@} golden=$root/session/testdata/harness/$name@${pin##*@}.json
	python3 "$root/.ci/capture.py" summarise "$dir/capture.jsonl" "$name" "$version" "$api" "$sid" "$dir/capture-$name.json"
	if [[ ! -f "$golden" ]] || ! python3 "$root/.ci/capture.py" compare "$dir/capture-$name.json" "$golden" >"$dir/capture-$name.diff"; then
		if [[ "${AGENTKV_HARNESS_UPDATE:-}" == 1 ]]; then
			mkdir -p "$(dirname "$golden")"
			cp "$dir/capture-$name.json" "$golden"
			echo "harness: $pass: wrote $golden"
			return
		fi
		[[ -f "$golden" ]] || fail "$pass: no header capture for $name $version at $golden (a new pin: run with AGENTKV_HARNESS_UPDATE=1 and review it)"
		cat "$dir/capture-$name.diff" >&2
		fail "$pass: $name $version sends other headers than $golden records (above); review, then AGENTKV_HARNESS_UPDATE=1"
	fi
}

# reported: the session id a harness printed in its JSON output.
reported() { # name
	python3 - "$dir/$1.out" <<'PY'
import json, sys
ids = []
for line in open(sys.argv[1]):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if not isinstance(ev, dict):
        continue
    for k in ("session_id", "thread_id", "sessionID"):
        if isinstance(ev.get(k), str) and ev[k] not in ids:
            ids.append(ev[k])
    if ev.get("type") == "session" and isinstance(ev.get("id"), str) and ev["id"] not in ids:
        ids.append(ev["id"])  # Pi's first event
print(ids[0] if len(ids) == 1 else "")
PY
}

pass() { # name, then the proxy's worker flags
	local pass=$1; shift
	dir=$tmp/$pass
	mkdir -p "$dir/work" "$dir/home-claude" "$dir/home-codex" "$dir/home-opencode" "$dir/home-pi-completions/.pi/agent" \
		"$dir/home-pi-responses/.pi/agent"
	local port base model capport cap
	port=$(freeport)
	base=http://127.0.0.1:$port
	"$tmp/agentkv" proxy --listen "127.0.0.1:$port" "$@" --infer-sessions --trace-out "$dir/trace.jsonl" >"$dir/proxy.log" 2>&1 &
	local proxy=$!
	pids+=($proxy)
	for _ in $(seq 1 150); do
		curl -fsS -o /dev/null "$base/v1/models" 2>/dev/null && break
		kill -0 "$proxy" 2>/dev/null || { cat "$dir/proxy.log" >&2; fail "$pass: agentkv proxy exited"; }
		sleep 0.1
	done
	model=$(curl -fsS "$base/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])') ||
		fail "$pass: agentkv proxy does not answer on $base"
	echo "harness: $pass: agentkv proxy $* --infer-sessions on $base, model $model"

	# The recording forwarder each harness talks to, under /_harness/NAME.
	capport=$(freeport)
	python3 "$root/.ci/capture.py" serve "$capport" "$base" "$dir/capture.jsonl" 2>"$dir/capture.log" &
	pids+=($!)
	cap=http://127.0.0.1:$capport/_harness
	for _ in $(seq 1 100); do
		curl -fsS -o /dev/null "$cap/probe/v1/models" 2>/dev/null && break
		sleep 0.1
	done

	# The project the agents work in: the mock's tool call reads README.md.
	printf '# hello\n\nA project for the harness check.\n' >"$dir/work/README.md"
	cd "$dir/work"

	# Claude Code: the Anthropic base URL and a key; nonessential traffic
	# (telemetry, error reports, update checks) off; the model for the main loop
	# and for its background (Haiku-class) calls; the model's context window,
	# which Claude Code cannot know for a model it does not recognise.
	run "$pass" claude env HOME="$dir/home-claude" \
		ANTHROPIC_BASE_URL="$cap/claude" ANTHROPIC_API_KEY=sk-local \
		ANTHROPIC_MODEL="$model" ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" CLAUDE_CODE_MAX_CONTEXT_TOKENS=131072 \
		CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
		"$bin/claude" -p "Say hello in one word." --output-format json
	capture "$pass" claude "$CLAUDE_CODE" messages "$(reported claude)"

	# Codex: a model provider on the Responses API (the only one Codex speaks);
	# analytics and the curated plugin sync (github.com, chatgpt.com) off.
	cat >"$dir/home-codex/config.toml" <<TOML
model = "$model"
model_provider = "agentkv"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false

[model_providers.agentkv]
name = "agentkv"
base_url = "$cap/codex/v1"
wire_api = "responses"
env_key = "AGENTKV_API_KEY"
TOML
	run "$pass" codex env HOME="$dir/home-codex" CODEX_HOME="$dir/home-codex" AGENTKV_API_KEY=sk-local \
		"$bin/codex" exec --json --skip-git-repo-check "Say hello in one word."
	capture "$pass" codex "$CODEX" responses "$(reported codex)"

	# OpenCode: an OpenAI-compatible provider in the project's opencode.json;
	# the models.dev catalogue fetch and the autoupdate off. At each start it
	# installs @opencode-ai/plugin into its config folder in the background;
	# npm offline makes that a logged warning instead of a registry fetch.
	cat >opencode.json <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "agentkv": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "agentkv",
      "options": { "baseURL": "$cap/opencode/v1", "apiKey": "sk-local" },
      "models": { "$model": { "name": "$model" } }
    }
  },
  "model": "agentkv/$model"
}
JSON
	run "$pass" opencode env HOME="$dir/home-opencode" XDG_CONFIG_HOME="$dir/home-opencode/.config" \
		XDG_DATA_HOME="$dir/home-opencode/.local/share" XDG_CACHE_HOME="$dir/home-opencode/.cache" \
		XDG_STATE_HOME="$dir/home-opencode/.local/state" \
		OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 npm_config_offline=true \
		"$bin/opencode" run --format json "Say hello in one word."
	rm -f opencode.json
	capture "$pass" opencode "$OPENCODE" chat "$(reported opencode)"

	# Pi: a provider in ~/.pi/agent/models.json, as its docs set up vLLM; in
	# openai-completions mode (no identity on the wire) and openai-responses
	# mode (its session_id header and prompt_cache_key).
	local mode
	for mode in completions responses; do
		cat >"$dir/home-pi-$mode/.pi/agent/models.json" <<JSON
{"providers": {"agentkv": {"baseUrl": "$cap/pi-$mode/v1", "api": "openai-$mode", "apiKey": "sk-local",
  "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
  "models": [{"id": "$model", "contextWindow": 131072, "maxTokens": 4096}]}}}
JSON
		run "$pass" "pi-$mode" env HOME="$dir/home-pi-$mode" PI_OFFLINE=1 PI_TELEMETRY=0 \
			"$bin/pi" -p --mode json --provider agentkv --model "$model" "Say hello in one word."
	done
	capture "$pass" pi-completions "$PI" chat ""
	capture "$pass" pi-responses "$PI" responses "$(reported pi-responses)"
	cd "$tmp"

	kill "$proxy"
	wait "$proxy" 2>/dev/null || true
	python3 - "$pass" "$dir" "$(reported claude)" "$(reported codex)" "$(reported opencode)" "$(reported pi-responses)" <<'PY' || fail "$pass: the trace does not show what it must (above)"
import collections, json, os, sys
pas, d = sys.argv[1], sys.argv[2]
claimed = {"claude": sys.argv[3], "codex": sys.argv[4], "opencode": sys.argv[5], "pi-responses": sys.argv[6]}
recs = [json.loads(l) for l in open(os.path.join(d, "trace.jsonl")) if l.strip()]
ok = True
def bad(msg):
    global ok
    print("harness: FAIL: %s: %s" % (pas, msg)); ok = False
root = lambda r: r["agent_context"].get("session_id", "").split("/")[0]
inferred = [r for r in recs if r["agent_context"].get("session_inferred")]
named = {root(r) for r in recs if not r["agent_context"].get("session_inferred")}
stray = named - set(claimed.values())
if stray:
    bad("requests under sessions no harness reported: %s" % sorted(stray))
for name, api, harness in (("claude", "messages", "Claude Code"), ("codex", "responses", "Codex"), ("opencode", "chat", "OpenCode"),
                           ("pi-responses", "responses", "Pi (openai-responses)"), ("pi-completions", "chat", "Pi (openai-completions)")):
    secs = open(os.path.join(d, name + ".secs")).read().strip()
    if name == "pi-completions":
        rs = inferred  # no identity: its turns must form one inferred session
        sessions = {r["agent_context"]["session_id"] for r in rs}
        if len(sessions) != 1:
            bad("%s's requests were inferred as sessions %s; want one" % (harness, sorted(sessions)))
        own = "inferred"
    else:
        own = claimed[name]
        if not own:
            bad("%s reported no single session id in its output" % harness); continue
        rs = [r for r in recs if root(r) == own]
        sessions = {r["agent_context"].get("session_id", "") for r in rs}
    if len(rs) < 2:
        bad("%s sent %d requests; want a tool round trip (at least 2)" % (harness, len(rs))); continue
    apis = {r["request"].get("api", "") for r in rs}
    if apis != {api}:
        bad("%s's requests came in as %s; want %s" % (harness, sorted(apis), api))
    errs = [r["request"].get("error_kind") for r in rs if r["request"].get("error_kind")]
    if errs:
        bad("%s requests failed: %s" % (harness, errs))
    workers = collections.defaultdict(set)
    for r in rs:
        w = r["request"].get("worker") or {}
        workers[r["agent_context"].get("session_id")].add((w.get("decode_worker_id", 0), w.get("decode_dp_rank", 0)))
    moved = {s: sorted(ws) for s, ws in workers.items() if len(ws) > 1}
    if moved:
        bad("%s sessions moved between workers: %s" % (harness, moved))
    cached = [r["request"].get("cached_tokens", 0) for r in rs]
    if not any(cached[1:]):
        bad("%s: no later turn found its prefix cached (cached tokens per request %s)" % (harness, cached))
    print("harness: %s: %s: %d %s requests, %d session(s) under %s, worker(s) %s, cached tokens %s, %s s" % (
        pas, harness, len(rs), api, len(sessions), own if own != "inferred" else sorted(sessions)[0],
        ",".join("%d.%d" % w for w in sorted({w for ws in workers.values() for w in ws})), cached, secs))
sys.exit(0 if ok else 1)
PY
}

if [[ -n "${AGENTKV_HARNESS_PROXY_ARGS:-}" ]]; then
	# shellcheck disable=SC2086
	pass custom $AGENTKV_HARNESS_PROXY_ARGS
else
	pass native --mock-workers 2 --mock-model "$MODEL"
	pass translated --mock-workers 2 --mock-model "$MODEL" --mock-apis chat
fi
echo "harness: ok"
