"""The queue listing pages through any status mix in claim order, by keyset, without gaps or repeats."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from server.core.claims import cancel, queue
from server.core.service import Core
from server.db import tables
from tests.core.helpers import ADMIN, enqueue

pytestmark = pytest.mark.anyio


async def claim_order(core: Core, *, status: str | None = None, operation: str | None = None) -> list[str]:
    tasks = tables.tasks
    query = select(tasks.c.id).order_by(tasks.c.priority, tasks.c.queued_at, tasks.c.id)
    if status is not None:
        query = query.where(tasks.c.status == status)
    if operation is not None:
        query = query.where(tasks.c.operation == operation)
    async with core.db.read() as conn:
        return [str(task_id) for task_id in (await conn.execute(query)).scalars().all()]


async def pages(core: Core, limit: int, **filters: str) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        page = await queue.list_tasks(core, limit=limit, cursor=cursor, **filters)
        assert page.count == len(page.tasks) <= limit
        seen += [task.task_id for task in page.tasks]
        if page.next_cursor is None:
            return seen
        cursor = page.next_cursor


async def test_every_status_mix_pages_in_claim_order(core: Core) -> None:
    operations = ("code_change", "docs", "analysis")
    ids = [
        await enqueue(core, objective=f"Task {n}", priority=f"P{n % 3}", operation=operations[n % 3]) for n in range(17)
    ]
    for task_id in ids[:4]:
        await cancel.cancel_task(core, ADMIN, task_id, "Not needed.")
    for _ in range(5):
        assert (await queue.claim_next(core, ADMIN)).claimed
    everything = await claim_order(core)
    assert len(everything) == 17

    for limit in (1, 4, 100):
        assert await pages(core, limit, status="all") == everything
        assert await pages(core, limit, status="all", operation="docs") == await claim_order(core, operation="docs")
        for status in ("queued", "running", "cancelled"):
            expected = await claim_order(core, status=status)
            assert expected
            assert await pages(core, limit, status=status) == expected
