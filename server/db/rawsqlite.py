"""Plain sqlite3 on aiosqlite's thread (Database.write_in_one_call), storing values exactly as
SQLAlchemy's column types do (server/db/types.py), so every other reader sees the same rows.

Statements are plain SQL built from the table definitions in server/db/tables.py: the column
types say how a value is stored (JSON as text, UTC times as naive text, booleans as 0/1).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import JSON, Boolean, Table
from sqlalchemy.sql.elements import BindParameter

from server.db.types import UTCDateTime

Values = Mapping[str, Any]


def sqlite_time(value: datetime) -> str:
    """The storage format of SQLAlchemy's SQLite DateTime, which UTCDateTime stores naive UTC in."""
    return value.astimezone(UTC).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S.%f")


def server_now() -> datetime:
    """The embedded database's clock: the server's (SQLite has no clock of its own worth the name)."""
    return datetime.now(UTC)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, BindParameter) else value


@cache
def _kinds(table: Table) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for column in table.columns:
        if isinstance(column.type, UTCDateTime):
            kinds[column.name] = "time"
        elif isinstance(column.type, JSON):
            kinds[column.name] = "json"
        elif isinstance(column.type, Boolean):
            kinds[column.name] = "bool"
    return kinds


def encode(table: Table, values: Values) -> dict[str, Any]:
    """Python values as SQLAlchemy stores them in `table` on SQLite."""
    kinds = _kinds(table)
    stored: dict[str, Any] = {}
    for name, value in values.items():
        value = _plain(value)
        kind = kinds.get(name)
        if kind == "json":
            value = json.dumps(value)  # None too: SQLAlchemy's JSON stores it as 'null'
        elif value is None:
            pass
        elif kind == "time":
            value = sqlite_time(value)
        elif kind == "bool":
            value = int(value)
        stored[name] = value
    return stored


def decode(table: Table, row: Mapping[str, Any]) -> dict[str, Any]:
    """A row of `table` as SQLAlchemy would return it."""
    kinds = _kinds(table)
    values = dict(row)
    for name, value in values.items():
        kind = kinds.get(name)
        if value is None or kind is None:
            continue
        if kind == "json":
            values[name] = json.loads(value)
        elif kind == "time":
            values[name] = datetime.fromisoformat(value).replace(tzinfo=UTC)
        else:
            values[name] = bool(value)
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
