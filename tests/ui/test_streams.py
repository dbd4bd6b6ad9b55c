"""Dashboard event streams on a real `jct serve`: what two hundred open pages cost the server, and a revoked
token's stream closing by itself."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from server.config import Settings
from server.core import tokens
from server.core.service import Core
from tests.support.servers import serve
from tests.support.serving import serving
from tests.transports.conftest import server_env

pytestmark = pytest.mark.anyio

STREAMS = 200
BUDGET_BYTES = 50 * 1024  # per open stream
HANG_GUARD = 120.0  # only so a broken stream fails the test instead of hanging it


def rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", status)
    assert found is not None
    return int(found.group(1)) * 1024


async def open_stream(port: int) -> SocketStream:
    """GET /ui/events on a raw socket, read until the stream's first event."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(
        f"GET /ui/events HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    seen = b""
    while b"event: hello" not in seen:
        seen += await stream.receive()
    return stream


async def open_ui_streams(base_url: str) -> int:
    async with httpx2.AsyncClient() as http:
        metrics = (await http.get(f"{base_url}/metrics")).text
    found = re.search(r'jct_open_sessions\{transport="ui"\} (\d+)', metrics)
    assert found is not None, metrics
    return int(float(found.group(1)))


async def test_two_hundred_open_pages_cost_under_50_kib_each(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path, max_sessions_per_principal=1000)
    # A process of its own: a fork of the zygote shares pages that new allocations could land in unseen.
    async with serve(env, tmp_path, fork=False) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        with anyio.fail_after(HANG_GUARD):
            warm = [await open_stream(port) for _ in range(10)]  # first-use allocations are not per stream
            before = rss(server.process.pid)
            streams = [await open_stream(port) for _ in range(STREAMS)]
            after = rss(server.process.pid)
            assert await open_ui_streams(server.base_url) == STREAMS + len(warm)
            for stream in [*warm, *streams]:
                await stream.aclose()
    per_stream = (after - before) / STREAMS
    print(f"{STREAMS} dashboard streams: {per_stream / 1024:.1f} KiB each")
    assert per_stream < BUDGET_BYTES


async def test_revoking_the_token_closes_its_open_stream(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(auth="token")
    async with serving(settings) as (base, _mcp), httpx2.AsyncClient(base_url=base) as http:
        core = Core.build(settings)
        try:
            secret, _ = await tokens.create_token(core, "watcher", ["reviewer"])
            login = await http.get("/ui/login")
            csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', login.text)
            assert csrf is not None
            signed_in = await http.post("/ui/login", data={"token": secret, "csrf": csrf.group(1)})
            assert signed_in.status_code == 303
            with anyio.fail_after(HANG_GUARD):
                async with http.stream("GET", "/ui/events", timeout=None) as events:
                    assert events.status_code == 200
                    lines = events.aiter_lines()
                    async for line in lines:
                        if line == "event: hello":
                            break
                    assert await tokens.revoke_token(core, "watcher")
                    async for _line in lines:
                        pass  # keep-alives at most, until the server ends the stream
            assert (await http.get("/ui/events")).status_code == 401  # and the session with it
        finally:
            await core.db.dispose()
