"""Reading the audit log as a change feed."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import RowMapping, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from server.db import tables as t


async def latest_audit_id(conn: AsyncConnection) -> int:
    """The newest id: one probe at the end of the primary key."""
    return int((await conn.execute(select(func.coalesce(func.max(t.audit_log.c.id), 0)))).scalar_one())


async def audit_after(conn: AsyncConnection, after_id: int, holes: Collection[int], limit: int) -> Sequence[RowMapping]:
    """Rows past the cursor, plus any ids the follower is still waiting for (see server/notify/feed.py).

    Two primary-key walks, merged here: `id > after OR id IN holes` in one statement is read in full
    and sorted before the LIMIT on PostgreSQL, which costs as much as the follower is behind."""
    a, tasks = t.audit_log, t.tasks
    # A task's row also names its mission (by primary key), whose page changes with it.
    rows_of = a.outerjoin(tasks, (a.c.entity_kind == "Task") & (tasks.c.id == a.c.entity_id))
    columns = (a.c.id, a.c.action, a.c.entity_kind, a.c.entity_id, a.c.after, tasks.c.mission_id)
    after = select(*columns).select_from(rows_of).where(a.c.id > after_id).order_by(a.c.id).limit(limit)
    rows = list((await conn.execute(after)).mappings())
    waiting = sorted(hole for hole in holes if hole <= after_id)
    if waiting:
        rows += (await conn.execute(select(*columns).select_from(rows_of).where(a.c.id.in_(waiting)))).mappings().all()
        rows.sort(key=lambda row: int(row["id"]))
    return rows[:limit]
