"""Event streams end cleanly, on both databases, through a real `jct serve`: an SSE connection closed by the
session cap and the streams still open at SIGTERM (dashboard pages, 2026-07-28 listens) each end with one
plain line in the log and a finished response for the client.

Measured before: every closed SSE connection logged "ASGI callable returned without completing response" and
its client read a broken chunked body; at SIGTERM the listens and dashboard streams were left for uvicorn to
cancel after its timeout, each with an "Exception in ASGI application" traceback and "timeout graceful
shutdown exceeded"."""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client

from tests.support.servers import serve
from tests.transports.conftest import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LIMIT = 60.0
CAP = 2


async def read_until_closed(url: str, ended: list[str], opened: anyio.Event) -> None:
    """Hold an event stream open until the server ends it; record that it ended properly."""
    async with httpx2.AsyncClient(timeout=None) as http, http.stream("GET", url) as response:
        opened.set()
        async for _chunk in response.aiter_bytes():
            pass
    ended.append(url)  # a broken body would have raised instead


async def test_closed_and_shut_down_streams_end_with_a_line_and_no_traceback(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path, log_level="INFO", max_sessions=CAP, shutdown_grace_seconds=1)
    ended: list[str] = []
    with anyio.fail_after(LIMIT):
        async with serve(env, tmp_path) as server, anyio.create_task_group() as tg:
            streams = [f"{server.base_url}/sse"] * (CAP + 2) + [f"{server.base_url}/ui/events"]
            for url in streams:  # one at a time: past the cap (no tokens) each closes the newest before it
                opened = anyio.Event()
                tg.start_soon(read_until_closed, url, ended, opened)
                await opened.wait()
            async with Client(server.mcp_url) as watcher, watcher.listen(resource_subscriptions=["jct://queue"]):
                server.process.send_signal(signal.SIGTERM)
                await server.process.wait()
    log = server.log()
    assert sorted(ended) == sorted(streams), log
    assert log.count("closing sse") >= CAP, log
    assert "event stream(s): the server is shutting down" in log, log
    assert "Traceback" not in log, log
    assert " ERROR " not in log, log
    assert "timeout graceful shutdown exceeded" not in log, log
