"""The lease sweeper's statements. Safe in several processes at once: a run is handled by whoever's
guarded UPDATE matches it; the others match nothing and move on."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ColumnElement, RowMapping, case, update
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
