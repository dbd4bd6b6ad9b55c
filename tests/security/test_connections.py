"""Half-open connections cannot lock clients out of a real `jct serve`, on both databases.

Measured before: sockets that send part of a request's headers and then nothing were held for ever, each
with a file descriptor; about a thousand used up a 1,024-file limit, after which no client was served and
asyncio logged a traceback for every failed `accept()`. Here the server runs under a 512-file limit (so
JCT_MAX_CONNECTIONS is lowered to fit it) and 600 sockets send half a request: a normal client is still
served, a half-open socket is closed after JCT_HEADER_TIMEOUT_SECONDS, and the log holds a few lines, no
traceback."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from tests.transports.conftest import free_port, server_env, stop_process, subprocess_env, wait_ready

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 90.0
OPEN_FILES = 512
HALF_OPEN = 600
HEADER_TIMEOUT = 3
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "

# `jct serve` with a low open-file limit, set in the child before it starts.
SERVE = (
    "import resource, runpy, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({OPEN_FILES}, {OPEN_FILES})); "
    "sys.argv = ['jct', 'serve', '--port', sys.argv[1]]; "
    "runpy.run_module('server', run_name='__main__')"
)


@asynccontextmanager
async def limited_server(env: dict[str, str], cwd: Path) -> AsyncIterator[tuple[str, Path]]:
    port = free_port()
    log_path = cwd / "jct.log"
    with log_path.open("wb") as log:
        process = await anyio.open_process(
            [sys.executable, "-c", SERVE, str(port)], env=subprocess_env(env), cwd=cwd, stdout=log, stderr=log
        )
    try:
        base = f"http://127.0.0.1:{port}"
        assert await wait_ready(process, base), log_path.read_text()
        yield base, log_path
    finally:
        await stop_process(process)


async def half_open(port: int) -> SocketStream:
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(PARTIAL)
    return stream


async def closed_by_server(stream: SocketStream) -> bool:
    """Read until the server closes the connection (it sends nothing before)."""
    try:
        while True:
            await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        return True


async def test_half_open_sockets_neither_lock_clients_out_nor_flood_the_log(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path, log_level="INFO", header_timeout_seconds=HEADER_TIMEOUT)
    with anyio.fail_after(LIMIT):
        async with limited_server(env, tmp_path) as (base, log_path), AsyncExitStack() as sockets:
            port = int(base.rsplit(":", 1)[1])
            first = await half_open(port)
            sockets.push_async_callback(first.aclose)
            for _ in range(HALF_OPEN - 1):
                stream = await half_open(port)
                sockets.push_async_callback(stream.aclose)
            async with httpx2.AsyncClient(timeout=None) as http:
                served = await http.get(f"{base}/healthz")
            assert served.status_code == 200
            # The oldest half-open socket was closed (to make room, or at its header deadline): it reads the end.
            assert await closed_by_server(first)
            # A half-open socket nobody needs the room of is closed at its header deadline.
            late = await half_open(port)
            sockets.push_async_callback(late.aclose)
            assert await closed_by_server(late)
            # A new client that sends its headers slowly but completely within the deadline is served too.
            slow = await anyio.connect_tcp("127.0.0.1", port)
            sockets.push_async_callback(slow.aclose)
            await slow.send(PARTIAL)
            await slow.send(b"1\r\nConnection: close\r\n\r\n")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += await slow.receive()
            assert answer.startswith(b"HTTP/1.1 200"), answer
    log = log_path.read_text()
    assert "Traceback" not in log, log[-5000:]
    assert "capping connections at 256" in log, log
    assert "(JCT_MAX_CONNECTIONS" in log, log
    assert "(JCT_HEADER_TIMEOUT_SECONDS)" in log, log
    assert len(log.splitlines()) < 60, log[-5000:]
