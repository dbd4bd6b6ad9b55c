"""Every place JCT reaches into aiosqlite's private parts, in one module, each with why (aiosqlite 0.22).

This is server/sdk.py's twin for the SQLite driver. It lives in db/ because db/ may not import the MCP SDK,
which server/sdk.py does (the import contracts in pyproject.toml). aiosqlite has no public way to do these
things; tests/db/test_driver.py fails, naming the attribute, when an upgrade removes or renames one of them.
Call sites use these functions, never the private names.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

import aiosqlite

T = TypeVar("T")


def sqlite3_connection(driver: aiosqlite.Connection) -> sqlite3.Connection:
    """The sqlite3 connection an aiosqlite connection wraps (`_conn`): its `interrupt()` is the one call that
    is safe from another thread, and stops a statement (or a waiting BEGIN IMMEDIATE) at a shutdown's deadline."""
    connection: sqlite3.Connection = driver._conn
    return connection


async def run_on_driver_thread(driver: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run `work` with the sqlite3 connection on aiosqlite's own thread (`_execute`, `_conn`), as ONE hop: a
    whole write transaction in plain sqlite3 instead of several hops per statement through SQLAlchemy."""
    result: T = await driver._execute(work, driver._conn)  # type: ignore[no-untyped-call]
    return result


async def connect(database: str, **kwargs: object) -> aiosqlite.Connection:
    """An aiosqlite connection whose thread (`_thread`, aiosqlite 0.22) is a daemon, as SQLAlchemy's aiosqlite
    dialect makes its own: a process that exits without closing it does not wait for it."""
    connection = aiosqlite.connect(database, **kwargs)  # type: ignore[arg-type]
    connection._thread.daemon = True
    return await connection
