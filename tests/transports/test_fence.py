"""The fence holds whoever shares an identity (DESIGN section 10), over every transport, on both databases.

The zombie: agent A claims a task and goes quiet; its lease runs out, the sweeper requeues the task and agent
B claims it. A wakes up and reports an artifact and a failed completion. With the defaults (JCT_AUTH=none,
no JCT_AGENT_ID) both calls used to succeed on B's run and fail B's task. Now each late call answers
LEASE_EXPIRED and changes nothing, whether A names its run or not; B finishes its work undisturbed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import select, update

from server.core.claims import sweeper
from server.core.service import Core
from server.db import tables
from server.vocab import RunStatus, TaskStatus
from tests.core.helpers import bare, snapshot
from tests.transports.conftest import Transport, call, call_error, report
from tests.transports.test_workflows import PATCH, enqueue

pytestmark = pytest.mark.anyio

LIMIT = 120.0
# Transports whose requests carry no session (the 2026-07-28 protocol): a caller there must name its run.
STATELESS = ("http-modern", "memory")


async def lapse_and_sweep(core: Core, run_id: str) -> None:
    """Time passes for one run: its lease is an hour gone, and a sweep requeues its task: this one, or the
    servers' own sweeper when it comes first (each server process sweeps every few seconds)."""
    async with core.db.write() as conn:
        stmt = update(tables.runs).where(tables.runs.c.id == run_id)
        await conn.execute(stmt.values(lease_expires_at=datetime.now(UTC) - timedelta(hours=1)))
    swept = await sweeper.sweep_expired_leases(core)
    assert swept.requeued in (0, 1)
    run = await _run_row(core, run_id)
    assert run["status"] == RunStatus.EXPIRED, run
    async with core.db.read() as conn:
        task = (await conn.execute(select(tables.tasks).where(tables.tasks.c.id == run["task_id"]))).mappings().one()
    assert (task["status"], task["active_run_id"]) == (TaskStatus.QUEUED, None)


async def _run_row(core: Core, run_id: str) -> dict[str, Any]:
    async with core.db.read() as conn:
        return dict((await conn.execute(select(tables.runs).where(tables.runs.c.id == run_id))).mappings().one())


async def _late_calls(zombie: Client, task_id: str, run_id: str | None) -> list[str]:
    """The zombie's late report and failed completion; the error code of each."""
    named = {"run_id": run_id} if run_id is not None else {}
    report = await call_error(
        zombie,
        "jct_report_artifact",
        task_id=task_id,
        title="Stale patch",
        artifact_type="code_patch",
        content=PATCH,
        **named,
    )
    complete = await call_error(
        zombie, "jct_complete_task", task_id=task_id, success=False, summary="gave up", error_message="late", **named
    )
    return [report["error"]["code"], complete["error"]["code"]]


@pytest.mark.parametrize("names_its_run", [True, False], ids=["with-run_id", "without-run_id"])
async def test_a_zombie_never_touches_the_run_of_the_agent_that_reclaimed_its_task(
    transport: Transport, make_settings: Callable[..., Any], names_its_run: bool
) -> None:
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            # The successor's completion is partial: it stays completed, not sent back (JCT_AUTO_REWORK).
            async with transport(auto_rework=False) as zombie, transport(auto_rework=False) as successor:
                task_id = await enqueue(zombie)
                stale = await call(zombie, "jct_claim_task", task_id=task_id)
                await lapse_and_sweep(core, bare(stale["run_id"]))
                fresh = await call(successor, "jct_claim_next")
                assert fresh["task_id"] == task_id
                assert fresh["run_id"] != stale["run_id"]
                before, fresh_run = await snapshot(core), await _run_row(core, bare(fresh["run_id"]))

                codes = await _late_calls(zombie, task_id, stale["run_id"] if names_its_run else None)

                if names_its_run or transport.kind not in STATELESS:
                    assert codes == ["LEASE_EXPIRED", "LEASE_EXPIRED"]
                else:
                    # A stateless caller without a token is nobody in particular: it must name its run.
                    assert codes == ["INVALID_ARGUMENT", "INVALID_ARGUMENT"]
                assert await snapshot(core) == before
                assert await _run_row(core, bare(fresh["run_id"])) == fresh_run

                # The successor's work goes on as if the zombie had never woken up.
                await report(successor, task_id, fresh["run_id"], PATCH)
                done = await call(
                    successor, "jct_complete_task", task_id=task_id, run_id=fresh["run_id"], success=True, summary="ok"
                )
                assert done["task_status"] == "completed"
                assert done["run_id"] == bare(fresh["run_id"])
    finally:
        await core.db.dispose()


@pytest.mark.parametrize("transport", ["stdio"], indirect=True)
async def test_two_stdio_processes_sharing_jct_agent_id_are_fenced_apart(
    make_settings: Callable[..., Any], transport: Transport
) -> None:
    """The same identity on both sides (JCT_AGENT_ID=bot): the fence still tells the zombie's run from its
    successor's, by the connection each claim came through."""
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            async with transport(agent_id="bot") as zombie, transport(agent_id="bot") as successor:
                task_id = await enqueue(zombie)
                stale = await call(zombie, "jct_claim_task", task_id=task_id)
                await lapse_and_sweep(core, bare(stale["run_id"]))
                fresh = await call(successor, "jct_claim_next")
                assert fresh["task_id"] == task_id
                fresh_row, stale_row = (
                    await _run_row(core, bare(fresh["run_id"])),
                    await _run_row(core, bare(stale["run_id"])),
                )
                assert fresh_row["actor_id"] == stale_row["actor_id"]
                before = await snapshot(core)

                assert await _late_calls(zombie, task_id, None) == ["LEASE_EXPIRED", "LEASE_EXPIRED"]
                assert await _late_calls(zombie, task_id, stale["run_id"]) == ["LEASE_EXPIRED", "LEASE_EXPIRED"]

                assert await snapshot(core) == before
                progress = await call(
                    successor, "jct_report_progress", task_id=task_id, message="still mine", run_id=fresh["run_id"]
                )
                assert progress["run_id"] == bare(fresh["run_id"])
    finally:
        await core.db.dispose()


@pytest.mark.parametrize("transport", ["stdio", "http-legacy", "sse"], indirect=True)
async def test_each_connection_is_its_own_agent_by_default(
    transport: Transport, make_settings: Callable[..., Any]
) -> None:
    """Without tokens or JCT_AGENT_ID, two sessions claim as two agents (`local-…`, `<user>-…`). (Stateless
    requests have no connection to name an agent after.)"""
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            async with transport() as one, transport() as two:
                await enqueue(one, objective="first")
                await enqueue(one, objective="second")
                first = await call(one, "jct_claim_next")
                second = await call(two, "jct_claim_next")
                a, b = await _run_row(core, bare(first["run_id"])), await _run_row(core, bare(second["run_id"]))
                assert a["actor_id"] != b["actor_id"]
                assert a["principal"] == b["principal"] == "local"
                base = "local" if transport.kind != "stdio" else a["actor_id"].rsplit("-", 1)[0]
                for run in (a, b):
                    assert run["actor_id"].startswith(f"{base}-")
                    assert len(run["actor_id"].rsplit("-", 1)[1]) == 6
                # One agent cannot act on the other's claim without its run_id...
                refused = await call_error(two, "jct_report_progress", task_id=first["task_id"], message="mine?")
                assert refused["error"]["code"] == "NOT_CLAIMANT"
    finally:
        await core.db.dispose()
