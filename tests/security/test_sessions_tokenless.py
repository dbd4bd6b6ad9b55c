"""Without tokens no client can close another's session (DESIGN section 10), over real HTTP.

Every tokenless caller is `local`. Sessions used to be capped per principal, so one client's flood of
`initialize`s and listen streams filled the cap all clients share and closed a quiet client's session
("Session not found"). Now each session or stream is its own client, only the process total bounds them, and
past it the youngest goes first: what was open before a flood outlives it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from server.config import Settings
from tests.support.raw import RawSession
from tests.support.serving import served
from tests.transports.conftest import call

pytestmark = pytest.mark.anyio

LIMIT = 120.0
PER_PRINCIPAL = 4
TOTAL = 12


@asynccontextmanager
async def client(base_url: str, mode: str) -> AsyncIterator[Client]:
    """An SDK client without a token: `legacy` holds a session, `auto` speaks the 2026-07-28 protocol."""
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(create_mcp_http_client())
        yield await stack.enter_async_context(
            Client(streamable_http_client(f"{base_url}/mcp", http_client=http), mode=mode)
        )


async def open_sessions(base_url: str, n: int, stack: AsyncExitStack) -> list[RawSession]:
    sessions = []
    for _ in range(n):
        session = RawSession(base_url)
        stack.push_async_callback(session.aclose)
        await session.initialize()
        sessions.append(session)
    return sessions


async def open_metric(base_url: str, transport: str) -> float:
    async with httpx2.AsyncClient(timeout=5) as http:
        text = (await http.get(f"{base_url}/metrics")).text
    line = next(line for line in text.splitlines() if line.startswith(f'jct_open_sessions{{transport="{transport}"}}'))
    return float(line.split()[-1])


async def test_a_flood_of_sessions_and_streams_from_one_client_closes_no_other_clients_session(
    make_settings: Callable[..., Settings],
) -> None:
    caps = {"max_sessions_per_principal": PER_PRINCIPAL, "max_sessions": TOTAL}
    with anyio.fail_after(LIMIT):
        async with served(make_settings, **caps) as (base_url, _core), AsyncExitStack() as stack:
            # Two quiet clients: a session used once and left idle, and an SDK client between two calls.
            (victim,) = await open_sessions(base_url, 1, stack)
            sdk_victim = await stack.enter_async_context(client(base_url, "legacy"))
            assert (await call(sdk_victim, "jct_queue_stats"))["success"] is True

            # The flood: three times the process's cap in sessions, twice in listen streams.
            flood = await open_sessions(base_url, 3 * TOTAL, stack)
            modern = await stack.enter_async_context(client(base_url, "auto"))
            for _ in range(2 * TOTAL):
                await stack.enter_async_context(modern.listen(resource_subscriptions=["jct://queue"]))
            await anyio.sleep(0.2)  # the closings run in the background

            assert await victim.status() == 200
            assert (await call(sdk_victim, "jct_queue_stats"))["success"] is True
            # The flood displaced only itself, and the total stayed bounded.
            alive = [await session.status() for session in flood]
            assert alive.count(200) < TOTAL
            held = await open_metric(base_url, "streamable_http") + await open_metric(base_url, "listen")
            assert held <= TOTAL

            # A newcomer is admitted, and works.
            async with client(base_url, "legacy") as newcomer:
                assert (await call(newcomer, "jct_queue_stats"))["success"] is True
            assert await victim.status() == 200
