"""Leases and fencing: renewal, expiry, the sweeper, and late calls from agents that lost their lease.

"Time passing" is simulated by moving `runs.lease_expires_at` into the past with a direct UPDATE.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from server.config import Settings
from server.core.claims import queue, sweeper, work
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from tests.core.helpers import ALICE, BOB, PATCH, bare, count, enqueue, race, separate_cores, snapshot

pytestmark = pytest.mark.anyio

SettingsFactory = Callable[..., Settings]


async def expire_leases(core: Core, *task_ids: str) -> None:
    """Time passes: the running runs of these tasks (all running runs if none given) are an hour overdue."""
    stmt = update(tables.runs).where(tables.runs.c.status == "running")
    if task_ids:
        stmt = stmt.where(tables.runs.c.task_id.in_(task_ids))
    async with core.db.write() as conn:
        await conn.execute(stmt.values(lease_expires_at=datetime.now(UTC) - timedelta(hours=1)))


async def task_row(core: Core, task_id: str) -> dict[str, Any]:
    async with core.db.read() as conn:
        row = (await conn.execute(select(tables.tasks).where(tables.tasks.c.id == task_id))).mappings().one()
    return dict(row)


async def run_rows(core: Core, task_id: str) -> list[dict[str, Any]]:
    query = select(tables.runs).where(tables.runs.c.task_id == task_id).order_by(tables.runs.c.id)
    async with core.db.read() as conn:
        return [dict(row) for row in (await conn.execute(query)).mappings().all()]


async def run_row(core: Core, run_id: str) -> dict[str, Any]:
    async with core.db.read() as conn:
        row = (await conn.execute(select(tables.runs).where(tables.runs.c.id == bare(run_id)))).mappings().one()
    return dict(row)


async def audit_actions(core: Core, entity_kind: str, entity_id: str) -> list[str]:
    log = tables.audit_log
    query = (
        select(log.c.action).where(log.c.entity_kind == entity_kind, log.c.entity_id == entity_id).order_by(log.c.id)
    )
    async with core.db.read() as conn:
        return [str(action) for action in (await conn.execute(query)).scalars().all()]


def files_under(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


# --- fencing -----------------------------------------------------------------------------

LateCall = Callable[[Core, str], Awaitable[object]]


async def _late_complete(core: Core, task_id: str) -> object:
    return await completion.complete_task(core, ALICE, task_id, success=True, summary="finished late")


async def _late_artifact(core: Core, task_id: str) -> object:
    return await work.report_artifact(
        core, ALICE, task_id, title="Code changes", artifact_type="code_patch", content=PATCH
    )


async def _late_progress(core: Core, task_id: str) -> object:
    return await work.report_progress(core, ALICE, task_id, message="still going", progress=90)


async def _late_release(core: Core, task_id: str) -> object:
    return await work.release_task(core, ALICE, task_id, "giving up")


LATE_CALLS = pytest.mark.parametrize(
    "late_call",
    [_late_complete, _late_artifact, _late_progress, _late_release],
    ids=["complete", "report_artifact", "report_progress", "release"],
)


async def state(core: Core, task_id: str) -> tuple[Any, ...]:
    """Every row of the database, and the task's row and runs in full: what a refused call must not change."""
    return await snapshot(core), await task_row(core, task_id), await run_rows(core, task_id)


async def claimed_and_expired(core: Core) -> tuple[str, str]:
    """A task Alice claimed and whose lease then ran out; (task_id, run_id)."""
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    await expire_leases(core, task_id)
    return task_id, bare(claim.run_id)


async def assert_refused_as_expired(core: Core, late_call: LateCall, task_id: str, run_id: str) -> None:
    """The late call is refused LEASE_EXPIRED, and neither the database nor the run's trace files change."""
    before = await state(core, task_id)

    with pytest.raises(JctError) as err:
        await late_call(core, task_id)

    assert err.value.code is ErrorCode.LEASE_EXPIRED
    assert await state(core, task_id) == before
    assert files_under(core.store.run_dir(run_id)) == []


@LATE_CALLS
async def test_a_stale_agent_whose_task_was_reclaimed_gets_lease_expired_and_changes_nothing(
    core: Core, late_call: LateCall
) -> None:
    task_id, stale_run = await claimed_and_expired(core)
    assert (await sweeper.sweep_expired_leases(core)).requeued == 1
    fresh = await queue.claim_next(core, BOB)
    assert fresh.task_id == task_id
    await assert_refused_as_expired(core, late_call, task_id, stale_run)


@LATE_CALLS
async def test_a_claimant_whose_lease_passed_before_any_sweep_gets_lease_expired(
    core: Core, late_call: LateCall
) -> None:
    task_id, run_id = await claimed_and_expired(core)
    await assert_refused_as_expired(core, late_call, task_id, run_id)
    # The sweeper still finds the run: the failed call did not revive the lease.
    assert (await sweeper.sweep_expired_leases(core)).expired == 1


async def lease_ends_in_a_minute(core: Core, run_id: str) -> datetime:
    """Time passes: the run's lease now ends a minute from now; when that is."""
    soon = datetime.now(UTC) + timedelta(seconds=60)
    async with core.db.write() as conn:
        await conn.execute(update(tables.runs).where(tables.runs.c.id == bare(run_id)).values(lease_expires_at=soon))
    return soon


async def test_progress_renews_the_lease(core: Core) -> None:
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    soon = await lease_ends_in_a_minute(core, claim.run_id)

    progress = await work.report_progress(core, ALICE, task_id, message="halfway", progress=50)

    renewed = (await run_row(core, claim.run_id))["lease_expires_at"]
    assert renewed == progress.lease_expires_at
    assert renewed > soon + timedelta(seconds=600)  # lease_seconds is 900: renewal is a fresh full lease
    assert await audit_actions(core, "Run", bare(claim.run_id)) == ["run.progress"]


async def test_reporting_an_artifact_renews_the_lease_too(core: Core) -> None:
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    soon = await lease_ends_in_a_minute(core, claim.run_id)

    reported = await work.report_artifact(
        core, ALICE, task_id, title="Patch", artifact_type="code_patch", content=PATCH
    )

    assert (await run_row(core, claim.run_id))["lease_expires_at"] == reported.lease_expires_at
    assert reported.lease_expires_at > soon + timedelta(seconds=600)


# --- the sweeper -------------------------------------------------------------------------


async def test_sweeper_expires_the_run_and_requeues_the_task_with_one_more_attempt(core: Core) -> None:
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    await expire_leases(core, task_id)

    report = await sweeper.sweep_expired_leases(core)

    assert (report.expired, report.requeued, report.failed) == (1, 1, 0)
    run = await run_row(core, claim.run_id)
    task = await task_row(core, task_id)
    assert run["status"] == "expired"
    assert run["ended_at"] is not None
    assert (task["status"], task["attempts"], task["active_run_id"], task["claimed_at"]) == ("queued", 1, None, None)
    assert await audit_actions(core, "Run", bare(claim.run_id)) == ["run.lease_expired"]
    assert await audit_actions(core, "Task", task_id) == ["task.enqueued", "task.claimed", "task.requeued"]
    assert await count(core, "issues", id=task["issue_id"], status="ready") == 1
    again = await queue.claim_next(core, BOB)
    assert (again.task_id, again.attempt) == (task_id, 2)


async def test_sweeper_leaves_live_leases_alone(core: Core) -> None:
    task_id = await enqueue(core)
    await queue.claim_task(core, ALICE, task_id)

    report = await sweeper.sweep_expired_leases(core)

    assert report.expired == 0
    assert (await task_row(core, task_id))["status"] == "running"


async def test_a_task_fails_once_its_lease_expired_max_attempts_times(make_settings: SettingsFactory) -> None:
    core = Core.build(make_settings(max_attempts=2))
    try:
        task_id = await enqueue(core)
        for attempt in (1, 2):
            claim = await queue.claim_next(core, ALICE)
            assert (claim.task_id, claim.attempt) == (task_id, attempt)
            await expire_leases(core, task_id)
            await sweeper.sweep_expired_leases(core)

        task = await task_row(core, task_id)
        assert (task["status"], task["attempts"], task["active_run_id"]) == ("failed", 2, None)
        assert task["error"] == "lease expired on the last attempt"
        assert await audit_actions(core, "Task", task_id) == [
            "task.enqueued",
            "task.claimed",
            "task.requeued",
            "task.claimed",
            "task.failed",
        ]
        assert await count(core, "runs", task_id=task_id, status="expired") == 2
        assert await count(core, "issues", id=task["issue_id"], status="failed") == 1
        assert (await queue.claim_next(core, ALICE)).claimed is False
    finally:
        await core.db.dispose()


async def test_release_gives_the_claim_back_without_spending_an_attempt(core: Core) -> None:
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)

    released = await work.release_task(core, ALICE, task_id, "wrong repo for me")

    assert released.task_status == "queued"
    task = await task_row(core, task_id)
    assert (task["status"], task["attempts"], task["active_run_id"]) == ("queued", 0, None)
    assert (await run_row(core, claim.run_id))["status"] == "released"
    assert await count(core, "issues", id=task["issue_id"], status="ready") == 1
    again = await queue.claim_next(core, BOB)
    # The second run of the task (a run's attempt is its number among its task's runs); attempts spent: none.
    assert (again.task_id, again.attempt) == (task_id, 2)
    assert (await task_row(core, task_id))["attempts"] == 0
    # The released run has ended: its agent cannot report on it any more.
    with pytest.raises(JctError) as err:
        await work.report_progress(core, ALICE, task_id, message="back again")
    assert err.value.code is ErrorCode.TASK_NOT_CLAIMED


async def test_two_sweepers_racing_expire_each_run_exactly_once(core: Core, make_settings: SettingsFactory) -> None:
    task_ids = [await enqueue(core, objective=f"task {n}") for n in range(30)]
    for _ in task_ids:
        assert (await queue.claim_next(core, ALICE)).claimed
    await expire_leases(core)
    expired: list[int] = []

    async def sweep(c: Core, _n: int) -> None:
        for _ in range(5):
            expired.append((await sweeper.sweep_expired_leases(c)).expired)

    async with separate_cores(make_settings(), 2, pool_size=2) as sweepers:
        await race(sweepers, sweep)

    assert sum(expired) == 30
    log = tables.audit_log
    per_run = select(log.c.entity_id, func.count()).where(log.c.action == "run.lease_expired").group_by(log.c.entity_id)
    per_task = select(log.c.entity_id, func.count()).where(log.c.action == "task.requeued").group_by(log.c.entity_id)
    async with core.db.read() as conn:
        expiries: dict[str, int] = dict((await conn.execute(per_run)).all())
        requeues: dict[str, int] = dict((await conn.execute(per_task)).all())
        attempts = dict((await conn.execute(select(tables.tasks.c.id, tables.tasks.c.attempts))).all())
        run_ids = set((await conn.execute(select(tables.runs.c.id))).scalars().all())
    assert expiries == dict.fromkeys(run_ids, 1)
    assert len(run_ids) == 30
    assert requeues == dict.fromkeys(task_ids, 1)
    assert attempts == dict.fromkeys(task_ids, 1)
    assert await count(core, "tasks", status="queued") == 30
    assert await count(core, "runs", status="expired") == 30
