"""Small builders the core tests share."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from server.core import intake
from server.core.models import Actor
from server.core.service import Core
from server.db import tables

# Each works through its own connection (a session), as an agent connected over MCP does.
ALICE = Actor(actor_id="alice", name="alice", session="alice-session")
BOB = Actor(actor_id="bob", name="bob", session="bob-session")
ADMIN = Actor(actor_id="root", actor_kind="human", admin=True, session="root-session")

PATCH = """diff --git a/src/app.py b/src/app.py
--- a/src/app.py
+++ b/src/app.py
@@ -1 +1 @@
-old
+new
"""


async def enqueue(core: Core, **overrides: Any) -> str:
    fields: dict[str, Any] = {
        "objective": "Add input validation",
        "operation": "code_change",
        "target_repo": "myorg/api",
        "acceptance_criteria": ["Email is validated"],
        "context_summary": "The endpoint accepts anything.",
    }
    fields.update(overrides)
    result = await intake.enqueue_task(core, ADMIN, **fields)
    return result.task_id


async def count(core: Core, table: str, **where: Any) -> int:
    t = tables.metadata.tables[table]
    query = select(func.count()).select_from(t)
    for column, value in where.items():
        query = query.where(t.c[column] == value)
    async with core.db.read() as conn:
        return int((await conn.execute(query)).scalar_one())


async def snapshot(core: Core) -> dict[str, int]:
    """Row counts of every table: a cheap way to see that a rejected call changed nothing."""
    return {name: await count(core, name) for name in tables.metadata.tables}
