"""Small builders the core tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from sqlalchemy import func, select

from server.config import Settings
from server.core.briefings import intake
from server.core.models import Actor, parse_run_id
from server.core.service import Core
from server.db import tables
from server.db.engine import Database

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


def satisfied_by(*artifact_ids: str) -> list[dict[str, Any]]:
    """criteria_results for a completion: the first acceptance criterion satisfied, citing these artifacts."""
    return [{"criterion": 0, "status": "satisfied", "evidence": list(artifact_ids)}]


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


@asynccontextmanager
async def built_core(settings: Settings) -> AsyncIterator[Core]:
    """A Core on `settings`, its engine disposed of at the end."""
    core = Core.build(settings)
    try:
        yield core
    finally:
        await core.db.dispose()


@asynccontextmanager
async def separate_cores(settings: Settings, n: int, pool_size: int = 1) -> AsyncIterator[list[Core]]:
    """n Cores, each on its own engine with `pool_size` connections, opened before the caller starts racing."""
    cores = [
        Core.build(settings, Database(settings.database_url, pool_size=pool_size, max_overflow=0)) for _ in range(n)
    ]
    try:
        for c in cores:  # connect now, so the race is about the work and not about connecting
            async with c.db.read() as conn:
                await conn.exec_driver_sql("SELECT 1")
        yield cores
    finally:
        for c in cores:
            await c.db.dispose()


async def race(cores: list[Core], racer: Callable[[Core, int], Awaitable[None]], seconds: float = 120) -> None:
    """`racer(core, n)` for every core at once, all let go together once every one has started; bounded."""
    start = anyio.Event()

    async def run(c: Core, n: int) -> None:
        await start.wait()
        await racer(c, n)

    with anyio.fail_after(seconds):
        async with anyio.create_task_group() as tg:
            for n, c in enumerate(cores):
                tg.start_soon(run, c, n)
            start.set()


def bare(run_id: str) -> str:
    """The run's id in the run_id a claim returned (which, without tokens, carries the claim's key)."""
    return parse_run_id(run_id)[0]
