"""A hundred waiting claims through a database restart (DESIGN section 17): PostgreSQL refuses connections and
cuts every session for a few seconds while 100 `jct_claim_next(wait_seconds)` calls wait on one server. Idle
waiters cost no query, so the outage does not reach them; once the database is back, tasks enqueued then wake
them through the change feed: each waiter gets one task, no task is claimed twice, none is left behind, and the
server's log holds no traceback. A waiter the outage did reach answers UNAVAILABLE and calls again, as an agent
would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from server.config import Settings
from server.core.claims.waiting import RECHECK_SECONDS
from tests.support.books import Books
from tests.support.servers import serving
from tests.transports.conftest import call, server_env
from tests.world import refusing_connections

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLIENTS, CALLS = 10, 10  # 100 waiters: ten connections with ten waiting calls each
# Shorter than the waiters' periodic re-check (waiting.RECHECK_SECONDS): only the change feed, back after the
# outage, can wake them in time.
WAIT = 25.0
OUTAGE_SECONDS = 3.0
LIMIT = 120.0


class Waiter:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.waiting = anyio.Event()
        self.result: dict[str, Any] | None = None
        self.unavailable = 0

    async def _progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.waiting.set()

    async def run(self) -> None:
        while True:
            result = await self.client.call_tool(
                "jct_claim_next", {"wait_seconds": WAIT}, progress_callback=self._progress
            )
            if not result.is_error:
                assert result.structured_content is not None
                self.result = dict(result.structured_content)
                return
            error = json.loads(result.content[0].text)["error"]  # type: ignore[union-attr]
            assert error["code"] == "UNAVAILABLE", error
            self.unavailable += 1
            await anyio.sleep(error["retry_after_seconds"])


async def _client(url: str, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
    async with Client(url, mode="legacy") as client:
        task_status.started(client)
        await anyio.sleep_forever()


assert WAIT < RECHECK_SECONDS


@pytest.mark.dialects("postgresql")
async def test_a_hundred_waiters_outlive_a_database_restart_and_each_gets_one_task(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    env = server_env(database_url, tmp_path)
    with anyio.fail_after(LIMIT):
        async with serving(env, tmp_path) as (server,), Client(server.mcp_url, mode="legacy") as planner:
            async with anyio.create_task_group() as tg:
                clients = [await tg.start(_client, server.mcp_url) for _ in range(CLIENTS)]
                waiters = [Waiter(client) for client in clients for _ in range(CALLS)]
                async with anyio.create_task_group() as calls:
                    for waiter in waiters:
                        calls.start_soon(waiter.run)
                    for waiter in waiters:
                        await waiter.waiting.wait()
                    async with refusing_connections(database_url):
                        await anyio.sleep(OUTAGE_SECONDS)
                    task_ids = [
                        (
                            await call(
                                planner,
                                "jct_enqueue_task",
                                objective=f"Task {n}",
                                operation="analysis",
                                target_repo="myorg/api",
                            )
                        )["task_id"]
                        for n in range(CLIENTS * CALLS)
                    ]
                tg.cancel_scope.cancel()
            log = server.log()

    results = [waiter.result for waiter in waiters]
    assert all(result is not None and result["claimed"] for result in results), results
    claimed = [result["task_id"] for result in results if result is not None]
    assert sorted(claimed) == sorted(task_ids), "each waiter got one task, and every task went to one waiter"
    books = await Books.read(database_url)
    for task_id in task_ids:
        runs = [run for run in books.runs.values() if run["task_id"] == task_id]
        assert len(runs) == 1, (task_id, runs)
        assert books.tasks[task_id]["status"] == "running"
    assert "Traceback" not in log, log
