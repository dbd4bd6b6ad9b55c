"""A fenced change on PostgreSQL: the fence with the facts, then every write in one statement (one
data-modifying CTE per write, each statement built once per shape)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, TypeGuard

import anyio
from sqlalchemy import (
    BindParameter,
    ClauseElement,
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
    true,
    type_coerce,
    update,
)
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.cache_key import NO_CACHE
from sqlalchemy.sql.dml import ReturningUpdate

from server.db import leases, missions, queries, rawsqlite
from server.db import tables as t
from server.db.changes.writes import (
    ARTIFACT_FIELDS,
    TASK_FIELDS,
    Approve,
    Changed,
    Decide,
    Facts,
    Insert,
    NewVersion,
    R,
    RowMissed,
    Spend,
    Update,
    Values,
)
from server.db.leases import Fence
from server.db.records import CompletingTask, Reported, Run
from server.db.types import UTCDateTime


async def change_postgres(
    conn: AsyncConnection, fence: Fence, decide: Decide[R], *, completion: bool, durable: bool, blocking: bool
) -> Changed[R] | None:
    """Inside Database.write(): fence (with the facts), decide (in a worker thread if it is `blocking`), write.
    Not `durable`: the fence's statement sets synchronous_commit off for this transaction alone."""
    fenced = leases.fence_statement(sqlite=False, by_run=fence.run_id is not None, keyed=fence.key_hash is not None)
    if completion:
        facts = await _fence_with_facts_postgres(conn, fenced, fence)
    else:
        facts = await _fence_with_bytes_postgres(conn, fenced, fence, durable=durable)
    if facts is None:
        return None
    writes, result = await anyio.to_thread.run_sync(decide, facts) if blocking else decide(facts)
    inserted_id = await write_postgres(conn, [write for write in writes if isinstance(write, Insert | Update | Spend)])
    for write in writes:
        if isinstance(write, Approve):
            approval = await missions.approve(conn, write.task_id, rawsqlite.server_now())
            await queries.insert_audit(conn, write.audit(approval))
        elif isinstance(write, NewVersion):
            latest = await queries.latest_context_packet(conn, write.issue_id)
            assert latest is not None  # every issue starts with version 1
            await queries.insert_context_packet(conn, write.packet(dict(latest)))
    return Changed(result, inserted_id)


async def _fence_with_bytes_postgres(
    conn: AsyncConnection, fenced: ReturningUpdate[Any], fence: Fence, *, durable: bool
) -> Facts | None:
    """The fence, the task's trace id and mission, and the bytes the run has stored so far, in one statement."""
    row = (await conn.execute(_bytes_query(fenced, durable), fence.params())).mappings().first()
    if row is None:
        return None
    return Facts(
        run=Run.of({c.name: row[c.name] for c in t.runs.columns}),
        trace_id=row["task__trace_id"],
        mission_id=row["task__mission_id"],
        stored_bytes=int(row["stored_bytes"]),
    )


# The statements below are built once per shape and reused: building one (a CTE's column proxies, the tree) and
# deriving its cache key, which SQLAlchemy memoizes on the statement object, cost more server CPU per call than
# compiling it did (bench/ANALYSIS.md). Every value travels as a named parameter.


@cache
def _bytes_query(fenced: ReturningUpdate[Any], durable: bool) -> Select[Any]:
    run = fenced.cte("run")
    art = t.artifacts
    stored = select(func.coalesce(func.sum(art.c.size_bytes), 0)).where(art.c.run_id == run.c.id).scalar_subquery()
    trace = select(t.tasks.c.trace_id).where(t.tasks.c.id == run.c.task_id).scalar_subquery()
    mission = select(t.tasks.c.mission_id).where(t.tasks.c.id == run.c.task_id).scalar_subquery()
    query = select(run, stored.label("stored_bytes"), trace.label("task__trace_id"), mission.label("task__mission_id"))
    if durable:
        return query
    # SET LOCAL as a function: evaluated for the fenced row, before the COMMIT it governs (a refused fence
    # returns no row and commits nothing).
    return query.add_columns(FLUSH_OFF.label("flush_off"))


# What Database.write(durable=False) says with SET LOCAL, as an expression of the fence's statement.
FLUSH_OFF = func.set_config(literal_column("'synchronous_commit'"), literal_column("'off'"), true())


async def _fence_with_facts_postgres(conn: AsyncConnection, fenced: ReturningUpdate[Any], fence: Fence) -> Facts | None:
    """The fence and everything a completion reads, in one statement; with the database clock, which is the
    transaction's (now() does not move within one)."""
    row = (await conn.execute(_facts_query(fenced), fence.params())).mappings().first()
    if row is None:
        return None
    task = CompletingTask.of({name: row[f"task__{name}"] for name in TASK_FIELDS})
    return Facts(
        run=Run.of({c.name: row[c.name] for c in t.runs.columns}),
        trace_id=task.trace_id,
        mission_id=task.mission_id,
        task=task,
        acceptance_criteria=tuple(row["acceptance_criteria"] or ()),
        artifacts=tuple(map(Reported.of, row["artifacts"])),
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


async def write_postgres(conn: AsyncConnection, writes: Sequence[Insert | Update | Spend]) -> int | None:
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
            if isinstance(value, ClauseElement):  # SQL or a literal; most values are plain: one isinstance for them
                if _is_literal(value):
                    self.params[f"{prefix}_{name}"] = value.value  # a parameter like any other value
                    type_key = value.type._static_cache_key
                    self._kept &= type_key is not NO_CACHE
                    shape.append((name, "literal", type_key))
                    continue
                if isinstance(value, ColumnElement):
                    cache_key = value._generate_cache_key()
                    self._kept &= cache_key is not None and not cache_key.bindparams
                    shape.append((name, "sql", None if cache_key is None else cache_key.key))
                    continue
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
