"""How fast `jct serve --stdio` answers `initialize`, beside a bare stdio server of the same MCP SDK.

A client such as Claude Code starts one stdio server per session and waits for its `initialize` answer before
it can list tools; a slow start leaves a session without JCT's tools. Each round starts both servers as fresh
processes (alternating which goes first), writes `initialize` to stdin at once, and times the first answer
on stdout; the database (SQLite in a temp directory) is created and migrated once before the rounds, as a
user's is after the first start. Writes bench/results/stdio_start.json and prints the medians and their ratio
(target: JCT at most 1.3x the bare server).

    .venv/bin/python bench/stdio_start.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "stdio_start.json"
TARGET = 1.3

# The floor: the same SDK's MCPServer with one tool, over stdio, nothing else imported.
BARE = """
from mcp.server import MCPServer

server = MCPServer("bare")


@server.tool()
def echo(text: str) -> str:
    return text


server.run("stdio")
"""

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "stdio-start-bench", "version": "1"},
    },
}


def time_to_initialize(command: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from starting `command` to the first line it writes on stdout (the initialize answer)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd
    )
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - start
    answer = json.loads(line)
    assert answer.get("id") == 1, answer
    assert "result" in answer, answer
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return elapsed


def measure(rounds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="jct-stdio-start-") as tmp:
        work = Path(tmp)
        bare = work / "bare_server.py"
        bare.write_text(BARE)
        base = {key: value for key, value in os.environ.items() if not key.startswith("JCT_")}
        env = base | {"JCT_HOME": str(work / "home"), "JCT_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        jct = [sys.executable, "-m", "server", "serve", "--stdio"]
        floor = [sys.executable, str(bare)]
        time_to_initialize(jct, env, work)  # creates and migrates the database, warms the OS file cache
        time_to_initialize(floor, env, work)
        times: dict[str, list[float]] = {"jct": [], "bare": []}
        for n in range(rounds):
            order = [("jct", jct), ("bare", floor)] if n % 2 == 0 else [("bare", floor), ("jct", jct)]
            for name, command in order:
                times[name].append(time_to_initialize(command, env, work))
    jct_median, bare_median = statistics.median(times["jct"]), statistics.median(times["bare"])
    return {
        "rounds": rounds,
        "jct_median_seconds": round(jct_median, 4),
        "bare_median_seconds": round(bare_median, 4),
        "ratio": round(jct_median / bare_median, 3),
        "target_ratio": TARGET,
        "jct_seconds": [round(t, 4) for t in times["jct"]],
        "bare_seconds": [round(t, 4) for t in times["bare"]],
        "python": sys.version.split()[0],
        "load_average": list(os.getloadavg()),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = measure(args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"jct serve --stdio: {result['jct_median_seconds']}s, bare SDK stdio server: {result['bare_median_seconds']}s "
        f"(median of {args.rounds}); ratio {result['ratio']} (target {TARGET}); written to {args.output}"
    )


if __name__ == "__main__":
    main()
