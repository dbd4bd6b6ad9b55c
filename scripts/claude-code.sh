#!/usr/bin/env bash
# The Claude Code CLI the tests drive (tests/claude_code/), pinned: prints the path of its `claude` binary.
#
# Installs @anthropic-ai/claude-code with npm into .cache/claude-code on first use and reuses it
# afterwards. The npm package is a thin wrapper around a native binary (an optional dependency per
# platform, linked into bin/ by its postinstall script), so no particular Node version is needed to run
# it; npm itself is the only requirement. Set CLAUDE_CODE_CACHE to install elsewhere.
#
#   scripts/claude-code.sh            # install if needed, print the binary's path
#   "$(scripts/claude-code.sh)" --version
#
# Exit status 2, with npm's output on stderr, when the install fails (no npm, registry unreachable).
set -euo pipefail

VERSION="2.1.328"
PACKAGE="@anthropic-ai/claude-code@$VERSION"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${CLAUDE_CODE_CACHE:-$ROOT/.cache/claude-code}"
PREFIX="$CACHE/$VERSION"
BIN="$PREFIX/node_modules/@anthropic-ai/claude-code/bin/claude.exe"

installed() {
    [[ -x "$BIN" ]] && [[ "$("$BIN" --version 2>/dev/null)" == "$VERSION "* ]]
}

if ! installed; then
    mkdir -p "$CACHE"
    # Several test processes may ask at once: one installs, the others wait for it and find it installed.
    exec 9>"$CACHE/.install.lock"
    flock 9
fi
if ! installed; then
    if ! command -v npm >/dev/null; then
        echo "error: npm not found; it is needed once to install $PACKAGE into $PREFIX" >&2
        exit 2
    fi
    echo "installing $PACKAGE into $PREFIX" >&2
    mkdir -p "$PREFIX"
    # --include=optional: the native binary is an optional dependency; an npm configured to omit them
    # would leave only the wrapper's placeholder.
    if ! npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --include=optional "$PACKAGE" >&2; then
        echo "error: npm could not install $PACKAGE (is the npm registry reachable?)" >&2
        exit 2
    fi
    if ! installed; then
        echo "error: $PACKAGE installed, but $BIN does not run as version $VERSION" >&2
        echo "(the native binary for $(uname -s)-$(uname -m) may be missing from the install)" >&2
        exit 2
    fi
fi
echo "$BIN"
