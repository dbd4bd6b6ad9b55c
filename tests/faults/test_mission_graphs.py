"""Missions under real concurrency (DESIGN section 11): fifty agents drain twenty missions of ten-task graphs,
chains and diamonds, through two server processes on one database.

What must hold, counted from the database afterwards: no task was claimed before every task it depends on
(and every task of the phases before its own) was approved, read from the audit log (each `task.claimed`
comes after the approval rows of all it waits for); no double claims; no lost tasks; every mission ended
completed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import select

from server.config import Settings
from server.core.missions import plan
from server.core.service import Core
from server.db import tables
from server.db.engine import Database
from tests.support import missions
from tests.support.agents import ADMIN, TARGET_PATH, Tally, crowd, run_all
from tests.support.books import Books
from tests.support.servers import serving
from tests.transports.conftest import server_env

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

MISSIONS = 20
AGENTS = 50
LIMIT = 240


def _task(key: str, *depends_on: str) -> dict[str, Any]:
    return missions.task(
        key,
        *depends_on,
        objective=f"Change module {key}",
        target_path=TARGET_PATH,
        touches=[],  # each changes a module of its own: only the graph orders them
        acceptance_criteria=["The module is changed"],
    )


def chain() -> list[dict[str, Any]]:
    """Ten tasks, each waiting for the one before, in one phase."""
    return [{"name": "Chain", "tasks": [_task(f"c{i}", *([f"c{i - 1}"] if i else [])) for i in range(10)]}]


def diamonds() -> list[dict[str, Any]]:
    """Two diamonds in two phases: a -> (b, c, d) -> e, then f -> (g, h) -> i, j waits for i."""
    first = [_task("a"), _task("b", "a"), _task("c", "a"), _task("d", "a"), _task("e", "b", "c", "d")]
    second = [_task("f"), _task("g", "f"), _task("h", "f"), _task("i", "g", "h"), _task("j", "i")]
    return [{"name": "First diamond", "tasks": first}, {"name": "Second diamond", "tasks": second}]


async def test_fifty_agents_never_claim_a_task_before_what_it_waits_for_is_approved(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    core = Core.build(make_settings())
    try:
        mission_ids = []
        for n in range(MISSIONS):
            phases = chain() if n % 2 == 0 else diamonds()
            made = await plan.create_mission(core, ADMIN, title=f"Mission {n}", goal="Graphs", phases=phases)
            mission_ids.append(made.mission_id)
    finally:
        await core.db.dispose()

    tally = Tally()
    with anyio.fail_after(LIMIT):
        async with serving(server_env(database_url, tmp_path), tmp_path, count=2) as servers:
            await run_all(crowd(AGENTS, [server.mcp_url for server in servers], tally, work_seconds=0.01))

    books = await Books.read(database_url)
    assert len(books.tasks) == MISSIONS * 10
    assert books.double_claims() == []
    assert books.lost_tasks() == []
    assert books.unaccounted_claims() == []
    assert books.missing(tally) == []
    assert await claimed_before_approval(database_url) == []
    core = Core.build(make_settings())
    try:
        async with core.db.read() as conn:
            statuses = (await conn.execute(select(tables.missions.c.status))).scalars().all()
    finally:
        await core.db.dispose()
    assert sorted(set(statuses)) == ["completed"], statuses


async def claimed_before_approval(database_url: str) -> list[str]:
    """Each claim of a task against the approvals of everything it waits for, in audit-log order."""
    db = Database(database_url)
    try:
        async with db.read() as conn:
            tasks = (await conn.execute(select(tables.tasks))).mappings().all()
            deps = (await conn.execute(select(tables.task_dependencies))).mappings().all()
            audit = (await conn.execute(select(tables.audit_log).order_by(tables.audit_log.c.id))).mappings().all()
    finally:
        await db.dispose()
    by_trace = {task["trace_id"]: task for task in tasks}
    approved_at: dict[str, int] = {}
    for row in audit:
        after = row["after"] or {}
        if row["action"] == "review.submitted" and after.get("decision") == "approved":
            task = by_trace[row["trace_id"]]
            approved_at.setdefault(task["id"], int(row["id"]))
    waits: dict[str, set[str]] = {task["id"]: set() for task in tasks}
    for link in deps:
        waits[link["task_id"]].add(link["depends_on"])
    for task in tasks:  # and every task of the phases before its own
        waits[task["id"]] |= {
            other["id"]
            for other in tasks
            if other["mission_id"] == task["mission_id"] and other["phase"] < task["phase"]
        }
    wrong = []
    for row in audit:
        if row["action"] != "task.claimed":
            continue
        for dep in waits[row["entity_id"]]:
            if dep not in approved_at or approved_at[dep] > int(row["id"]):
                wrong.append(f"task {row['entity_id']} claimed (audit {row['id']}) before {dep} was approved")
    assert approved_at, "no approvals were read"
    return wrong
