"""Reading the audit log as a change feed."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import RowMapping, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t


async def latest_audit_id(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.coalesce(func.max(t.audit_log.c.id), 0)))).scalar_one())


async def audit_after(conn: AsyncConnection, after_id: int, holes: Collection[int], limit: int) -> Sequence[RowMapping]:
    """Rows past the cursor, plus any ids the follower is still waiting for (see server/notify/feed.py)."""
    a = t.audit_log
    condition = a.c.id > after_id
    if holes:
        condition = or_(condition, a.c.id.in_(list(holes)))
    query = select(a.c.id, a.c.action, a.c.entity_kind, a.c.entity_id, a.c.after).where(condition)
    return (await conn.execute(query.order_by(a.c.id).limit(limit))).mappings().all()
