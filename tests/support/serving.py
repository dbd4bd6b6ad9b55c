"""JCT started for a test in this process: the app's lifespan without a socket (`running`), or uvicorn on a
socket (`serving`, and `served` with a Core on the same database, to set the scene and look behind it).
Tests whose subject is the process itself (signals, kills, logs, stdio) start `jct serve`: tests/support/servers.py."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import anyio
import uvicorn
from mcp.server import MCPServer
from starlette.applications import Starlette

from server.app import create_app
from server.config import Settings
from server.core.service import Core
from server.mcp import JctServer

STARTED_SECONDS = 30
STOPPED_SECONDS = 10


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[tuple[Starlette, Core]]:
    """create_app with its lifespan running, to call through an ASGI transport; (app, a Core on its database)."""
    app = create_app(settings)
    core = Core.build(settings)
    try:
        async with app.router.lifespan_context(app):
            yield app, core
    finally:
        await core.db.dispose()


class _Server(uvicorn.Server):
    """uvicorn whose main loop waits to be told to stop, where uvicorn's looks every 100 ms (`should_exit`): the
    suite starts and stops a server in hundreds of tests. Its per-second housekeeping (the Date header, the
    request cap) is nothing a test reads."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.stop = asyncio.Event()

    async def main_loop(self) -> None:
        await self.stop.wait()


@asynccontextmanager
async def serving(settings: Settings, *, send_buffer: int | None = None) -> AsyncIterator[tuple[str, JctServer]]:
    """create_app under uvicorn in this process, on a socket bound here; yields (base URL, the MCP server).

    `send_buffer` fixes SO_SNDBUF of the listening socket, which accepted sockets inherit (and it turns
    off the kernel's autotuning, which would otherwise let a few MB pile up for a reader that stalls).

    uvicorn runs in a task of its own, not in a task group of the caller's: a fixture may start a server from
    inside a test's cancel scope (`anyio.fail_after`) and stop it at teardown, outside that scope.
    """
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    captured: list[MCPServer[Any]] = []
    # The port in the settings too, as `jct serve --port` has it (the URLs JCT names itself by use it).
    app = create_app(settings.model_copy(update={"host": "127.0.0.1", "port": port}), extend=captured.append)
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    server = _Server(config)
    server.capture_signals = nullcontext  # type: ignore[method-assign, assignment]  # pytest owns the signals
    task = asyncio.create_task(server.serve([sock]))
    try:
        with anyio.fail_after(STARTED_SECONDS):
            while not server.started:
                if task.done():
                    task.result()  # its exception, if it raised one
                    raise RuntimeError("uvicorn stopped before it started (see the log above)")
                await anyio.sleep(0.005)
        mcp = captured[0]
        assert isinstance(mcp, JctServer)
        yield f"http://127.0.0.1:{port}", mcp
    finally:
        server.stop.set()
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(STOPPED_SECONDS):
                await asyncio.wait([task])
            if not task.done():
                task.cancel()
                await asyncio.wait([task])
        sock.close()
    if not task.cancelled():
        task.result()  # a server that failed while the test ran fails the test


@asynccontextmanager
async def served(make_settings: Callable[..., Settings], **overrides: Any) -> AsyncIterator[tuple[str, Core]]:
    """JCT with these setting overrides, served over HTTP in this process (`serving`); yields (base URL, a Core
    on its database). The test's database and directories (`make_settings`), as `jct serve` would have them."""
    core = Core.build(make_settings())
    try:
        async with serving(make_settings(**overrides)) as (base_url, _mcp):
            yield base_url, core
    finally:
        await core.db.dispose()
