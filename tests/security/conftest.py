"""JCT served with JCT_AUTH=token (uvicorn, real HTTP), tokens for it, and MCP clients that present them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ErrorData

from server.config import Settings
from server.core import tokens
from server.core.models import new_id
from server.core.service import Core
from server.db import tokens as token_rows
from tests.support.serving import served

HTTP_KINDS = ["http-legacy", "http-modern", "sse"]


async def future_token(core: Core) -> str:
    """A token only a newer JCT could write: its one role is unknown to this build. Its secret."""
    secret = tokens.PREFIX + "future-token-with-an-unknown-role"
    async with core.db.write() as conn:
        row = {
            "id": new_id(),
            "name": "future",
            "roles": ["auditor"],
            "token_hash": tokens.hash_secret(secret),
            "created_at": datetime.now(UTC),
        }
        assert await token_rows.insert_token(conn, row)
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@asynccontextmanager
async def connect(kind: str, base_url: str, secret: str) -> AsyncIterator[Client]:
    """A connected SDK client of `kind` that sends `Authorization: Bearer <secret>` on every request."""
    async with AsyncExitStack() as stack:
        if kind == "sse":
            client = Client(sse_client(f"{base_url}/sse", headers=bearer(secret)), mode="legacy")
        else:
            http = await stack.enter_async_context(create_mcp_http_client(headers=bearer(secret)))
            transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
            client = Client(transport, mode="legacy" if kind == "http-legacy" else "auto")
        async with client:
            yield client


@dataclass
class TokenServer:
    """A running JCT server (JCT_AUTH=token) and a Core on its database, to mint and revoke tokens."""

    kind: str
    base_url: str
    core: Core

    async def token(self, name: str, *roles: str) -> str:
        secret, _ = await tokens.create_token(self.core, name, list(roles))
        return secret

    async def revoke(self, name: str) -> None:
        assert await tokens.revoke_token(self.core, name)

    def client(self, secret: str) -> Any:
        return connect(self.kind, self.base_url, secret)


@pytest.fixture(params=HTTP_KINDS)
async def token_server(
    request: pytest.FixtureRequest, make_settings: Callable[..., Settings]
) -> AsyncIterator[TokenServer]:
    """JCT served with JCT_AUTH=token (manual review, so completed work waits for a reviewer, partial too)."""
    async with served(make_settings, auth="token", review_auto_approve=False, auto_rework=False) as (url, core):
        yield TokenServer(str(request.param), url, core)


def mcp_error(exc: BaseException) -> ErrorData:
    """The MCPError the SDK client raised, out of the exception groups its task groups wrap it in."""
    if isinstance(exc, MCPError):
        return exc.error
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            try:
                return mcp_error(inner)
            except AssertionError:
                continue
    raise AssertionError(f"not an MCPError: {exc!r}")


async def sdk_refusal(base_url: str, secret: str, mode: str, calls: int = 0) -> ErrorData:
    """What the MCP SDK's own client raises when the front door refuses it (at `initialize`, or after `calls`)."""
    try:
        async with (
            create_mcp_http_client(headers=bearer(secret)) as http,
            Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode) as client,
        ):
            for _ in range(calls):
                await client.list_tools()
    except BaseException as exc:  # an ExceptionGroup around the MCPError
        return mcp_error(exc)
    raise AssertionError("the front door let every request through")
