"""A change to a claimed task, behind the fence, in as few trips to the database as each dialect allows.

The service hands over a `Fence` (whose run must hold a live lease) and a `decide` function. Here
the fence is passed (renewing the lease and locking the run), the facts `decide` needs are read,
`decide` turns them into writes (audit rows among them), and the writes are made, all in one
transaction. `decide` runs off the event loop (it may read or write artifact files):

- SQLite: the whole transaction is ONE call on aiosqlite's thread (Database.write_in_one_call),
  in plain sqlite3 (server/db/rawsqlite.py).
- PostgreSQL: the fence, then the facts, then `decide` in a worker thread, then every write in
  one statement (one data-modifying CTE per write).

`apply` is the one way in, for both: the dialect fork is there and nowhere else.

If the fence refuses, nothing is written and the result is None: the service works out why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache, partial
from typing import Any, Generic, TypeGuard, TypeVar

import anyio
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Float,
    Select,
    Table,
    bindparam,
    func,
    insert,
    literal,
    literal_column,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.cache_key import NO_CACHE
from sqlalchemy.sql.dml import ReturningUpdate

from server.db import leases, missions, queries, rawsqlite
from server.db import tables as t
from server.db.engine import Database
from server.db.leases import Fence
from server.db.types import UTCDateTime

Values = Mapping[str, Any]
R = TypeVar("R")


# What a completion reads of its task and of the run's artifacts (the prover's input, and the trace manifest's).
TASK_FIELDS = (
    "id",
    "issue_id",
    "trace_id",
    "operation",
    "target_repo",
    "target_ref",
    "target_path",
    "time_budget_seconds",
    "mission_id",
    "step",
    "review_rounds",
)
ARTIFACT_FIELDS = ("id", "type", "title", "stored", "uri", "media_type", "size_bytes", "sha256")


@dataclass(frozen=True)
class Facts:
    """What `decide` is given: the fenced run, and (for a completion) the task, its criteria and the run's artifacts."""

    run: dict[str, Any]
    # Bytes of content the run has stored so far (for the per-run cap); not read for a completion.
    stored_bytes: int = 0
    # The task's TASK_FIELDS for a completion; its trace_id otherwise.
    task: dict[str, Any] = field(default_factory=dict)
    acceptance_criteria: tuple[str, ...] = ()
    artifacts: tuple[dict[str, Any], ...] = ()
    # For a completion: the clock the fence read (the database's on PostgreSQL, the server's on SQLite), read
    # once at the start of the transaction; `clock()` writes it, so a row and what is told of it agree.
    now: datetime | None = None

    def clock(self) -> ColumnElement[datetime]:
        """`now` as a value to write."""
        assert self.now is not None, "read for a completion only"
        return literal(self.now, UTCDateTime())


@dataclass(frozen=True)
class Insert:
    table: Table
    rows: Sequence[Values]
    # One row whose generated id the change hands back (a progress event's).
    returns_id: bool = False


@dataclass(frozen=True)
class Update:
    table: Table
    row_id: str
    values: Values
    status_in: tuple[str, ...] | None = None
    # Nothing matched -> RowMissed, and the whole change (fence included) is rolled back.
    required: bool = False


@dataclass(frozen=True)
class Approve:
    """The task's work is approved: what waits for it may go (server/db/missions.py), after the other writes.
    `audit` turns what the approval unblocked into audit rows of the same transaction."""

    task_id: str
    audit: Callable[[missions.Approval], Sequence[Values]]


@dataclass(frozen=True)
class NewVersion:
    """A new briefing version of the issue, made from its latest one by `packet` (server/core/briefings/
    versions.py), after the other writes."""

    issue_id: str
    packet: Callable[[Mapping[str, Any]], Values]


@dataclass(frozen=True)
class Spend:
    """What a telemetry report adds to its mission's spending, which the claim compares with the mission's budget
    (server/db/claims.py): added in the report's own transaction, so the sums never lag what the runs say."""

    mission_id: str
    tokens: float
    cost_usd: float


# Adds a report's spending to its mission's sums (the Spend write) on SQLite.
_SPEND_SQLITE = (
    "UPDATE missions SET spent_tokens = spent_tokens + :tokens, spent_cost_usd = spent_cost_usd + :cost_usd "
    "WHERE id = :mission_id"
)


Write = Insert | Update | Approve | NewVersion | Spend
Decide = Callable[[Facts], tuple[Sequence[Write], R]]


@dataclass(frozen=True)
class Changed(Generic[R]):
    """What a change that passed the fence made: `decide`'s result, and the id an insert handed back."""

    result: R
    inserted_id: int | None = None


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


def insert_run_event(values: Values) -> Insert:
    """A progress event; the change hands back its id."""
    return Insert(t.run_events, [values], returns_id=True)


def insert_artifact(values: Values) -> Insert:
    return Insert(t.artifacts, [values])


def insert_evidence_pack(values: Values) -> Insert:
    return Insert(t.evidence_packs, [values])


def insert_telemetry_deltas(rows: Sequence[Values]) -> Insert:
    """What one telemetry report adds to the queue's totals."""
    return Insert(t.telemetry_deltas, rows)


def insert_integration(values: Values) -> Insert:
    return Insert(t.integrations, (values,))


def insert_review_decision(values: Values) -> Insert:
    return Insert(t.review_decisions, [values])


def update_run(run_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    return Update(t.runs, run_id, values, status_in)


def update_task(task_id: str, values: Values, *, status_in: tuple[str, ...]) -> Update:
    """The task's move; if it is no longer in `status_in` (cancelled under us), the change is undone."""
    return Update(t.tasks, task_id, values, status_in, required=True)


def update_issue(issue_id: str, values: Values) -> Update:
    return Update(t.issues, issue_id, values)


# --- the change -----------------------------------------------------------------------------------


async def apply(
    db: Database, fence: Fence, decide: Decide[R], *, completion: bool = False, durable: bool = True
) -> Changed[R] | None:
    """Pass the fence and make `decide`'s writes in one transaction; None if the fence refused (nothing was
    written then). `completion`: `decide` is also given the task, its criteria and the run's artifacts.
    `durable=False`: writes that may be lost without harm (Database.write).

    The one dialect fork of a fenced change. SQLite: the whole transaction as ONE call on aiosqlite's
    thread, which pays against the same steps through SQLAlchemy (several thread hops per statement): the
    figures are in bench/README.md. PostgreSQL: three round trips (fence with facts, writes, commit)."""
    if db.is_sqlite:
        return await db.write_in_one_call(partial(_change_sqlite, fence=fence, decide=decide, completion=completion))
    async with db.write(durable=durable) as conn:
        return await _change_postgres(conn, fence, decide, completion=completion)


# --- SQLite: one call on aiosqlite's thread ----------------------------------------------------


def _change_sqlite(db: sqlite3.Connection, fence: Fence, decide: Decide[R], *, completion: bool) -> Changed[R] | None:
    """Inside Database.write_in_one_call: fence, facts, decide, write."""
    now = rawsqlite.server_now()
    run = leases.renew_sqlite(db, fence, now)
    if run is None:
        return None
    facts = _facts_sqlite(db, fence.task_id, run, now) if completion else _facts_of_run_sqlite(db, run)
    writes, result = decide(facts)
    inserted_id = None
    for write in writes:
        if isinstance(write, Insert):
            row_id = rawsqlite.insert(db, write.table, write.rows)
            if write.returns_id:
                inserted_id = row_id
        elif isinstance(write, Approve):
            approval = missions.approve_sqlite(db, write.task_id, rawsqlite.server_now())
            rawsqlite.insert(db, t.audit_log, queries.stamped(write.audit(approval)))
        elif isinstance(write, Spend):
            spend = {"mission_id": write.mission_id, "tokens": write.tokens, "cost_usd": write.cost_usd}
            db.execute(_SPEND_SQLITE, spend)
        elif isinstance(write, NewVersion):
            latest = rawsqlite.fetch_one(db, t.context_packets, _LATEST_PACKET, {"id": write.issue_id})
            assert latest is not None  # every issue starts with version 1
            rawsqlite.insert(db, t.context_packets, [write.packet(latest)])
        elif rawsqlite.update(db, write.table, write.row_id, write.values, write.status_in) is None and write.required:
            raise RowMissed(write.table.name, write.row_id)
    return Changed(result, inserted_id)


_LATEST_PACKET = "SELECT * FROM context_packets WHERE issue_id = :id ORDER BY version DESC LIMIT 1"


def _facts_of_run_sqlite(db: sqlite3.Connection, run: dict[str, Any]) -> Facts:
    cursor = db.execute(
        "SELECT trace_id, mission_id, (SELECT COALESCE(SUM(size_bytes), 0) FROM artifacts WHERE run_id = ?) "
        "FROM tasks WHERE id = ?",
        (run["id"], run["task_id"]),
    )
    trace_id, mission_id, stored = cursor.fetchone()
    return Facts(run, stored_bytes=int(stored), task={"trace_id": trace_id, "mission_id": mission_id})


def _facts_sqlite(db: sqlite3.Connection, task_id: str, run: dict[str, Any], now: datetime) -> Facts:
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
    return Facts(run, task=task, acceptance_criteria=criteria, artifacts=tuple(artifacts), now=now)


# --- PostgreSQL: the fence, the facts, then every write in one statement -------------------------


async def _change_postgres(
    conn: AsyncConnection, fence: Fence, decide: Decide[R], *, completion: bool
) -> Changed[R] | None:
    """Inside Database.write(): fence (with the facts), decide (in a worker thread), write."""
    fenced = leases.fence_statement(sqlite=False, by_run=fence.run_id is not None, keyed=fence.key_hash is not None)
    if completion:
        facts = await _fence_with_facts_postgres(conn, fenced, fence)
    else:
        facts = await _fence_with_bytes_postgres(conn, fenced, fence)
    if facts is None:
        return None
    writes, result = await anyio.to_thread.run_sync(decide, facts)
    inserted_id = await _write_postgres(conn, [write for write in writes if isinstance(write, Insert | Update | Spend)])
    for write in writes:
        if isinstance(write, Approve):
            approval = await missions.approve(conn, write.task_id, rawsqlite.server_now())
            await queries.insert_audit(conn, write.audit(approval))
        elif isinstance(write, NewVersion):
            latest = await queries.latest_context_packet(conn, write.issue_id)
            assert latest is not None  # every issue starts with version 1
            await queries.insert_context_packet(conn, write.packet(dict(latest)))
    return Changed(result, inserted_id)


async def _fence_with_bytes_postgres(conn: AsyncConnection, fenced: ReturningUpdate[Any], fence: Fence) -> Facts | None:
    """The fence, the task's trace id and mission, and the bytes the run has stored so far, in one statement."""
    row = (await conn.execute(_bytes_query(fenced), fence.params())).mappings().first()
    if row is None:
        return None
    return Facts(
        run={c.name: row[c.name] for c in t.runs.columns},
        stored_bytes=int(row["stored_bytes"]),
        task={"trace_id": row["task__trace_id"], "mission_id": row["task__mission_id"]},
    )


# The statements below are built once per shape and reused: building one (a CTE's column proxies, the tree) and
# deriving its cache key, which SQLAlchemy memoizes on the statement object, cost more server CPU per call than
# compiling it did (bench/ANALYSIS.md). Every value travels as a named parameter.


@cache
def _bytes_query(fenced: ReturningUpdate[Any]) -> Select[Any]:
    run = fenced.cte("run")
    art = t.artifacts
    stored = select(func.coalesce(func.sum(art.c.size_bytes), 0)).where(art.c.run_id == run.c.id).scalar_subquery()
    trace = select(t.tasks.c.trace_id).where(t.tasks.c.id == run.c.task_id).scalar_subquery()
    mission = select(t.tasks.c.mission_id).where(t.tasks.c.id == run.c.task_id).scalar_subquery()
    return select(run, stored.label("stored_bytes"), trace.label("task__trace_id"), mission.label("task__mission_id"))


async def _fence_with_facts_postgres(conn: AsyncConnection, fenced: ReturningUpdate[Any], fence: Fence) -> Facts | None:
    """The fence and everything a completion reads, in one statement; with the database clock, which is the
    transaction's (now() does not move within one)."""
    row = (await conn.execute(_facts_query(fenced), fence.params())).mappings().first()
    if row is None:
        return None
    return Facts(
        run={c.name: row[c.name] for c in t.runs.columns},
        task={name: row[f"task__{name}"] for name in TASK_FIELDS},
        acceptance_criteria=tuple(row["acceptance_criteria"] or ()),
        artifacts=tuple(row["artifacts"]),
        now=row["fence_now"],
    )


@cache
def _facts_query(fenced: ReturningUpdate[Any]) -> Select[Any]:
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
    return (
        select(
            run,
            *[t.tasks.c[name].label(f"task__{name}") for name in TASK_FIELDS],
            criteria.label("acceptance_criteria"),
            artifacts.label("artifacts"),
            type_coerce(func.now(), UTCDateTime()).label("fence_now"),
        )
        .select_from(run)
        .join(t.tasks, t.tasks.c.id == run.c.task_id)
    )


async def _write_postgres(conn: AsyncConnection, writes: Sequence[Insert | Update | Spend]) -> int | None:
    """Every write as data-modifying CTEs of a single statement; it returns what each required update matched
    (and the id of an insert that hands one back).

    Values travel as named parameters (a value given as a bound literal too), so the statement is the same from
    one call to the next and is built once per shape (`_WriteShape`); SQL expressions without parameters stay
    inline. A write whose SQL carries a value of its own is built for that call alone."""
    shape = _WriteShape(writes)
    statement = _WRITE_STATEMENTS.get(shape.key) if shape.key is not None else None
    if statement is None:
        statement = shape.build()
        if shape.key is not None:
            if len(_WRITE_STATEMENTS) >= _WRITE_SHAPES_KEPT:
                _WRITE_STATEMENTS.clear()  # shapes come from a few code paths and row counts: full is unusual
            _WRITE_STATEMENTS[shape.key] = statement
    outcome = (await conn.execute(statement, shape.params)).one()
    required = [write for write in writes if isinstance(write, Update) and write.required]
    for write, count in zip(required, outcome[1:], strict=True):
        if not count:
            raise RowMissed(write.table.name, write.row_id)
    return None if outcome[0] is None else int(outcome[0])


_WRITE_SHAPES_KEPT = 256
_WRITE_STATEMENTS: dict[tuple[Any, ...], Select[Any]] = {}


class _WriteShape:
    """The writes' parameters, and a key that is equal for two lists of writes exactly when one statement (with
    their own parameters) makes both; None when a value cannot be a parameter of a statement kept for others (SQL
    that carries a parameter of its own, a literal of a type SQLAlchemy does not cache)."""

    def __init__(self, writes: Sequence[Insert | Update | Spend]) -> None:
        self.writes = writes
        self.params: dict[str, Any] = {}
        self._kept = True
        key: list[Any] = []
        for n, write in enumerate(writes):  # every part names its write (n) and row (i): no two lists share a key
            if isinstance(write, Insert):
                key.append(("insert", n, write.table.name, write.returns_id, len(write.rows)))
                key += [(i, self._values(f"w{n}_{i}", row)) for i, row in enumerate(write.rows)]
            elif isinstance(write, Spend):
                self.params |= {f"w{n}_tokens": write.tokens, f"w{n}_cost_usd": write.cost_usd}
                self.params[f"w{n}_id"] = write.mission_id
                key.append(("spend", n))
            else:
                self.params[f"w{n}_row_id"] = write.row_id
                values = self._values(f"w{n}", write.values)
                status_in = None if write.status_in is None else tuple(write.status_in)
                key.append(("update", n, write.table.name, status_in, write.required, values))
        self.key = tuple(key) if self._kept else None

    def _values(self, prefix: str, values: Values) -> tuple[Any, ...]:
        """Each value's parameter (every one, kept or not: `build` names them all), and the values' part of the key."""
        shape: list[Any] = []
        for name, value in values.items():
            if _is_literal(value):
                self.params[f"{prefix}_{name}"] = value.value  # a parameter like any other value
                type_key = value.type._static_cache_key
                self._kept &= type_key is not NO_CACHE
                shape.append((name, "literal", type_key))
            elif isinstance(value, ColumnElement):
                cache_key = value._generate_cache_key()
                self._kept &= cache_key is not None and not cache_key.bindparams
                shape.append((name, "sql", None if cache_key is None else cache_key.key))
            else:
                self.params[f"{prefix}_{name}"] = value
                shape.append((name,))
        return tuple(shape)

    def build(self) -> Select[Any]:
        ctes = []
        counts: list[ColumnElement[int]] = []
        inserted: ColumnElement[Any] = literal(None)
        for n, write in enumerate(self.writes):
            if isinstance(write, Insert):
                for i, row in enumerate(write.rows):
                    stmt_insert = insert(write.table).values(_bound(write.table, f"w{n}_{i}", row))
                    if write.returns_id:
                        cte_insert = stmt_insert.returning(write.table.c.id).cte(f"write_{n}_{i}")
                        inserted = select(cte_insert.c.id).scalar_subquery()
                    else:
                        cte_insert = stmt_insert.cte(f"write_{n}_{i}")
                    ctes.append(cte_insert)
            elif isinstance(write, Spend):
                missions_ = t.missions
                spend = (
                    update(missions_)
                    .where(missions_.c.id == bindparam(f"w{n}_id"))
                    .values(
                        spent_tokens=missions_.c.spent_tokens + bindparam(f"w{n}_tokens", type_=Float()),
                        spent_cost_usd=missions_.c.spent_cost_usd + bindparam(f"w{n}_cost_usd", type_=Float()),
                    )
                )
                ctes.append(spend.cte(f"write_{n}"))
            else:
                table = write.table
                stmt = update(table).where(table.c.id == bindparam(f"w{n}_row_id", type_=table.c.id.type))
                if write.status_in is not None:
                    stmt = stmt.where(table.c.status.in_(write.status_in))
                cte = stmt.values(_bound(table, f"w{n}", write.values)).returning(table.c.id).cte(f"write_{n}")
                ctes.append(cte)
                if write.required:
                    counts.append(select(func.count()).select_from(cte).scalar_subquery())
        return select(inserted, *counts).add_cte(*ctes)


def _is_literal(value: object) -> TypeGuard[BindParameter[Any]]:
    """A bound value with its value given (`literal(x, Type())`): sent as a named parameter like a plain value."""
    return isinstance(value, BindParameter) and not value.expanding and value.callable is None and not value.required


def _bound(table: Table, prefix: str, values: Values) -> dict[str, Any]:
    """The columns to set: a parameter named `{prefix}_{column}` for each value (a literal's too), and SQL as is."""
    columns: dict[str, Any] = {}
    for name, value in values.items():
        if _is_literal(value):
            columns[name] = bindparam(f"{prefix}_{name}", type_=value.type)
        elif isinstance(value, ColumnElement):
            columns[name] = value
        else:
            columns[name] = bindparam(f"{prefix}_{name}", type_=table.c[name].type)
    return columns
