"""Alembic, driven from code: `upgrade()` on start and from `jct db upgrade`.

Alembic is imported only when a schema is behind: a start on a current schema (every `jct serve --stdio` a
client launches after the first) reads the stored revision with one query and compares it with the head,
read from the migration files' `revision` lines (`head_revision`), and never loads the migration machinery.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from server.db.engine import Database

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]*)?=\s*(.+)$", re.M)
# Any fixed number: every JCT process takes this lock before migrating one PostgreSQL database.
_PG_MIGRATION_LOCK = 0x4A4354


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


@cache
def head_revision() -> str:
    """The newest migration: the one revision no other file names as its down_revision (read from the files,
    without Alembic; Alembic's own answer when the files do not name exactly one)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        for name, value in _REVISION.findall(path.read_text(encoding="utf-8")):
            found = set(re.findall(r"[\"']([^\"']+)[\"']", value))
            (revisions if name == "revision" else parents).update(found)
    heads = revisions - parents
    if len(heads) == 1:
        return str(heads.pop())
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def _upgrade(connection: Connection) -> None:
    from alembic import command

    command.upgrade(alembic_config(connection), "head")


def _current(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


async def upgrade(db: Database) -> None:
    """Bring the schema to head. Several processes may call this at once: one migrates, the rest wait. A schema
    already at head costs one query (no Alembic)."""
    if await stored_revision(db) == head_revision():
        return
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
