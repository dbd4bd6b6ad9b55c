"""A change to a claimed task, behind the fence, in as few trips to the database as each dialect allows.

The service hands over a `Fence` (whose run must hold a live lease) and a `decide` function. Here
the fence is passed (renewing the lease and locking the run), the facts `decide` needs are read,
`decide` turns them into writes (audit rows among them), and the writes are made, all in one
transaction. `decide` runs off the event loop (it may read or write artifact files):

- SQLite: the whole transaction is ONE call on aiosqlite's thread (Database.write_in_one_call),
  in plain sqlite3 (server/db/rawsqlite.py).
- PostgreSQL: the fence, then the facts, then `decide` in a worker thread, then every write in
  one statement (one data-modifying CTE per write).

If the fence refuses, nothing is written and the result is None: the service works out why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import anyio
from sqlalchemy import ColumnElement, Table, bindparam, func, insert, literal, literal_column, select, update
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.dml import ReturningUpdate

from server.db import queries, rawsqlite
from server.db import tables as t

Values = Mapping[str, Any]
R = TypeVar("R")


@dataclass(frozen=True)
class Fence:
    """The caller's run must be the task's active run, with a live lease; passing renews it."""

    task_id: str
    actor_id: str
    now: ColumnElement[datetime]  # the database clock (engine.db_now), and the lease's new end
    expires: ColumnElement[datetime]


# What a completion reads of its task and of the run's artifacts (the prover's input).
TASK_FIELDS = ("id", "issue_id", "trace_id", "operation", "target_path", "time_budget_seconds")
ARTIFACT_FIELDS = ("id", "type", "title", "stored", "uri")


@dataclass(frozen=True)
class Facts:
    """What `decide` is given: the fenced run, and (for a completion) the task, its criteria and the run's artifacts."""

    run: dict[str, Any]
    task: dict[str, Any] = field(default_factory=dict)
    acceptance_criteria: tuple[str, ...] = ()
    artifacts: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Insert:
    table: Table
    rows: Sequence[Values]


@dataclass(frozen=True)
class Update:
    table: Table
    row_id: str
    values: Values
    status_in: tuple[str, ...] | None = None
    # Nothing matched -> RowMissed, and the whole change (fence included) is rolled back.
    required: bool = False


Write = Insert | Update
Decide = Callable[[Facts], tuple[Sequence[Write], R]]


class RowMissed(Exception):
    """A required update matched no row (the row left the expected status under us)."""

    def __init__(self, table: str, row_id: str) -> None:
        super().__init__(f"{table} {row_id} did not match")
        self.table = table
        self.row_id = row_id


# --- what a change writes ------------------------------------------------------------------


def insert_audit(rows: Sequence[Values]) -> Insert:
    """Audit rows; `ts` is informational (the id orders the log), the server's clock, one for the change."""
    return Insert(t.audit_log, queries.stamped(rows))


def insert_artifact(values: Values) -> Insert:
    return Insert(t.artifacts, [values])


def insert_evidence_pack(values: Values) -> Insert:
    return Insert(t.evidence_packs, [values])


def insert_review_decision(values: Values) -> Insert:
    return Insert(t.review_decisions, [values])


def update_run(run_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    return Update(t.runs, run_id, values, status_in)


def update_task(task_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    """The task's move; if it is no longer in `status_in` (cancelled under us), the change is undone."""
    return Update(t.tasks, task_id, values, status_in, required=True)


def update_issue(issue_id: str, values: Values) -> Update:
    return Update(t.issues, issue_id, values)


# --- SQLite: one call on aiosqlite's thread ----------------------------------------------------

_SQLITE_FENCE = """
UPDATE runs SET lease_expires_at = :expires
WHERE id = (SELECT active_run_id FROM tasks WHERE id = :task_id)
  AND task_id = :task_id AND actor_id = :actor_id AND status = 'running' AND lease_expires_at > :now
RETURNING *"""


def change_sqlite(db: sqlite3.Connection, fence: Fence, decide: Decide[R], *, completion: bool) -> R | None:
    """Inside Database.write_in_one_call: fence, facts, decide, write."""
    params = {
        "task_id": fence.task_id,
        "actor_id": fence.actor_id,
        "now": rawsqlite.stored_time(fence.now),
        "expires": rawsqlite.stored_time(fence.expires),
    }
    run = rawsqlite.fetch_one(db, t.runs, _SQLITE_FENCE, params)
    if run is None:
        return None
    facts = _facts_sqlite(db, fence.task_id, run) if completion else Facts(run)
    writes, result = decide(facts)
    for write in writes:
        if isinstance(write, Insert):
            rawsqlite.insert(db, write.table, write.rows)
        elif rawsqlite.update(db, write.table, write.row_id, write.values, write.status_in) is None and write.required:
            raise RowMissed(write.table.name, write.row_id)
    return result


def _facts_sqlite(db: sqlite3.Connection, task_id: str, run: dict[str, Any]) -> Facts:
    task_sql = f"SELECT {', '.join(TASK_FIELDS)} FROM tasks WHERE id = :id"
    task = rawsqlite.fetch_one(db, t.tasks, task_sql, {"id": task_id})
    assert task is not None  # the fenced run points at it
    criteria: tuple[str, ...] = ()
    if task["issue_id"] is not None:
        packet = rawsqlite.fetch_one(
            db,
            t.context_packets,
            "SELECT acceptance_criteria FROM context_packets WHERE issue_id = :id ORDER BY version DESC LIMIT 1",
            {"id": task["issue_id"]},
        )
        criteria = tuple(packet["acceptance_criteria"]) if packet is not None else ()
    artifacts = rawsqlite.fetch_all(
        db,
        t.artifacts,
        f"SELECT {', '.join(ARTIFACT_FIELDS)} FROM artifacts WHERE run_id = :id ORDER BY created_at",
        {"id": run["id"]},
    )
    return Facts(run, task, criteria, tuple(artifacts))


# --- PostgreSQL: the fence, the facts, then every write in one statement -------------------------


async def change_postgres(conn: AsyncConnection, fence: Fence, decide: Decide[R], *, completion: bool) -> R | None:
    """Inside Database.write(): fence (with the facts, for a completion), decide (in a worker thread), write."""
    fenced = queries.renew_lease_statement(fence.task_id, fence.actor_id, fence.now, fence.expires)
    if completion:
        facts = await _fence_with_facts_postgres(conn, fenced)
    else:
        row = (await conn.execute(fenced)).mappings().first()
        facts = Facts(dict(row)) if row is not None else None
    if facts is None:
        return None
    writes, result = await anyio.to_thread.run_sync(decide, facts)
    await _write_postgres(conn, writes)
    return result


async def _fence_with_facts_postgres(conn: AsyncConnection, fenced: ReturningUpdate[Any]) -> Facts | None:
    """The fence and everything a completion reads, in one statement."""
    run = fenced.cte("run")
    packet, art = t.context_packets, t.artifacts
    criteria = (
        select(packet.c.acceptance_criteria)
        .where(packet.c.issue_id == t.tasks.c.issue_id)
        .order_by(packet.c.version.desc())
        .limit(1)
        .scalar_subquery()
    )
    fields = [item for name in ARTIFACT_FIELDS for item in (literal(name), art.c[name])]
    artifacts = (
        select(
            func.coalesce(
                func.jsonb_agg(aggregate_order_by(func.jsonb_build_object(*fields), art.c.created_at)),
                literal_column("'[]'::jsonb"),
            )
        )
        .where(art.c.run_id == run.c.id)
        .scalar_subquery()
    )
    query = (
        select(
            run,
            *[t.tasks.c[name].label(f"task__{name}") for name in TASK_FIELDS],
            criteria.label("acceptance_criteria"),
            artifacts.label("artifacts"),
        )
        .select_from(run)
        .join(t.tasks, t.tasks.c.id == run.c.task_id)
    )
    row = (await conn.execute(query)).mappings().first()
    if row is None:
        return None
    return Facts(
        run={c.name: row[c.name] for c in t.runs.columns},
        task={name: row[f"task__{name}"] for name in TASK_FIELDS},
        acceptance_criteria=tuple(row["acceptance_criteria"] or ()),
        artifacts=tuple(row["artifacts"]),
    )


async def _write_postgres(conn: AsyncConnection, writes: Sequence[Write]) -> None:
    """Every write as data-modifying CTEs of a single statement; it returns what each required update matched.

    Values travel as named parameters, so the statement's shape (and SQLAlchemy's cached compiled
    form of it) is the same from one call to the next; SQL expressions (the clock) stay inline."""
    params: dict[str, Any] = {}

    def bound(table: Table, prefix: str, values: Values) -> dict[str, Any]:
        columns: dict[str, Any] = {}
        for name, value in values.items():
            if isinstance(value, ColumnElement):
                columns[name] = value
            else:
                params[f"{prefix}_{name}"] = value
                columns[name] = bindparam(f"{prefix}_{name}", type_=table.c[name].type)
        return columns

    ctes = []
    required: list[tuple[Update, ColumnElement[int]]] = []
    for n, write in enumerate(writes):
        if isinstance(write, Insert):
            for i, row in enumerate(write.rows):
                ctes.append(insert(write.table).values(bound(write.table, f"w{n}_{i}", row)).cte(f"write_{n}_{i}"))
            continue
        stmt = update(write.table).where(write.table.c.id == write.row_id)
        if write.status_in is not None:
            stmt = stmt.where(write.table.c.status.in_(write.status_in))
        cte = stmt.values(bound(write.table, f"w{n}", write.values)).returning(write.table.c.id).cte(f"write_{n}")
        ctes.append(cte)
        if write.required:
            required.append((write, select(func.count()).select_from(cte).scalar_subquery()))
    counts: list[ColumnElement[int]] = [count for _, count in required] or [literal(1)]
    matched = (await conn.execute(select(*counts).add_cte(*ctes), params)).one()
    for (write, _), count in zip(required, matched, strict=False):
        if not count:
            raise RowMissed(write.table.name, write.row_id)
