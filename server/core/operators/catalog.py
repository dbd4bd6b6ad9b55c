"""What clients browse: the tasks resources/list walks, each with its issue and newest run, and id completions.

resources/list shows running tasks first (claim order), then every other task newest first. Both walks are
keyset walks from a `Position`, so a page costs the same wherever it is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from sqlalchemy import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from server.core import results, views
from server.core.operators.pages import RunLine, run_line
from server.core.service import Core
from server.db import listing
from server.vocab import EntityKind

RUNNING, RECENT = "running", "recent"
# Ids one completion offers, and how much of the typed value it looks at.
COMPLETIONS = 20
COMPLETION_INPUT = 200


@dataclass(frozen=True)
class Position:
    """Where a page starts: in the running walk after `running_after`, or the recent walk after `recent_after`."""

    walk: str
    running_after: tuple[str, datetime, str] | None = None
    recent_after: tuple[datetime, str] | None = None


@dataclass(frozen=True)
class Listed:
    """One task as resources/list shows it: with its issue and its newest run (that run's evidence and review)."""

    task: results.TaskSummary
    issue: results.IssueView | None
    run: RunLine | None


async def listed_tasks(core: Core, position: Position, limit: int) -> tuple[list[Listed], Position | None]:
    """Up to `limit` tasks from `position`, and where the next page starts (None: this was the last)."""
    async with core.db.read() as conn:
        tasks, following = await _walk(conn, position, limit)
        issues = await listing.issues_by_id(conn, [task["issue_id"] for task in tasks if task["issue_id"]])
        runs = await listing.latest_runs(conn, [task["id"] for task in tasks])
    listed = []
    for task in tasks:
        issue, run = issues.get(task["issue_id"]), runs.get(task["id"])
        listed.append(
            Listed(
                task=views.task_summary(task),
                issue=views.issue(issue) if issue is not None else None,
                run=run_line(run) if run is not None else None,
            )
        )
    return listed, following


async def _walk(conn: AsyncConnection, position: Position, limit: int) -> tuple[list[RowMapping], Position | None]:
    page: list[RowMapping] = []
    recent_after = position.recent_after
    if position.walk == RUNNING:
        rows = await listing.running_tasks(conn, position.running_after, limit + 1)
        if len(rows) > limit:
            last = rows[limit - 1]
            following = Position(RUNNING, running_after=(last["priority"], last["queued_at"], last["id"]))
            return list(rows[:limit]), following
        page, recent_after = list(rows), None
    room = limit - len(page)
    rows = await listing.recent_tasks(conn, recent_after, room + 1)
    page += rows[:room]
    if len(rows) <= room:
        return page, None
    if room == 0:  # the running walk filled this page exactly; the recent walk starts the next
        return page, Position(RECENT)
    last = rows[room - 1]
    return page, Position(RECENT, recent_after=(last["queued_at"], last["id"]))


# --- completions -------------------------------------------------------------------------


@dataclass(frozen=True)
class Completed:
    ids: list[str]
    has_more: bool


Completer = Callable[[AsyncConnection, str, int], Awaitable[Sequence[str]]]
# Ids by prefix, or by words of the objective or title.
_COMPLETERS: dict[EntityKind, Completer] = {
    EntityKind.TASK: listing.complete_task_ids,
    EntityKind.ISSUE: listing.complete_issue_ids,
    EntityKind.RUN: listing.complete_run_ids,
    EntityKind.EVIDENCE_PACK: listing.complete_evidence_pack_ids,
    EntityKind.ARTIFACT: listing.complete_artifact_ids,
    EntityKind.MISSION: listing.complete_mission_ids,
}


async def complete_ids(core: Core, kind: EntityKind, value: str) -> Completed:
    """Ids of `kind` that start with `value`, or whose objective or title holds every word of it."""
    return await _complete(core, _COMPLETERS[kind], value)


async def complete_pending_pack_ids(core: Core, value: str) -> Completed:
    """Like complete_ids, for evidence packs awaiting review only."""
    return await _complete(core, partial(listing.complete_evidence_pack_ids, pending_only=True), value)


async def _complete(core: Core, completer: Completer, value: str) -> Completed:
    async with core.db.read() as conn:
        ids = await completer(conn, value[:COMPLETION_INPUT], COMPLETIONS + 1)
    return Completed(ids=list(ids[:COMPLETIONS]), has_more=len(ids) > COMPLETIONS)
