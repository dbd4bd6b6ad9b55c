"""The lease sweeper's statements. Safe in several processes at once: a run is handled by whoever's
guarded UPDATE matches it; the others match nothing and move on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, RowMapping, case, delete, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t


async def expire_run(conn: AsyncConnection, run_id: str, now: ColumnElement[datetime]) -> RowMapping | None:
    stmt = (
        update(t.runs)
        .where(t.runs.c.id == run_id, t.runs.c.status == "running", t.runs.c.lease_expires_at <= now)
        .values(status="expired", ended_at=now, failure={"reason": "lease expired"})
        .returning(t.runs.c.id, t.runs.c.task_id, t.runs.c.issue_id, t.runs.c.actor_id)
    )
    return (await conn.execute(stmt)).mappings().first()


async def requeue_or_fail(conn: AsyncConnection, task_id: str, run_id: str) -> RowMapping | None:
    """One more penalised attempt: back to the queue, or failed once attempts reach max_attempts."""
    exhausted = t.tasks.c.attempts + 1 >= t.tasks.c.max_attempts
    stmt = (
        update(t.tasks)
        .where(t.tasks.c.id == task_id, t.tasks.c.active_run_id == run_id, t.tasks.c.status == "running")
        .values(
            attempts=t.tasks.c.attempts + 1,
            status=case((exhausted, "failed"), else_="queued"),
            error=case((exhausted, "lease expired on the last attempt"), else_=t.tasks.c.error),
            active_run_id=None,
            claimed_at=None,
        )
        .returning(t.tasks.c.status, t.tasks.c.attempts, t.tasks.c.trace_id, t.tasks.c.issue_id)
    )
    return (await conn.execute(stmt)).mappings().first()


# The PostgreSQL fold: a DELETE sees (and locks) only rows committed before it started; delta rows that
# triggers insert meanwhile are not deleted and stay to be counted. The sums go back in the same
# statement, so every reader sees either all the old rows or the folded ones. Two concurrent folds
# cannot count a row twice: the second one's DELETE skips rows the first already deleted.
_PG_FOLD = text(
    """
WITH gone AS (DELETE FROM count_deltas RETURNING entity, status, delta)
INSERT INTO count_deltas (entity, status, delta)
SELECT entity, status, SUM(delta) FROM gone GROUP BY entity, status HAVING SUM(delta) <> 0
"""
)


async def fold_count_deltas(conn: AsyncConnection, *, sqlite: bool) -> None:
    """Fold the count delta rows (server/db/tables.py count_deltas) into one row per count.

    Run by the sweeper, so the rows summed by queue statistics stay few however many tasks change.
    On SQLite the caller's BEGIN IMMEDIATE transaction holds the write lock: no trigger runs between the
    two statements, and rows above `top` (the sums just written) are kept."""
    if not sqlite:
        await conn.execute(_PG_FOLD)
        return
    deltas = t.count_deltas
    top = (await conn.execute(select(func.max(deltas.c.id)))).scalar()
    if top is None:
        return
    total = func.sum(deltas.c.delta)
    sums = (
        select(deltas.c.entity, deltas.c.status, total)
        .where(deltas.c.id <= top)
        .group_by(deltas.c.entity, deltas.c.status)
        .having(total != 0)
    )
    await conn.execute(insert(deltas).from_select(["entity", "status", "delta"], sums))
    await conn.execute(delete(deltas).where(deltas.c.id <= top))
