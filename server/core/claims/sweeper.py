"""The lease sweeper: expires runs whose lease has passed and requeues (or fails) their tasks."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from server.core import results
from server.core.audit import AuditAction, audit_row
from server.core.claims.queue import fold_counts
from server.core.integration import workspace
from server.core.models import SYSTEM
from server.core.service import Core
from server.db import leases, queries
from server.failures import FailureLog
from server.vocab import EntityKind, IssueStatus, RunStatus, TaskStatus

log = logging.getLogger(__name__)
BATCH = 100


async def sweep_expired_leases(core: Core) -> results.SweepReport:
    """One pass. Each expiry is its own small transaction, so a crash mid-pass loses nothing."""
    report = results.SweepReport(expired=0, requeued=0, failed=0)
    async with core.db.read() as conn:
        candidates = await queries.expired_running_runs(conn, core.now(), BATCH)
    for run_id in candidates:
        ts = core.now()
        async with core.db.write() as conn:
            run = await leases.expire_run(conn, run_id, ts)
            if run is None:  # completed, released or swept by another process in the meantime
                continue
            task = await leases.requeue_or_fail(conn, run.task_id, run_id)
            before, expired = {"status": RunStatus.RUNNING}, {"status": RunStatus.EXPIRED}
            audit = [audit_row(SYSTEM, AuditAction.RUN_LEASE_EXPIRED, EntityKind.RUN, run_id, before, expired, None)]
            report.expired += 1
            if task is not None:
                requeued = task.status == TaskStatus.QUEUED
                action = AuditAction.TASK_REQUEUED if requeued else AuditAction.TASK_FAILED
                after = {"status": task.status, "attempts": task.attempts, "reason": "lease expired"}
                audit.append(audit_row(SYSTEM, action, EntityKind.TASK, run.task_id, before, after, task.trace_id))
                if requeued:
                    report.requeued += 1
                else:
                    report.failed += 1
                if task.issue_id is not None:
                    issue_status = IssueStatus.READY if requeued else IssueStatus.FAILED
                    await queries.update_issue(conn, task.issue_id, {"status": issue_status, "updated_at": ts})
                    moved = AuditAction.issue_moved(issue_status)
                    issue_after = {"status": issue_status}
                    audit.append(audit_row(SYSTEM, moved, EntityKind.ISSUE, task.issue_id, None, issue_after, None))
            await queries.insert_audit(conn, audit)
    return report


async def run_sweeper(
    core: Core, interval: float, on_sweep: Callable[[results.SweepReport], None] | None = None
) -> None:
    """Sweep forever; one failed pass is logged and the next one tries again. `on_sweep` sees each report.
    While the database is away, that is one line per interval, not a traceback per pass."""
    failures = FailureLog(log, "leases are not expired meanwhile")
    while True:
        try:
            report = await sweep_expired_leases(core)
            if on_sweep is not None:
                on_sweep(report)
            await fold_counts(core)  # keeps queue statistics' delta rows few (server/db/leases.py)
            await workspace.sweep(core)  # worktrees of runs no longer running (after a crash too)
            if report.expired:
                log.info(
                    "lease sweep: %d expired, %d requeued, %d failed", report.expired, report.requeued, report.failed
                )
        except Exception as exc:
            if not failures.failed_on(exc):
                log.exception("lease sweep failed; retrying in %.1fs", interval)
        else:
            failures.recovered()
        await anyio.sleep(interval)
