"""server/db/driver.py against the real aiosqlite: every private part it reaches is still there and still works.

An aiosqlite upgrade that removes or renames one fails here first, naming it, rather than in a claim or a shutdown.
"""

from __future__ import annotations

import importlib.metadata
import sqlite3
from pathlib import Path

import aiosqlite
import pytest

from server.db import driver

pytestmark = pytest.mark.anyio

AIOSQLITE = f"aiosqlite {importlib.metadata.version('aiosqlite')}"


@pytest.mark.parametrize("attribute", ["_conn", "_execute", "_thread"])
async def test_every_private_attribute_the_driver_module_reaches_is_there(tmp_path: Path, attribute: str) -> None:
    async with aiosqlite.connect(tmp_path / "reach.db") as connection:
        assert hasattr(connection, attribute), f"{AIOSQLITE}: aiosqlite.Connection.{attribute} is gone"


async def test_the_wrapped_sqlite3_connection_is_the_one_statements_run_on(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "conn.db") as connection:
        raw = driver.sqlite3_connection(connection)
        assert isinstance(raw, sqlite3.Connection), f"{AIOSQLITE}: Connection._conn is no sqlite3 connection"
        assert await driver.run_on_driver_thread(connection, lambda db: db is raw)
        raw.interrupt()  # what a shutdown calls, from another thread: nothing runs, so nothing happens
        await connection.execute("SELECT 1")


async def test_work_runs_on_the_driver_thread_with_its_connection(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "thread.db") as connection:

        def work(db: sqlite3.Connection) -> int:
            db.execute("CREATE TABLE t (x)")
            db.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
            return int(db.execute("SELECT sum(x) FROM t").fetchone()[0])

        assert await driver.run_on_driver_thread(connection, work) == 3
        # The same connection: what the work wrote is visible to the driver's own calls.
        async with connection.execute("SELECT count(*) FROM t") as cursor:
            assert await cursor.fetchone() == (2,)
