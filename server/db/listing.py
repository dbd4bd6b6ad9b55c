"""Statements behind the listings: the queue listing, queue statistics, the resources/list walk,
briefing lookups and id completions. Each one is an index walk that stops after the rows it returns."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    RowMapping,
    Select,
    String,
    Table,
    and_,
    func,
    literal,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t
from server.db.records import ReviewedRun, Task
from server.db.types import UTCDateTime

# --- the queue listing ---------------------------------------------------------------------

# Claim order: what claim-next picks first comes first. Every listing in this order is keyset-paginated
# on the full key, compared as one row value, which both dialects use as an index range (an OR of
# column comparisons is only a filter to PostgreSQL, so a deep page would rescan all before it).
_CLAIM_ORDER = (t.tasks.c.priority, t.tasks.c.queued_at, t.tasks.c.id)


def _past(after: tuple[str, datetime, str]) -> ColumnElement[bool]:
    """Strictly after `after` (priority, queued_at, id) in claim order."""
    priority, queued_at, task_id = after
    bound = tuple_(literal(priority, String()), literal(queued_at, UTCDateTime()), literal(task_id, String()))
    return tuple_(*_CLAIM_ORDER) > bound


async def list_tasks(
    conn: AsyncConnection,
    statuses: Sequence[str],
    operation: str | None,
    after: tuple[str, datetime, str] | None,
    limit: int,
    *,
    repo: str | None = None,
    mission_id: str | None = None,
) -> Sequence[RowMapping]:
    """Tasks in any of `statuses`, in claim order, from the cursor `after`.

    Several statuses (the listing's "all") are merged from one index walk per status, each at most
    `limit` long: no index orders every task by (priority, queued_at, id) alone, and adding one would tax
    every claim and completion. A page costs the same at page 1 and page 10,000, at 1k tasks and 1M."""

    def in_claim_order(status: str) -> Select[Any]:
        """One status's tasks: ix_tasks_status_priority_queued_at_id, or with an operation
        ix_tasks_operation_status_priority_queued_at_id; an index walk from the cursor that stops at `limit`.
        A repository prefix or a mission (the dashboard's filters) is checked along the same walk."""
        tasks = t.tasks
        query = select(tasks).where(tasks.c.status == status)
        if operation is not None:
            query = query.where(tasks.c.operation == operation)
        if repo is not None:
            query = query.where(tasks.c.target_repo.startswith(repo, autoescape=True))
        if mission_id is not None:
            query = query.where(tasks.c.mission_id == mission_id)
        if after is not None:
            query = query.where(_past(after))
        return query.order_by(*_CLAIM_ORDER).limit(limit)

    query: Select[Any]
    if len(statuses) == 1:
        query = in_claim_order(statuses[0])
    else:
        walks = [in_claim_order(status).subquery() for status in statuses]
        merged = union_all(*(select(walk) for walk in walks)).subquery()
        query = select(merged).order_by(merged.c.priority, merged.c.queued_at, merged.c.id).limit(limit)
    rows: Sequence[RowMapping] = (await conn.execute(query)).mappings().all()
    return rows


# --- queue statistics ------------------------------------------------------------------------


async def counts(conn: AsyncConnection) -> tuple[dict[tuple[str, str], int], int]:
    """Every (entity, status) count the triggers keep (migration 0004), and how many delta rows were summed.

    The table holds one row per count after each fold, plus a few per change since (server/db/leases.py)."""
    deltas = t.count_deltas
    query = select(deltas.c.entity, deltas.c.status, func.sum(deltas.c.delta), func.count()).group_by(
        deltas.c.entity, deltas.c.status
    )
    found: dict[tuple[str, str], int] = {}
    rows = 0
    for entity, status, total, summed in (await conn.execute(query)).all():
        found[(str(entity), str(status))] = int(total)
        rows += int(summed)
    return found, rows


async def oldest_queued_at(conn: AsyncConnection, priorities: Sequence[str]) -> datetime | None:
    """When the longest-waiting queued task was queued: the first entry of each priority's run in
    ix_tasks_status_priority_queued_at_id (one index probe per priority, in one statement).

    `ORDER BY queued_at` over all queued tasks would walk every queued task's entry in that index, or
    ix_tasks_queued_at_id past every finished task older than the oldest queued one."""
    tasks = t.tasks
    firsts = [
        select(tasks.c.queued_at)
        .where(tasks.c.status == "queued", tasks.c.priority == priority)
        .order_by(tasks.c.queued_at)
        .limit(1)
        .scalar_subquery()
        for priority in priorities
    ]
    if not firsts:
        return None
    row = (await conn.execute(select(*firsts))).one()
    found = [value for value in row if value is not None]
    return min(found) if found else None


# --- the resources/list walk -------------------------------------------------------------


async def running_tasks(
    conn: AsyncConnection, after: tuple[str, datetime, str] | None, limit: int
) -> Sequence[RowMapping]:
    """Running tasks in claim order (priority, age, id): ix_tasks_status_priority_queued_at_id serves it."""
    tasks = t.tasks
    query = select(tasks).where(tasks.c.status == "running")
    if after is not None:
        query = query.where(_past(after))
    query = query.order_by(*_CLAIM_ORDER).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def recent_tasks(conn: AsyncConnection, after: tuple[datetime, str] | None, limit: int) -> Sequence[RowMapping]:
    """Every task that is not running, newest first (queued_at never changes, so the keyset is stable).
    A backward walk of ix_tasks_queued_at_id; the row-value bound is an index condition, not a filter."""
    tasks = t.tasks
    query = select(tasks).where(tasks.c.status != "running")
    if after is not None:
        queued_at, task_id = after
        query = query.where(
            tuple_(tasks.c.queued_at, tasks.c.id)
            < tuple_(literal(queued_at, UTCDateTime()), literal(task_id, String()))
        )
    query = query.order_by(tasks.c.queued_at.desc(), tasks.c.id.desc()).limit(limit)
    return (await conn.execute(query)).mappings().all()


async def issues_by_id(conn: AsyncConnection, issue_ids: Sequence[str]) -> dict[str, RowMapping]:
    if not issue_ids:
        return {}
    rows = (await conn.execute(select(t.issues).where(t.issues.c.id.in_(list(issue_ids))))).mappings().all()
    return {row["id"]: row for row in rows}


def _run_number() -> ColumnElement[int]:
    """A run's place among its task's runs, oldest first: run 1, run 2, ... (`attempt` counts penalties)."""
    runs = t.runs
    number: ColumnElement[int] = func.row_number().over(
        partition_by=runs.c.task_id, order_by=(runs.c.started_at, runs.c.id)
    )
    return number


def _runs_with_review(number: ColumnElement[int]) -> Select[Any]:
    """Runs with their number, evidence pack and review decision (if any), flattened into one row."""
    runs, packs, decisions = t.runs, t.evidence_packs, t.review_decisions
    return (
        select(
            number.label("number"),
            runs.c.id,
            runs.c.task_id,
            runs.c.status,
            runs.c.attempt,
            runs.c.executor,
            runs.c.started_at,
            runs.c.ended_at,
            runs.c.lease_expires_at,
            packs.c.id.label("evidence_pack_id"),
            packs.c.verdict,
            packs.c.verdict_reason,
            packs.c.review_state,
            decisions.c.decision,
            decisions.c.reason.label("decision_reason"),
            decisions.c.reviewer,
        )
        .select_from(runs)
        .outerjoin(packs, packs.c.run_id == runs.c.id)
        .outerjoin(decisions, decisions.c.evidence_pack_id == packs.c.id)
    )


async def latest_runs(conn: AsyncConnection, task_ids: Sequence[str]) -> dict[str, ReviewedRun]:
    """Each task's newest run, with its evidence and review: one row per task that has run at all."""
    if not task_ids:
        return {}
    runs = t.runs
    rank = (
        func.row_number()
        .over(partition_by=runs.c.task_id, order_by=(runs.c.started_at.desc(), runs.c.id.desc()))
        .label("rank")
    )
    count = func.count().over(partition_by=runs.c.task_id).label("count")
    newest = select(runs.c.id, rank, count).where(runs.c.task_id.in_(list(task_ids))).subquery()
    query = _runs_with_review(newest.c.count).join(newest, and_(newest.c.id == runs.c.id, newest.c.rank == 1))
    rows = [ReviewedRun.of(row) for row in (await conn.execute(query)).mappings()]
    return {row.task_id: row for row in rows}


async def runs_of_tasks(conn: AsyncConnection, task_ids: Sequence[str], limit: int) -> list[ReviewedRun]:
    """The tasks' runs, newest first, with evidence and review decision."""
    if not task_ids:
        return []
    runs = t.runs
    query = (
        _runs_with_review(_run_number())
        .where(runs.c.task_id.in_(list(task_ids)))
        .order_by(runs.c.started_at.desc(), runs.c.id.desc())
        .limit(limit)
    )
    return [ReviewedRun.of(row) for row in (await conn.execute(query)).mappings()]


async def run_number(conn: AsyncConnection, task_id: str, started_at: datetime, run_id: str) -> int:
    """How many of the task's runs started up to and including this one."""
    runs = t.runs
    query = (
        select(func.count())
        .select_from(runs)
        .where(
            runs.c.task_id == task_id,
            or_(runs.c.started_at < started_at, and_(runs.c.started_at == started_at, runs.c.id <= run_id)),
        )
    )
    return int((await conn.execute(query)).scalar_one())


# --- briefings -----------------------------------------------------------------------------


async def tasks_of_issue(conn: AsyncConnection, issue_id: str, limit: int) -> list[Task]:
    """An issue's tasks, newest first (ix_tasks_issue_id)."""
    tasks = t.tasks
    query = (
        select(tasks)
        .where(tasks.c.issue_id == issue_id)
        .order_by(tasks.c.queued_at.desc(), tasks.c.id.desc())
        .limit(limit)
    )
    return [Task.of(row) for row in (await conn.execute(query)).mappings()]


async def feedback_of_issue(conn: AsyncConnection, issue_id: str, limit: int) -> list[list[Any]]:
    """The review_feedback lists of the newest `limit` briefing versions, oldest first
    (uq_context_packets_issue_id_version).

    Each version normally carries all feedback so far; reading every version also keeps feedback a
    version dropped."""
    packets = t.context_packets
    query = (
        select(packets.c.review_feedback)
        .where(packets.c.issue_id == issue_id)
        .order_by(packets.c.version.desc())
        .limit(limit)
    )
    return [feedback or [] for (feedback,) in reversed((await conn.execute(query)).all())]


# --- completions ---------------------------------------------------------------------------


def _matches(id_column: ColumnElement[str], texts: Sequence[ColumnElement[str]], value: str) -> ColumnElement[bool]:
    """An id starting with `value`, or every word of `value` in one of the texts (case-insensitive)."""
    value = value.strip()
    by_id = id_column.startswith(value.lower(), autoescape=True)
    words = value.lower().split()
    if not words:
        return by_id
    by_words = and_(*(or_(*(func.lower(text).contains(word, autoescape=True) for text in texts)) for word in words))
    return or_(by_id, by_words)


async def _newest_ids(
    conn: AsyncConnection,
    table: Table,
    newest: ColumnElement[Any],
    texts: Sequence[ColumnElement[str]],
    value: str,
    limit: int,
    *conditions: ColumnElement[bool],
) -> Sequence[str]:
    """Ids of `table` matching `value` (`_matches`), newest first; a table with a task_id may search its
    task's objective (joined as t.tasks)."""
    query = select(table.c.id)
    if table is not t.tasks and "task_id" in table.c:
        query = query.join(t.tasks, t.tasks.c.id == table.c.task_id)
    query = query.where(*conditions).order_by(newest.desc(), table.c.id.desc()).limit(limit)
    if value.strip():
        query = query.where(_matches(table.c.id, texts, value))
    return [str(row) for row in (await conn.execute(query)).scalars().all()]


async def complete_task_ids(conn: AsyncConnection, value: str, limit: int) -> Sequence[str]:
    tasks = t.tasks
    return await _newest_ids(conn, tasks, tasks.c.queued_at, [tasks.c.objective], value, limit)


async def complete_issue_ids(conn: AsyncConnection, value: str, limit: int) -> Sequence[str]:
    issues = t.issues
    return await _newest_ids(conn, issues, issues.c.created_at, [issues.c.title], value, limit)


async def complete_run_ids(conn: AsyncConnection, value: str, limit: int) -> Sequence[str]:
    runs = t.runs
    return await _newest_ids(conn, runs, runs.c.started_at, [t.tasks.c.objective], value, limit)


async def complete_evidence_pack_ids(
    conn: AsyncConnection, value: str, limit: int, *, pending_only: bool = False
) -> Sequence[str]:
    packs = t.evidence_packs
    pending = [packs.c.review_state == "pending"] if pending_only else []
    return await _newest_ids(conn, packs, packs.c.created_at, [t.tasks.c.objective], value, limit, *pending)


async def complete_artifact_ids(conn: AsyncConnection, value: str, limit: int) -> Sequence[str]:
    artifacts = t.artifacts
    texts = [artifacts.c.title, t.tasks.c.objective]
    return await _newest_ids(conn, artifacts, artifacts.c.created_at, texts, value, limit)


async def complete_mission_ids(conn: AsyncConnection, value: str, limit: int) -> Sequence[str]:
    missions = t.missions
    return await _newest_ids(conn, missions, missions.c.created_at, [missions.c.title], value, limit)
