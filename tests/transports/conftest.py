"""A real JCT server behind every transport a client can use, and helpers to call its tools.

`transport` is parametrized over memory, stdio, http-legacy, http-modern and sse. Calling it
(`async with transport(**setting_overrides) as client`) yields a connected `mcp.Client`. Clients asking
for the same overrides share one server (two HTTP clients talk to one uvicorn server, run in the test's
process on a real socket: tests/support/serving.py); stdio starts one `jct serve --stdio` process per
client, as Claude Code does. `http_server` starts `jct serve` as a process, for tests whose subject is it;
`clients_of_two_servers` two of them on one database, with a client of each.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.server import MCPServer

from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.support.serving import serving

KINDS = ["memory", "stdio", "http-legacy", "http-modern", "sse"]
READY_SECONDS = 60.0
STOP_SECONDS = 15.0


# --- calling tools -------------------------------------------------------------------------


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """The tool's structuredContent; a tool error fails the test with the error JSON."""
    result = await client.call_tool(tool, args)
    if result.is_error:
        text = result.content[0].text if result.content and hasattr(result.content[0], "text") else result
        raise AssertionError(f"{tool} failed: {text}")
    assert result.structured_content is not None, f"{tool} returned no structuredContent"
    return dict(result.structured_content)


async def report(
    client: Client,
    task_id: str,
    run_id: str,
    content: str,
    *,
    title: str = "Code changes",
    artifact_type: str = "code_patch",
) -> dict[str, Any]:
    """jct_report_artifact on the run `run_id` of `task_id`; its result."""
    args = {"title": title, "artifact_type": artifact_type, "content": content}
    return await call(client, "jct_report_artifact", task_id=task_id, run_id=run_id, **args)


async def complete_failed(
    client: Client, task_id: str, run_id: str, summary: str, error_message: str
) -> dict[str, Any]:
    """jct_complete_task with success=false on the run `run_id` of `task_id`; its result."""
    args = {"summary": summary, "error_message": error_message}
    return await call(client, "jct_complete_task", task_id=task_id, run_id=run_id, success=False, **args)


async def call_error(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    """The parsed `{"success": false, "error": {...}}` of a call that must fail."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    first = result.content[0]
    assert first.type == "text"
    parsed: dict[str, Any] = json.loads(first.text)
    assert parsed["success"] is False
    assert set(parsed["error"]) >= {"code", "message", "suggestion"}
    return parsed


# --- real servers ----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(database_url: str, tmp_path: Path, **overrides: Any) -> dict[str, str]:
    """JCT_* for a server subprocess: the test's database and directories, plus setting overrides."""
    env = {
        "JCT_DATABASE_URL": database_url,
        "JCT_HOME": str(tmp_path / "home"),
        "JCT_TRACE_ROOT": str(tmp_path / "traces"),
        "JCT_LOG_LEVEL": "WARNING",
    }
    for name, value in overrides.items():
        env[f"JCT_{name.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def subprocess_env(jct: dict[str, str]) -> dict[str, str]:
    """The test process's environment without any JCT_* of its own, plus `jct`."""
    base = {key: value for key, value in os.environ.items() if not key.startswith("JCT_") and key != "DATABASE_URL"}
    return base | jct


async def stop_process(process: Process) -> None:
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(STOP_SECONDS):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def wait_ready(process: Process, base_url: str) -> bool:
    """Poll /readyz until 200 (True) or the process exits (False); bounded by READY_SECONDS."""
    async with httpx2.AsyncClient(timeout=5.0) as http:
        with anyio.fail_after(READY_SECONDS):
            while process.returncode is None:
                try:
                    response = await http.get(f"{base_url}/readyz")
                    if response.status_code == 200:
                        return True
                except httpx2.TransportError:
                    pass
                await anyio.sleep(0.05)
    return False


async def open_serve(port: int, env: dict[str, str], cwd: Path, log: IO[bytes], fork: bool = True) -> Process:
    """`jct serve --port PORT` with `env` (JCT_* settings: `server_env`), its stdout and stderr into `log`: a
    process forked from this worker's zygote (tests/support/zygote.py), which has already imported JCT, or with
    `fork=False` a `python -m server` of its own (for a test that measures the process: its memory)."""
    args = ["serve", "--port", str(port)]
    if fork:
        from tests.support.zygote import spawn

        return await spawn(args, subprocess_env(env), cwd, log)
    return await anyio.open_process(
        [sys.executable, "-m", "server", *args], env=subprocess_env(env), cwd=cwd, stdin=None, stdout=log, stderr=log
    )


@asynccontextmanager
async def http_server(env: dict[str, str], cwd: Path) -> AsyncIterator[str]:
    """`jct serve --port <free port>` as a subprocess; yields its base URL once /readyz answers 200."""
    from tests.support.servers import serve

    async with serve(env, cwd, "jct-serve") as server:
        yield server.base_url


@asynccontextmanager
async def clients_of_two_servers(
    database_url: str, tmp_path: Path, second_mode: str = "auto"
) -> AsyncIterator[tuple[Client, Client]]:
    """Two `jct serve` processes on the test's database and a client of each, the second's connecting in
    `second_mode`: (the first's client, the second's)."""
    env = server_env(database_url, tmp_path)
    async with (
        http_server(env, tmp_path) as one,
        http_server(env, tmp_path) as two,
        Client(f"{one}/mcp") as first,
        Client(f"{two}/mcp", mode=second_mode) as second,
    ):
        yield first, second


# --- the fixture -----------------------------------------------------------------------------


@dataclass
class Transport:
    """Open connected clients of one transport kind: `async with transport(**overrides) as client`."""

    kind: str
    database_url: str
    tmp_path: Path
    make_settings: Callable[..., Any]
    stack: AsyncExitStack
    servers: dict[tuple[tuple[str, Any], ...], Any] = field(default_factory=dict)

    def __call__(self, **overrides: Any) -> AbstractAsyncContextManager[Client]:
        return self._connect(**overrides)

    @asynccontextmanager
    async def _connect(self, **overrides: Any) -> AsyncIterator[Client]:
        # Tests bound their whole body with anyio.fail_after; a client's task groups must not be
        # entered under a narrower cancel scope than the one they are exited under.
        client = await self._client(tuple(sorted(overrides.items())), overrides)
        async with client:
            yield client

    async def _client(self, key: tuple[tuple[str, Any], ...], overrides: dict[str, Any]) -> Client:
        if self.kind == "memory":
            return Client(await self._memory_server(key, overrides))
        if self.kind == "stdio":
            from tests.support.zygote import command

            executable, *args = await command(["serve", "--stdio"])
            params = StdioServerParameters(
                command=executable,
                args=args,
                env=server_env(self.database_url, self.tmp_path, **overrides),
                cwd=self.tmp_path,
            )
            return Client(params, mode="legacy")
        if key not in self.servers:
            settings = self.make_settings(**overrides)
            self.servers[key], _mcp = await self.stack.enter_async_context(serving(settings))
        base_url = self.servers[key]
        if self.kind == "http-legacy":
            return Client(f"{base_url}/mcp", mode="legacy")
        if self.kind == "http-modern":
            return Client(f"{base_url}/mcp")
        assert self.kind == "sse"
        return Client(sse_client(f"{base_url}/sse"), mode="legacy")

    async def _memory_server(self, key: tuple[tuple[str, Any], ...], overrides: dict[str, Any]) -> MCPServer[Any]:
        if key not in self.servers:
            core = Core.build(self.make_settings(**overrides))
            self.stack.push_async_callback(core.db.dispose)
            self.servers[key] = build_mcp(core, FixedIdentity("local"))
        server: MCPServer[Any] = self.servers[key]
        return server


@pytest.fixture(params=KINDS)
async def transport(
    request: pytest.FixtureRequest,
    database_url: str,
    tmp_path: Path,
    make_settings: Callable[..., Any],
) -> AsyncIterator[Transport]:
    async with AsyncExitStack() as stack:
        yield Transport(str(request.param), database_url, tmp_path, make_settings, stack)
