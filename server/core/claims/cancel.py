"""Cancelling work for good: a task (queued, blocked or running) and its running run, or a whole mission."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results as r
from server.core.audit import AuditAction, audit_row
from server.core.missions.graph import mission_not_found
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.service import Core
from server.db import missions as q
from server.db import queries
from server.errors import invalid, task_not_found
from server.vocab import TASK_OPEN, EntityKind, IssueStatus, MissionStatus, RunStatus, TaskStatus

CANCEL_ROUNDS = 5


async def cancel_task(core: Core, actor: Actor, task_id: str, reason: str) -> r.Cancelled:
    task_id = parse_id(task_id, "task_id")
    check_text(reason, "reason", Limits.REASON)
    async with core.db.write() as conn:
        cancelled = await cancel_in(conn, actor, task_id, reason, core.now())
    return cancelled


async def cancel_in(conn: AsyncConnection, actor: Actor, task_id: str, reason: str, ts: Any) -> r.Cancelled:
    """Cancel a queued, blocked or running task, and its running run, in the caller's transaction.

    Locks are taken run first, then task: the order the fence and the sweeper use, so cancel
    never deadlocks with a complete, release or expiry of the same task. A claim that commits
    between the two steps makes the guarded task update miss; the next round cancels its run too.
    """
    cancelled_runs: list[str] = []
    before = task = None
    for _ in range(CANCEL_ROUNDS):
        cancelled_runs += await queries.cancel_running_runs(conn, task_id, ts)
        before = await queries.get_task(conn, task_id)
        if before is None:
            raise task_not_found(task_id, "Check the task_id.")
        task = await queries.cancel_task_row(
            conn,
            task_id,
            {
                "status": TaskStatus.CANCELLED,
                "active_run_id": None,
                "completed_at": ts,
                "error": f"cancelled: {reason}",
            },
            known_runs=cancelled_runs,
        )
        if task is not None or before.status not in TASK_OPEN:
            break
    if task is None:
        status = before.status if before is not None else "changing"
        raise invalid(
            f"Task {task_id} is {status}; only queued, blocked or running tasks can be cancelled.",
            "Nothing to do: the task has already ended.",
        )
    audit = [
        audit_row(
            actor,
            AuditAction.TASK_CANCELLED,
            EntityKind.TASK,
            task_id,
            {"status": before.status if before is not None else TaskStatus.QUEUED},
            {"status": TaskStatus.CANCELLED, "reason": reason},
            task.trace_id,
        )
    ]
    for run_id in cancelled_runs:
        moved = ({"status": RunStatus.RUNNING}, {"status": RunStatus.CANCELLED})
        audit.append(audit_row(actor, AuditAction.RUN_CANCELLED, EntityKind.RUN, run_id, *moved, None))
    if task.issue_id is not None:
        cancelled = {"status": IssueStatus.CANCELLED}
        await queries.update_issue(conn, task.issue_id, {**cancelled, "updated_at": ts})
        audit.append(
            audit_row(actor, AuditAction.ISSUE_CANCELLED, EntityKind.ISSUE, task.issue_id, None, cancelled, None)
        )
    await queries.insert_audit(conn, audit)
    last_run = cancelled_runs[-1] if cancelled_runs else None
    return r.Cancelled(task_id=task_id, task_status=TaskStatus.CANCELLED, run_id=last_run)


async def cancel_mission(core: Core, actor: Actor, mission_id: str, reason: str) -> r.MissionCancelled:
    """Cancel an active mission and every task of it not yet ended (and their running runs), in one transaction."""
    mission_id = parse_id(mission_id, "mission_id")
    check_text(reason, "reason", Limits.REASON)
    ts = core.now()
    async with core.db.write() as conn:
        # Its running runs first, then the mission's row: the order completions, progress reports and approvals
        # take them in (the fence locks the run), so none of them deadlocks with this.
        await q.lock_running_runs(conn, mission_id)
        mission = await q.get_mission(conn, mission_id, lock=True)
        if mission is None:
            raise mission_not_found(mission_id)
        if mission.status != MissionStatus.ACTIVE:
            raise invalid(f"Mission {mission_id} is {mission.status}.", "Nothing to do: it has already ended.")
        tasks = await q.tasks_of(conn, mission_id, 10_000)
        cancelled = 0
        for task in tasks:
            if task.status in TASK_OPEN:
                await cancel_in(conn, actor, task.id, reason, ts)
                cancelled += 1
        if not await q.cancel(conn, mission_id, reason, ts):
            raise invalid(f"Mission {mission_id} ended while cancelling.", "Nothing was changed; look again.")
        after = {"status": MissionStatus.CANCELLED, "reason": reason, "tasks_cancelled": cancelled}
        before = {"status": MissionStatus.ACTIVE}
        await queries.insert_audit(
            conn, [audit_row(actor, AuditAction.MISSION_CANCELLED, EntityKind.MISSION, mission_id, before, after, None)]
        )
    return r.MissionCancelled(mission_id=mission_id, status=MissionStatus.CANCELLED, tasks_cancelled=cancelled)
