"""The lease's statements: the fence that renews it, the caller's run when the fence refuses, and expiry.

A lease is granted by the claim (server/db/claims/). Every later call of the claimant passes the fence
(`fence_statement`): one guarded UPDATE that renews the lease only while the caller's run is the task's
active run and its lease is live. The same statement serves both dialects: PostgreSQL runs it through
SQLAlchemy, SQLite as plain SQL compiled from it, inside the one-hop transaction of server/db/changes/.

Expiry is the sweeper's: safe in several processes at once, a run is handled by whoever's guarded UPDATE
matches it; the others match nothing and move on.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sqlalchemy import ColumnElement, Float, String, and_, bindparam, case, func, literal, or_, select, update
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate

from server.db import rawsqlite
from server.db import tables as t
from server.db.records import ExpiredRun, FencedRun, RequeuedTask
from server.db.types import UTCDateTime
from server.vocab import RunStatus, TaskStatus


@dataclass(frozen=True)
class Fence:
    """Who may act on a task's run. With `run_id`: that run, if the caller's principal claimed it and, when the
    claim gave it a key, the caller names the key (`key_hash`) or is the agent and connection that claimed.
    Without: the run this agent (`actor_id`) claimed through this connection (`session`, None for stateless
    calls)."""

    task_id: str
    run_id: str | None
    actor_id: str
    principal: str
    session: str | None
    lease_seconds: float
    key_hash: str | None = None

    def admits(self, run: Any) -> bool:
        """Whether `run` (a row with actor_id, principal, claim_session, claim_key) is the caller's, by the
        fence's own rule: what the fence statement checks, for a run read when it refused."""
        if self.run_id is None:
            return bool(run.actor_id == self.actor_id and run.claim_session == self.session)
        if run.principal != self.principal:
            return False
        if self.key_hash is not None:
            return bool(run.claim_key == self.key_hash)
        return run.claim_key is None or (
            self.session is not None and run.actor_id == self.actor_id and run.claim_session == self.session
        )

    def params(self, now: datetime | None = None) -> dict[str, Any]:
        """The statement's parameters (prefixed: an UPDATE takes a parameter named like a column as a value to
        set); `now` (SQLite only: the server's clock) dates the renewal."""
        values: dict[str, Any] = {"fence_task_id": self.task_id}
        if self.run_id is not None:
            values |= {"fence_run_id": self.run_id, "fence_principal": self.principal}
        if self.key_hash is not None:
            values["fence_key"] = self.key_hash
        else:
            values |= {"fence_actor_id": self.actor_id, "fence_session": self.session}
        if now is None:
            values["fence_lease_seconds"] = float(self.lease_seconds)
        else:
            values |= {"fence_now": now, "fence_expires": now + timedelta(seconds=self.lease_seconds)}
        return values


@cache
def fence_statement(*, sqlite: bool, by_run: bool, keyed: bool = False) -> ReturningUpdate[Any]:
    """The fence: renew the lease of the caller's run, only while it is the task's active run with a live lease.

    Returns the renewed run (locked until commit on PostgreSQL; SQLite holds the write lock already), or
    nothing when the caller may not act: the service then works out why (`claimant_run`). The clock is the
    database's on PostgreSQL and the server's on SQLite (the embedded database shares the server's clock)."""
    runs, tasks = t.runs, t.tasks
    task_id = bindparam("fence_task_id", type_=String())
    if sqlite:
        now: ColumnElement[Any] = bindparam("fence_now", type_=UTCDateTime())
        expires: ColumnElement[Any] = bindparam("fence_expires", type_=UTCDateTime())
    else:
        now = func.now()
        expires = func.now() + func.make_interval(0, 0, 0, 0, 0, 0, bindparam("fence_lease_seconds", type_=Float()))
    if by_run:
        claimant = [
            runs.c.id == bindparam("fence_run_id", type_=String()),
            runs.c.principal == bindparam("fence_principal"),
        ]
        if keyed:  # the run_id carried the claim's key: whatever the connection, it is the claimant's
            claimant.append(runs.c.claim_key == bindparam("fence_key", type_=String()))
        else:  # a bare run_id: a keyed run only for the agent and connection that claimed it
            claimant.append(
                or_(
                    runs.c.claim_key.is_(None),
                    and_(
                        runs.c.actor_id == bindparam("fence_actor_id", type_=String()),
                        runs.c.claim_session == bindparam("fence_session", type_=String()),
                    ),
                )
            )
    else:
        claimant = [
            runs.c.actor_id == bindparam("fence_actor_id", type_=String()),
            runs.c.claim_session.is_not_distinct_from(bindparam("fence_session", type_=String())),
        ]
    active = select(tasks.c.active_run_id).where(tasks.c.id == task_id).scalar_subquery()
    return (
        update(runs)
        .where(
            runs.c.id == active,  # the task's active run: a requeued or re-claimed task has another
            runs.c.task_id == task_id,
            *claimant,  # the caller's run
            runs.c.status == RunStatus.RUNNING,
            runs.c.lease_expires_at > now,  # a lease that ran out stays out, swept or not
        )
        .values(lease_expires_at=expires)
        .returning(runs)
    )


@cache
def _sqlite_fence_sql(by_run: bool, keyed: bool) -> tuple[str, dict[str, Any]]:
    """The fence as SQLite SQL with named parameters, and the values of its constants (`status = 'running'`)."""
    statement = fence_statement(sqlite=True, by_run=by_run, keyed=keyed)
    compiled = statement.compile(dialect=sqlite_dialect.dialect(paramstyle="named"))
    return str(compiled), {name: value for name, value in compiled.params.items() if value is not None}


def renew_sqlite(db: Any, fence: Fence, now: datetime) -> dict[str, Any] | None:
    """SQLite, on aiosqlite's thread inside the change's transaction: the same fence as plain SQL, by the
    server's clock as the change read it (`now`)."""
    sql, constants = _sqlite_fence_sql(fence.run_id is not None, fence.key_hash is not None)
    params = constants | fence.params(now)
    for name in ("fence_now", "fence_expires"):
        params[name] = rawsqlite.stored_time(params[name])
    return rawsqlite.fetch_one(db, t.runs, sql, params)


async def claimant_run(conn: AsyncConnection, fence: Fence, now: ColumnElement[datetime]) -> FencedRun | None:
    """The run the fence looked for, whatever became of it, with `lease_live` and `active` worked out by the
    fence's clock: read only when the fence refused, to say why."""
    runs, tasks = t.runs, t.tasks
    query = select(
        runs,
        case((runs.c.lease_expires_at > now, True), else_=False).label("lease_live"),
        case((tasks.c.active_run_id == runs.c.id, True), else_=False).label("active"),
    ).join(tasks, tasks.c.id == runs.c.task_id)
    if fence.run_id is not None:
        query = query.where(runs.c.id == fence.run_id)
    else:
        query = query.where(
            runs.c.task_id == fence.task_id,
            runs.c.actor_id == fence.actor_id,
            runs.c.claim_session.is_not_distinct_from(fence.session),
        ).order_by(runs.c.started_at.desc(), runs.c.id.desc())
    return FencedRun.maybe((await conn.execute(query.limit(1))).mappings().first())


async def expire_run(
    conn: AsyncConnection, run_id: str, now: ColumnElement[datetime], *, reason: str = "lease expired", due: bool = True
) -> ExpiredRun | None:
    """The running run expired, if its lease has passed (`due`; an operator's expiry does not wait for it)."""
    guards = [t.runs.c.id == run_id, t.runs.c.status == RunStatus.RUNNING]
    if due:
        guards.append(t.runs.c.lease_expires_at <= now)
    stmt = (
        update(t.runs)
        .where(*guards)
        .values(status=RunStatus.EXPIRED, ended_at=now, failure={"reason": reason})
        .returning(t.runs.c.id, t.runs.c.task_id, t.runs.c.issue_id, t.runs.c.actor_id)
    )
    return ExpiredRun.maybe((await conn.execute(stmt)).mappings().first())


async def requeue_or_fail(conn: AsyncConnection, task_id: str, run_id: str) -> RequeuedTask | None:
    """One more penalised attempt: back to the queue, or failed once attempts reach max_attempts."""
    exhausted = t.tasks.c.attempts + 1 >= t.tasks.c.max_attempts
    stmt = (
        update(t.tasks)
        .where(t.tasks.c.id == task_id, t.tasks.c.active_run_id == run_id, t.tasks.c.status == TaskStatus.RUNNING)
        .values(
            attempts=t.tasks.c.attempts + 1,
            status=case((exhausted, TaskStatus.FAILED.value), else_=TaskStatus.QUEUED.value),
            error=case((exhausted, "lease expired on the last attempt"), else_=t.tasks.c.error),
            active_run_id=None,
            claimed_at=None,
        )
        .returning(t.tasks.c.status, t.tasks.c.attempts, t.tasks.c.trace_id, t.tasks.c.issue_id)
    )
    return RequeuedTask.maybe((await conn.execute(stmt)).mappings().first())


async def renew_held(
    conn: AsyncConnection, run_ids: list[str], now: ColumnElement[datetime], lease_seconds: float
) -> set[str]:
    """Renew the leases of `run_ids` (runs a live connection holds) to `lease_seconds` from now, in one statement;
    the ids it renewed. A run is renewed only while it is running, is its task's active run, its lease is still
    live (a lease that ran out stays out, swept or not) and its time budget has not ended; a lease is never
    shortened. The clock is the database's on PostgreSQL and the server's on SQLite, as the fence's."""
    runs, tasks = t.runs, t.tasks
    if conn.dialect.name == "sqlite":
        expires: ColumnElement[Any] = literal(datetime.now(UTC) + timedelta(seconds=lease_seconds), UTCDateTime())
    else:
        expires = func.now() + func.make_interval(
            0, 0, 0, 0, 0, 0, bindparam("held_lease_seconds", lease_seconds, type_=Float())
        )
    active = select(tasks.c.active_run_id).where(tasks.c.id == runs.c.task_id).scalar_subquery()
    stmt = (
        update(runs)
        .where(
            runs.c.id.in_(run_ids),
            runs.c.status == RunStatus.RUNNING,
            runs.c.id == active,
            runs.c.lease_expires_at > now,
            or_(runs.c.budget_ends_at.is_(None), runs.c.budget_ends_at > now),
        )
        .values(lease_expires_at=case((runs.c.lease_expires_at < expires, expires), else_=runs.c.lease_expires_at))
        .returning(runs.c.id)
    )
    return set((await conn.execute(stmt)).scalars())
