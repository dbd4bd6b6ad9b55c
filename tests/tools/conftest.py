"""An in-memory MCP client on a real server object and a real (migrated) database."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp

ClientFactory = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(make_settings: Callable[..., Settings]) -> ClientFactory:
    """connect(agent="alice", **settings) -> an async context manager yielding a connected Client."""

    @asynccontextmanager
    async def open_client(agent: str = "local", core: Core | None = None, **overrides: Any) -> AsyncIterator[Client]:
        owned = core is None
        built = core if core is not None else Core.build(make_settings(**overrides))
        try:
            # The handshake era, as Claude Code speaks it: the connection is a session, so calls on a claim
            # may leave out run_id (a stateless 2026-07-28 caller must name its run).
            async with Client(build_mcp(built, FixedIdentity(agent)), mode="legacy") as client:
                yield client
        finally:
            if owned:
                await built.db.dispose()

    return open_client


async def ok(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert result.structured_content["success"] is True
    structured: dict[str, Any] = result.structured_content
    return structured


async def error(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    """The error object of a failed call, after checking its shape."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body["success"] is False
    # Only a failure of the world says when to retry; every other code keeps exactly three fields.
    retry = {"retry_after_seconds"} if body["error"]["code"] == "UNAVAILABLE" else set()
    assert set(body["error"]) == {"code", "message", "suggestion"} | retry
    assert body["error"]["message"]
    assert body["error"]["suggestion"]
    assert "Traceback" not in result.content[0].text  # type: ignore[union-attr]
    return dict(body["error"])
