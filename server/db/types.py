"""Column types that behave the same on SQLite and PostgreSQL, the metadata every table joins, and the column
groups and indexes more than one table declares alike."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, DateTime, Dialect, Index, Integer, MetaData, String
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.expression import ColumnElement, TextClause
from sqlalchemy.types import TypeDecorator


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on the way in and out; SQLite stores naive text, PostgreSQL timestamptz."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# JSONB on PostgreSQL (binary, indexable), plain JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")
# The same, storing Python None as SQL NULL (not JSON `null`): for a column whose NULL means "none" and is
# looked for with IS NULL, written in multi-row inserts where some rows have none (tasks.touches).
JsonOrNull = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
# BIGINT on PostgreSQL; SQLite only autoincrements an INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


# Stable constraint names, so migrations are the same on every dialect.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

ID = String(36)


def idempotency_columns() -> list[Column[Any]]:
    """What makes a request safe to send again: its idempotency key, whose key it is (the principal that sent it:
    keys are per principal, so one cannot probe another's), and the hash of the request the key first came with.
    A table with them keeps UniqueConstraint("idempotency_scope", "idempotency_key")."""
    return [
        Column("idempotency_key", String(256), nullable=True),
        Column("idempotency_scope", String(256), nullable=True),
        Column("request_hash", String(64), nullable=True),
    ]


def partial_index(
    name: str, column: Column[Any] | str, where: ColumnElement[bool] | TextClause, *, unique: bool = False
) -> Index:
    """An index of the rows where `where` holds, the same condition on both dialects: SQLite uses it only for a
    query whose WHERE has its terms, so `where` writes its values out (a bound parameter is never one)."""
    return Index(name, column, unique=unique, postgresql_where=where, sqlite_where=where)
