"""A mission's statements: storing its graph, and what an approval unblocks (DESIGN section 11).

A blocked task holds two kinds of blocker, kept apart so that no task added later can unbalance them:
`blockers`, how many of its dependencies are not approved yet (a task's dependencies are fixed when it is
stored, and each is approved once), and `waits_for_phase`, true while some phase before its own has a task
not approved. It is `queued` when it has neither. An approval (`approval_steps`) marks the task approved,
takes one from `blockers` of each task that depends on it and, when it was the last task of its phase to be
approved, clears `waits_for_phase` of the later tasks whose earlier phases are now all done (read from the
phases, not counted); a task left with no blocker becomes queued, in the same transaction. A task added to a
phase that was done re-opens it (`reopen`): the later tasks that have not started wait for it again.

Every approval of a mission's task takes the mission's row first (`_MISSION_DONE`), as adding a task to the
mission does (server/core/missions/graph.py): the two serialise per mission, so what one reads of the phases
and approvals, the other has committed. The claim never looks at dependencies at all: a blocked task is
simply not `queued`.

The steps are plain SQL both dialects run as they are: through SQLAlchemy (`approve`), or on aiosqlite's
thread inside a one-hop transaction (`approve_sqlite`, server/db/changes/).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import RowMapping, bindparam, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import rawsqlite
from server.db import tables as t
from server.db.records import FlaggedRun, Mission, MissionTaskRow, Phase, PhasedTask
from server.db.types import UTCDateTime
from server.vocab import EventKind, MissionStatus, ReviewState, RunStatus, TaskStatus

Values = Mapping[str, Any]

# The approved task: approved once (a repeated approval changes nothing further).
_APPROVE = "UPDATE tasks SET approved_at = :now WHERE id = :task_id AND approved_at IS NULL RETURNING mission_id, phase"
# The mission's row, taken before anything else of its graph: one task fewer to approve; the last one
# completes it.
_MISSION_DONE = f"""
UPDATE missions SET remaining = remaining - 1,
    status = CASE WHEN remaining = 1 AND status = '{MissionStatus.ACTIVE}' THEN '{MissionStatus.COMPLETED}'
                  ELSE status END,
    completed_at = CASE WHEN remaining = 1 AND status = '{MissionStatus.ACTIVE}' THEN :now ELSE completed_at END
WHERE id = :mission_id RETURNING status, remaining"""
# One dependency fewer for each task that waits for it; the last one unblocks, unless a phase holds it back.
_UNBLOCK_DEPENDENTS = f"""
UPDATE tasks SET blockers = blockers - 1,
    status = CASE WHEN blockers = 1 AND NOT waits_for_phase AND status = '{TaskStatus.BLOCKED}'
                  THEN '{TaskStatus.QUEUED}' ELSE status END
WHERE id IN (SELECT task_id FROM task_dependencies WHERE depends_on = :task_id)
RETURNING id, status, trace_id"""
# One task fewer to approve in its phase.
_PHASE_DONE = """
UPDATE mission_phases SET remaining = remaining - 1
WHERE mission_id = :mission_id AND "index" = :phase RETURNING remaining"""
# The phase is done: the later tasks whose earlier phases are all done stop waiting.
_UNBLOCK_PHASE = f"""
UPDATE tasks SET waits_for_phase = FALSE,
    status = CASE WHEN blockers = 0 AND status = '{TaskStatus.BLOCKED}' THEN '{TaskStatus.QUEUED}' ELSE status END
WHERE mission_id = :mission_id AND phase > :phase AND waits_for_phase
  AND NOT EXISTS (SELECT 1 FROM mission_phases p
                  WHERE p.mission_id = :mission_id AND p."index" < tasks.phase AND p.remaining > 0)
RETURNING id, status, trace_id"""
# A task joined a phase: the later tasks that have not started wait for it (the queued ones go back to blocked;
# those blocked already wait for it too).
_REOPEN = f"""
UPDATE tasks SET waits_for_phase = TRUE, status = '{TaskStatus.BLOCKED}'
WHERE mission_id = :mission_id AND phase > :phase AND NOT waits_for_phase AND status = :status
RETURNING id, trace_id"""


@dataclass
class Approval:
    """What an approval changed beyond the task: the tasks it unblocked, and its mission if now completed."""

    mission_id: str | None = None
    unblocked: list[tuple[str, str]] = field(default_factory=list)  # (task id, trace id)
    mission_completed: bool = False


Step = tuple[str, dict[str, Any]]


def approval_steps(task_id: str) -> Generator[Step, list[dict[str, Any]], Approval]:
    """The approval's statements, one at a time: each yields (SQL, parameters) and is sent the rows it
    returned. `:now` is bound by the runner."""
    approval = Approval()
    approved = yield _APPROVE, {"task_id": task_id}
    if not approved or approved[0]["mission_id"] is None:
        return approval
    mission_id, phase = str(approved[0]["mission_id"]), int(approved[0]["phase"])
    approval.mission_id = mission_id
    mission = yield _MISSION_DONE, {"mission_id": mission_id}
    approval.mission_completed = bool(mission) and int(mission[0]["remaining"]) == 0
    for row in (yield _UNBLOCK_DEPENDENTS, {"task_id": task_id}):
        if row["status"] == TaskStatus.QUEUED:
            approval.unblocked.append((str(row["id"]), str(row["trace_id"])))
    left = yield _PHASE_DONE, {"mission_id": mission_id, "phase": phase}
    if left and int(left[0]["remaining"]) == 0:
        for row in (yield _UNBLOCK_PHASE, {"mission_id": mission_id, "phase": phase}):
            if row["status"] == TaskStatus.QUEUED:
                approval.unblocked.append((str(row["id"]), str(row["trace_id"])))
    return approval


async def approve(conn: AsyncConnection, task_id: str, now: datetime) -> Approval:
    """The approval's steps through SQLAlchemy (either dialect), in the caller's transaction."""
    steps = approval_steps(task_id)
    rows: list[dict[str, Any]] | None = None
    try:
        while True:
            sql, params = steps.send(rows) if rows is not None else next(steps)
            statement = text(sql).bindparams(bindparam("now", type_=UTCDateTime())) if ":now" in sql else text(sql)
            values = {**params, "now": now} if ":now" in sql else params
            rows = [dict(row) for row in (await conn.execute(statement, values)).mappings().all()]
    except StopIteration as done:
        result: Approval = done.value
        return result


def approve_sqlite(db: sqlite3.Connection, task_id: str, now: datetime) -> Approval:
    """The approval's steps in plain sqlite3, inside the caller's transaction on aiosqlite's thread."""
    steps = approval_steps(task_id)
    rows: list[dict[str, Any]] | None = None
    stamp = rawsqlite.stored_time(now)
    try:
        while True:
            sql, params = steps.send(rows) if rows is not None else next(steps)
            cursor = db.execute(sql, {**params, "now": stamp} if ":now" in sql else params)
            names = [d[0] for d in cursor.description] if cursor.description else []
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    except StopIteration as done:
        result: Approval = done.value
        return result


# --- the graph ---------------------------------------------------------------------------------


async def insert_mission(
    conn: AsyncConnection,
    mission: Values,
    phases: Sequence[Values],
    dependencies: Sequence[tuple[str, str]],
) -> bool:
    """The mission and its phases (its tasks are inserted by the caller, first); False if its idempotency key
    won a race."""
    from sqlalchemy.exc import IntegrityError

    try:
        async with conn.begin_nested():
            await conn.execute(insert(t.missions).values(dict(mission)))
            await conn.execute(insert(t.mission_phases), [dict(phase) for phase in phases])
            if dependencies:
                await conn.execute(
                    insert(t.task_dependencies), [{"task_id": a, "depends_on": b} for a, b in dependencies]
                )
    except IntegrityError:
        if mission.get("idempotency_key") is None:
            raise
        return False
    return True


async def get_mission(conn: AsyncConnection, mission_id: str, *, lock: bool = False) -> Mission | None:
    query = select(t.missions).where(t.missions.c.id == mission_id)
    if lock and conn.dialect.name != "sqlite":
        query = query.with_for_update()
    return Mission.maybe((await conn.execute(query)).mappings().first())


async def lock_running_runs(conn: AsyncConnection, mission_id: str) -> None:
    """Lock the running runs of the mission's tasks (PostgreSQL), before its row: the order a completion, a
    progress report or an approval takes them in (the fence locks the run, then the mission is taken), so
    cancelling a mission never deadlocks with them."""
    if conn.dialect.name == "sqlite":
        return  # one writer at a time
    runs, tasks = t.runs, t.tasks
    query = (
        select(runs.c.id)
        .where(
            runs.c.status == RunStatus.RUNNING,
            runs.c.task_id.in_(select(tasks.c.id).where(tasks.c.mission_id == mission_id)),
        )
        .order_by(runs.c.id)
        .with_for_update(of=runs)
    )
    await conn.execute(query)


async def set_budget(
    conn: AsyncConnection, mission_id: str, max_cost_usd: float | None, max_tokens: int | None
) -> None:
    missions = t.missions
    stmt = update(missions).where(missions.c.id == mission_id).values(max_cost_usd=max_cost_usd, max_tokens=max_tokens)
    await conn.execute(stmt)


async def set_summary(conn: AsyncConnection, mission_id: str, summary: str) -> None:
    await conn.execute(update(t.missions).where(t.missions.c.id == mission_id).values(summary=summary))


async def mission_by_idempotency_key(conn: AsyncConnection, scope: str, key: str) -> Mission | None:
    query = select(t.missions).where(t.missions.c.idempotency_scope == scope, t.missions.c.idempotency_key == key)
    return Mission.maybe((await conn.execute(query)).mappings().first())


async def phases_of(conn: AsyncConnection, mission_id: str, *, lock: bool = False) -> list[Phase]:
    """The phases in order; `lock`: held until commit (PostgreSQL), so no approval moves them meanwhile."""
    query = select(t.mission_phases).where(t.mission_phases.c.mission_id == mission_id)
    query = query.order_by(t.mission_phases.c.index)
    if lock and conn.dialect.name != "sqlite":
        query = query.with_for_update()
    return [Phase.of(row) for row in (await conn.execute(query)).mappings()]


async def dependencies_in(conn: AsyncConnection, mission_id: str, task_ids: Sequence[str]) -> list[PhasedTask]:
    """These tasks of the mission (those that are), with what decides whether a new task waits for them: their
    phase and whether they were approved. Not locked: the caller holds the mission's row, which an approval
    takes before it unblocks anything, so an approval not yet committed here unblocks the new task after."""
    if not task_ids:
        return []
    tasks = t.tasks
    query = select(tasks.c.id, tasks.c.phase, tasks.c.approved_at).where(
        tasks.c.id.in_(list(task_ids)), tasks.c.mission_id == mission_id
    )
    return [PhasedTask.of(row) for row in (await conn.execute(query)).mappings()]


async def add_phase(conn: AsyncConnection, mission_id: str, index: int, name: str) -> None:
    await conn.execute(insert(t.mission_phases).values(mission_id=mission_id, index=index, name=name, remaining=0))


async def count_in(conn: AsyncConnection, mission_id: str, phase: int) -> None:
    """One more task to approve in this phase and in the mission (a task added to a running mission)."""
    phases = t.mission_phases
    await conn.execute(
        update(phases)
        .where(phases.c.mission_id == mission_id, phases.c.index == phase)
        .values(remaining=phases.c.remaining + 1)
    )
    await conn.execute(
        update(t.missions).where(t.missions.c.id == mission_id).values(remaining=t.missions.c.remaining + 1)
    )


async def reopen(conn: AsyncConnection, mission_id: str, phase: int) -> list[tuple[str, str]]:
    """A task joins `phase`: the later tasks that have not started wait for it. The (id, trace id) of those
    that were queued."""
    params = {"mission_id": mission_id, "phase": phase}
    await conn.execute(text(_REOPEN), {**params, "status": TaskStatus.BLOCKED.value})
    rows = (await conn.execute(text(_REOPEN), {**params, "status": TaskStatus.QUEUED.value})).mappings().all()
    return [(str(row["id"]), str(row["trace_id"])) for row in rows]


async def insert_dependencies(conn: AsyncConnection, task_id: str, depends_on: Sequence[str]) -> None:
    if depends_on:
        await conn.execute(insert(t.task_dependencies), [{"task_id": task_id, "depends_on": d} for d in depends_on])


async def tasks_of(conn: AsyncConnection, mission_id: str, limit: int) -> list[MissionTaskRow]:
    tasks = t.tasks.c
    columns = (tasks[name] for name in MissionTaskRow.model_fields)
    query = (
        select(*columns)
        .where(tasks.mission_id == mission_id)
        .order_by(tasks.phase, tasks.queued_at, tasks.id)
        .limit(limit)
    )
    return [MissionTaskRow.of(row) for row in (await conn.execute(query)).mappings()]


async def dependencies_of(conn: AsyncConnection, task_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(task_id, depends_on) for these tasks."""
    deps = t.task_dependencies
    query = select(deps.c.task_id, deps.c.depends_on).where(deps.c.task_id.in_(list(task_ids)))
    return [(task_id, depends_on) for task_id, depends_on in await conn.execute(query)]


async def waiting_for(conn: AsyncConnection, task_id: str) -> Sequence[RowMapping]:
    """What a blocked task waits for: its dependencies that are not approved, with their status."""
    deps, tasks = t.task_dependencies, t.tasks
    query = (
        select(tasks.c.id, tasks.c.status, tasks.c.objective)
        .join(deps, deps.c.depends_on == tasks.c.id)
        .where(deps.c.task_id == task_id, tasks.c.approved_at.is_(None))
        .order_by(tasks.c.id)
    )
    return (await conn.execute(query)).mappings().all()


async def lock_tasks(conn: AsyncConnection, mission_id: str) -> Sequence[RowMapping]:
    """The mission's tasks, locked (PostgreSQL) for a cancellation."""
    query = select(t.tasks.c.id, t.tasks.c.status, t.tasks.c.issue_id, t.tasks.c.trace_id).where(
        t.tasks.c.mission_id == mission_id
    )
    if conn.dialect.name != "sqlite":
        query = query.with_for_update()
    return (await conn.execute(query)).mappings().all()


async def cancel(conn: AsyncConnection, mission_id: str, reason: str, now: Any) -> bool:
    stmt = (
        update(t.missions)
        .where(t.missions.c.id == mission_id, t.missions.c.status == MissionStatus.ACTIVE)
        .values(status=MissionStatus.CANCELLED, completed_at=now, error=f"cancelled: {reason}")
    )
    return (await conn.execute(stmt)).rowcount == 1


async def decisions_of(
    conn: AsyncConnection,
    mission_id: str,
    limit: int,
    since: datetime | None = None,
    agent: str | None = None,
    kind: str = EventKind.DECISION,
) -> list[dict[str, Any]]:
    """The decisions (or another kind of event) recorded in the mission, newest first, after `since` and by
    `agent` (a run's actor_id) when given: {data, message, task_id, run_id, agent, at}."""
    events, runs, tasks = t.run_events, t.runs, t.tasks
    query = (
        select(
            events.c.data,
            events.c.message,
            runs.c.task_id,
            events.c.run_id,
            runs.c.actor_id.label("agent"),
            events.c.created_at.label("at"),
        )
        .join(runs, runs.c.id == events.c.run_id)
        .join(tasks, tasks.c.id == runs.c.task_id)
        .where(tasks.c.mission_id == mission_id, events.c.kind == kind)
    )
    if since is not None:
        query = query.where(events.c.created_at > since)
    if agent is not None:
        query = query.where(runs.c.actor_id == agent)
    rows = (await conn.execute(query.order_by(events.c.id.desc()).limit(limit))).mappings().all()
    return [dict(row) for row in rows]


async def events_of(conn: AsyncConnection, mission_id: str, kinds: Sequence[str]) -> Sequence[RowMapping]:
    """The mission's events of these kinds, with the run's requires_human flag, newest first."""
    events, runs, tasks = t.run_events, t.runs, t.tasks
    query = (
        select(events, runs.c.task_id, runs.c.status.label("run_status"), runs.c.requires_human)
        .join(runs, runs.c.id == events.c.run_id)
        .join(tasks, tasks.c.id == runs.c.task_id)
        .where(tasks.c.mission_id == mission_id, events.c.kind.in_(list(kinds)))
        .order_by(events.c.id.desc())
        .limit(1000)
    )
    return (await conn.execute(query)).mappings().all()


async def human_blocked_runs(conn: AsyncConnection, mission_id: str) -> list[FlaggedRun]:
    """Runs of the mission flagged for a person, still running or awaiting review."""
    runs, tasks, packs = t.runs, t.tasks, t.evidence_packs
    query = (
        select(runs.c.id, runs.c.task_id, runs.c.status, tasks.c.objective)
        .join(tasks, tasks.c.id == runs.c.task_id)
        .outerjoin(packs, packs.c.run_id == runs.c.id)
        .where(
            tasks.c.mission_id == mission_id,
            runs.c.requires_human.is_(True),
            (runs.c.status == RunStatus.RUNNING) | (packs.c.review_state == ReviewState.PENDING),
        )
    )
    return [FlaggedRun.of(row) for row in (await conn.execute(query)).mappings()]


async def review_tally(conn: AsyncConnection, mission_id: str) -> list[tuple[str, str, int]]:
    """Per verdict and review state, how many evidence packs the mission's tasks have: (verdict, state, count)."""
    packs, tasks = t.evidence_packs, t.tasks
    query = (
        select(packs.c.verdict, packs.c.review_state, func.count().label("n"))
        .join(tasks, tasks.c.id == packs.c.task_id)
        .where(tasks.c.mission_id == mission_id)
        .group_by(packs.c.verdict, packs.c.review_state)
    )
    return [(verdict, state, n) for verdict, state, n in await conn.execute(query)]


async def list_missions(
    conn: AsyncConnection, statuses: Sequence[str], after: tuple[datetime, str] | None, limit: int
) -> list[Mission]:
    """Missions in these statuses, newest first, from the keyset position `after`."""
    missions = t.missions
    query = select(missions).where(missions.c.status.in_(list(statuses)))
    if after is not None:
        created_at, mission_id = after
        query = query.where(
            (missions.c.created_at < created_at)
            | ((missions.c.created_at == created_at) & (missions.c.id < mission_id))
        )
    query = query.order_by(missions.c.created_at.desc(), missions.c.id.desc()).limit(limit)
    return [Mission.of(row) for row in (await conn.execute(query)).mappings()]


async def task_totals(conn: AsyncConnection, mission_ids: Sequence[str]) -> dict[str, int]:
    """How many tasks each mission has."""
    if not mission_ids:
        return {}
    tasks = t.tasks
    query = (
        select(tasks.c.mission_id, func.count())
        .where(tasks.c.mission_id.in_(list(mission_ids)))
        .group_by(tasks.c.mission_id)
    )
    return {str(mission_id): int(n) for mission_id, n in (await conn.execute(query)).all()}


async def artifacts_of_dependencies(conn: AsyncConnection, task_id: str, limit: int) -> Sequence[RowMapping]:
    """What the tasks this one depends on delivered: the artifacts of their approved runs (`done`), in order,
    each with its task's id and workflow step."""
    deps, runs, art, tasks = t.task_dependencies, t.runs, t.artifacts, t.tasks
    query = (
        select(art.c.id, art.c.title, art.c.type, art.c.task_id, tasks.c.step)
        .join(deps, deps.c.depends_on == art.c.task_id)
        .join(runs, runs.c.id == art.c.run_id)
        .join(tasks, tasks.c.id == art.c.task_id)
        .where(deps.c.task_id == task_id, runs.c.status == RunStatus.DONE)
        .order_by(tasks.c.phase, art.c.task_id, art.c.created_at, art.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def steps_of(conn: AsyncConnection, task_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The workflow steps of these tasks (those that are one), by task id."""
    if not task_ids:
        return {}
    query = select(t.tasks.c.id, t.tasks.c.step).where(t.tasks.c.id.in_(list(task_ids)), t.tasks.c.step.is_not(None))
    return {str(row["id"]): row["step"] for row in (await conn.execute(query)).mappings().all() if row["step"]}
