"""A server process SIGKILLed mid-run, with another one on the same database: nothing is lost, nothing is
claimed twice.

Twelve agents (both protocol eras) drain eighty code changes through two `jct serve` processes on one
database. Once a third of the tasks are done, one server is SIGKILLed; on SQLite, at a moment it holds the
database's write lock (in the middle of a transaction: the lock is released with the process, and the
transaction's pages in the WAL are never committed). Its agents connect to the survivor: half carry on with
the task they hold (the claim's run_id names their run, whichever server they reach), half start afresh as
a restarted client would, and the claims they leave behind run out and are claimed again. Then the
database is counted.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from sqlalchemy.engine import make_url

from server.config import Settings
from tests.core.helpers import bare
from tests.support.agents import SHORT_LEASES, Job, Tally, crowd, enqueue_work_in, run_all
from tests.support.books import Books
from tests.support.servers import Server, serving
from tests.transports.conftest import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASKS = 80
AGENTS = 12
LIMIT = 90
# Another process holding SQLite's write lock this long without a break is the stopped one: the survivor's
# transactions last milliseconds.
HELD_SECONDS = 0.3


async def test_a_server_killed_mid_run_loses_no_task_and_claims_none_twice(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    task_ids = await enqueue_work_in(make_settings(), TASKS)
    tally = Tally()
    killed = anyio.Event()
    held: list[Job] = []

    async def complete_after_the_kill(job: Job) -> None:
        held.append(job)
        await killed.wait()

    with anyio.fail_after(LIMIT):
        async with serving(server_env(database_url, tmp_path, **SHORT_LEASES), tmp_path, count=2) as servers:
            doomed, survivor = servers
            agents = crowd(AGENTS, [doomed.mcp_url, survivor.mcp_url], tally)
            on_doomed = [agent for agent in agents if agent.urls[0] == doomed.mcp_url]
            for agent in on_doomed[: len(on_doomed) // 2]:
                agent.resume = False  # restarts afresh: the claim it held is left to run out
            # One of them is sure to hold a claim when its server dies.
            on_doomed[0].before_complete = complete_after_the_kill
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_all, agents)
                await tally.completed(TASKS // 3).wait()
                await kill_mid_transaction(doomed, database_url)
                killed.set()
            survivor_log = survivor.log()

    books = await Books.read(database_url)
    assert sorted(books.tasks) == sorted(task_ids)
    assert books.problems(tally) == {}
    # The kill did what it should: every agent of the dead server moved, and claims ran out and came back.
    assert {name for name, _ in tally.reconnections} == {agent.name for agent in on_doomed}
    assert books.runs[bare(held[0].run_id)]["status"] == "expired"
    assert books.tasks[held[0].task_id]["attempts"] == 1
    assert tally.codes() <= {"LEASE_EXPIRED"}, tally.refusals
    assert "Traceback" not in survivor_log, survivor_log


async def kill_mid_transaction(server: Server, database_url: str) -> None:
    """SIGKILL `server`; on SQLite, once it is caught holding the write lock (stopped, then checked)."""
    if not database_url.startswith("sqlite"):
        await server.kill()
        return
    path = make_url(database_url).database
    assert path is not None
    while True:
        server.process.send_signal(signal.SIGSTOP)
        if await held_throughout(path, HELD_SECONDS):
            await server.kill()
            return
        server.process.send_signal(signal.SIGCONT)
        await anyio.sleep(0.01)  # let it run into another transaction


async def held_throughout(path: str, seconds: float) -> bool:
    """Whether another process holds SQLite's write lock for all of `seconds` (BEGIN IMMEDIATE never gets it)."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        ends = anyio.current_time() + seconds
        while anyio.current_time() < ends:
            try:
                probe.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc):
                    raise
            else:
                probe.execute("ROLLBACK")
                return False
            await anyio.sleep(0.02)
        return True
    finally:
        probe.close()
