"""The counting the fault scenarios end with catches what it counts: a scenario that passes has really found
no double claim, no lost task and no missing write (tests/support/books.py)."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from server.core.claims import queue, work
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from server.db import tables
from tests.core.helpers import ALICE, BOB, bare
from tests.support.agents import Tally, enqueue_work, patch
from tests.support.books import Books

pytestmark = pytest.mark.anyio


async def finish(core: Core, actor: Actor, task_id: str) -> str:
    """Report a patch and complete the task as `actor`; the artifact's id."""
    artifact = await work.report_artifact(
        core, actor, task_id, title="Code changes", artifact_type="code_patch", content=patch(task_id)
    )
    criteria = [{"criterion": 0, "status": "satisfied", "evidence": [artifact.artifact_id], "note": None}]
    await completion.complete_task(core, actor, task_id, success=True, summary="Done.", criteria_results=criteria)
    return artifact.artifact_id


async def test_a_clean_run_has_nothing_to_report(core: Core, database_url: str) -> None:
    (task_id,) = await enqueue_work(core, 1)
    claim = await queue.claim_next(core, ALICE)
    assert claim.run_id is not None
    run_id = bare(claim.run_id)
    artifact_id = await finish(core, ALICE, task_id)
    tally = Tally(claims={run_id: task_id}, artifacts={artifact_id: run_id})
    tally.completions[run_id] = task_id

    books = await Books.read(database_url)
    assert books.problems(tally) == {}
    assert books.store_differs(core.settings.traces) == []


async def test_a_task_claimed_twice_is_counted(core: Core, database_url: str) -> None:
    (task_id,) = await enqueue_work(core, 1)
    first = await queue.claim_next(core, ALICE)
    assert first.run_id is not None
    # What a broken claim would do: the task is handed out again while its first run still holds it.
    async with core.db.write() as conn:
        await conn.execute(
            update(tables.tasks).where(tables.tasks.c.id == task_id).values(status="queued", active_run_id=None)
        )
    second = await queue.claim_next(core, BOB)
    assert second.task_id == task_id
    assert second.run_id is not None
    await finish(core, BOB, task_id)

    books = await Books.read(database_url)
    assert books.double_claims() == [
        f"task {task_id}: run {bare(second.run_id)} claimed (audit {books.claims()[1]['id']}) "
        f"before run {bare(first.run_id)} ended"
    ]
    assert books.unaccounted_claims() == [
        f"run {bare(first.run_id)} of task {task_id} ended running, not expired, released or completing its task"
    ]
    # And the tally of a client that was told of writes the database does not hold.
    told = Tally(claims={"not-a-run": task_id}, artifacts={"not-an-artifact": first.run_id})
    told.completions[first.run_id] = task_id
    assert len(books.missing(told)) == 3


async def test_a_task_left_running_is_lost(core: Core, database_url: str) -> None:
    (task_id,) = await enqueue_work(core, 1)
    await queue.claim_next(core, ALICE)
    books = await Books.read(database_url)
    assert len(books.lost_tasks()) == 1
    assert books.lost_tasks()[0].startswith(f"task {task_id}: running")
