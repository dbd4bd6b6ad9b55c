"""`jct serve --stdio` starts lean (bench/stdio_start.py measures it): on a current schema it loads neither the
command table (typer) nor Alembic, it answers `initialize` before it has opened the database, and the
requests after it wait until JCT is ready, so a client sees every tool, resource and prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.support.command import piped_process
from tests.transports.conftest import server_env, subprocess_env

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
# `jct serve --stdio` as the console script runs it, reporting at exit which heavy modules it loaded.
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: sys.stderr.write('LOADED ' + ','.join(sorted("
    "m for m in ('alembic', 'typer') if m in sys.modules)) + '\\n'))\n"
    "sys.argv = ['jct', 'serve', '--stdio']\n"
    "from server.cli import main\n"
    "main()\n"
)


async def start_once(env: dict[str, str], cwd: Path) -> tuple[dict[str, object], str]:
    """Start the probe, send initialize, close stdin: (the initialize answer, stderr)."""
    async with piped_process([sys.executable, "-c", PROBE], env, cwd) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        with anyio.fail_after(120):
            await process.stdin.send(json.dumps(INITIALIZE).encode() + b"\n")
            received = b""
            while b"\n" not in received:
                received += await process.stdout.receive()
            await process.stdin.aclose()
            stderr = b"".join([chunk async for chunk in process.stderr]).decode()
            assert await process.wait() == 0, stderr
    return json.loads(received.decode().splitlines()[0]), stderr


async def test_a_start_on_a_current_schema_loads_no_migration_machinery(database_url: str, tmp_path: Path) -> None:
    env = subprocess_env(server_env(database_url, tmp_path) | {"PYTHONPATH": str(ROOT)})
    first, _ = await start_once(env, tmp_path)  # migrates a fresh database
    answer, stderr = await start_once(env, tmp_path)
    for result in (first, answer):
        assert result["id"] == 1
        assert result["result"]["serverInfo"]["name"] == "jct"  # type: ignore[index]
    assert answer["result"]["capabilities"] == first["result"]["capabilities"]  # type: ignore[index]
    assert set(answer["result"]["capabilities"]) >= {"tools", "resources", "prompts", "completions"}  # type: ignore[index]
    assert "LOADED \n" in stderr, stderr


async def test_requests_after_initialize_see_the_whole_server(database_url: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "server", "serve", "--stdio"],
        env=server_env(database_url, tmp_path),
        cwd=tmp_path,
    )
    async with Client(params, mode="legacy") as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        listed = await client.list_resources()
        stats = await client.call_tool("jct_queue_stats", {})
    assert {"jct_claim_next", "jct_complete_task", "jct_enqueue_task", "jct_submit_review"} <= tools
    assert prompts == {"work_next", "review", "enqueue", "plan"}
    assert {str(r.uri) for r in listed.resources} >= {"jct://queue", "jct://reviews/pending"}
    assert not stats.is_error


async def test_the_command_table_loads_no_mcp_sdk(tmp_path: Path) -> None:
    """An operator's `jct` command talks to the database, not to MCP: loading the SDK cost every command
    about 1.1 s of start-up (`python -X importtime`), through the login-name helper it shared with tool
    calls' identities."""
    probe = (
        "import sys\n"
        "import server.cli.commands\n"
        "print(','.join(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.'))))\n"
    )
    done = await anyio.run_process([sys.executable, "-c", probe], env=subprocess_env({}), cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "", "the command table loaded the MCP SDK"
