"""The engine: one per process, with the transaction discipline each dialect needs."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
from sqlalchemy import ColumnElement, Float, event, func, literal
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState
from sqlalchemy.util import await_

from server.db import failures
from server.db.types import UTCDateTime

T = TypeVar("T")

CONNECT_TIMEOUT = 10.0
SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    # Another process holding the write lock makes us wait, not fail.
    "PRAGMA busy_timeout=30000",
)


class Database:
    """Owns the engine. `write()` and `read()` are the only ways into a transaction."""

    def __init__(self, url: str, *, pool_size: int = 10, max_overflow: int = 20) -> None:
        self.url = url
        parsed = make_url(url)
        self.dialect = parsed.get_backend_name()
        options: dict[str, Any] = {"pool_pre_ping": False}
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            # The reset hook below rolls back only a connection left inside a transaction.
            options.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=120, pool_reset_on_return=None)
        else:
            options.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=120, pool_recycle=1800)
            options["connect_args"] = {"timeout": CONNECT_TIMEOUT}
        self.engine: AsyncEngine = create_async_engine(url, **options)
        # Writers inside one process queue here instead of spinning on SQLite's busy handler;
        # other processes are still arbitrated by BEGIN IMMEDIATE and busy_timeout.
        self._write_lock: anyio.Lock | None = None
        if self.dialect == "sqlite":
            self._write_lock = anyio.Lock()
            _install_sqlite_hooks(self.engine)
        self._reader = self.engine.execution_options(deferred_begin=True)

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A read-write transaction: BEGIN IMMEDIATE on SQLite, so the write lock is taken up front."""
        lock: AbstractAsyncContextManager[Any] = self._write_lock if self._write_lock is not None else nullcontext()
        async with lock:
            with self._uncancellable():
                committing = False
                try:
                    async with self.engine.begin() as conn:
                        yield conn
                        # PostgreSQL may lose the connection with the COMMIT in flight: then nobody knows
                        # whether it was recorded. A failed SQLite COMMIT recorded nothing.
                        committing = not self.is_sqlite
                except Exception as exc:
                    if committing:
                        failures.mark_at_commit(exc)
                    raise

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction: a deferred BEGIN on SQLite, so readers never wait for writers."""
        with self._uncancellable():
            async with self._reader.begin() as conn:
                yield conn

    async def write_in_one_call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """SQLite: a whole write transaction (BEGIN IMMEDIATE, `work`, COMMIT) as ONE call on the
        connection's aiosqlite thread, where `work` runs plain sqlite3 (server/db/rawsqlite.py).

        Every statement through SQLAlchemy is several hops to that thread and back (cursor, execute,
        fetch, close); this is one. If `work` raises, the transaction is rolled back and the error
        re-raised here. `work` may block (file I/O): it holds only this connection's thread.
        """
        assert self._write_lock is not None, "SQLite only"
        async with self._write_lock:
            with self._uncancellable():
                async with self.engine.connect() as conn:
                    raw = await conn.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    result: T = await driver._execute(_transaction, driver._conn, work)
                    return result

    @asynccontextmanager
    async def schema_change(self) -> AsyncIterator[AsyncConnection]:
        """The transaction migrations run in. On SQLite, with foreign keys off for its length: SQLite
        changes a table's constraints by rebuilding it, which drops a table other tables point at (its
        documented procedure for ALTER TABLE). Whatever the change leaves dangling fails it before commit."""
        if not self.is_sqlite:
            async with self.write() as conn:
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

    async def dispose(self) -> None:
        await self.engine.dispose()


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
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
        await_(driver.execute("BEGIN" if read_only else "BEGIN IMMEDIATE"))

    @event.listens_for(engine.sync_engine, "reset")
    def _on_reset(dbapi_connection: Any, record: ConnectionPoolEntry, state: PoolResetState) -> None:
        # A connection back in the pool is rolled back only if a transaction is still open on it:
        # after a COMMIT (nearly always) that would be a hop to the driver's thread for nothing.
        driver = record.driver_connection
        if state.asyncio_safe and not state.transaction_was_reset and driver is not None and driver.in_transaction:
            dbapi_connection.rollback()


def _transaction(db: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """On aiosqlite's thread: `work` inside BEGIN IMMEDIATE ... COMMIT, rolled back if it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        result = work(db)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
    return result


def db_now(db: Database) -> ColumnElement[datetime]:
    """The database clock orders and expires things; embedded SQLite shares the server's clock."""
    if db.is_sqlite:
        return literal(datetime.now(UTC), UTCDateTime())
    return func.now()


def db_now_plus(db: Database, seconds: float) -> ColumnElement[datetime]:
    if db.is_sqlite:
        return literal(datetime.now(UTC) + timedelta(seconds=seconds), UTCDateTime())
    return func.now() + func.make_interval(0, 0, 0, 0, 0, 0, literal(float(seconds), Float()))
