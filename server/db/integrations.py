"""The merge queue's statements (DESIGN section 16): its rows, and the lease one process holds to integrate
one (repository, ref).

The integrator's lease is one row per (repo, ref) in `integrators`, taken with a single upsert that succeeds
only when the row is free, lapsed, or already the caller's: two processes can never both hold it, and a dead
holder's lease is taken over once it lapses. The same statement runs on both dialects.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t
from server.db.records import Integration, Record
from server.db.types import UTCDateTime

# queued | merging | merged | conflict | check_failed
WAITING = ("queued", "merging")

_TAKE = text(
    """
INSERT INTO integrators (repo, ref, holder, expires_at) VALUES (:repo, :ref, :holder, :expires_at)
ON CONFLICT (repo, ref) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE integrators.expires_at < :now OR integrators.holder = excluded.holder
RETURNING holder"""
).bindparams(bindparam("expires_at", type_=UTCDateTime()), bindparam("now", type_=UTCDateTime()))


async def take(conn: AsyncConnection, repo: str, ref: str, holder: str, now: datetime, until: datetime) -> bool:
    """Take (or renew) the integrator's lease on (repo, ref) until `until`; False when another live holder has it."""
    params = {"repo": repo, "ref": ref, "holder": holder, "expires_at": until, "now": now}
    row = (await conn.execute(_TAKE, params)).first()
    return row is not None and row[0] == holder


async def release(conn: AsyncConnection, repo: str, ref: str, holder: str) -> None:
    i = t.integrators
    await conn.execute(delete(i).where(i.c.repo == repo, i.c.ref == ref, i.c.holder == holder))


async def waiting_targets(conn: AsyncConnection, limit: int = 100) -> list[tuple[str, str]]:
    """The (repo, ref) pairs with work waiting to be integrated."""
    g = t.integrations
    query = select(g.c.repo, g.c.ref).where(g.c.status.in_(WAITING)).group_by(g.c.repo, g.c.ref).limit(limit)
    return [(row[0], row[1]) for row in (await conn.execute(query)).all()]


async def next_for(conn: AsyncConnection, repo: str, ref: str) -> Integration | None:
    """The oldest integration of (repo, ref) still waiting (a `merging` one first: its integrator died)."""
    g = t.integrations
    query = select(g).where(g.c.status.in_(WAITING), g.c.repo == repo, g.c.ref == ref).order_by(g.c.id).limit(1)
    return Integration.maybe((await conn.execute(query)).mappings().first())


async def queue(conn: AsyncConnection, values: dict[str, Any]) -> None:
    await conn.execute(insert(t.integrations).values(values))


async def update_integration(conn: AsyncConnection, integration_id: int, values: dict[str, Any]) -> None:
    await conn.execute(update(t.integrations).where(t.integrations.c.id == integration_id).values(values))


async def of_runs(conn: AsyncConnection, run_ids: Sequence[str]) -> dict[str, Integration]:
    if not run_ids:
        return {}
    query = select(t.integrations).where(t.integrations.c.run_id.in_(list(run_ids)))
    return {row["run_id"]: Integration.of(row) for row in (await conn.execute(query)).mappings().all()}


async def of_task(conn: AsyncConnection, task_id: str) -> Integration | None:
    """The task's latest integration."""
    g = t.integrations
    query = select(g).where(g.c.task_id == task_id).order_by(g.c.id.desc()).limit(1)
    return Integration.maybe((await conn.execute(query)).mappings().first())


async def listed(conn: AsyncConnection, *, limit: int = 100) -> list[dict[str, Any]]:
    """The merge queue newest first, with each task's objective (the dashboard's view)."""
    g = t.integrations
    query = (
        select(g, t.tasks.c.objective).join(t.tasks, t.tasks.c.id == g.c.task_id).order_by(g.c.id.desc()).limit(limit)
    )
    return [dict(row) for row in (await conn.execute(query)).mappings().all()]


async def counts(conn: AsyncConnection) -> dict[str, int]:
    """How many integrations wait in each waiting status (queue statistics; indexed by status first)."""
    g = t.integrations
    query = select(g.c.status, text("count(*)")).where(g.c.status.in_(WAITING)).group_by(g.c.status)
    return {str(row[0]): int(row[1]) for row in (await conn.execute(query)).all()}


async def merging_runs(conn: AsyncConnection, run_ids: Sequence[str]) -> set[str]:
    """Which of these runs' integrations are being worked (`merging`)."""
    g = t.integrations
    query = select(g.c.run_id).where(g.c.run_id.in_(list(run_ids)), g.c.status == "merging")
    return {row[0] for row in (await conn.execute(query)).all()}


class Waiting(Record):
    """A queued integration that cannot go on, and why (`waiting`)."""

    task_id: str
    objective: str
    run_id: str
    actor_id: str
    waiting: str
    queued_at: datetime
    repo: str
    ref: str


async def waiting_with_reason(conn: AsyncConnection, limit: int) -> list[Waiting]:
    """Queued integrations that cannot go on (a dirty checkout, a lock), oldest first, with their task's objective
    and the run's agent: work a person must unblock (jct_list_stuck)."""
    g, tasks, runs = t.integrations, t.tasks, t.runs
    query = (
        select(
            g.c.task_id,
            g.c.run_id,
            g.c.waiting,
            g.c.queued_at,
            g.c.repo,
            g.c.ref,
            tasks.c.objective,
            runs.c.actor_id,
        )
        .join(tasks, tasks.c.id == g.c.task_id)
        .join(runs, runs.c.id == g.c.run_id)
        .where(g.c.status == "queued", g.c.waiting.is_not(None))
        .order_by(g.c.id)
        .limit(limit)
    )
    return [Waiting.of(row) for row in (await conn.execute(query)).mappings()]
