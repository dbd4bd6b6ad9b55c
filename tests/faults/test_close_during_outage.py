"""A session whose close request (DELETE) meets a database outage is closed once the outage passes (issue 25).

With tokens on, the front door checks the DELETE's token in the database; during an outage it answers 503,
and before the fix the session then stayed open until its idle timeout. Now the request is remembered and
carried out as soon as the token can be checked, for the session that token opened only. JCT served over HTTP
with a real outage: PostgreSQL refusing connections, or another process holding SQLite's WAL index locked.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from sqlalchemy.engine import make_url

from server.config import Settings
from server.core import tokens
from tests.support.raw import RawSession
from tests.support.serving import served
from tests.world import refusing_connections

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def database_away(database_url: str) -> AsyncIterator[None]:
    """The database cannot answer: PostgreSQL refuses connections; SQLite's WAL index is held by another process."""
    if database_url.startswith("postgresql"):
        async with refusing_connections(database_url):
            yield
        return
    # Another process locks the WAL index's write, checkpoint, recovery and read-mark bytes (120..127 of the
    # -shm file, as SQLite lays it out): no connection can begin a read until it lets go.
    shm = f"{make_url(database_url).database}-shm"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, shm], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        yield
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 8, 120)
print("held", flush=True)
sys.stdin.read()
"""


async def open_session(stack: AsyncExitStack, base_url: str, secret: str) -> RawSession:
    session = RawSession(base_url, token=secret)
    stack.push_async_callback(session.aclose)
    await session.initialize()
    return session


async def delete(session: RawSession, token: str) -> int:
    headers = session._headers() | {"Authorization": f"Bearer {token}"}
    return (await session.http.delete(session.url, headers=headers)).status_code


async def open_count(base_url: str) -> float:
    async with httpx2.AsyncClient(timeout=30) as http:
        text = (await http.get(f"{base_url}/metrics")).text
    line = next(line for line in text.splitlines() if line.startswith('jct_open_sessions{transport="streamable_http"}'))
    return float(line.rsplit(" ", 1)[1])


async def test_a_close_request_during_an_outage_is_carried_out_once_it_passes(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    async with (
        served(make_settings, auth="token") as (base_url, core),
        AsyncExitStack() as stack,
    ):
        alice, _ = await tokens.create_token(core, "alice", ["worker"])
        bob, _ = await tokens.create_token(core, "bob", ["worker"])
        leaving = await open_session(stack, base_url, alice)
        staying = await open_session(stack, base_url, alice)
        bystander = await open_session(stack, base_url, bob)
        assert await open_count(base_url) == 3

        async with database_away(database_url):
            assert await delete(leaving, alice) == 503  # the token cannot be checked now
            assert await delete(staying, bob) == 503  # another principal's close request: never carried out

        # No request of the client follows: JCT closes the session itself once the token checks out.
        for _ in range(200):
            if await open_count(base_url) == 2:
                break
            await anyio.sleep(0.1)
        assert await open_count(base_url) == 2
        assert await leaving.status() == 404
        assert await staying.status() == 200
        assert await bystander.status() == 200
