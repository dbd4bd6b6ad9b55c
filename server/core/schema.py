"""The schema's revision, for the app and the jct command: migrate to head, and what the database is at."""

from __future__ import annotations

from server.core.service import Core
from server.db import migrate


async def upgrade(core: Core) -> None:
    """Bring the schema to head. Several processes may call this at once: one migrates, the rest wait."""
    await migrate.upgrade(core.db)


def head_revision() -> str:
    """The newest migration this JCT carries."""
    return migrate.head_revision()


async def current_revision(core: Core) -> str | None:
    """The database's revision as Alembic reads it (None before the first migration)."""
    return await migrate.current_revision(core.db)


async def revision(core: Core) -> str | None:
    """The database's revision, read quietly: for probes that ask every few seconds (/readyz)."""
    return await migrate.stored_revision(core.db)
