"""The lease sweeper: expires runs whose lease has passed and requeues (or fails) their tasks.

`expire` is the one way a run expires: the sweeper's, for a lease that has passed, and an operator's "expire now"
(server/core/operators/claims.py) for the claim of an agent that is gone, audited as the person who did it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results
from server.core.audit import AuditAction, audit_row
from server.core.claims.queue import fold_counts
from server.core.integration import workspace
from server.core.models import SYSTEM, Actor
from server.core.service import Core
from server.db import leases, queries
from server.db.records import ExpiredRun, RequeuedTask
from server.failures import every
from server.vocab import EntityKind, IssueStatus, RunStatus, TaskStatus

log = logging.getLogger(__name__)
BATCH = 100
LEASE_EXPIRED = "lease expired"
# A report's content is staged for the length of one transaction; older staged files were left by a killed process.
STAGED_AT_MOST = 3600.0


async def sweep_expired_leases(core: Core) -> results.SweepReport:
    """One pass. Each expiry is its own small transaction, so a crash mid-pass loses nothing."""
    report = results.SweepReport(expired=0, requeued=0, failed=0)
    async with core.db.read() as conn:
        candidates = await queries.expired_running_runs(conn, core.now(), BATCH)
    for run_id in candidates:
        async with core.db.write() as conn:
            expired = await expire(core, conn, SYSTEM, run_id)
        if expired is None:  # completed, released or swept by another process in the meantime
            continue
        report.expired += 1
        _run, task = expired
        if task is not None:
            if task.status == TaskStatus.QUEUED:
                report.requeued += 1
            else:
                report.failed += 1
    return report


async def expire(
    core: Core, conn: AsyncConnection, actor: Actor, run_id: str, *, reason: str = LEASE_EXPIRED, due: bool = True
) -> tuple[ExpiredRun, RequeuedTask | None] | None:
    """Expire the running run (only once its lease has passed, when `due`) and requeue its task, or fail it once
    its expired leases reach max_attempts; audited as `actor`, in the caller's transaction. None when the run is
    not running (or, `due`, its lease is still live)."""
    ts = core.now()
    run = await leases.expire_run(conn, run_id, ts, reason=reason, due=due)
    if run is None:
        return None
    task = await leases.requeue_or_fail(conn, run.task_id, run_id)
    before, expired = {"status": RunStatus.RUNNING}, {"status": RunStatus.EXPIRED}
    audit = [audit_row(actor, AuditAction.RUN_LEASE_EXPIRED, EntityKind.RUN, run_id, before, expired, None)]
    if task is not None:
        requeued = task.status == TaskStatus.QUEUED
        action = AuditAction.TASK_REQUEUED if requeued else AuditAction.TASK_FAILED
        after: dict[str, Any] = {"status": task.status, "attempts": task.attempts, "reason": reason}
        audit.append(audit_row(actor, action, EntityKind.TASK, run.task_id, before, after, task.trace_id))
        if task.issue_id is not None:
            issue_status = IssueStatus.READY if requeued else IssueStatus.FAILED
            await queries.update_issue(conn, task.issue_id, {"status": issue_status, "updated_at": ts})
            moved = AuditAction.issue_moved(issue_status)
            audit.append(audit_row(actor, moved, EntityKind.ISSUE, task.issue_id, None, {"status": issue_status}, None))
    await queries.insert_audit(conn, audit)
    return run, task


async def run_sweeper(
    core: Core, interval: float, on_sweep: Callable[[results.SweepReport], None] | None = None
) -> None:
    """Sweep forever; one failed pass is logged and the next one tries again. `on_sweep` sees each report.
    While the database is away, that is one line per interval, not a traceback per pass."""

    async def sweep() -> None:
        report = await sweep_expired_leases(core)
        if on_sweep is not None:
            on_sweep(report)
        await fold_counts(core)  # keeps queue statistics' delta rows few (server/db/leases.py)
        await workspace.sweep(core)  # worktrees of runs no longer running (after a crash too)
        await anyio.to_thread.run_sync(core.store.sweep_staging, STAGED_AT_MOST)
        if report.expired:
            log.info("lease sweep: %d expired, %d requeued, %d failed", report.expired, report.requeued, report.failed)

    await every(interval, sweep, log, effect="leases are not expired meanwhile", what="lease sweep")
