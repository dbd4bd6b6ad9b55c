#!/usr/bin/env bash
# The MCP Inspector CLI the schema portability test drives (tests/tools/test_inspector_strict.py), pinned:
# prints the path of its launcher. Installs @modelcontextprotocol/inspector with npm into .cache/inspector on
# first use and reuses it afterwards. Set INSPECTOR_CACHE to install elsewhere.
#
#   node "$(scripts/inspector.sh)" --cli --strict --method tools/list -- jct serve --stdio
#
# Exit status 2, with npm's output on stderr, when the install fails (no npm, registry unreachable).
set -euo pipefail

VERSION="2.12.0"
PACKAGE="@modelcontextprotocol/inspector@$VERSION"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${INSPECTOR_CACHE:-$ROOT/.cache/inspector}"
PREFIX="$CACHE/$VERSION"
BIN="$PREFIX/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"

if [[ ! -f "$BIN" ]]; then
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.install.lock"
    flock 9
fi
if [[ ! -f "$BIN" ]]; then
    if ! command -v npm >/dev/null; then
        echo "error: npm not found; it is needed once to install $PACKAGE into $PREFIX" >&2
        exit 2
    fi
    echo "installing $PACKAGE into $PREFIX" >&2
    mkdir -p "$PREFIX"
    if ! npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$PACKAGE" >&2; then
        echo "error: npm could not install $PACKAGE (is the npm registry reachable?)" >&2
        exit 2
    fi
fi
echo "$BIN"
