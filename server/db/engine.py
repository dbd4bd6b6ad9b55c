"""The engine: one per process, with the transaction discipline each dialect needs."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import anyio
from sqlalchemy import ColumnElement, event, func, literal, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState
from sqlalchemy.util import await_

from server import failures
from server.db import driver as sqlite_driver
from server.db.driver import run_on_driver_thread, sqlite3_connection
from server.db.types import UTCDateTime

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0
CANCEL_TIMEOUT = 3.0
# How long a statement may wait for a lock, and run at all, before it fails (and its transaction rolls back).
LOCK_TIMEOUT = 10.0
STATEMENT_TIMEOUT = 60.0
# SQLite waits for another process's write lock in slices this long (its busy_timeout), checking between
# slices whether its time is up or the server is stopping: SQLite's own busy wait cannot be interrupted.
SQLITE_BUSY_SLICE_MS = 1000
# SQLite's WAL is checkpointed into the database every 1,000 pages (about 4 MB), and a checkpoint that
# resets it cuts the file back to SQLITE_WAL_LIMIT_BYTES: a burst of writes, or a reader that held the
# checkpoint off, does not leave a WAL of its own peak size on the disk (it would grow into any space freed).
SQLITE_WAL_CHECKPOINT_PAGES = 1_000
SQLITE_WAL_LIMIT_BYTES = 4 * 1024 * 1024
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    f"PRAGMA busy_timeout={SQLITE_BUSY_SLICE_MS}",
    f"PRAGMA wal_autocheckpoint={SQLITE_WAL_CHECKPOINT_PAGES}",
    f"PRAGMA journal_size_limit={SQLITE_WAL_LIMIT_BYTES}",
)
# Readiness reports the disk full when the SQLite database's file system has less than this free (a write
# appends WAL frames of its pages, and the checkpoint needs room too), or for this long after a write failed
# on a full disk (either database) unless a write has succeeded since.
DISK_FREE_MIN_BYTES = 1024 * 1024
DISK_FULL_REPORT_SECONDS = 60.0


class Database:
    """Owns the engine. `write()` and `read()` are the only ways into a transaction.

    Every wait is bounded: for a lock (`lock_timeout`), for a statement (`statement_timeout`, PostgreSQL),
    and by `stop()`, which a shutdown calls at its deadline: no transaction begins after it, and the
    statements running then are cancelled, so their transactions roll back and their callers are told so."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        max_overflow: int = 20,
        lock_timeout: float = LOCK_TIMEOUT,
        statement_timeout: float = STATEMENT_TIMEOUT,
    ) -> None:
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        self.lock_timeout = lock_timeout
        self.stopping = False
        # When a write last failed on a full disk (time.monotonic()), until a write succeeds.
        self.full_at: float | None = None
        options: dict[str, Any] = {"pool_pre_ping": False}
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            # The reset hook below rolls back only a connection left inside a transaction.
            options.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=120, pool_reset_on_return=None)
        else:
            options.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=120, pool_recycle=1800)
            timeouts = {"lock_timeout": _ms(lock_timeout), "statement_timeout": _ms(statement_timeout)}
            options["connect_args"] = {"timeout": CONNECT_TIMEOUT, "server_settings": timeouts}
        self.engine: AsyncEngine = create_async_engine(url, **options)
        # Writers inside one process queue here instead of spinning on SQLite's busy handler;
        # other processes are still arbitrated by BEGIN IMMEDIATE and busy_timeout.
        self._write_lock: anyio.Lock | None = None
        # SQLite: the connection `write_in_one_call` writes on, held open outside the pool (made at the first such
        # write, under the write lock): taking one from the pool and giving it back cost as much as the hop.
        self._writer: aiosqlite.Connection | None = None
        on_disk = self.dialect == "sqlite" and parsed.database not in (None, "", ":memory:")
        self._writer_database = parsed.database if on_disk else None
        # How many transactions `write_in_one_call` has run (they take no connection from the pool).
        self.one_call_writes = 0
        # The connections checked out now, by pool record: a PostgreSQL backend pid, or a sqlite3 connection.
        self._in_use: dict[int, Any] = {}
        _install_tracking(self)
        if self.dialect == "sqlite":
            self._write_lock = anyio.Lock()
            _install_sqlite_hooks(self)
        self._reader = self.engine.execution_options(deferred_begin=True)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @asynccontextmanager
    async def write(self, *, durable: bool = True) -> AsyncIterator[AsyncConnection]:
        """A read-write transaction: BEGIN IMMEDIATE on SQLite, so the write lock is taken up front.

        `durable=False` is for writes that may be lost without harm (lease renewals, progress notes): on
        PostgreSQL the COMMIT then returns without waiting for its WAL flush (`synchronous_commit = off` for this
        transaction alone). A crash of the database server may lose the last such commits, never a part of one
        and never a durable commit made after them. SQLite (WAL, synchronous=NORMAL) waits for no flush at
        COMMIT either way."""
        lock: AbstractAsyncContextManager[Any] = self._write_lock if self._write_lock is not None else nullcontext()
        async with lock:
            self._check_open()
            with self._uncancellable():
                committing = False
                try:
                    async with self.engine.begin() as conn:
                        if not durable and not self.is_sqlite:
                            await conn.execute(text("SET LOCAL synchronous_commit = off"))
                        yield conn
                        # PostgreSQL may lose the connection with the COMMIT in flight: then nobody knows
                        # whether it was recorded. A failed SQLite COMMIT recorded nothing.
                        committing = not self.is_sqlite
                except Exception as exc:
                    if committing:
                        failures.mark_at_commit(exc)
                    self._note_stopping(exc)
                    failure = failures.world_failure(exc)
                    if failure is not None and failure.kind is failures.Kind.DISK_FULL:
                        self.full_at = time.monotonic()
                    raise
                self.full_at = None

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction: a deferred BEGIN on SQLite, so readers never wait for writers."""
        self._check_open()
        with self._uncancellable():
            try:
                async with self._reader.begin() as conn:
                    yield conn
            except Exception as exc:
                self._note_stopping(exc)
                raise

    async def write_in_one_call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: a whole write transaction (BEGIN IMMEDIATE, `work`, COMMIT) as ONE call on the
        connection's aiosqlite thread, where `work` runs plain sqlite3 (server/db/rawsqlite.py).

        Every statement through SQLAlchemy is several hops to that thread and back (cursor, execute,
        fetch, close); this is one. If `work` raises, the transaction is rolled back and the error
        re-raised here. `work` may block (file I/O): it holds only this connection's thread.
        """
        assert self._write_lock is not None, "SQLite only"
        async with self._write_lock:
            self._check_open()
            self.one_call_writes += 1
            with self._uncancellable():
                if self._writer_database is None:  # an in-memory database is each connection's own
                    async with self.engine.connect() as conn:
                        raw = await conn.get_raw_connection()
                        assert raw.driver_connection is not None
                        return await self._on_driver_thread(raw.driver_connection, work)
                writer = self._writer if self._writer is not None else await self._open_writer()
                self._in_use[id(writer)] = sqlite3_connection(writer)  # a stop's deadline interrupts it
                try:
                    return await self._on_driver_thread(writer, work)
                finally:
                    self._in_use.pop(id(writer), None)

    async def _on_driver_thread(self, driver: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return await run_on_driver_thread(driver, partial(self._transaction, work=work))
        except Exception as exc:
            self._note_stopping(exc)
            raise

    async def _open_writer(self) -> aiosqlite.Connection:
        """The connection `write_in_one_call` keeps, set up as the pool's are (`_install_sqlite_hooks`)."""
        assert self._writer_database is not None
        args, options = self.engine.dialect.create_connect_args(make_url(self.url))
        # BEGIN is said by `_transaction`, never by the driver (isolation_level None).
        writer = await sqlite_driver.connect(*args, **{**options, "isolation_level": None})
        try:
            for pragma in SQLITE_PRAGMAS:
                await writer.execute(pragma)
        except BaseException:
            await writer.close()
            raise
        self._writer = writer
        return writer

    def _transaction(self, db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        """On aiosqlite's thread: `work` inside BEGIN IMMEDIATE ... COMMIT, rolled back if it raises."""
        self.begin_immediate(db.execute)
        try:
            result = work(db)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:  # `work` failed, or the COMMIT did: the connection is left outside one
                db.execute("ROLLBACK")
            raise
        return result

    def begin_immediate(self, execute: Callable[[str], Any]) -> None:
        """BEGIN IMMEDIATE, waiting for another process's write lock at most `lock_timeout`, in slices
        (SQLite's busy wait cannot be interrupted), and not at all once the database is stopping."""
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = "locked" in str(exc) or "busy" in str(exc)
                if not busy or self.stopping or time.monotonic() >= deadline:
                    raise

    def _check_open(self) -> None:
        if self.stopping:
            raise failures.ShuttingDown()

    def disk_full(self) -> str | None:
        """Why writes fail for want of disk now, or None: the SQLite database's file system is nearly full,
        or a write failed on a full disk a short while ago and none has succeeded since."""
        if self.full_at is not None and time.monotonic() - self.full_at < DISK_FULL_REPORT_SECONDS:
            return "a write failed: the database's disk is full"
        database = make_url(self.url).database
        if self.is_sqlite and database and database != ":memory:":
            try:
                stat = os.statvfs(Path(database).resolve().parent)
            except OSError:
                return None
            free = stat.f_bavail * stat.f_frsize
            if free < DISK_FREE_MIN_BYTES:
                return f"{free} bytes free where the database is (at least {DISK_FREE_MIN_BYTES} needed)"
        return None

    def _note_stopping(self, exc: BaseException) -> None:
        if self.stopping:
            failures.mark_stopping(exc)

    async def stop(self) -> int:
        """At a shutdown's deadline: begin no more transactions, and cancel the statements running now so
        their transactions roll back. Returns how many connections were interrupted."""
        self.stopping = True
        held = list(self._in_use.values())
        if not held:
            return 0
        if self.is_sqlite:
            for connection in held:
                connection.interrupt()  # thread-safe; a waiting BEGIN IMMEDIATE gives up at its next slice
            return len(held)
        await _cancel_backends(self.url, [pid for pid in held if isinstance(pid, int)])
        return len(held)

    @asynccontextmanager
    async def schema_change(self) -> AsyncIterator[AsyncConnection]:
        """The transaction migrations run in. On SQLite, with foreign keys off for its length: SQLite
        changes a table's constraints by rebuilding it, which drops a table other tables point at (its
        documented procedure for ALTER TABLE). Whatever the change leaves dangling fails it before commit."""
        if not self.is_sqlite:
            async with self.write() as conn:
                # A migration may wait for another replica's (the advisory lock) and build indexes for long.
                await conn.execute(text("SET LOCAL lock_timeout = 0"))
                await conn.execute(text("SET LOCAL statement_timeout = 0"))
                yield conn
            return
        assert self._write_lock is not None
        async with self._write_lock:
            with self._uncancellable():
                async with self.engine.connect() as conn:
                    raw = await conn.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    await driver.execute("PRAGMA foreign_keys=OFF")  # a no-op inside a transaction: before BEGIN
                    try:
                        async with conn.begin():
                            yield conn
                            dangling = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).all()
                            if dangling:
                                raise RuntimeError(f"the schema change leaves rows without their parent: {dangling}")
                    finally:
                        await driver.execute("PRAGMA foreign_keys=ON")

    def _uncancellable(self) -> AbstractContextManager[Any]:
        """A transaction, once begun, runs to its end even if its caller is cancelled.

        Cancelling a driver call mid-flight leaves a connection half-used: with aiosqlite,
        SQLAlchemy is left a close task that never finishes and the event loop hangs on exit;
        with asyncpg, the connection is torn down under a live protocol. Transactions are short,
        so a cancelled tool call (a client gone, a SIGTERM) simply finishes its transaction
        first. Connecting is bounded (CONNECT_TIMEOUT), so a dead database cannot hold it forever.
        """
        return anyio.CancelScope(shield=True)

    async def ping(self) -> None:
        """One trivial read; raises whatever keeps the database from answering."""
        async with self.read() as conn:
            await conn.execute(text("SELECT 1"))

    async def dispose(self) -> None:
        if self._write_lock is not None:
            async with self._write_lock:  # after a write that may be opening the writer
                writer, self._writer = self._writer, None
                if writer is not None:
                    await writer.close()
        await self.engine.dispose()


def _ms(seconds: float) -> str:
    return str(max(1, round(seconds * 1000)))


async def _cancel_backends(url: str, pids: list[int]) -> None:
    """PostgreSQL: cancel the statements these backends run, from a connection of our own."""
    import asyncpg

    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with anyio.move_on_after(CANCEL_TIMEOUT):
        connection = await asyncpg.connect(dsn, timeout=CANCEL_TIMEOUT)
        try:
            await connection.execute("SELECT pg_cancel_backend(pid) FROM unnest($1::int[]) AS pid", pids)
        finally:
            await connection.close()


def _install_tracking(db: Database) -> None:
    """Know which connections are checked out (and so may be running a statement) at any moment."""
    sync_engine = db.engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _remember(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        driver = dbapi_connection.driver_connection
        record.info["handle"] = sqlite3_connection(driver) if db.is_sqlite else driver.get_server_pid()

    @event.listens_for(sync_engine, "checkout")
    def _out(_dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        db._in_use[id(record)] = record.info.get("handle")

    @event.listens_for(sync_engine, "checkin")
    def _in(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        db._in_use.pop(id(record), None)


def _install_sqlite_hooks(db: Database) -> None:
    engine = db.engine

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Take BEGIN away from the driver, so the begin hook below decides what it says.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A deferred BEGIN that later writes fails with SQLITE_BUSY instead of waiting.
        read_only = conn.get_execution_options().get("deferred_begin", False)
        # Straight to the driver: one hop to aiosqlite's thread, where exec_driver_sql takes three.
        driver = conn.connection.driver_connection
        assert driver is not None
        if read_only:
            await_(driver.execute("BEGIN"))
        else:
            db.begin_immediate(lambda statement: await_(driver.execute(statement)))

    @event.listens_for(engine.sync_engine, "reset")
    def _on_reset(dbapi_connection: Any, record: ConnectionPoolEntry, state: PoolResetState) -> None:
        # A connection back in the pool is rolled back only if a transaction is still open on it:
        # after a COMMIT (nearly always) that would be a hop to the driver's thread for nothing.
        driver = record.driver_connection
        if state.asyncio_safe and not state.transaction_was_reset and driver is not None and driver.in_transaction:
            dbapi_connection.rollback()


def db_now(db: Database) -> ColumnElement[datetime]:
    """The database clock orders and expires things; embedded SQLite shares the server's clock."""
    if db.is_sqlite:
        return literal(datetime.now(UTC), UTCDateTime())
    return func.now()
