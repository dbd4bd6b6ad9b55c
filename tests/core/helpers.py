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


# Folded by the sweeper in the background (many rows into one per key): what they hold is their sums.
FOLDED = {"count_deltas": ("entity", "status", "delta"), "telemetry_deltas": ("key", "amount")}


async def snapshot(core: Core) -> dict[str, Any]:
    """Row counts of every table, and the sums of the folded ones: a cheap way to see that a rejected call
    changed nothing."""
    seen: dict[str, Any] = {name: await count(core, name) for name in tables.metadata.tables if name not in FOLDED}
    async with core.db.read() as conn:
        for name, (*keys, amount) in FOLDED.items():
            t = tables.metadata.tables[name]
            query = select(*(t.c[key] for key in keys), func.sum(t.c[amount])).group_by(*(t.c[key] for key in keys))
            seen[name] = {tuple(row[:-1]): row[-1] for row in await conn.execute(query) if row[-1]}
    return seen
