"""Which failures are the world's (UNAVAILABLE, retry later) and which are bugs, on real drivers; and the log
that says so once per kind per interval.

Before server/failures.py, every one of these was INTERNAL_ERROR "Nothing you sent caused this" with a
traceback per call; these tests name the real errors each driver raises, so none of them can pass on it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text

from server.core.tracestore import TraceStore
from server.db.engine import Database
from server.db.migrate import upgrade
from server.errors import ErrorCode, JctError
from server.failures import FailureLog, Kind, WorldFailure, as_error, world_failure
from tests.world import fill, refuse_connections, refusing_connections, small_disk, terminate_backend

pytestmark = pytest.mark.anyio

RUN = "6d0c2b63-29c5-4b1b-9d38-0d4a2c1e9f00"


async def failure_of(work: object) -> WorldFailure | None:
    """Run the awaitable `work`, which must raise; the classification of what it raised."""
    with anyio.fail_after(30):
        try:
            await work  # type: ignore[misc]
        except Exception as exc:
            return world_failure(exc)
    raise AssertionError("the work did not fail")


def assert_failure(failure: WorldFailure | None, kind: Kind, detail: str) -> WorldFailure:
    """The work failed as `kind`, its detail naming `detail`; the failure, for further checks."""
    assert failure is not None
    assert failure.kind is kind
    assert detail in failure.detail
    return failure


async def select_one(db: Database) -> None:
    async with db.read() as conn:
        await conn.execute(text("SELECT 1"))


async def test_a_refused_connection_is_unreachable() -> None:
    db = Database("postgresql+asyncpg://postgres@127.0.0.1:1/x")
    try:
        failure = await failure_of(select_one(db))
    finally:
        await db.dispose()
    assert not assert_failure(failure, Kind.UNREACHABLE, "ConnectionRefusedError").outcome_unknown


async def test_a_database_refusing_connections_and_lost_connections_are_unreachable(
    database_url: str, dialect: str
) -> None:
    if dialect != "postgresql":
        pytest.skip("an outage of a PostgreSQL server")
    db = Database(database_url)
    try:
        await select_one(db)  # a pooled connection, about to be cut
        async with refusing_connections(database_url):
            lost = await failure_of(select_one(db))  # the pooled connection was terminated
            refused = await failure_of(select_one(db))  # a new one is refused
        await select_one(db)  # and once connections are allowed again, it simply works
    finally:
        await db.dispose()
    assert lost is not None
    assert refused is not None
    assert (lost.kind, refused.kind) == (Kind.UNREACHABLE, Kind.UNREACHABLE)
    assert "not currently accepting connections" in refused.detail


async def test_lock_and_statement_timeouts_and_a_locked_sqlite_are_busy(database_url: str, dialect: str) -> None:
    db = Database(database_url)
    try:
        async with db.write() as conn:
            await conn.execute(text("CREATE TABLE held (x integer)"))
        if dialect == "sqlite":
            writer = sqlite3.connect(database_url.split("///", 1)[1])
            try:
                writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock
                async with db.read() as conn:
                    await conn.execute(text("PRAGMA busy_timeout=50"))
                    locked = await failure_of(conn.execute(text("INSERT INTO held VALUES (1)")))
            finally:
                writer.close()
            assert_failure(locked, Kind.BUSY, "database is locked")
            return

        async def blocked(setting: str, statement: str) -> WorldFailure | None:
            async with db.engine.connect() as conn:
                await conn.execute(text(setting))
                return await failure_of(conn.execute(text(statement)))

        async with db.engine.connect() as holder:
            await holder.execute(text("LOCK TABLE held"))
            lock = await blocked("SET lock_timeout = '50ms'", "SELECT * FROM held")
            statement = await blocked("SET statement_timeout = '50ms'", "SELECT pg_sleep(5)")
            await holder.rollback()
    finally:
        await db.dispose()
    assert_failure(lock, Kind.BUSY, "lock timeout")
    assert_failure(statement, Kind.BUSY, "statement timeout")


async def test_a_connection_lost_during_commit_leaves_the_outcome_unknown(database_url: str, dialect: str) -> None:
    """Only PostgreSQL can lose a COMMIT in flight; a loss before it is an ordinary outage."""
    if dialect != "postgresql":
        pytest.skip("a PostgreSQL connection lost mid-transaction")
    db = Database(database_url)

    async def cut_then(more: bool) -> None:
        async with db.write() as conn:
            pid = (await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            await terminate_backend(pid)
            if more:
                await conn.execute(text("SELECT 1"))  # fails inside the transaction

    try:
        before_commit = await failure_of(cut_then(more=True))
        at_commit = await failure_of(cut_then(more=False))
    finally:
        await db.dispose()
    assert before_commit is not None
    assert at_commit is not None
    assert (before_commit.kind, at_commit.kind) == (Kind.UNREACHABLE, Kind.UNREACHABLE)
    assert not before_commit.outcome_unknown
    assert "nothing was recorded" in as_error(before_commit).suggestion
    assert at_commit.outcome_unknown
    told = as_error(at_commit)
    assert "cannot tell whether" in told.message
    assert "nothing was recorded" not in told.suggestion


async def test_a_full_disk_is_disk_full_for_sqlite_and_for_the_trace_store(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        db = Database(f"sqlite+aiosqlite:///{disk / 'jct.db'}")
        try:
            await upgrade(db)
            async with db.write() as conn:
                await conn.execute(text("CREATE TABLE big (blob text)"))
            filler = fill(disk, leave=16 * 1024)

            async def grow() -> None:
                for _ in range(64):
                    async with db.write() as conn:
                        await conn.execute(text("INSERT INTO big VALUES (:b)"), {"b": "x" * 64 * 1024})

            database_full = await failure_of(grow())
            filler.unlink()
        finally:
            await db.dispose()
        fill(disk, leave=4 * 1024)
        store = TraceStore(disk / "traces", 1024 * 1024)
        store_full = await failure_of(anyio.to_thread.run_sync(store.write, RUN, "log.txt", b"x" * 256 * 1024))
        assert not list((disk / "traces").rglob("*.txt")), "no partial file is left behind"
    assert_failure(database_full, Kind.DISK_FULL, "database or disk is full")
    assert as_error(assert_failure(store_full, Kind.DISK_FULL, "No space left on device")).retry_after_seconds == 60


async def test_bugs_and_bad_input_are_not_failures_of_the_world(database_url: str, tmp_path: Path) -> None:
    db = Database(database_url)
    try:
        async with db.write() as conn:
            await conn.execute(text("CREATE TABLE uniq (x integer PRIMARY KEY)"))
            await conn.execute(text("INSERT INTO uniq VALUES (1)"))

        async def duplicate() -> None:
            async with db.write() as conn:
                await conn.execute(text("INSERT INTO uniq VALUES (1)"))

        async def gibberish() -> None:
            async with db.read() as conn:
                await conn.execute(text("SELEC 1"))

        async def missing_table() -> None:
            async with db.read() as conn:
                await conn.execute(text("SELECT * FROM no_such_table"))

        for work in (duplicate(), gibberish(), missing_table()):
            assert await failure_of(work) is None
    finally:
        await db.dispose()
    assert world_failure(FileNotFoundError(2, "No such file or directory")) is None
    assert world_failure(PermissionError(13, "Permission denied")) is None
    assert world_failure(ValueError("bad")) is None
    assert world_failure(JctError(ErrorCode.INVALID_ARGUMENT, "bad")) is None
    wrapped = RuntimeError("while storing")
    wrapped.__cause__ = OSError(28, os.strerror(28))
    assert world_failure(wrapped) == WorldFailure(Kind.DISK_FULL, "OSError: [Errno 28] No space left on device")


def test_the_failure_log_writes_one_line_per_kind_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    log = logging.getLogger("jct.test.failures")
    failures = FailureLog(log, "calls answer UNAVAILABLE", interval=10.0, clock=lambda: now[0])
    down = WorldFailure(Kind.UNREACHABLE, "ConnectionRefusedError: [Errno 111] Connect call failed")
    full = WorldFailure(Kind.DISK_FULL, "OSError: [Errno 28] No space left on device")
    with caplog.at_level(logging.INFO, logger="jct.test.failures"):
        for _ in range(500):  # 500 calls in 5 seconds
            failures.failed(down)
            now[0] += 0.01
        failures.failed(full)
        now[0] += 6.0
        failures.failed(down)  # 11 s after the first line
        failures.failed(down)
        failures.recovered()
        failures.recovered()  # nothing left to close
    lines = [record.getMessage() for record in caplog.records]
    assert all(record.exc_info is None for record in caplog.records)
    assert lines == [
        "database unreachable: ConnectionRefusedError: [Errno 111] Connect call failed "
        "(calls answer UNAVAILABLE; logged once per 10s while it lasts)",
        "disk full: OSError: [Errno 28] No space left on device (calls answer UNAVAILABLE; logged once per 10s "
        "while it lasts)",
        "database unreachable: ConnectionRefusedError: [Errno 111] Connect call failed "
        "(still; 500 more since the last line, 501 in 11s)",
        "database unreachable: over after 11.0s, 502 failure(s) in all",
        "disk full: over after 6.0s, 1 failure(s) in all",
    ]


def test_other_work_succeeding_does_not_end_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    """A full trace disk fails every report while claims and reads succeed: one line per interval, not two
    per refused report (measured under jct serve: tests/faults/test_full_trace_disk.py)."""
    now = [100.0]
    log = logging.getLogger("jct.test.failures")
    failures = FailureLog(log, "calls answer UNAVAILABLE", interval=10.0, clock=lambda: now[0])
    full = WorldFailure(Kind.DISK_FULL, "OSError: [Errno 28] No space left on device")
    with caplog.at_level(logging.INFO, logger="jct.test.failures"):
        for _ in range(100):  # 100 refused reports in 5 seconds, each followed by a claim that works
            failures.failed(full, "jct_report_artifact")
            failures.recovered("jct_claim_next")
            now[0] += 0.05
        failures.recovered("jct_report_artifact")  # a report fits again
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "disk full: OSError: [Errno 28] No space left on device (calls answer UNAVAILABLE; logged once per 10s "
        "while it lasts)",
        "disk full: over after 5.0s, 100 failure(s) in all",
    ]


def test_a_failure_nothing_repeats_ends_with_the_next_success(caplog: pytest.LogCaptureFixture) -> None:
    """Whatever failed may never be called again: once nothing has failed for an interval, any success ends it."""
    now = [100.0]
    log = logging.getLogger("jct.test.failures")
    failures = FailureLog(log, "calls answer UNAVAILABLE", interval=10.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="jct.test.failures"):
        failures.failed(WorldFailure(Kind.BUSY, "LockNotAvailableError: lock timeout"), "jct_claim_task")
        now[0] += 5.0
        failures.recovered("jct_list_tasks")  # too soon to tell
        now[0] += 5.0
        failures.recovered("jct_list_tasks")
    assert [record.getMessage() for record in caplog.records][1:] == [
        "database busy: over after 10.0s, 1 failure(s) in all"
    ]


def test_a_call_begun_before_the_outage_does_not_end_it(caplog: pytest.LogCaptureFixture) -> None:
    """The database cuts its connections one by one: a call that already held one finishes after another
    call met the cut (seen in CI: "over after 0.0s", then a second first line). Only work begun after the
    last failure says the failure is over."""
    now = [100.0]
    log = logging.getLogger("jct.test.failures")
    failures = FailureLog(log, "calls answer UNAVAILABLE", interval=10.0, clock=lambda: now[0])
    cut = WorldFailure(Kind.UNREACHABLE, "ConnectionResetError: [Errno 104] Connection reset by peer")
    with caplog.at_level(logging.INFO, logger="jct.test.failures"):
        began_early = failures.now()
        now[0] += 0.01
        failures.failed(cut, "jct_claim_next")
        now[0] += 0.001
        failures.recovered("jct_claim_next", began_early)  # held its connection from before the cut
        failures.failed(cut, "jct_claim_next")
        now[0] += 3.0
        failures.recovered("jct_claim_next", failures.now())
    assert [record.getMessage() for record in caplog.records] == [
        "database unreachable: ConnectionResetError: [Errno 104] Connection reset by peer "
        "(calls answer UNAVAILABLE; logged once per 10s while it lasts)",
        "database unreachable: over after 3.0s, 2 failure(s) in all",
    ]


async def test_refusing_connections_is_undone_for_the_next_test(database_url: str, dialect: str) -> None:
    """The helper itself: an outage ends when the test says so, and only its own database was touched."""
    if dialect != "postgresql":
        pytest.skip("PostgreSQL only")
    await refuse_connections(database_url)
    db = Database(database_url)
    try:
        assert (await failure_of(select_one(db))) is not None
    finally:
        await db.dispose()
    async with refusing_connections(database_url):
        pass
    db = Database(database_url)
    try:
        await select_one(db)
    finally:
        await db.dispose()
