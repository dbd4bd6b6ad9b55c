"""Every statement the services run, one function each, named for what it does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, RowMapping, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t
from server.db.records import Artifact, EvidencePack, ReviewDecision, Run, Task
from server.vocab import TASK_OPEN, ReviewState, RunStatus

Values = Mapping[str, Any]


_INSERT_AUDIT = insert(t.audit_log)


async def insert_audit(conn: AsyncConnection, rows: Sequence[Values]) -> None:
    """One prebuilt statement for every audit write (compiled once, cached). The id orders the log;
    `ts` is informational, so it is the server's clock, taken once for the whole change."""
    if rows:
        await conn.execute(_INSERT_AUDIT, stamped(rows))


def stamped(rows: Sequence[Values]) -> list[dict[str, Any]]:
    """Audit rows with `ts`: the server's clock, taken once for the whole change."""
    now = datetime.now(UTC)
    return [{**row, "ts": now} for row in rows]


# --- tasks -------------------------------------------------------------------------------


async def get_task(conn: AsyncConnection, task_id: str) -> Task | None:
    return Task.maybe((await conn.execute(select(t.tasks).where(t.tasks.c.id == task_id))).mappings().first())


async def get_task_by_idempotency_key(conn: AsyncConnection, scope: str, key: str) -> Task | None:
    query = select(t.tasks).where(t.tasks.c.idempotency_scope == scope, t.tasks.c.idempotency_key == key)
    return Task.maybe((await conn.execute(query)).mappings().first())


@dataclass
class TaskBundle:
    """The rows one task is stored as: the task, its issue, first context packet and constraints, the audit."""

    task: dict[str, Any]
    issue: dict[str, Any] | None
    packet: dict[str, Any] | None
    snapshot: dict[str, Any] | None
    audit: list[dict[str, Any]]


async def insert_task_bundle(conn: AsyncConnection, bundle: TaskBundle) -> bool:
    """Insert a task with its issue, first context packet and constraints. False if the idempotency key won a race."""
    try:
        async with conn.begin_nested():
            await insert_task_bundles(conn, [bundle])
    except IntegrityError:
        if bundle.task.get("idempotency_key") is None:
            raise
        return False
    return True


async def insert_task_bundles(conn: AsyncConnection, bundles: Sequence[TaskBundle]) -> None:
    """Many tasks at once (a mission's): one multi-row INSERT per table, parents first."""
    for table, rows in (
        (t.issues, [b.issue for b in bundles if b.issue is not None]),
        (t.context_packets, [b.packet for b in bundles if b.packet is not None]),
        (t.constraint_snapshots, [b.snapshot for b in bundles if b.snapshot is not None]),
        (t.tasks, [b.task for b in bundles]),
    ):
        if rows:
            await conn.execute(insert(table).values(rows))
    await insert_audit(conn, [row for b in bundles for row in b.audit])


async def update_task(
    conn: AsyncConnection, task_id: str, values: Values, *, status_in: Sequence[str] | None = None
) -> Task | None:
    """Update one task, optionally only from the given statuses; returns the new row, or None if nothing matched."""
    stmt = update(t.tasks).where(t.tasks.c.id == task_id)
    if status_in is not None:
        stmt = stmt.where(t.tasks.c.status.in_(status_in))
    return Task.maybe((await conn.execute(stmt.values(values).returning(t.tasks))).mappings().first())


async def cancel_task_row(
    conn: AsyncConnection, task_id: str, values: Values, *, known_runs: Sequence[str]
) -> Task | None:
    """Cancel a queued, blocked or running task, but only if its active run (if any) is one already cancelled."""
    stmt = update(t.tasks).where(
        t.tasks.c.id == task_id,
        t.tasks.c.status.in_(TASK_OPEN),
        or_(t.tasks.c.active_run_id.is_(None), t.tasks.c.active_run_id.in_(list(known_runs))),
    )
    return Task.maybe((await conn.execute(stmt.values(values).returning(t.tasks))).mappings().first())


async def get_issue(conn: AsyncConnection, issue_id: str) -> RowMapping | None:
    return (await conn.execute(select(t.issues).where(t.issues.c.id == issue_id))).mappings().first()


async def update_issue(conn: AsyncConnection, issue_id: str, values: Values) -> RowMapping | None:
    stmt = update(t.issues).where(t.issues.c.id == issue_id).values(values).returning(t.issues)
    row: RowMapping | None = (await conn.execute(stmt)).mappings().first()
    return row


async def latest_context_packet(conn: AsyncConnection, issue_id: str) -> RowMapping | None:
    query = (
        select(t.context_packets)
        .where(t.context_packets.c.issue_id == issue_id)
        .order_by(t.context_packets.c.version.desc())
        .limit(1)
    )
    return (await conn.execute(query)).mappings().first()


async def insert_context_packet(conn: AsyncConnection, values: Values) -> None:
    await conn.execute(insert(t.context_packets).values(values))


async def get_constraint_snapshot(conn: AsyncConnection, snapshot_id: str) -> RowMapping | None:
    query = select(t.constraint_snapshots).where(t.constraint_snapshots.c.id == snapshot_id)
    return (await conn.execute(query)).mappings().first()


async def upsert_doctrine(conn: AsyncConnection, values: Values) -> str:
    query = select(t.doctrine_refs.c.id).where(
        t.doctrine_refs.c.namespace == values["namespace"], t.doctrine_refs.c.name == values["name"]
    )
    existing: str | None = (await conn.execute(query)).scalar()
    if existing is not None:
        await conn.execute(update(t.doctrine_refs).where(t.doctrine_refs.c.id == existing).values(body=values["body"]))
        return existing
    await conn.execute(insert(t.doctrine_refs).values(values))
    return str(values["id"])


async def link_doctrine(conn: AsyncConnection, issue_id: str, doctrine_id: str) -> None:
    query = select(t.issue_doctrine).where(
        t.issue_doctrine.c.issue_id == issue_id, t.issue_doctrine.c.doctrine_id == doctrine_id
    )
    if (await conn.execute(query)).first() is None:
        await conn.execute(insert(t.issue_doctrine).values(issue_id=issue_id, doctrine_id=doctrine_id))


# --- runs --------------------------------------------------------------------------------


async def get_run(conn: AsyncConnection, run_id: str) -> Run | None:
    return Run.maybe((await conn.execute(select(t.runs).where(t.runs.c.id == run_id))).mappings().first())


async def update_run_columns(conn: AsyncConnection, run_id: str, values: Values) -> None:
    """Columns of a run that say nothing of its status (its base commit and workspace, set at claim)."""
    await conn.execute(update(t.runs).where(t.runs.c.id == run_id).values(values))


async def run_statuses(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, str]:
    if not run_ids:
        return {}
    query = select(t.runs.c.id, t.runs.c.status).where(t.runs.c.id.in_(list(run_ids)))
    return {row[0]: row[1] for row in (await conn.execute(query)).all()}


async def runs_of_task(conn: AsyncConnection, task_id: str, limit: int) -> list[Run]:
    query = select(t.runs).where(t.runs.c.task_id == task_id).order_by(t.runs.c.started_at.desc()).limit(limit)
    return [Run.of(row) for row in (await conn.execute(query)).mappings().all()]


async def count_running_claims(conn: AsyncConnection, actor_id: str) -> int:
    query = (
        select(func.count())
        .select_from(t.runs)
        .where(t.runs.c.actor_id == actor_id, t.runs.c.status == RunStatus.RUNNING)
    )
    return int((await conn.execute(query)).scalar_one())


async def lock_principal(conn: AsyncConnection, actor_id: str) -> None:
    """PostgreSQL: serialise one principal's claims until commit, so its claim cap holds exactly.
    (SQLite's BEGIN IMMEDIATE already serialises every write.)"""
    await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(actor_id))))


async def cancel_running_runs(conn: AsyncConnection, task_id: str, now: ColumnElement[datetime]) -> list[str]:
    stmt = (
        update(t.runs)
        .where(t.runs.c.task_id == task_id, t.runs.c.status == RunStatus.RUNNING)
        .values(status=RunStatus.CANCELLED, ended_at=now)
        .returning(t.runs.c.id)
    )
    return [str(run_id) for run_id in (await conn.execute(stmt)).scalars().all()]


async def update_run(conn: AsyncConnection, run_id: str, values: Values, *, status_in: Sequence[str]) -> bool:
    stmt = update(t.runs).where(t.runs.c.id == run_id, t.runs.c.status.in_(status_in)).values(values)
    return (await conn.execute(stmt)).rowcount == 1


async def insert_run_event(conn: AsyncConnection, values: Values) -> int:
    event_id: int = (await conn.execute(insert(t.run_events).values(values).returning(t.run_events.c.id))).scalar_one()
    return event_id


async def run_events(conn: AsyncConnection, run_id: str, limit: int) -> Sequence[RowMapping]:
    query = select(t.run_events).where(t.run_events.c.run_id == run_id).order_by(t.run_events.c.id.desc()).limit(limit)
    return list(reversed((await conn.execute(query)).mappings().all()))


async def expired_running_runs(conn: AsyncConnection, now: ColumnElement[datetime], limit: int) -> Sequence[str]:
    query = (
        select(t.runs.c.id)
        .where(t.runs.c.status == RunStatus.RUNNING, t.runs.c.lease_expires_at <= now)
        .order_by(t.runs.c.lease_expires_at)
        .limit(limit)
    )
    return [str(run_id) for run_id in (await conn.execute(query)).scalars().all()]


async def count_expired_leases(conn: AsyncConnection, now: ColumnElement[datetime]) -> int:
    query = select(func.count()).where(t.runs.c.status == RunStatus.RUNNING, t.runs.c.lease_expires_at <= now)
    return int((await conn.execute(query.select_from(t.runs))).scalar_one())


# --- artifacts and evidence --------------------------------------------------------------


async def get_artifact(conn: AsyncConnection, artifact_id: str) -> Artifact | None:
    query = select(t.artifacts).where(t.artifacts.c.id == artifact_id)
    return Artifact.maybe((await conn.execute(query)).mappings().first())


async def artifacts_of_run(conn: AsyncConnection, run_id: str) -> list[Artifact]:
    query = select(t.artifacts).where(t.artifacts.c.run_id == run_id).order_by(t.artifacts.c.created_at)
    return [Artifact.of(row) for row in (await conn.execute(query)).mappings()]


async def get_evidence_pack(conn: AsyncConnection, pack_id: str) -> EvidencePack | None:
    query = select(t.evidence_packs).where(t.evidence_packs.c.id == pack_id)
    return EvidencePack.maybe((await conn.execute(query)).mappings().first())


async def evidence_pack_for_run(conn: AsyncConnection, run_id: str) -> EvidencePack | None:
    query = select(t.evidence_packs).where(t.evidence_packs.c.run_id == run_id)
    return EvidencePack.maybe((await conn.execute(query)).mappings().first())


async def decide_evidence_pack(conn: AsyncConnection, pack_id: str, state: str) -> bool:
    """Only a pending pack can be decided: two reviewers racing get one winner."""
    stmt = (
        update(t.evidence_packs)
        .where(t.evidence_packs.c.id == pack_id, t.evidence_packs.c.review_state == ReviewState.PENDING)
        .values(review_state=state)
    )
    return (await conn.execute(stmt)).rowcount == 1


async def override_evidence_pack(conn: AsyncConnection, pack_id: str) -> bool:
    """An admin's override turns a needs_changes decision into an approval."""
    stmt = (
        update(t.evidence_packs)
        .where(t.evidence_packs.c.id == pack_id, t.evidence_packs.c.review_state == ReviewState.NEEDS_CHANGES)
        .values(review_state=ReviewState.APPROVED)
    )
    return (await conn.execute(stmt)).rowcount == 1


async def replace_review_decision(conn: AsyncConnection, pack_id: str, values: Values) -> str:
    """The pack's one decision, replaced (an override); returns its id. The audit log keeps the first one."""
    stmt = (
        update(t.review_decisions)
        .where(t.review_decisions.c.evidence_pack_id == pack_id)
        .values(values)
        .returning(t.review_decisions.c.id)
    )
    return str((await conn.execute(stmt)).scalar_one())


async def insert_review_decision(conn: AsyncConnection, values: Values) -> None:
    await conn.execute(insert(t.review_decisions).values(values))


async def review_decision_for_pack(conn: AsyncConnection, pack_id: str) -> ReviewDecision | None:
    query = select(t.review_decisions).where(t.review_decisions.c.evidence_pack_id == pack_id)
    return ReviewDecision.maybe((await conn.execute(query)).mappings().first())


async def pending_reviews(
    conn: AsyncConnection, after: tuple[datetime, str] | None, limit: int
) -> Sequence[RowMapping]:
    ep, runs, tasks = t.evidence_packs, t.runs, t.tasks
    query = (
        select(
            ep.c.id.label("evidence_pack_id"),
            ep.c.run_id,
            ep.c.task_id,
            ep.c.issue_id,
            ep.c.verdict,
            ep.c.verdict_reason,
            ep.c.created_at,
            runs.c.summary,
            runs.c.executor,
            tasks.c.objective,
        )
        .join(runs, runs.c.id == ep.c.run_id)
        .join(tasks, tasks.c.id == ep.c.task_id)
        .where(ep.c.review_state == ReviewState.PENDING)
    )
    if after is not None:
        created_at, pack_id = after
        query = query.where(or_(ep.c.created_at > created_at, and_(ep.c.created_at == created_at, ep.c.id > pack_id)))
    query = query.order_by(ep.c.created_at, ep.c.id).limit(limit)
    return (await conn.execute(query)).mappings().all()


# --- audit -------------------------------------------------------------------------------


async def audit_trail(
    conn: AsyncConnection, entity_kind: str, entity_id: str, after_id: int | None, limit: int
) -> Sequence[RowMapping]:
    query = select(t.audit_log).where(t.audit_log.c.entity_kind == entity_kind, t.audit_log.c.entity_id == entity_id)
    if after_id is not None:
        query = query.where(t.audit_log.c.id > after_id)
    return (await conn.execute(query.order_by(t.audit_log.c.id).limit(limit))).mappings().all()
