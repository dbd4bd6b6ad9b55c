"""Claims that wait for work (DESIGN section 17, server/core/claims/waiting.py), on both databases.

The process's own change feed and sweeper run beside the test (`run_background`), as in a server: what wakes a
waiter is the audit row a release, an expiry or an approval writes, read back by the feed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from mcp import Client
from sqlalchemy import select

from server.background import run_background
from server.config import Settings
from server.core import results
from server.core.claims import queue, work
from server.core.claims.waiting import Waiters
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from server.errors import ErrorCode, JctError
from server.identity import FixedIdentity
from server.mcp import build_mcp
from server.notify.hub import NotificationHub
from tests.core.helpers import ALICE, BOB, count, enqueue
from tests.support import missions

pytestmark = pytest.mark.anyio

LIMIT = 120.0
WAIT = 60.0


@asynccontextmanager
async def running(core: Core) -> AsyncIterator[None]:
    """The change feed, sweeper and merge queue of `core`'s process, until the block ends."""
    async with anyio.create_task_group() as tg:
        await tg.start(run_background, core, NotificationHub())
        yield
        tg.cancel_scope.cancel()


@asynccontextmanager
async def served(make_settings: Callable[..., Settings], **overrides: Any) -> AsyncIterator[Core]:
    core = Core.build(make_settings(**overrides))
    try:
        async with running(core):
            yield core
    finally:
        await core.db.dispose()


class Waiting:
    """queue.claim_next(wait_seconds) in the background: `started` once it waits (its first progress)."""

    def __init__(self, core: Core, actor: Any, wait: float = WAIT, **filters: Any) -> None:
        self.core, self.actor, self.wait, self.filters = core, actor, wait, filters
        self.started = anyio.Event()
        self.result: results.ClaimNext | None = None

    async def _progress(self, waited: float, wait: float) -> None:
        self.started.set()

    async def run(self) -> None:
        self.result = await queue.claim_next(
            self.core, self.actor, wait_seconds=self.wait, progress=self._progress, **self.filters
        )


async def waiting(tg: TaskGroup, *waiters: Waiting) -> None:
    """Start the waiters in `tg`; return once each of them waits."""
    for waiter in waiters:
        tg.start_soon(waiter.run)
    for waiter in waiters:
        await waiter.started.wait()


# --- what wakes a waiter ---------------------------------------------------------------------------


async def test_a_released_task_goes_to_the_waiter(make_settings: Callable[..., Settings]) -> None:
    async with served(make_settings) as core:
        task_id = await enqueue(core, operation="analysis")
        held = await queue.claim_next(core, ALICE)
        assert held.task_id == task_id
        waiter = Waiting(core, BOB)
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, waiter)
                await work.release_task(core, ALICE, task_id, "Not mine after all", run_id=held.run_id)
    assert waiter.result is not None
    assert waiter.result.task_id == task_id


async def test_an_expired_lease_goes_to_the_waiter(make_settings: Callable[..., Settings]) -> None:
    async with served(make_settings, lease_seconds=5, sweep_interval_seconds=0.2) as core:
        task_id = await enqueue(core, operation="analysis")
        assert (await queue.claim_next(core, ALICE)).task_id == task_id  # and ALICE goes silent
        waiter = Waiting(core, BOB)
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, waiter)
    assert waiter.result is not None
    assert waiter.result.task_id == task_id
    assert waiter.result.attempt == 2


async def test_an_approved_dependency_frees_its_dependent_for_the_waiter(
    make_settings: Callable[..., Settings],
) -> None:
    async with served(make_settings) as core:
        async with Client(build_mcp(core, FixedIdentity("planner")), mode="legacy") as planner:
            created = await planner.call_tool(
                "jct_create_mission",
                {
                    "title": "Two steps",
                    "goal": "First, then second",
                    "phases": [{"name": "All", "tasks": [_task("first"), _task("second", "first")]}],
                },
            )
            assert not created.is_error, created.content
            assert created.structured_content is not None
            ids = {item["key"]: item["task_id"] for item in created.structured_content["tasks"]}
        first = await queue.claim_next(core, ALICE)
        assert first.task_id == ids["first"]
        waiter = Waiting(core, BOB)
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, waiter)
                assert first.run_id is not None
                await work.report_artifact(
                    core,
                    ALICE,
                    ids["first"],
                    title="Findings",
                    artifact_type="report",
                    content="The first part, written.",
                    run_id=first.run_id,
                )
                done = await completion.complete_task(
                    core, ALICE, ids["first"], success=True, summary="Written.", run_id=first.run_id
                )
                assert done.review.status == "auto_approved", done
    assert waiter.result is not None
    assert waiter.result.task_id == ids["second"]


def _task(key: str, *depends_on: str) -> dict[str, Any]:
    return missions.task(key, *depends_on, objective=f"Write the {key} part", operation="analysis")


async def test_a_waiter_takes_only_what_its_filters_allow(make_settings: Callable[..., Settings]) -> None:
    async with served(make_settings) as core:
        docs_waiter = Waiting(core, BOB, operation="docs")
        any_waiter = Waiting(core, ALICE, wait=3.0)
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, docs_waiter)
                analysis = await enqueue(core, operation="analysis")
                tg.start_soon(any_waiter.run)  # takes the analysis task at once
                docs = await enqueue(core, operation="docs")
    assert any_waiter.result is not None
    assert any_waiter.result.task_id == analysis
    assert docs_waiter.result is not None
    assert docs_waiter.result.task_id == docs


async def test_stop_answers_every_waiter_at_once_and_later_calls_do_not_wait(
    make_settings: Callable[..., Settings],
) -> None:
    async with served(make_settings) as core:
        waiters = [Waiting(core, ALICE), Waiting(core, BOB)]
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, *waiters)
                core.waiters.stop()
            assert [w.result.claimed if w.result else None for w in waiters] == [False, False]
            late = Waiting(core, ALICE)
            await late.run()
        assert late.result is not None
        assert late.result.claimed is False
        assert not late.started.is_set()
        assert core.waiters.count == 0


# --- caps, bad input, a caller that went away ------------------------------------------------------------


async def test_with_tokens_an_agent_may_wait_in_as_many_calls_as_it_may_hold_claims(
    make_settings: Callable[..., Settings],
) -> None:
    async with served(make_settings, auth="token", max_claims_per_agent=2) as core:
        waiters = [Waiting(core, ALICE), Waiting(core, ALICE)]
        with anyio.fail_after(LIMIT):
            async with anyio.create_task_group() as tg:
                await waiting(tg, *waiters)
                with pytest.raises(JctError) as refused:
                    await queue.claim_next(core, ALICE, wait_seconds=WAIT)
                assert refused.value.code is ErrorCode.PERMISSION_DENIED
                assert "JCT_MAX_CLAIMS_PER_AGENT" in refused.value.message
                # Without waiting it is an ordinary claim, and another agent may wait.
                assert (await queue.claim_next(core, ALICE)).claimed is False
                other = Waiting(core, BOB, wait=0.5)
                await other.run()
                assert other.result is not None
                assert other.result.claimed is False
                tg.cancel_scope.cancel()
        assert core.waiters.count == 0


@pytest.mark.parametrize("wait", [-1.0, float("nan"), float("inf"), float("-inf"), 10.5, True, "5"])
async def test_a_bad_wait_is_invalid_argument_and_claims_nothing(
    make_settings: Callable[..., Settings], wait: Any
) -> None:
    core = Core.build(make_settings(claim_wait_max_seconds=10))
    try:
        await enqueue(core)
        with pytest.raises(JctError) as refused:
            await queue.claim_next(core, ALICE, wait_seconds=wait)
        assert refused.value.code is ErrorCode.INVALID_ARGUMENT
        assert "JCT_CLAIM_WAIT_MAX_SECONDS" in refused.value.message
        assert await count(core, "runs") == 0
    finally:
        await core.db.dispose()


async def test_a_claim_whose_caller_was_cancelled_once_it_committed_is_released_at_once(core: Core) -> None:
    """The claim's transaction runs to its end even when its caller is cancelled (server/db/engine.py): the
    cancellation here is there before the claim begins, so it is delivered only after the commit."""
    task_id = await enqueue(core, operation="analysis")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await queue.claim_next(core, ALICE)
    assert scope.cancelled_caught
    async with core.db.read() as conn:
        task = (await conn.execute(select(tables.tasks).where(tables.tasks.c.id == task_id))).mappings().one()
        runs = (await conn.execute(select(tables.runs).where(tables.runs.c.task_id == task_id))).mappings().all()
        audit = (
            await conn.execute(
                select(tables.audit_log.c.action, tables.audit_log.c.after).where(
                    tables.audit_log.c.entity_id == task_id
                )
            )
        ).all()
    assert task["status"] == "queued"
    assert task["active_run_id"] is None
    assert [run["status"] for run in runs] == ["released"]
    assert [action for action, _ in audit][-1] == "task.released"
    assert "went away" in audit[-1][1]["reason"]
    # And the next caller gets it.
    assert (await queue.claim_next(core, BOB)).task_id == task_id


# --- a wake-up is not a query per waiter -----------------------------------------------------------------


async def test_a_wake_up_costs_one_try_per_filter_while_nothing_is_claimable() -> None:
    waiters = Waiters()
    tries: list[tuple[str | None, str | None]] = []

    def trying(filters: tuple[str | None, str | None]) -> Callable[[], Any]:
        async def claim() -> str | None:
            tries.append(filters)
            await anyio.sleep(0)
            return None

        return claim

    filters = [("docs", None)] * 30 + [(None, "myorg/")] * 20
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            for n, key in enumerate(filters):
                tg.start_soon(_turn, waiters, f"agent-{n}", key, trying(key))
    assert set(tries) == set(filters)
    assert len(tries) == 2  # one per filter, for fifty waiters
    assert (waiters.tried, waiters.skipped) == (2, 48)  # what /metrics shows (jct_waiting_claim_turns_total)


async def test_a_wake_up_lets_every_task_go_then_stops_trying() -> None:
    waiters = Waiters()
    tasks = ["t1", "t2", "t3"]
    tries = 0

    async def claim() -> str | None:
        nonlocal tries
        tries += 1
        await anyio.sleep(0)
        return tasks.pop() if tasks else None

    got: list[str | None] = []

    async def one(n: int) -> None:
        with waiters.entered(f"agent-{n}", ("docs", None), None):
            got.append(await waiters.take_turn(("docs", None), claim))

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            for n in range(40):
                tg.start_soon(one, n)
    assert sorted(g for g in got if g is not None) == ["t1", "t2", "t3"]
    assert tries == 4  # three claims, one that found nothing; the other 36 skipped


async def _turn(waiters: Waiters, principal: str, key: tuple[str | None, str | None], claim: Any) -> None:
    with waiters.entered(principal, key, None):
        await waiters.take_turn(key, claim)
