"""Thirty agents race jct_claim_next over streamable HTTP against one uvicorn server: no task twice, none lost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import func, select

from server.core.briefings import intake
from server.core.models import Actor
from server.core.service import Core
from server.db import tables
from tests.support.serving import serving
from tests.transports.conftest import call

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

AGENTS = 30
TASKS = 60
ADMIN = Actor(actor_id="root", actor_kind="human", admin=True)


async def test_thirty_agents_claim_every_task_exactly_once(make_settings: Callable[..., Any]) -> None:
    core = Core.build(make_settings())
    try:
        task_ids = [
            (
                await intake.enqueue_task(
                    core,
                    ADMIN,
                    objective=f"Task {n}",
                    operation="analysis",
                    target_repo="myorg/api",
                    priority=f"P{n % 5}",
                )
            ).task_id
            for n in range(TASKS)
        ]
        with anyio.fail_after(240):
            async with serving(make_settings()) as (base_url, _mcp):
                claims = await _race(f"{base_url}/mcp")
                async with Client(f"{base_url}/mcp", mode="legacy") as observer:
                    for task_id in task_ids:
                        task = await call(observer, "jct_get_task", task_id=task_id)
                        assert task["task"]["status"] == "running"
                        assert len(task["runs"]) == 1
                    stats = await call(observer, "jct_queue_stats")
                    assert stats["counts"]["queued"] == 0
                    assert stats["counts"]["running"] == TASKS

        claimed = [task_id for _agent, task_id in claims]
        duplicates = [task_id for task_id, n in Counter(claimed).items() if n > 1]
        assert duplicates == [], f"claimed more than once: {duplicates}"
        assert sorted(claimed) == sorted(task_ids), "some tasks were never claimed"
        assert len({agent for agent, _task in claims}) > 1, "one agent got everything: there was no race"

        runs, audit = tables.metadata.tables["runs"], tables.metadata.tables["audit_log"]
        async with core.db.read() as conn:
            per_task = (await conn.execute(select(runs.c.task_id, func.count()).group_by(runs.c.task_id))).all()
            claimed_rows = (
                await conn.execute(select(func.count()).select_from(audit).where(audit.c.action == "task.claimed"))
            ).scalar_one()
        assert sorted(task for task, _n in per_task) == sorted(task_ids)
        assert {n for _task, n in per_task} == {1}
        assert claimed_rows == TASKS
    finally:
        await core.db.dispose()


async def _race(url: str) -> list[tuple[int, str]]:
    """Connect every agent first (half on the 2025 handshake, half on 2026-07-28), then start them together."""
    claims: list[tuple[int, str]] = []
    go = anyio.Event()
    connected = 0
    all_connected = anyio.Event()

    async def agent(n: int) -> None:
        nonlocal connected
        async with Client(url, mode="legacy" if n % 2 == 0 else "auto") as client:
            connected += 1
            if connected == AGENTS:
                all_connected.set()
            await go.wait()
            for _ in range(TASKS + 1):
                result = await call(client, "jct_claim_next")
                if not result["claimed"]:
                    return
                claims.append((n, str(result["task_id"])))
            pytest.fail(f"agent {n} claimed more tasks than exist")

    async with anyio.create_task_group() as tg:
        for n in range(AGENTS):
            tg.start_soon(agent, n)
        await all_connected.wait()
        go.set()
    return claims
