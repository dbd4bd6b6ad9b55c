"""The statements behind the operator tools: requeue and priority, agents, stuck work, audit search."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import ColumnElement, RowMapping, and_, case, func, select, union
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from server.db import tables as t
from server.vocab import ReviewState, RunStatus, TaskStatus


async def clock(conn: AsyncConnection, now: ColumnElement[datetime]) -> datetime:
    """The time `now` names, read once: cutoffs are computed from it and bound as values."""
    moment = (await conn.execute(select(now))).scalar_one()
    assert isinstance(moment, datetime)
    return moment


# --- agents ----------------------------------------------------------------------------------


async def agent_totals(conn: AsyncConnection, since: datetime, limit: int) -> Sequence[RowMapping]:
    """Per agent with a run started since `since` or still running: its principal, runs done and failed, last
    start and end, most recently started first (ix_runs_started_at, ix_runs_status_lease_expires_at)."""
    runs = t.runs.c
    # Two index walks (ix_runs_started_at, ix_runs_status_lease_expires_at) rather than an OR, which would
    # read every run ever made.
    recent = union(
        select(runs.id).where(runs.started_at >= since), select(runs.id).where(runs.status == RunStatus.RUNNING)
    ).subquery()
    query = (
        select(
            runs.actor_id.label("agent"),
            func.max(runs.principal).label("principal"),
            func.sum(case((runs.status.in_([RunStatus.DONE, RunStatus.UNDER_REVIEW]), 1), else_=0)).label("done"),
            func.sum(case((runs.status.in_([RunStatus.FAILED, RunStatus.EXPIRED]), 1), else_=0)).label("failed"),
            func.max(runs.started_at).label("last_started"),
            func.max(runs.ended_at).label("last_ended"),
        )
        .where(runs.id.in_(select(recent.c.id)))
        .group_by(runs.actor_id)
        .order_by(func.max(runs.started_at).desc())
        .limit(limit)
    )
    rows: Sequence[RowMapping] = (await conn.execute(query)).mappings().all()
    return rows


async def running_claims(conn: AsyncConnection, agents: Sequence[str]) -> Sequence[RowMapping]:
    """The running runs of these agents, with their task's objective, soonest lease end first."""
    query = (
        select(
            t.runs.c.actor_id.label("agent"),
            t.runs.c.id.label("run_id"),
            t.runs.c.task_id,
            t.runs.c.lease_expires_at,
            t.runs.c.started_at,
            t.tasks.c.objective,
        )
        .join(t.tasks, t.tasks.c.id == t.runs.c.task_id)
        .where(t.runs.c.status == RunStatus.RUNNING, t.runs.c.actor_id.in_(list(agents)))
        .order_by(t.runs.c.lease_expires_at)
    )
    return (await conn.execute(query)).mappings().all()


# --- stuck work ------------------------------------------------------------------------------


async def running_runs(conn: AsyncConnection, limit: int) -> Sequence[RowMapping]:
    """Running runs with their task's budget and the time of their newest progress event, oldest first."""
    # Per running run, its newest event (ix_run_events_run_id): never a pass over every event.
    last_event = (
        select(func.max(t.run_events.c.created_at))
        .where(t.run_events.c.run_id == t.runs.c.id)
        .correlate(t.runs)
        .scalar_subquery()
        .label("last_event")
    )
    query = (
        select(
            t.runs.c.id.label("run_id"),
            t.runs.c.task_id,
            t.runs.c.actor_id,
            t.runs.c.started_at,
            t.runs.c.lease_expires_at,
            t.runs.c.requires_human,
            t.tasks.c.objective,
            t.tasks.c.time_budget_seconds,
            last_event,
        )
        .join(t.tasks, t.tasks.c.id == t.runs.c.task_id)
        .where(t.runs.c.status == RunStatus.RUNNING)
        .order_by(t.runs.c.started_at, t.runs.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def human_blocked_reviews(conn: AsyncConnection, limit: int) -> Sequence[RowMapping]:
    """Runs an agent flagged as needing a person, finished and awaiting review: a walk of the pending packs
    (ix_evidence_packs_review_state_created_at), never of every run."""
    packs = t.evidence_packs
    query = (
        select(
            t.runs.c.id.label("run_id"),
            t.runs.c.task_id,
            t.runs.c.actor_id,
            t.runs.c.ended_at,
            t.tasks.c.objective,
            packs.c.id.label("evidence_pack_id"),
        )
        .select_from(packs)
        .join(t.runs, t.runs.c.id == packs.c.run_id)
        .join(t.tasks, t.tasks.c.id == t.runs.c.task_id)
        .where(packs.c.review_state == ReviewState.PENDING, t.runs.c.requires_human.is_(True))
        .order_by(packs.c.review_state, packs.c.created_at)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


async def failed_dependencies(conn: AsyncConnection, limit: int) -> Sequence[RowMapping]:
    """Blocked tasks waiting for a dependency that failed or was cancelled (each pair once)."""
    dep = aliased(t.tasks)
    query = (
        select(
            t.tasks.c.id.label("task_id"),
            t.tasks.c.objective,
            t.tasks.c.queued_at,
            dep.c.id.label("dependency_id"),
            dep.c.status.label("dependency_status"),
        )
        .join(t.task_dependencies, t.task_dependencies.c.task_id == t.tasks.c.id)
        .join(dep, dep.c.id == t.task_dependencies.c.depends_on)
        .where(
            t.tasks.c.status == TaskStatus.BLOCKED,
            dep.c.status.in_([TaskStatus.FAILED, TaskStatus.CANCELLED]),
        )
        .order_by(t.tasks.c.queued_at, t.tasks.c.id)
        .limit(limit)
    )
    return (await conn.execute(query)).mappings().all()


# --- audit search ----------------------------------------------------------------------------


async def search_audit(
    conn: AsyncConnection,
    *,
    actor_id: str | None,
    action: str | None,
    entity_kind: str | None,
    since: datetime | None,
    until: datetime | None,
    before_id: int | None,
    limit: int,
) -> Sequence[RowMapping]:
    """Audit rows matching every filter given, newest first, below `before_id` (the keyset)."""
    log = t.audit_log.c
    conditions = []
    if actor_id is not None:
        conditions.append(log.actor_id == actor_id)
    if action is not None:
        conditions.append(log.action == action)
    if entity_kind is not None:
        conditions.append(log.entity_kind == entity_kind)
    if since is not None:
        conditions.append(log.ts >= since)
    if until is not None:
        conditions.append(log.ts < until)
    if before_id is not None:
        conditions.append(log.id < before_id)
    query = select(t.audit_log).where(and_(True, *conditions)).order_by(log.id.desc()).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def recent_of_action(
    conn: AsyncConnection, action: str, before_id: int | None, limit: int
) -> Sequence[RowMapping]:
    """One page of an action's audit rows (id, ts), newest first, below `before_id` (ix_audit_log_action_id)."""
    log = t.audit_log.c
    query = select(log.id, log.ts).where(log.action == action)
    if before_id is not None:
        query = query.where(log.id < before_id)
    return (await conn.execute(query.order_by(log.id.desc()).limit(limit))).mappings().all()
