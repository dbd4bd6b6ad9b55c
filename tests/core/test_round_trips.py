"""What a completion costs the database: a task JCT cannot verify (no repository it reads) completes in one
transaction, on one connection checkout; a verifiable one reads its change from git first, outside any
transaction, and still completes (tests/integration and tests/git cover what it reads)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from server.config import Settings
from server.core.claims import leases, queue
from server.core.review import completion
from server.core.service import Core
from server.db import changes, queries
from server.db.engine import Database
from tests.core.helpers import ALICE, bare, enqueue

pytestmark = pytest.mark.anyio


@contextmanager
def checkouts(db: Database) -> Iterator[list[int]]:
    """How many transactions the block runs: connections taken from the pool (one per transaction), and SQLite's
    writes in one call, which run on a connection kept outside the pool."""
    taken = [0]

    def took(*_args: Any) -> None:
        taken[0] += 1

    before = db.one_call_writes
    event.listen(db.engine.sync_engine.pool, "checkout", took)
    try:
        yield taken
    finally:
        event.remove(db.engine.sync_engine.pool, "checkout", took)
        taken[0] += db.one_call_writes - before


async def test_a_task_jct_cannot_verify_completes_in_one_transaction(make_settings: Callable[..., Settings]) -> None:
    # Without tokens JCT reads local working trees (an absolute target_repo): "myorg/api" is not one.
    core = Core.build(make_settings())
    try:
        assert core.repos.place_of_any(), "the check that reads first is on"
        task_id = await enqueue(core, operation="analysis")
        claimed = await queue.claim_next(core, ALICE)
        with checkouts(core.db) as taken:
            done = await completion.complete_task(
                core, ALICE, task_id, success=True, summary="Done.", run_id=claimed.run_id
            )
    finally:
        await core.db.dispose()
    assert done.task_id == task_id
    assert taken == [1], "the completion read nothing before its transaction"


async def test_completions_of_one_shape_share_a_statement_and_each_writes_its_own_values(core: Core) -> None:
    """The completion's writes are built once per shape and reused (server/db/changes/): the second completion
    must still write its own run's summary, status and end time, never the first's."""
    executed: list[Any] = []

    def seen(_conn: Any, clause: Any, *_args: Any) -> None:
        executed.append(clause)

    done = []
    event.listen(core.db.engine.sync_engine, "before_execute", seen)
    try:
        for n in range(2):
            task_id = await enqueue(core, operation="analysis", objective=f"Task {n}")
            claimed = await queue.claim_task(core, ALICE, task_id)
            before = len(executed)
            await completion.complete_task(
                core, ALICE, task_id, success=False, summary=f"Summary {n}.", run_id=claimed.run_id
            )
            done.append((bare(claimed.run_id), executed[before:]))
    finally:
        event.remove(core.db.engine.sync_engine, "before_execute", seen)
    async with core.db.read() as conn:
        first_run, second_run = [await queries.get_run(conn, run_id) for run_id, _ in done]
    assert first_run is not None
    assert second_run is not None
    assert (first_run.summary, first_run.status) == ("Summary 0.", "failed")
    assert (second_run.summary, second_run.status) == ("Summary 1.", "failed")
    assert first_run.ended_at is not None
    assert second_run.ended_at is not None
    assert first_run.ended_at < second_run.ended_at
    if not core.db.is_sqlite:  # SQLite's completion is plain sqlite3 in one call (server/db/rawsqlite.py)
        first, second = (statements for _, statements in done)
        assert len(first) == len(second)
        assert all(a is b for a, b in zip(first, second, strict=True)), "the second completion reused each statement"


async def test_a_completion_is_never_applied_without_its_commit_being_durable(core: Core) -> None:
    task_id = await enqueue(core, operation="analysis")
    claimed = await queue.claim_next(core, ALICE)
    fence = leases.fence_for(core, ALICE, task_id, claimed.run_id)

    def decide(_facts: changes.Facts) -> tuple[list[changes.Write], None]:
        raise AssertionError("refused before anything is read")

    with checkouts(core.db) as taken, pytest.raises(ValueError, match="always durable"):
        await changes.apply(core.db, fence, decide, completion=True, durable=False)
    assert taken == [0]
    async with core.db.read() as conn:
        task = await queries.get_task(conn, task_id)
    assert task is not None
    assert task.status == "running"
