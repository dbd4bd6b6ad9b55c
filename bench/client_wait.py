"""How long the pinned Claude Code waits for one MCP tool call, over streamable HTTP and stdio, before it gives up.

`jct_claim_next(wait_seconds=...)` holds a tool call open; its cap (JCT_CLAIM_WAIT_MAX_SECONDS) must stay below
what clients wait. This drives the real Claude Code CLI (scripts/claude-code.sh, the version tests/claude_code
pins) with the scripted stand-in model (tests/claude_code/model.py) calling one tool of a stand-in MCP server
(the same SDK as JCT): `hold(seconds, progress_every)` sleeps `seconds`, sending a progress notification every
`progress_every` seconds when the call carried a progressToken. Claude Code runs with its defaults: none of
MCP_TIMEOUT, MCP_TOOL_TIMEOUT or CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT is set (the test harness sets the first two).

For each case it records when the call reached the server, whether it carried a progressToken, whether and when
the server saw it cancelled (the client gave up: HTTP request closed, or notifications/cancelled), and the tool
result the model was sent back (text, is_error) with the seconds since the call began. Writes
bench/results/client_wait.json.

    .venv/bin/python bench/client_wait.py [--hold 2400] [--cases http-auto,http-legacy,stdio] [--progress 0,10]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.claude_code.harness import ERAS, ClaudeCode, claude_binary  # noqa: E402
from tests.claude_code.model import Reply, ToolResult, ToolUse, scripted_model  # noqa: E402
from tests.claude_code.proxy import egress  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "client_wait.json"
DEFAULTS_REMOVED = ("MCP_TIMEOUT", "MCP_TOOL_TIMEOUT", "CLAUDE_CODE_MCP_TOOL_IDLE_TIMEOUT")

# The stand-in server: one tool that holds the call, logging what it saw to HOLD_LOG (one JSON line per event).
STANDIN = """
import json, os, sys, time
import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

LOG = os.environ["HOLD_LOG"]
server = MCPServer("standin")


def log(**event):
    with open(LOG, "a") as out:
        out.write(json.dumps({"t": time.time(), **event}) + "\\n")


@server.tool()
async def hold(seconds: float, progress_every: float, ctx: Context) -> str:
    meta = dict(ctx.request_context.meta or {})
    token = meta.get("progress_token", meta.get("progressToken"))
    log(event="start", progress_token=token is not None, meta_keys=sorted(meta))
    started = time.monotonic()
    sent = 0
    try:
        while (left := seconds - (time.monotonic() - started)) > 0:
            await anyio.sleep(min(left, progress_every) if progress_every > 0 else left)
            if progress_every > 0 and time.monotonic() - started < seconds:
                sent += 1
                await ctx.report_progress(sent, None, f"still holding ({sent})")
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            log(event="cancelled", after=time.monotonic() - started, progress_sent=sent, error=type(exc).__name__)
        raise
    log(event="done", after=time.monotonic() - started, progress_sent=sent)
    return f"held {seconds}s"


if sys.argv[1] == "stdio":
    server.run("stdio")
else:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_listening(port: int) -> None:
    with anyio.fail_after(60):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.1)
                continue
            await stream.aclose()
            return


async def one_case(binary: Path, case: str, hold: float, progress_every: float, work: Path) -> dict[str, Any]:
    """One Claude Code run calling `hold` once over `case` (http-auto, http-legacy or stdio)."""
    work.mkdir(parents=True)
    log_path = work / "hold.jsonl"
    script = work / "standin.py"
    script.write_text(STANDIN)
    env = {**os.environ, "HOLD_LOG": str(log_path)}
    began: list[float] = []
    answered: list[float] = []

    def call(_: ToolResult | None) -> ToolUse:
        began.append(time.time())
        return ToolUse("mcp__standin__hold", {"seconds": hold, "progress_every": progress_every})

    def finish(result: ToolResult | None) -> Reply:
        answered.append(time.time())
        return Reply("done")

    server: subprocess.Popen[bytes] | None = None
    era = "legacy" if case == "http-legacy" else "auto"
    if case.startswith("http"):
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, str(script), "http", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await wait_listening(port)
        entry: dict[str, Any] = {"type": "http", "url": f"http://127.0.0.1:{port}/mcp"}
    else:
        entry = {"command": sys.executable, "args": [str(script), "stdio"], "env": {"HOLD_LOG": str(log_path)}}
    try:
        async with egress() as (catcher, egress_url), scripted_model([call, finish]) as (model, model_url):
            claude = ClaudeCode(binary, work / "home", work / "cwd", catcher, egress_url)
            claude.work.mkdir()
            config = work / "mcp.json"
            config.write_text(json.dumps({"mcpServers": {"standin": entry}}))
            environment = {k: v for k, v in claude.env(model_url, era).items() if k not in DEFAULTS_REMOVED}
            args = [
                "-p",
                "hold",
                "--mcp-config",
                str(config),
                "--strict-mcp-config",
                "--allowedTools",
                "mcp__standin__*",
            ]
            args += ["--output-format", "json", "--no-session-persistence"]
            started = time.time()
            done = await anyio.run_process(
                [str(binary), *args], env=environment, cwd=claude.work, check=False, stdin=subprocess.DEVNULL
            )
            ended = time.time()
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    events = [json.loads(line) for line in log_path.read_text().splitlines()] if log_path.exists() else []
    call_start = began[0] if began else started
    result = model.tool_results[0] if model.tool_results else None
    return {
        "case": case,
        "hold_seconds": hold,
        "progress_every": progress_every,
        "server_events": [{**e, "t": round(e["t"] - call_start, 1)} for e in events],
        "tool_result": None
        if result is None
        else {"text": result.text[:500], "is_error": result.is_error, "after": round(answered[0] - call_start, 1)},
        "claude_exit": done.returncode,
        "claude_seconds": round(ended - started, 1),
        "stderr": done.stderr.decode(errors="replace")[-1000:],
    }


async def main(hold: float, cases: list[str], progress: list[float]) -> None:
    binary = claude_binary()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="client-wait-") as tmp:
        async with anyio.create_task_group() as tg:

            async def run(case: str, every: float) -> None:
                outcome = await one_case(binary, case, hold, every, Path(tmp) / f"{case}-{every:g}")
                results.append(outcome)
                print(json.dumps(outcome), flush=True)

            for case in cases:
                for every in progress:
                    tg.start_soon(run, case, every)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout.split()[0]
    RESULTS.write_text(json.dumps({"claude_code": version, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hold", type=float, default=2400.0, help="seconds the tool holds the call")
    parser.add_argument("--cases", default="http-auto,http-legacy,stdio")
    parser.add_argument("--progress", default="0,10", help="progress intervals to try (0: none)")
    options = parser.parse_args()
    assert set(options.cases.split(",")) <= {"http-auto", "http-legacy", "stdio"}, options.cases
    assert ERAS
    anyio.run(main, options.hold, options.cases.split(","), [float(p) for p in options.progress.split(",")])
