"""Alembic, driven from code: `upgrade()` on start and from `jct db upgrade`."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from server.db.engine import Database

MIGRATIONS = Path(__file__).parent / "migrations"
# Any fixed number: every JCT process takes this lock before migrating one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x4A4354


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _upgrade(connection: Connection) -> None:
    command.upgrade(alembic_config(connection), "head")


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(db: Database) -> None:
    """Bring the schema to head. Several processes may call this at once: one migrates, the rest wait."""
    async with db.schema_change() as conn:
        if not db.is_sqlite:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
        await conn.run_sync(_upgrade)


async def current_revision(db: Database) -> str | None:
    async with db.read() as conn:
        return await conn.run_sync(_current)


async def stored_revision(db: Database) -> str | None:
    """The revision in alembic_version, read with one plain query: alembic's MigrationContext logs at INFO
    every time it is asked, and the readiness probe asks every few seconds."""
    async with db.read() as conn:
        if not await conn.run_sync(lambda sync: inspect(sync).has_table("alembic_version")):
            return None
        return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one_or_none()


async def is_migrated(db: Database) -> bool:
    return await current_revision(db) == head_revision()
