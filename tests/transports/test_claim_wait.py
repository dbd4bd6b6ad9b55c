"""jct_claim_next(wait_seconds=...) through real clients and transports (DESIGN section 17).

A waiting call says it has begun to wait with a progress notification (the client passes a progress
callback, so a progressToken): the tests enqueue only after that, so the task really appears while the call
waits. The in-memory transport runs no change feed (nothing wakes a waiter there), so it is left out.
"""

from __future__ import annotations

import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from sqlalchemy import select

from server.config import Settings
from server.core.service import Core
from server.db import tables
from tests.conftest import POSTGRES_URL
from tests.core.helpers import enqueue
from tests.support.servers import serve, serving
from tests.support.serving import serving as serving_here
from tests.transports.conftest import Transport, call, call_error, server_env

pytestmark = pytest.mark.anyio

LIMIT = 180.0  # a whole test, servers included
WAIT = 120.0  # what a waiter is willing to wait where the test ends it sooner
WAITING = ["stdio", "http-legacy", "http-modern", "sse"]


@pytest.fixture(params=WAITING)
async def transport(
    request: pytest.FixtureRequest, database_url: str, tmp_path: Path, make_settings: Callable[..., Any]
) -> AsyncIterator[Transport]:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        yield Transport(str(request.param), database_url, tmp_path, make_settings, stack)


class Waiter:
    """One jct_claim_next(wait_seconds) call run in the background: `waiting` is set once the server said it
    waits (its first progress notification); `result` is what the call returned."""

    def __init__(self, client: Client, wait_seconds: float, **filters: Any) -> None:
        self.client = client
        self.arguments = {"wait_seconds": wait_seconds, **filters}
        self.waiting = anyio.Event()
        self.result: dict[str, Any] | None = None
        self.took: float | None = None
        self.progress: list[tuple[float, float | None, str | None]] = []

    async def _progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total, message))
        self.waiting.set()

    async def run(self) -> None:
        started = time.monotonic()
        result = await self.client.call_tool("jct_claim_next", self.arguments, progress_callback=self._progress)
        self.took = time.monotonic() - started
        assert not result.is_error, result.content
        assert result.structured_content is not None
        self.result = dict(result.structured_content)


async def enqueue_through(client: Client, objective: str = "Add input validation") -> str:
    created = await call(client, "jct_enqueue_task", objective=objective, operation="analysis", target_repo="myorg/api")
    return str(created["task_id"])


async def woken_by_enqueue(agent: Client, planner: Client) -> tuple[Waiter, str]:
    """`agent` waits in jct_claim_next; once the server says it waits, `planner` enqueues a task: (the waiter,
    done, and the task's id)."""
    waiter = Waiter(agent, WAIT)
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter.run)
        await waiter.waiting.wait()
        task_id = await enqueue_through(planner)
    return waiter, task_id


# --- one waiter ----------------------------------------------------------------------------------


async def test_a_waiter_gets_a_task_enqueued_after_it_began_to_wait(transport: Transport) -> None:
    """Over stdio the waiter and the enqueuer are two `jct serve --stdio` processes: across processes."""
    with anyio.fail_after(LIMIT):
        async with transport() as agent, transport() as planner:
            waiter, task_id = await woken_by_enqueue(agent, planner)
    assert waiter.result is not None
    assert waiter.result["claimed"] is True, waiter.result
    assert waiter.result["task_id"] == task_id
    assert waiter.result["run_id"]
    assert waiter.took is not None
    assert waiter.took < WAIT
    assert waiter.progress[0][1] == WAIT  # progress of wait_seconds: the total is the wait


async def test_a_waiter_with_nothing_to_claim_answers_claimed_false_at_its_deadline(transport: Transport) -> None:
    with anyio.fail_after(LIMIT):
        async with transport() as agent:
            waiter = Waiter(agent, 1.5)
            await waiter.run()
    assert waiter.result is not None
    assert waiter.result["claimed"] is False
    assert waiter.result.get("task_id") is None
    assert waiter.took is not None
    assert waiter.took >= 1.5


async def test_a_waiter_takes_a_task_already_queued_at_once(transport: Transport) -> None:
    with anyio.fail_after(LIMIT):
        async with transport() as agent:
            task_id = await enqueue_through(agent)
            waiter = Waiter(agent, WAIT)
            await waiter.run()
    assert waiter.result is not None
    assert waiter.result["task_id"] == task_id
    assert not waiter.progress  # it never waited


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # legacy: a session, whose calls note a hang-up
@pytest.mark.parametrize("wait_seconds", [-1, -0.001, "NaN", "Infinity", "-Infinity", 61, 1e308])
async def test_a_bad_wait_is_invalid_and_claims_nothing(
    wait_seconds: Any, mode: str, make_settings: Callable[..., Settings]
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            serving_here(make_settings(claim_wait_max_seconds=60)) as (base_url, _mcp),
            Client(f"{base_url}/mcp", mode=mode) as agent,
        ):
            task_id = await enqueue_through(agent)
            error = await call_error(agent, "jct_claim_next", wait_seconds=wait_seconds)
            assert error["error"]["code"] == "INVALID_ARGUMENT", error
            assert "wait_seconds" in error["error"]["message"]
            assert "JCT_CLAIM_WAIT_MAX_SECONDS" in error["error"]["message"]
            task = await call(agent, "jct_get_task", task_id=task_id)
            assert task["task"]["status"] == "queued"
            assert task["runs"] == []


# --- many waiters --------------------------------------------------------------------------------


async def test_many_waiters_and_few_tasks_each_task_claimed_once_and_the_rest_time_out(
    make_settings: Callable[..., Settings],
) -> None:
    agents, tasks, wait = 12, 4, 8.0
    with anyio.fail_after(LIMIT):
        async with (
            serving_here(make_settings()) as (base_url, _mcp),
            Client(f"{base_url}/mcp", mode="legacy") as planner,
        ):
            waiters: list[Waiter] = []
            async with anyio.create_task_group() as tg:
                clients = [await tg.start(_client, f"{base_url}/mcp", n) for n in range(agents)]
                waiters = [Waiter(client, wait) for client in clients]
                async with anyio.create_task_group() as calls:
                    for waiter in waiters:
                        calls.start_soon(waiter.run)
                    for waiter in waiters:
                        await waiter.waiting.wait()
                    task_ids = [await enqueue_through(planner, f"Task {n}") for n in range(tasks)]
                tg.cancel_scope.cancel()
            for task_id in task_ids:
                task = await call(planner, "jct_get_task", task_id=task_id)
                assert task["task"]["status"] == "running"
                assert len(task["runs"]) == 1
    results = [waiter.result for waiter in waiters]
    assert all(result is not None for result in results)
    claimed = [result["task_id"] for result in results if result is not None and result["claimed"]]
    assert sorted(claimed) == sorted(task_ids), results
    assert sum(1 for result in results if result is not None and not result["claimed"]) == agents - tasks


async def _client(url: str, n: int, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
    """A client held open until cancelled: legacy and 2026-07-28 handshakes alternating."""
    async with Client(url, mode="legacy" if n % 2 else "auto") as client:
        task_status.started(client)
        await anyio.sleep_forever()


# --- across processes (PostgreSQL) ---------------------------------------------------------------


@pytest.mark.skipif(not POSTGRES_URL, reason="two server processes share one PostgreSQL database")
@pytest.mark.parametrize("dialect", ["postgresql"])
async def test_an_enqueue_on_another_process_wakes_a_waiter(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path)
    with anyio.fail_after(LIMIT):
        async with (
            serving(env, tmp_path, 2) as (one, two),
            Client(one.mcp_url) as agent,
            Client(two.mcp_url, mode="legacy") as planner,
        ):
            waiter, task_id = await woken_by_enqueue(agent, planner)
    assert waiter.result is not None
    assert waiter.result["task_id"] == task_id


# --- a client that goes, a server that stops -----------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto", "sse"])
async def test_a_waiter_whose_client_went_away_claims_nothing(
    mode: str, make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    """The waiting call ends with its client, not at its deadline (an hour, past this test's limit: a legacy
    session's call, which the SDK keeps running, stops when its event stream's client hangs up); a task
    enqueued afterwards is still there for the next agent."""
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            async with serving_here(make_settings(claim_wait_max_seconds=3600)) as (base_url, _mcp):
                async with anyio.create_task_group() as tg:
                    client = await tg.start(_any_client, base_url, mode)
                    waiter = Waiter(client, 3600)
                    tg.start_soon(waiter.run)
                    await waiter.waiting.wait()
                    tg.cancel_scope.cancel()  # the call is abandoned and the client disconnects
                await _until_no_waiter(base_url)
                task_id = await enqueue(core, operation="analysis")
                async with Client(f"{base_url}/mcp") as other:
                    late = Waiter(other, WAIT)
                    await late.run()
            assert late.result is not None
            assert late.result["task_id"] == task_id
            async with core.db.read() as conn:
                runs = (await conn.execute(select(tables.runs).where(tables.runs.c.task_id == task_id))).all()
            assert len(runs) == 1
    finally:
        await core.db.dispose()


async def _any_client(base_url: str, mode: str, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
    from mcp.client.sse import sse_client

    target: Any = sse_client(f"{base_url}/sse") if mode == "sse" else f"{base_url}/mcp"
    async with Client(target, mode="legacy" if mode == "sse" else mode) as client:
        task_status.started(client)
        await anyio.sleep_forever()


async def _until_no_waiter(base_url: str) -> None:
    """Until the server's /metrics shows no waiting claim (polled: it is another party's state)."""
    async with httpx2.AsyncClient() as http:
        while True:
            metrics = (await http.get(f"{base_url}/metrics")).text
            if "\njct_waiting_claims 0.0\n" in metrics:
                return
            await anyio.sleep(0.05)


async def test_sigterm_answers_waiters_at_once(database_url: str, tmp_path: Path) -> None:
    grace = 60.0
    env = server_env(database_url, tmp_path, shutdown_grace_seconds=grace)
    with anyio.fail_after(LIMIT):
        async with serve(env, tmp_path) as server, Client(server.mcp_url) as agent:
            await agent.list_tools()  # the client checks results against the listing: it holds it already
            waiter = Waiter(agent, WAIT)
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter.run)
                await waiter.waiting.wait()
                stopped = time.monotonic()
                server.process.send_signal(signal.SIGTERM)

            answered = time.monotonic() - stopped
            await server.process.wait()
            exited = time.monotonic() - stopped
    assert waiter.result is not None
    assert waiter.result["claimed"] is False
    # Well inside the grace: the drain did not wait for the waiter.
    assert answered < grace / 2, answered
    assert exited < grace / 2, (exited, server.log())
