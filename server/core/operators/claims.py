"""An operator's hand on an agent's claim (DESIGN section 14, the dashboard's task and stuck pages): give it back
to the queue (release, as the agent's own jct_release_task does, no attempt counted), or end it now as expired
(the claim of an agent that is gone, as the sweeper ends it once its lease has passed: one expired lease counted,
the task requeued or failed at its last attempt). Both are audited as the person who acted.

The rules are the agent's release (server/core/claims/work.py `Release`) and the sweeper's expiry
(server/core/claims/sweeper.py `expire`); only the fence differs: an operator names the task, not a run it holds.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results as r
from server.core.claims import sweeper
from server.core.claims.work import Release
from server.core.models import Actor, Limits, check_text, parse_id
from server.core.service import Core
from server.db import queries
from server.db.records import Task
from server.errors import invalid, task_not_found
from server.vocab import RunStatus, TaskStatus


async def release_claim(core: Core, actor: Actor, task_id: str, reason: str) -> r.Released:
    """The running task's claim given back: its run released, the task queued again, no attempt counted."""
    task_id = parse_id(task_id, "task_id")
    check_text(reason, "reason", Limits.REASON)
    ts = core.now()
    async with core.db.write() as conn:
        task, run_id = await _claimed(conn, task_id, "release")
        given = Release.of(
            actor, task_id, run_id, task.issue_id, f"released by {actor.actor_id}: {reason}", ts, task.trace_id
        )
        # The run first, then the task: the order the fence, cancel and the sweeper lock them in.
        if not await queries.update_run(conn, run_id, given.run, status_in=(RunStatus.RUNNING,)):
            raise _ended(task_id)
        if await queries.update_task(conn, task_id, given.task, status_in=(TaskStatus.RUNNING,)) is None:
            raise _ended(task_id)
        if given.issue is not None and task.issue_id is not None:
            await queries.update_issue(conn, task.issue_id, given.issue)
        await queries.insert_audit(conn, given.audit)
    return r.Released(task_id=task_id, run_id=run_id, task_status=TaskStatus.QUEUED)


async def expire_claim(core: Core, actor: Actor, task_id: str, reason: str) -> r.Expired:
    """The running task's claim ended now as expired, its lease live or not: the task requeued, or failed once
    its expired leases reach max_attempts."""
    task_id = parse_id(task_id, "task_id")
    check_text(reason, "reason", Limits.REASON)
    async with core.db.write() as conn:
        _task, run_id = await _claimed(conn, task_id, "expire")
        why = f"expired by {actor.actor_id}: {reason}"
        expired = await sweeper.expire(core, conn, actor, run_id, reason=why, due=False)
        if expired is None:
            raise _ended(task_id)
        _run, moved = expired
        if moved is None:
            raise _ended(task_id)
    return r.Expired(task_id=task_id, run_id=run_id, task_status=TaskStatus(moved.status), attempts=moved.attempts)


async def _claimed(conn: AsyncConnection, task_id: str, verb: str) -> tuple[Task, str]:
    """The running task and its active run, or INVALID_ARGUMENT naming the task's status."""
    task = await queries.get_task(conn, task_id)
    if task is None:
        raise task_not_found(task_id, "Check the task_id.")
    if task.status != TaskStatus.RUNNING or task.active_run_id is None:
        raise invalid(
            f"Task {task_id} is {task.status}; only a running task has a claim to {verb}.",
            "Nothing to do: no agent holds it now.",
        )
    return task, task.active_run_id


def _ended(task_id: str) -> Exception:
    return invalid(
        f"Task {task_id}'s claim ended while acting on it (completed, released or expired meanwhile).",
        "Nothing was changed; look at the task again.",
    )
