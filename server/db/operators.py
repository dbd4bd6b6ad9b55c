"""The statements behind the operator tools: requeue and priority, agents, stuck work, audit search; each read's
rows as a typed record beside it (server/db/records.py says how)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Integer, RowMapping, Select, and_, bindparam, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.orm import aliased

from server.db import tables as t
from server.db.outcomes import spending
from server.db.records import Record, Spending
from server.db.types import UTCDateTime
from server.vocab import MissionStatus, ReviewState, RunStatus, TaskStatus


async def clock(conn: AsyncConnection, now: ColumnElement[datetime]) -> datetime:
    """The time `now` names, read once: cutoffs are computed from it and bound as values."""
    moment = (await conn.execute(select(now))).scalar_one()
    assert isinstance(moment, datetime)
    return moment


# --- agents ----------------------------------------------------------------------------------


class AgentTotals(Record, Spending):
    """An agent's runs within the window."""

    agent: str
    principal: str | None
    done: int
    failed: int
    last_started: datetime | None
    last_ended: datetime | None

    @classmethod
    def waiting(cls, agent: str) -> AgentTotals:
        """An agent that waits for its first claim: no run yet."""
        return cls(
            agent=agent,
            principal=None,
            done=0,
            failed=0,
            last_started=None,
            last_ended=None,
            tokens=0,
            cost_usd=0,
            duration_seconds=0,
        )


class HeldCount(Record):
    """How many runs an agent holds, and the latest end of their leases."""

    agent: str
    held: int
    last_lease_end: datetime | None


class HeldRun(Record):
    """A run an agent holds, with its task's objective."""

    agent: str
    run_id: str
    task_id: str
    lease_expires_at: datetime
    objective: str


async def agent_totals(conn: AsyncConnection, since: datetime, limit: int) -> list[AgentTotals]:
    """Per agent with a run started since `since` or still running: its principal, runs done and failed, last
    start and end, most recently started first. The OR is two index scans joined in a bitmap (PostgreSQL) or a
    multi-index OR (SQLite): ix_runs_started_at and ix_runs_status_lease_expires_at, never every run."""
    runs = t.runs.c
    query = (
        select(
            runs.actor_id.label("agent"),
            func.max(runs.principal).label("principal"),
            func.sum(case((runs.status.in_([RunStatus.DONE, RunStatus.UNDER_REVIEW]), 1), else_=0)).label("done"),
            func.sum(case((runs.status.in_([RunStatus.FAILED, RunStatus.EXPIRED]), 1), else_=0)).label("failed"),
            func.max(runs.started_at).label("last_started"),
            func.max(runs.ended_at).label("last_ended"),
            # What its runs in the window reported spending.
            *spending(t.runs),
        )
        .where(or_(runs.started_at >= since, runs.status == RunStatus.RUNNING))
        .group_by(runs.actor_id)
        .order_by(func.max(runs.started_at).desc())
        .limit(limit)
    )
    return [AgentTotals.of(row) for row in (await conn.execute(query)).mappings()]


async def claims_held(conn: AsyncConnection, agents: Sequence[str]) -> list[HeldCount]:
    """Per agent, how many runs it holds and the latest end of their leases (read from the runs alone)."""
    runs = t.runs.c
    query = (
        select(
            runs.actor_id.label("agent"),
            func.count().label("held"),
            func.max(runs.lease_expires_at).label("last_lease_end"),
        )
        .where(runs.status == RunStatus.RUNNING, runs.actor_id.in_(list(agents)))
        .group_by(runs.actor_id)
    )
    return [HeldCount.of(row) for row in (await conn.execute(query)).mappings()]


async def soonest_claims(conn: AsyncConnection, agents: Sequence[str], per_agent: int) -> list[HeldRun]:
    """Each agent's first `per_agent` running runs by lease end, with their task's objective: the tasks are read
    for the runs shown only."""
    runs = t.runs.c
    ranked = (
        select(
            runs.actor_id,
            runs.id,
            runs.task_id,
            runs.lease_expires_at,
            func.row_number().over(partition_by=runs.actor_id, order_by=(runs.lease_expires_at, runs.id)).label("n"),
        )
        .where(runs.status == RunStatus.RUNNING, runs.actor_id.in_(list(agents)))
        .subquery()
    )
    query = (
        select(
            ranked.c.actor_id.label("agent"),
            ranked.c.id.label("run_id"),
            ranked.c.task_id,
            ranked.c.lease_expires_at,
            t.tasks.c.objective,
        )
        .join(t.tasks, t.tasks.c.id == ranked.c.task_id)
        .where(ranked.c.n <= per_agent)
        .order_by(ranked.c.lease_expires_at, ranked.c.id)
    )
    return [HeldRun.of(row) for row in (await conn.execute(query)).mappings()]


# --- stuck work ------------------------------------------------------------------------------


class StuckTask(Record):
    """A task that needs a person, with its objective."""

    task_id: str
    objective: str


class StuckRun(StuckTask):
    """A running run that is stuck: `kind` says why (stuck_runs), `last` is its last sign of life."""

    run_id: str
    actor_id: str
    started_at: datetime
    lease_expires_at: datetime
    budget_ends_at: datetime | None
    kind: int
    last: datetime
    time_budget_seconds: int | None


class BlockedReview(StuckTask):
    """A finished run its agent flagged for a person, awaiting review."""

    run_id: str
    actor_id: str
    ended_at: datetime
    evidence_pack_id: str


class FailedDependency(StuckTask):
    """A blocked task and the dependency that ended without approval."""

    queued_at: datetime
    dependency_id: str
    dependency_status: str


async def stuck_runs(conn: AsyncConnection, now: datetime, quiet_since: datetime, limit: int) -> list[StuckRun]:
    """Running runs that are stuck, each with its kind and its last sign of life, most urgent kind first, then
    oldest run first: a lease that has passed (kind 0), a human blocker (1), a time budget that has run out
    (2, budget_ends_at), or no event since `quiet_since` (3)."""
    params = {"now": now, "quiet_since": quiet_since, "limit": limit}
    return [StuckRun.of(row) for row in (await conn.execute(_stuck_runs(), params)).mappings()]


@cache
def _stuck_runs() -> Select[Any]:
    """Built once (the dashboard asks on every page): the running runs are read from the runs alone
    (ix_runs_status_lease_expires_at), each one's newest event in one probe (ix_run_events_run_id_created_at);
    only the runs returned read their task."""
    now = bindparam("now", type_=UTCDateTime)
    runs = t.runs.c
    last_event = (
        select(func.max(t.run_events.c.created_at))
        .where(t.run_events.c.run_id == runs.id)
        .correlate(t.runs)
        .scalar_subquery()
    )
    running = (
        select(
            runs.id,
            runs.task_id,
            runs.actor_id,
            runs.started_at,
            runs.lease_expires_at,
            runs.budget_ends_at,
            runs.requires_human,
            func.coalesce(last_event, runs.started_at).label("last"),
        )
        .where(runs.status == RunStatus.RUNNING)
        .subquery()
    )
    kind = case(
        (running.c.lease_expires_at <= now, 0),
        (running.c.requires_human.is_(True), 1),
        (running.c.budget_ends_at <= now, 2),
        (running.c.last <= bindparam("quiet_since", type_=UTCDateTime), 3),
        else_=None,
    )
    judged = select(*(c for c in running.c if c.name != "requires_human"), kind.label("kind")).subquery()
    stuck = (
        select(judged)
        .where(judged.c.kind.is_not(None))
        .order_by(judged.c.kind, judged.c.started_at, judged.c.id)
        .limit(bindparam("limit", type_=Integer))
        .subquery()
    )
    return (
        select(
            stuck.c.id.label("run_id"),
            stuck.c.task_id,
            stuck.c.actor_id,
            stuck.c.started_at,
            stuck.c.lease_expires_at,
            stuck.c.budget_ends_at,
            stuck.c.kind,
            stuck.c.last,
            t.tasks.c.objective,
            t.tasks.c.time_budget_seconds,
        )
        .join(t.tasks, t.tasks.c.id == stuck.c.task_id)
        .order_by(stuck.c.kind, stuck.c.started_at, stuck.c.id)
    )


async def human_blocked_reviews(conn: AsyncConnection, limit: int) -> list[BlockedReview]:
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
    return [BlockedReview.of(row) for row in (await conn.execute(query)).mappings()]


async def failed_dependencies(conn: AsyncConnection, limit: int) -> list[FailedDependency]:
    """Blocked tasks waiting for a dependency that failed or was cancelled (each pair once). Dependencies are
    within a mission and a mission with a blocked task is active, so the walk starts from the active missions'
    tasks (ix_missions_status_created_at_id, ix_tasks_mission_id_phase), never from every blocked task."""
    dep = aliased(t.tasks)
    active = select(t.missions.c.id).where(t.missions.c.status == MissionStatus.ACTIVE)
    query = (
        select(
            t.tasks.c.id.label("task_id"),
            t.tasks.c.objective,
            t.tasks.c.queued_at,
            dep.c.id.label("dependency_id"),
            dep.c.status.label("dependency_status"),
        )
        .select_from(dep)
        .join(t.task_dependencies, t.task_dependencies.c.depends_on == dep.c.id)
        .join(t.tasks, t.tasks.c.id == t.task_dependencies.c.task_id)
        .where(
            dep.c.mission_id.in_(active),
            t.ended_badly(dep),  # ix_tasks_mission_id_ended_badly
            t.tasks.c.status == TaskStatus.BLOCKED,
        )
        .order_by(t.tasks.c.queued_at, t.tasks.c.id)
        .limit(limit)
    )
    return [FailedDependency.of(row) for row in (await conn.execute(query)).mappings()]


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
) -> list[tuple[int, datetime]]:
    """One page of an action's audit rows (id, ts), newest first, below `before_id`: read from
    ix_audit_log_action_id_ts alone."""
    log = t.audit_log.c
    query = select(log.id, log.ts).where(log.action == action)
    if before_id is not None:
        query = query.where(log.id < before_id)
    return [(id_, ts) for id_, ts in await conn.execute(query.order_by(log.id.desc()).limit(limit))]
