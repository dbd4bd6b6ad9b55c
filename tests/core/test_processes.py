"""Real OS processes sharing one database: no double claims across processes, and a SIGKILLed
worker's claims come back through the sweeper once their leases pass."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from sqlalchemy import func, select

from server.config import Settings
from server.core.claims import queue, sweeper
from server.core.service import Core
from server.db import tables
from tests.core.helpers import ALICE, count, enqueue
from tests.support.lines import REPO, LineProcess, line_process

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SettingsFactory = Callable[..., Settings]
SCRIPT = Path(__file__).with_name("claimer_proc.py")


@asynccontextmanager
async def worker(settings: Settings, tmp_path: Path, *args: str, **env: str) -> AsyncIterator[LineProcess]:
    """A claimer_proc.py process: its stdout read line by line, its stderr kept in a file for failures."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("JCT_") and k != "DATABASE_URL"}
    environ.update(
        PYTHONPATH=str(REPO),
        JCT_DATABASE_URL=settings.database_url,
        JCT_TRACE_ROOT=str(settings.traces),
        JCT_HOME=str(tmp_path / "home"),
        **env,
    )
    stderr = tmp_path / f"worker-{'-'.join(args)}.stderr"
    async with line_process([sys.executable, str(SCRIPT), *args], environ, stderr) as process:
        yield LineProcess(process, stderr)


async def runs_per_task(core: Core) -> dict[str, int]:
    query = select(tables.runs.c.task_id, func.count()).group_by(tables.runs.c.task_id)
    async with core.db.read() as conn:
        return {str(task_id): int(n) for task_id, n in (await conn.execute(query)).all()}


async def test_two_processes_draining_one_queue_claim_every_task_exactly_once(
    core: Core, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    task_ids = {await enqueue(core, objective=f"task {n}", create_cwom=n % 2 == 0) for n in range(300)}
    claimed: dict[str, list[str]] = {"one": [], "two": []}
    reported: dict[str, int] = {}
    settings = make_settings()

    async def drain(name: str, w: LineProcess, ready: anyio.Event, go: anyio.Event) -> None:
        assert await w.line() == "ready"
        ready.set()
        await go.wait()
        await w.send("go\n")
        while True:
            word, _, value = (await w.line()).partition(" ")
            if word == "done":
                reported[name] = int(value)
                break
            assert word == "claimed"
            claimed[name].append(value)
        assert await w.process.wait() == 0, w.stderr.read_text()

    with anyio.fail_after(180):
        async with (
            # Each completion is partial (no criteria cited): it stays completed, not sent back (JCT_AUTO_REWORK).
            worker(settings, tmp_path, "drain", "one", JCT_AUTO_REWORK="false") as one,
            worker(settings, tmp_path, "drain", "two", JCT_AUTO_REWORK="false") as two,
            anyio.create_task_group() as tg,
        ):
            ready = [anyio.Event(), anyio.Event()]
            go = anyio.Event()
            tg.start_soon(drain, "one", one, ready[0], go)
            tg.start_soon(drain, "two", two, ready[1], go)
            for event in ready:
                await event.wait()
            go.set()

    assert not set(claimed["one"]) & set(claimed["two"])
    assert sorted(claimed["one"] + claimed["two"]) == sorted(task_ids)
    assert reported == {"one": len(claimed["one"]), "two": len(claimed["two"])}
    assert await runs_per_task(core) == dict.fromkeys(task_ids, 1)
    assert await count(core, "tasks", status="completed") == 300
    assert await count(core, "audit_log", action="task.claimed") == 300


async def test_a_killed_workers_claims_are_swept_back_to_the_queue_or_failed(
    make_settings: SettingsFactory, tmp_path: Path
) -> None:
    retry = Core.build(make_settings(max_attempts=3))
    last = Core.build(make_settings(max_attempts=1))
    try:
        retried = {await enqueue(retry, objective=f"retry {n}") for n in range(3)}
        exhausted = {await enqueue(last, objective=f"last {n}") for n in range(3)}

        with anyio.fail_after(60):
            async with worker(
                make_settings(), tmp_path, "hold", "doomed", "6", JCT_LEASE_SECONDS="5", JCT_MAX_ATTEMPTS="1"
            ) as doomed:
                word, *held = (await doomed.line()).split()
                assert word == "claimed"
                assert set(held) == retried | exhausted
                doomed.process.send_signal(signal.SIGKILL)
                assert await doomed.process.wait() == -signal.SIGKILL

        assert await count(retry, "tasks", status="running") == 6
        with anyio.fail_after(60):  # the leases (5 s) pass; the sweeper notices within a few polls
            while await count(retry, "tasks", status="running"):
                await sweeper.sweep_expired_leases(retry)
                await anyio.sleep(0.2)

        # Nothing is left running without a live lease.
        assert await count(retry, "runs", status="running") == 0
        assert await count(retry, "runs", status="expired") == 6
        async with retry.db.read() as conn:
            rows = (await conn.execute(select(tables.tasks.c.id, tables.tasks.c.status, tables.tasks.c.attempts))).all()
        assert {task_id: (status, attempts) for task_id, status, attempts in rows} == {
            **{task_id: ("queued", 1) for task_id in retried},
            **{task_id: ("failed", 1) for task_id in exhausted},
        }
        assert await count(retry, "audit_log", action="run.lease_expired") == 6
        assert await count(retry, "audit_log", action="task.requeued") == 3
        assert await count(retry, "audit_log", action="task.failed") == 3

        # Another worker picks the requeued tasks up, on their second attempt.
        again = [await queue.claim_next(retry, ALICE) for _ in range(4)]
        assert {c.task_id for c in again[:3]} == retried
        assert {c.attempt for c in again[:3]} == {2}
        assert again[3].claimed is False
    finally:
        await retry.db.dispose()
        await last.db.dispose()
