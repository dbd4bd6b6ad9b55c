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
from server.core.claims import queue
from server.core.review import completion
from server.core.service import Core
from server.db.engine import Database
from tests.core.helpers import ALICE, enqueue

pytestmark = pytest.mark.anyio


@contextmanager
def checkouts(db: Database) -> Iterator[list[int]]:
    """How many times a connection is taken from the pool while the block runs (one per transaction)."""
    taken = [0]

    def took(*_args: Any) -> None:
        taken[0] += 1

    event.listen(db.engine.sync_engine.pool, "checkout", took)
    try:
        yield taken
    finally:
        event.remove(db.engine.sync_engine.pool, "checkout", took)


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
