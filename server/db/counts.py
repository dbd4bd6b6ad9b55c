"""The derived counts behind queue statistics (server/db/bookkeeping.py `count_deltas`): folding their delta rows."""

from __future__ import annotations

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t

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

_PG_FOLD_TELEMETRY = text(
    """
WITH gone AS (DELETE FROM telemetry_deltas RETURNING key, amount)
INSERT INTO telemetry_deltas (key, amount)
SELECT key, SUM(amount) FROM gone GROUP BY key HAVING SUM(amount) <> 0
"""
)


async def fold_count_deltas(conn: AsyncConnection) -> None:
    """Fold the count delta rows (server/db/bookkeeping.py count_deltas) into one row per count.

    Run by the sweeper, so the rows summed by queue statistics stay few however many tasks change.
    On SQLite the caller's BEGIN IMMEDIATE transaction holds the write lock: no trigger runs between the
    two statements, and rows above `top` (the sums just written) are kept."""
    if conn.dialect.name != "sqlite":
        await conn.execute(_PG_FOLD)
        await conn.execute(_PG_FOLD_TELEMETRY)
        return
    await _fold_telemetry_sqlite(conn)
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


async def _fold_telemetry_sqlite(conn: AsyncConnection) -> None:
    """The telemetry totals' rows (server/db/bookkeeping.py telemetry_deltas), folded the same way."""
    deltas = t.telemetry_deltas
    top = (await conn.execute(select(func.max(deltas.c.id)))).scalar()
    if top is None:
        return
    total = func.sum(deltas.c.amount)
    sums = select(deltas.c.key, total).where(deltas.c.id <= top).group_by(deltas.c.key).having(total != 0)
    await conn.execute(insert(deltas).from_select(["key", "amount"], sums))
    await conn.execute(delete(deltas).where(deltas.c.id <= top))


async def telemetry_totals(conn: AsyncConnection) -> tuple[dict[str, float], int]:
    """What agents reported spending, summed per key, and how many rows were summed."""
    deltas = t.telemetry_deltas
    query = select(deltas.c.key, func.sum(deltas.c.amount), func.count()).group_by(deltas.c.key)
    found: dict[str, float] = {}
    rows = 0
    for key, total, summed in (await conn.execute(query)).all():
        found[str(key)] = float(total)
        rows += int(summed)
    return found, rows
