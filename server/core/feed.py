"""The audit log read as a change feed (server/notify/feed.py follows it): where it ends, and what lies past a
cursor."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from server.core.service import Core


@dataclass(frozen=True)
class AuditChange:
    """One audit row, as much of it as says which records changed."""

    id: int
    action: str
    entity_kind: str
    entity_id: str
    after: Mapping[str, Any] | None
    mission_id: str | None = None  # a task's mission


async def latest_audit_id(core: Core) -> int:
    """The newest audit id (0 for an empty log)."""
    async with core.db.read() as conn:
        from server.db import feed

        return await feed.latest_audit_id(conn)


async def audit_after(core: Core, after_id: int, holes: Collection[int], limit: int) -> list[AuditChange]:
    """Up to `limit` rows past `after_id`, plus any of `holes` (ids skipped earlier) that have appeared, by id."""
    async with core.db.read() as conn:
        from server.db import feed

        rows = await feed.audit_after(conn, after_id, holes, limit)
    return [
        AuditChange(
            id=int(row["id"]),
            action=str(row["action"]),
            entity_kind=str(row["entity_kind"]),
            entity_id=str(row["entity_id"]),
            after=row["after"] if isinstance(row["after"], Mapping) else None,
            mission_id=str(row["mission_id"]) if row["mission_id"] is not None else None,
        )
        for row in rows
    ]
