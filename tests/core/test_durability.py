"""Which writes wait for PostgreSQL's WAL flush at COMMIT: every one but those that may be lost without harm
(a held lease's renewal, a progress note that asks for no person), which commit with `synchronous_commit = off`
for their own transaction alone. Seen as PostgreSQL sees it: the setting each transaction runs under, read from
inside it, and every statement the server sent while a call ran."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import event, text

from server.config import Settings
from server.core.claims import holding, queue, work
from server.core.claims.holders import CURRENT, Holder
from server.core.review import completion
from server.core.service import Core
from server.db.engine import Database
from server.errors import JctError
from tests.core.helpers import ALICE, bare, built_core, enqueue
from tests.world import holding_row

pytestmark = pytest.mark.anyio

SET_ASYNC = "SET LOCAL synchronous_commit = off"
# The same, inside a fenced change's first statement (server/db/changes/postgres.py), a round trip fewer.
FLUSH_OFF = "set_config('synchronous_commit', 'off', true)"


def lossy(sent: list[str]) -> bool:
    return any(SET_ASYNC in statement or FLUSH_OFF in statement for statement in sent)


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
            given_up = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
        async with core.db.write() as conn:
            after = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
        async with core.db.write() as conn:
            await conn.execute(text(f"SELECT {FLUSH_OFF}"))
            folded = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
        async with core.db.write() as conn:
            after_folded = (await conn.execute(text("SELECT current_setting('synchronous_commit')"))).scalar_one()
    finally:
        await core.db.dispose()
    assert (durable, given_up, after) == ("on", "off", "on"), "the setting is the transaction's alone"
    assert (folded, after_folded) == ("off", "on"), "set_config(..., true) is SET LOCAL"


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
    assert lossy(renewal)
    assert lossy(note)
    assert len(note) == 2, "the fence (which gives up the flush) and the writes: no SET LOCAL of its own"
    for durable in (claim, blocker, done):
        assert durable, "the call wrote through this engine"
        assert not lossy(durable)


def staged_files(core: Core) -> list[Path]:
    staging = core.settings.traces / "staging"
    return sorted(staging.iterdir()) if staging.is_dir() else []


async def test_a_reports_content_is_on_the_disk_before_its_transaction_waits(
    make_settings: Callable[..., Settings], database_url: str
) -> None:
    """The content's fsync runs before the transaction, not under its lock: while another writer holds the
    lock, the report has already staged its content; once it commits, the content sits in the run, nothing
    staged is left, and the artifact's row names it."""
    async with built_core(make_settings()) as core:
        task_id = await enqueue(core, operation="analysis")
        claimed = await queue.claim_next(core, ALICE)
        assert claimed.run_id is not None
        reported: list[Any] = []

        async def report() -> None:
            reported.append(
                await work.report_artifact(
                    core, ALICE, task_id, title="log", artifact_type="log", content="ok", run_id=claimed.run_id
                )
            )

        async with anyio.create_task_group() as tg, holding_row(database_url, "runs", bare(claimed.run_id)):
            tg.start_soon(report)
            with anyio.fail_after(30):
                while not staged_files(core):
                    await anyio.sleep(0.01)
            assert reported == [], "the report waits for the lock"
            [staged] = staged_files(core)
            assert staged.read_bytes() == b"ok"
        [artifact] = reported
        assert staged_files(core) == []
        path = core.settings.traces / "runs" / bare(claimed.run_id) / "artifacts"
        assert [p.read_bytes() for p in path.iterdir()] == [b"ok"]
        assert artifact.sha256 == hashlib.sha256(b"ok").hexdigest()


async def test_a_refused_report_leaves_nothing_staged(make_settings: Callable[..., Settings]) -> None:
    async with built_core(make_settings()) as core:
        task_id = await enqueue(core, operation="analysis")
        claimed = await queue.claim_next(core, ALICE)
        await work.release_task(core, ALICE, task_id, run_id=claimed.run_id, reason="not mine")
        with pytest.raises(JctError):
            await work.report_artifact(
                core, ALICE, task_id, title="log", artifact_type="log", content="late", run_id=claimed.run_id
            )
        assert staged_files(core) == []
        assert list((core.settings.traces / "runs").rglob("artifacts/*")) == []
