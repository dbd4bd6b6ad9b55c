"""The engine: one per process, with the transaction discipline each dialect needs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import ColumnElement, Float, event, func, literal
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from server.db.types import UTCDateTime

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
            options.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=120)
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
                async with self.engine.begin() as conn:
                    yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction: a deferred BEGIN on SQLite, so readers never wait for writers."""
        with self._uncancellable():
            async with self._reader.begin() as conn:
                yield conn

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
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")


def db_now(db: Database) -> ColumnElement[datetime]:
    """The database clock orders and expires things; embedded SQLite shares the server's clock."""
    if db.is_sqlite:
        return literal(datetime.now(UTC), UTCDateTime())
    return func.now()


def db_now_plus(db: Database, seconds: float) -> ColumnElement[datetime]:
    if db.is_sqlite:
        return literal(datetime.now(UTC) + timedelta(seconds=seconds), UTCDateTime())
    return func.now() + func.make_interval(0, 0, 0, 0, 0, 0, literal(float(seconds), Float()))
