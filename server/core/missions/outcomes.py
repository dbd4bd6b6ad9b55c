"""How a mission ended (seed 001 complete_mission): its outcome, what each task achieved, its limitations, the
files its approved work changed, and what it cost.

A mission has ended when every task is approved (`completed`), it was cancelled (`cancelled`), or nothing of it
can move without a person. Then, with every task either approved or ended unapproved (failed past its cap,
rejected, cancelled) it is `completed_with_failures`; with tasks left that wait on a person (a failed
dependency, a spent budget, a blocker only a person lifts) it is `stalled`. Something moves by itself while a task
of it is queued (and its budget not spent), running, or done and awaiting a review no person is required for. The
outcome is derived on every read: a person who requeues a task or raises the budget sets the mission going again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results as r
from server.db import outcomes as outcome_rows
from server.db.records import FlaggedRun, JsonObject, Mission, MissionTaskRow
from server.vocab import TASK_ENDED_UNAPPROVED, MissionStatus, TaskStatus

FILES_SHOWN = 500
SUMMARY_CHARS = 2000


def outcome_of(
    mission: Mission,
    tasks: Sequence[r.MissionTask],
    humans: Sequence[FlaggedRun],
    budget_spent: bool,
) -> r.Outcome | None:
    """The mission's outcome, or None while it can still move by itself."""
    if mission.status == MissionStatus.CANCELLED:
        return "cancelled"
    if mission.status == MissionStatus.COMPLETED:
        return "completed"
    open_tasks = [task for task in tasks if not task.approved and task.status not in TASK_ENDED_UNAPPROVED]
    if not open_tasks:
        return "completed_with_failures" if tasks else None
    flagged = {run.task_id for run in humans}
    for task in open_tasks:
        if task.status == TaskStatus.QUEUED and not budget_spent:
            return None
        if task.status == TaskStatus.RUNNING and task.task_id not in flagged:
            return None
        if task.status == TaskStatus.COMPLETED and task.task_id not in flagged:
            return None  # awaiting a review (or its merge)
    # What is left is blocked, held back by the budget, or flagged for a person.
    return "stalled"


async def describe(
    conn: AsyncConnection,
    outcome: r.Outcome,
    mission: Mission,
    rows: Sequence[MissionTaskRow],
    blockers: Sequence[r.Blocker],
    spent: r.Spent,
    last_ended: datetime | None,
) -> r.MissionOutcome:
    """The outcome's page: achieved, limitations, files changed (from the approved runs' verified changes), cost
    and duration (to its end; for a mission that stopped without ending, to the end of its last run)."""
    approved = [row for row in rows if row.approved_at is not None]
    achieved = [
        r.TaskAchieved(
            task_id=row.id,
            objective=_clip(row.objective, 200),
            summary=_clip(str((row.result or {}).get("summary") or ""), SUMMARY_CHARS) or None,
        )
        for row in approved
    ]
    limitations = [
        r.TaskLimitation(
            task_id=row.id,
            kind="failed" if row.status == TaskStatus.FAILED else "cancelled",
            reason=_clip(f"{_clip(row.objective, 80)}: {row.error or row.status}", 400),
        )
        for row in rows
        if row.status in TASK_ENDED_UNAPPROVED and row.approved_at is None
    ]
    limitations += [
        r.TaskLimitation(task_id=b.task_id, kind="blocker", reason=f"{b.reason}. {b.action}")
        for b in blockers
        if b.kind not in ("failed", "cancelled")
    ]
    for task_id, reason in await outcome_rows.overrides_of(conn, mission.id):
        why = _clip(f"approved by override: {reason}", 400)
        limitations.append(r.TaskLimitation(task_id=task_id, kind="override", reason=why))
    run_ids = [str(run_id) for row in approved if (run_id := (row.result or {}).get("run_id"))]
    files, truncated = _union(await outcome_rows.files_changed_of(conn, run_ids))
    end = mission.completed_at or last_ended or datetime.now(UTC)
    return r.MissionOutcome(
        outcome=outcome,
        achieved=achieved,
        limitations=limitations,
        files_changed=files,
        files_truncated=truncated,
        spent=spent,
        duration_seconds=max(0.0, (end - mission.created_at).total_seconds()),
    )


def _union(runs: Sequence[tuple[str, JsonObject | None]]) -> tuple[list[r.MissionFile], bool]:
    """Every path the runs changed, once: lines added and removed summed, the latest status, the tasks."""
    found: dict[str, r.MissionFile] = {}
    truncated = False
    for task_id, stored in runs:
        changed = stored or {}  # JSON null
        truncated = truncated or bool(changed.get("truncated"))
        for item in changed.get("files") or []:
            path = str(item.get("path", ""))
            seen = found.get(path)
            if seen is None:
                if len(found) >= FILES_SHOWN:
                    truncated = True
                    continue
                seen = found[path] = r.MissionFile(path=path, status=str(item.get("status", "")), tasks=[])
            seen.status = str(item.get("status", seen.status))
            seen.added += int(item.get("added") or 0)
            seen.removed += int(item.get("removed") or 0)
            if task_id not in seen.tasks:
                seen.tasks.append(task_id)
    return sorted(found.values(), key=lambda f: f.path), truncated


def _clip(text: Any, limit: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
