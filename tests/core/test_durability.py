"""Which writes wait for PostgreSQL's WAL flush at COMMIT: every one but those that may be lost without harm
(a held lease's renewal, a progress note that asks for no person), which commit with `synchronous_commit = off`
for their own transaction alone. Seen as PostgreSQL sees it: the setting each transaction runs under, read from
inside it, and every statement the server sent while a call ran."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from server.config import Settings
from server.core.claims import holding, queue, work
from server.core.claims.holders import CURRENT, Holder
from server.core.review import completion
from server.core.service import Core
from server.db.engine import Database
from tests.core.helpers import ALICE, enqueue

pytestmark = pytest.mark.anyio

SET_ASYNC = "SET LOCAL synchronous_commit = off"


@pytest.fixture
def postgres_only(dialect: str) -> None:
    if dialect != "postgresql":
        pytest.skip("a PostgreSQL setting (SQLite in WAL mode waits for no flush at COMMIT either way)")


@contextmanager
def statements(db: Database) -> Iterator[list[str]]:
    """Every statement the database's engine sends while the block runs."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)


async def test_a_write_waits_for_its_flush_unless_it_says_it_may_be_lost(
    postgres_only: None, make_settings: Callable[..., Settings]
) -> None:
    core = Core.build(make_settings())
    try:
        async with core.db.write() as conn:
            durable = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
        async with core.db.write(durable=False) as conn:
            lossy = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
        async with core.db.write() as conn:
            after = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
    finally:
        await core.db.dispose()
    assert (durable, lossy, after) == ("on", "off", "on"), "the setting is the transaction's alone"


async def test_only_renewals_and_plain_progress_notes_give_up_the_flush(
    postgres_only: None, make_settings: Callable[..., Settings]
) -> None:
    core = Core.build(make_settings(live_lease_seconds=30))
    try:
        task_id = await enqueue(core)
        token = CURRENT.set(Holder("test", lambda: True))
        try:
            with statements(core.db) as claim:
                claimed = await queue.claim_next(core, ALICE)
        finally:
            CURRENT.reset(token)
        assert claimed.task_id == task_id
        with statements(core.db) as renewal:
            assert await holding.renew_once(core) == 1
        with statements(core.db) as note:
            await work.report_progress(core, ALICE, task_id, message="Tests running", run_id=claimed.run_id)
        with statements(core.db) as blocker:
            await work.report_progress(
                core,
                ALICE,
                task_id,
                message="Which database?",
                kind="blocker",
                data={"requires_human": True},
                run_id=claimed.run_id,
            )
        with statements(core.db) as done:
            await completion.complete_task(core, ALICE, task_id, success=True, summary="Done.", run_id=claimed.run_id)
    finally:
        await core.db.dispose()
    assert SET_ASYNC in renewal
    assert SET_ASYNC in note
    for durable in (claim, blocker, done):
        assert durable, "the call wrote through this engine"
        assert SET_ASYNC not in durable
