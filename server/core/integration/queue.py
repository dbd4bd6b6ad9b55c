"""The merge queue's rules (DESIGN section 16).

- An approved run of an **integrable** repository (repos.Place.writable) that changed something is not done
  at approval: its work is queued (`integrations`, `tasks.merge = 'queued'`), and its dependents, phase and
  mission wait for the merge. A task completed and awaiting review is `merge = 'pending'` (it holds its
  touches as a running task does).
- Merged: the integration records the commit the target ref moved to, the task is `merged`, and the approval's
  steps run then (server/core/missions/plan.approve): dependents unblock, the mission counts it done.
- A conflict or a failed check changes nothing on the target ref: the task goes back to the queue with a new
  briefing version naming the conflicting files (or the check's output tail) and the new base, as a review
  round; past the round cap it fails (a mission blocker for a person).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results
from server.core.audit import AuditAction, audit_row, issue_moved
from server.core.briefings import versions
from server.core.missions import plan
from server.core.models import Actor
from server.core.review import gates
from server.core.service import Core
from server.db import integrations, queries
from server.db.records import Integration, Run, Task
from server.errors import JctError
from server.vocab import EntityKind, IssueStatus, TaskStatus

INTEGRATOR = Actor(actor_id="integrator", actor_kind="system", name="merge queue")

# tasks.merge
PENDING, QUEUED, MERGING, MERGED = "pending", "queued", "merging", "merged"
# integrations.status beyond queued and merging
CONFLICT, CHECK_FAILED = "conflict", "check_failed"


def values(
    core: Core,
    *,
    task_id: str,
    run_id: str,
    target_repo: str,
    target_ref: str,
    files_changed: dict[str, Any] | None,
    base_commit: str | None,
    ts: datetime | ColumnElement[datetime],
) -> dict[str, Any] | None:
    """The merge-queue row for this run's work, or None when there is nothing to integrate: the repository
    is not integrable, or the run changed nothing JCT read (no base commit, no head beyond it). Touches no disk."""
    try:
        place = core.repos.place(target_repo)
    except JctError:
        return None
    head = (files_changed or {}).get("head")
    if place is None or not place.writable or base_commit is None or not head or head == base_commit:
        return None
    return {
        "run_id": run_id,
        "task_id": task_id,
        "repo": target_repo,
        "ref": target_ref,
        "base_commit": base_commit,
        "head_commit": head,
        "strategy": core.settings.merge_strategy,
        "status": QUEUED,
        "attempts": 0,
        "queued_at": ts,
    }


def queued_audit(actor: Actor, run_id: str, queued: dict[str, Any], trace_id: str | None) -> dict[str, Any]:
    after = {"status": QUEUED, "repo": queued["repo"], "ref": queued["ref"], "head": queued["head_commit"]}
    return audit_row(actor, AuditAction.INTEGRATION_QUEUED, EntityKind.RUN, run_id, None, after, trace_id)


async def merge_queue(core: Core, *, limit: int = 100) -> results.MergeQueue:
    """The merge queue newest first: what waits (and why), what landed, what went back to an agent."""
    async with core.db.read() as conn:
        rows = await integrations.listed(conn, limit=limit)
    items = [results.MergeQueueItem.model_validate(row) for row in rows]
    return results.MergeQueue(items=items, count=len(items))


async def approve(core: Core, conn: AsyncConnection, actor: Actor, task: Task, run: Run) -> None:
    """A reviewer approved the run's work: queued for integration when its repository is integrable, else
    approved now (what waits for the task may go)."""
    queued = values(
        core,
        task_id=task.id,
        run_id=run.id,
        target_repo=task.target_repo,
        target_ref=task.target_ref,
        files_changed=run.files_changed,
        base_commit=run.base_commit,
        ts=core.now(),
    )
    if queued is None:
        await plan.approve(conn, actor, task.id)
        return
    await integrations.queue(conn, queued)
    await queries.update_task(conn, task.id, {"merge": QUEUED})
    await queries.insert_audit(conn, [queued_audit(actor, run.id, queued, task.trace_id)])


async def merged(core: Core, conn: AsyncConnection, item: Integration, commit: str, trace_id: str | None) -> None:
    """The target ref holds the run's work: record it, and let what waited for the task go."""
    ts = core.now()
    await integrations.update_integration(
        conn, item.id, {"status": MERGED, "commit": commit, "ended_at": ts, "waiting": None}
    )
    await queries.update_task(conn, item.task_id, {"merge": MERGED})
    after = {"status": MERGED, "commit": commit, "ref": item.ref}
    audit = audit_row(INTEGRATOR, AuditAction.INTEGRATION_MERGED, EntityKind.RUN, item.run_id, None, after, trace_id)
    await queries.insert_audit(conn, [audit])
    await plan.approve(conn, INTEGRATOR, item.task_id)


@dataclass(frozen=True)
class SentBack:
    """Why the merge queue sends a run's work back: a CONFLICT (the files git named) or a CHECK_FAILED (the
    check's output), found replaying it onto the target ref at `new_base`."""

    status: str
    new_base: str
    conflicting_files: list[str] | None = None
    check_output: str | None = None

    def reason(self, ref: str) -> str:
        """The feedback the agent reads in its next briefing: what went wrong, and where to start again."""
        if self.status == CONFLICT:
            files = ", ".join(self.conflicting_files or []) or "(git named none)"
            return (
                f"Your change conflicts with work merged into {ref} since you started: {files}. "
                f"Start again from {ref} at {self.new_base} (your next claim's base), redo the change on top of "
                "it, and resolve those files."
            )
        tail = (self.check_output or "")[-2000:]
        return (
            f"The check command failed on your change replayed onto {ref} at {self.new_base}. "
            f"Fix what it reports (its output's tail below), then complete again.\n\n{tail}"
        )


async def sent_back(core: Core, conn: AsyncConnection, item: Integration, task: Task, back: SentBack) -> str:
    """A conflict or a failed check: nothing moved on the target ref. The task goes back to the queue with a new
    briefing version that says why (a review round), or fails past the round cap. The task's new status."""
    ts = core.now()
    status = back.status
    await integrations.update_integration(
        conn,
        item.id,
        {
            "status": status,
            "conflicting_files": back.conflicting_files,
            "check_output": back.check_output,
            "ended_at": ts,
            "waiting": None,
        },
    )
    reason = back.reason(item.ref)
    gate = gates.gate_of(task.step, core.settings.max_review_rounds)
    new_status, values = gates.another_round(task.review_rounds, gate, f"integration: {status.replace('_', ' ')}")
    rounds = int(values["review_rounds"])
    await queries.update_task(conn, task.id, values, status_in=(TaskStatus.COMPLETED,))
    completed = {"status": TaskStatus.COMPLETED}
    trace = task.trace_id
    after = {"status": new_status, "reason": status, "rounds": rounds}
    if new_status == TaskStatus.FAILED:
        issue_status, action = IssueStatus.FAILED, AuditAction.TASK_FAILED
    else:
        issue_status, action = IssueStatus.READY, AuditAction.TASK_REQUEUED
        if task.issue_id is not None:
            entry = versions.feedback_round(
                decision=status, reason=reason, reviewer=INTEGRATOR, run_id=item.run_id, verdict=status
            )
            await versions.new_version(conn, task.issue_id, ts, feedback=entry)
    happened = AuditAction.INTEGRATION_CONFLICT if status == CONFLICT else AuditAction.INTEGRATION_CHECK_FAILED
    detail = {"status": status, "conflicting_files": back.conflicting_files, "new_base": back.new_base}
    audit = [
        audit_row(INTEGRATOR, happened, EntityKind.RUN, item.run_id, None, detail, trace),
        audit_row(INTEGRATOR, action, EntityKind.TASK, task.id, completed, after, trace),
    ]
    if task.issue_id is not None:
        await queries.update_issue(conn, task.issue_id, {"status": issue_status, "updated_at": ts})
        audit.append(issue_moved(INTEGRATOR, task.issue_id, issue_status, trace))
    await queries.insert_audit(conn, audit)
    return new_status


async def waiting(core: Core, conn: AsyncConnection, item: Integration, why: str, trace_id: str | None) -> None:
    """The integration cannot go on now (a checkout with uncommitted changes, a lock): back to queued, saying why.
    Audited once per reason."""
    await integrations.update_integration(conn, item.id, {"status": QUEUED, "waiting": why})
    if item.waiting != why:
        after = {"status": QUEUED, "waiting": why}
        audit = audit_row(
            INTEGRATOR, AuditAction.INTEGRATION_WAITING, EntityKind.RUN, item.run_id, None, after, trace_id
        )
        await queries.insert_audit(conn, [audit])
