"""The database schema's revision: bring it to head, and read where it is."""

from __future__ import annotations

from server.core.service import Core
from server.db import migrate


async def upgrade(core: Core) -> None:
    """Bring the schema to head. Several processes may call this at once: one migrates, the rest wait."""
    await migrate.upgrade(core.db)


def head_revision() -> str:
    return migrate.head_revision()


async def current_revision(core: Core) -> str | None:
    return await migrate.current_revision(core.db)
