"""Plain sqlite3 on aiosqlite's thread (Database.write_in_one_call), storing values through SQLAlchemy's own
column types, so every other reader sees the same rows.

Statements are plain SQL naming the tables of server/db/tables.py. How a value is stored (JSON as text, UTC
times as naive text, booleans as 0/1) is not restated here: each column's type, as SQLAlchemy's SQLite dialect
adapts it, hands over the processors that SQLAlchemy itself runs on the way in and out.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects.sqlite.aiosqlite import dialect as aiosqlite_dialect
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.types import TypeEngine

from server.db.types import UTCDateTime

Values = Mapping[str, Any]
Processor = Callable[[Any], Any]

# The dialect the engine runs SQLite through: its column type adaptations are the ones applied here.
_DIALECT = aiosqlite_dialect()


def server_now() -> datetime:
    """The embedded database's clock: the server's (SQLite has no clock of its own worth the name)."""
    return datetime.now(UTC)


def _processors(column_type: TypeEngine[Any]) -> tuple[Processor | None, Processor | None]:
    impl = column_type.dialect_impl(_DIALECT)
    return impl.bind_processor(_DIALECT), impl.result_processor(_DIALECT, None)


_TIME_IN, _ = _processors(UTCDateTime())


def stored_time(value: datetime) -> Any:
    """A UTC time as a UTCDateTime column stores it (for a parameter that is no column's value)."""
    assert _TIME_IN is not None
    return _TIME_IN(value)


@cache
def _bind_processors(table: Table) -> dict[str, Processor]:
    return {c.name: p for c in table.columns if (p := _processors(c.type)[0]) is not None}


@cache
def _result_processors(table: Table) -> dict[str, Processor]:
    return {c.name: p for c in table.columns if (p := _processors(c.type)[1]) is not None}


def encode(table: Table, values: Values) -> dict[str, Any]:
    """Python values as SQLAlchemy stores them in `table` on SQLite."""
    processors = _bind_processors(table)
    stored: dict[str, Any] = {}
    for name, value in values.items():
        plain = value.value if isinstance(value, BindParameter) else value
        process = processors.get(name)
        stored[name] = process(plain) if process is not None else plain
    return stored


def decode(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of `table` as SQLAlchemy would return it (names that are no column of `table` pass as read)."""
    processors = _result_processors(table)
    values = dict(row)
    for name, value in values.items():
        process = processors.get(name)
        if process is not None:
            values[name] = process(value)
    return values


def fetch_one(db: sqlite3.Connection, table: Table, sql: str, params: Values) -> dict[str, Any] | None:
    cursor = db.execute(sql, params)
    row = cursor.fetchone()
    if row is None:
        return None
    return decode(table, dict(zip([d[0] for d in cursor.description], row, strict=True)))


def fetch_all(db: sqlite3.Connection, table: Table, sql: str, params: Values) -> list[dict[str, Any]]:
    cursor = db.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [decode(table, dict(zip(names, row, strict=True))) for row in cursor.fetchall()]


def insert(db: sqlite3.Connection, table: Table, rows: Sequence[Values]) -> int | None:
    """Insert rows that all name the same columns; the rowid of a single row inserted."""
    if not rows:
        return None
    columns = list(rows[0])
    sql = f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"
    if len(rows) == 1:
        return db.execute(sql, encode(table, rows[0])).lastrowid
    db.executemany(sql, [encode(table, row) for row in rows])
    return None


def update(
    db: sqlite3.Connection, table: Table, row_id: str, values: Values, status_in: Sequence[str] | None
) -> dict[str, Any] | None:
    """Update one row by id, optionally only from the given statuses; the new row, or None if none matched."""
    assignments = ", ".join(f"{name} = :{name}" for name in values)
    sql = f"UPDATE {table.name} SET {assignments} WHERE id = :_id"
    params = encode(table, values) | {"_id": row_id}
    if status_in is not None:
        sql += f" AND status IN ({', '.join(f':_s{n}' for n in range(len(status_in)))})"
        params |= {f"_s{n}": status for n, status in enumerate(status_in)}
    return fetch_one(db, table, sql + " RETURNING *", params)
