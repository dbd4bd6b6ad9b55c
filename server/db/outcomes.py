"""A mission's costs and outcome (DESIGN section 17, seed 001 complete_mission): what its runs and a task's
reported spending, summed in SQL; the missions whose budget is spent; the files its runs changed and the review
overrides it saw."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t
from server.db.records import Budgeted, JsonObject, Record, Spending
from server.vocab import MissionStatus, TaskStatus


def spending(runs: Any) -> list[Any]:
    """The columns of a `Spending`: the runs' reported tokens, cost and duration summed (server/core/telemetry.py
    run_columns), zero for none."""
    return [
        func.coalesce(func.sum(runs.c.tokens), 0).label("tokens"),
        func.coalesce(func.sum(runs.c.cost_usd), 0).label("cost_usd"),
        func.coalesce(func.sum(runs.c.duration_seconds), 0).label("duration_seconds"),
    ]


class MissionSpending(Record, Spending):
    last_ended: datetime | None  # when the last of its runs ended


async def spent_of(conn: AsyncConnection, mission_id: str) -> MissionSpending:
    """What the mission's runs reported spending, summed in SQL, and when the last of them ended."""
    runs, tasks = t.runs, t.tasks
    query = (
        select(*spending(runs), func.max(runs.c.ended_at).label("last_ended"))
        .select_from(runs)
        .join(tasks, tasks.c.id == runs.c.task_id)
        .where(tasks.c.mission_id == mission_id)
    )
    return MissionSpending.of((await conn.execute(query)).mappings().one())


async def spent_of_task(conn: AsyncConnection, task_id: str) -> Spending:
    """What the task's runs reported spending, summed in SQL (ix_runs_task_id_actor_id)."""
    query = select(*spending(t.runs)).where(t.runs.c.task_id == task_id)
    return Spending.of((await conn.execute(query)).mappings().one())


async def files_changed_of(conn: AsyncConnection, run_ids: Sequence[str]) -> list[tuple[str, JsonObject | None]]:
    """The verified changes (files_changed) of these runs, those that have them: (task_id, files_changed)."""
    if not run_ids:
        return []
    runs = t.runs
    query = (
        select(runs.c.task_id, runs.c.files_changed)
        .where(runs.c.id.in_(list(run_ids)), runs.c.files_changed.is_not(None))
        .order_by(runs.c.ended_at, runs.c.id)
    )
    return [(task_id, changed) for task_id, changed in await conn.execute(query)]


# The review decisions that passed a gate by an admin's override (server/core/review/reviews.py).
OVERRIDES = ("review.overridden", "review.submitted")


async def overrides_of(conn: AsyncConnection, mission_id: str) -> list[tuple[str, str]]:
    """Reviews of the mission's work made by an override (a gate out of rounds, or its reviewer rule): the audit
    rows of its evidence packs (ix_audit_log_entity_kind_entity_id_id) whose `after` names an override_reason,
    as (task_id, override_reason)."""
    packs, tasks, log = t.evidence_packs, t.tasks, t.audit_log
    query = (
        select(packs.c.task_id, log.c.after)
        .select_from(tasks)
        .join(packs, packs.c.task_id == tasks.c.id)
        .join(log, (log.c.entity_kind == "EvidencePack") & (log.c.entity_id == packs.c.id))
        .where(tasks.c.mission_id == mission_id, log.c.action.in_(OVERRIDES))
        .order_by(log.c.id)
    )
    return [
        (task_id, str(after["override_reason"]))
        for task_id, after in await conn.execute(query)
        if isinstance(after, dict) and after.get("override_reason")
    ]


class SpentMission(Record, Budgeted):
    """An active mission whose budget is spent while tasks of its wait, with the first of them."""

    id: str
    waiting: int
    first_task_id: str
    objective: str
    queued_at: datetime


async def spent_missions(conn: AsyncConnection, limit: int) -> list[SpentMission]:
    """Active missions whose budget is spent while tasks of theirs are queued: each with its first queued task in
    claim order and how many wait. Walks the active missions (ix_missions_status_created_at_id) only."""
    missions, tasks = t.missions, t.tasks
    spent = (missions.c.spent_cost_usd >= missions.c.max_cost_usd) | (missions.c.spent_tokens >= missions.c.max_tokens)
    waiting = (
        select(func.count())
        .where(tasks.c.mission_id == missions.c.id, tasks.c.status == TaskStatus.QUEUED)
        .scalar_subquery()
    )
    first = (
        select(tasks.c.id)
        .where(tasks.c.mission_id == missions.c.id, tasks.c.status == TaskStatus.QUEUED)
        .order_by(tasks.c.priority, tasks.c.queued_at, tasks.c.id)
        .limit(1)
        .scalar_subquery()
    )
    found = (
        select(missions, waiting.label("waiting"), first.label("first_task_id"))
        .where(missions.c.status == MissionStatus.ACTIVE, spent)
        .subquery()
    )
    query = (
        select(found, tasks.c.objective, tasks.c.queued_at)
        .join(tasks, tasks.c.id == found.c.first_task_id)
        .order_by(found.c.created_at, found.c.id)
        .limit(limit)
    )
    return [SpentMission.of(row) for row in (await conn.execute(query)).mappings()]
