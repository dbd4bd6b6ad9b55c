"""JCT started for a test, three ways: the app's lifespan without a socket, uvicorn in this process, and a
`jct serve` process; the last two with a Core on the same database, to set the scene and look behind it."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp.server import MCPServer
from starlette.applications import Starlette

from server.app import create_app
from server.config import Settings
from server.core.service import Core
from server.mcp import JctServer
from tests.transports.conftest import http_server, server_env

STARTED_SECONDS = 30


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


@asynccontextmanager
async def serving(settings: Settings, *, send_buffer: int | None = None) -> AsyncIterator[tuple[str, JctServer]]:
    """create_app under uvicorn in this process, on a socket bound here; yields (base URL, the MCP server).

    `send_buffer` fixes SO_SNDBUF of the listening socket, which accepted sockets inherit (and it turns
    off the kernel's autotuning, which would otherwise let a few MB pile up for a reader that stalls).
    """
    captured: list[MCPServer[Any]] = []
    app = create_app(settings, extend=captured.append)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_config=None, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    server.capture_signals = nullcontext  # type: ignore[method-assign]  # pytest owns the signals
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(STARTED_SECONDS):
                while not server.started:
                    await anyio.sleep(0.02)
            mcp = captured[0]
            assert isinstance(mcp, JctServer)
            yield f"http://127.0.0.1:{port}", mcp
            server.should_exit = True
    finally:
        sock.close()


@asynccontextmanager
async def served(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings], **overrides: Any
) -> AsyncIterator[tuple[str, Core]]:
    """`jct serve` with these setting overrides, as a process; yields (base URL, a Core on its database)."""
    core = Core.build(make_settings())
    try:
        async with http_server(server_env(database_url, tmp_path, **overrides), tmp_path) as base_url:
            yield base_url, core
    finally:
        await core.db.dispose()
