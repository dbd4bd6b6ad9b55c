"""The world failing for real, for tests: a small disk that fills up, a PostgreSQL database that refuses connections.

`small_disk` mounts a tmpfs of a few kilobytes (root, and a kernel that lets this process mount: CI has both;
elsewhere the test is skipped and says why). `refusing_connections` works on one test database only, never on
the cluster: `ALLOW_CONNECTIONS false`, then its sessions are terminated; on exit connections are allowed again.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from tests.conftest import _admin_execute


@contextmanager
def small_disk(where: Path, size: str = "64k", *, required: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (created), unmounted on exit. `required`: a test that cannot
    mount one fails rather than skips (CI runs as root, where mounting works)."""
    where.mkdir(parents=True, exist_ok=True)
    give_up = pytest.fail if required else pytest.skip
    if os.geteuid() != 0:
        give_up("needs root to mount a small tmpfs (a real full disk)")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True, timeout=30
    )
    if mounted.returncode != 0:
        give_up(f"cannot mount a tmpfs here (a real full disk): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        # Lazy: a connection the test left open must not keep the mount (and the test) alive.
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30, check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill `disk` with one file until `leave` bytes are free; returns the file (delete it to make room)."""
    filler = disk / "filler"
    stat = os.statvfs(disk)
    free = stat.f_bavail * stat.f_frsize
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, free - leave))
    return filler


def _database_name(url: str) -> str:
    name = make_url(url).database or ""
    if not name.startswith("jct_"):
        raise ValueError(f"only a test's own database may refuse connections, not {name!r}")
    return name


async def refuse_connections(url: str) -> None:
    """The database of `url` refuses new connections and its open ones are cut (an outage, from JCT's side)."""
    name = _database_name(url)
    await _admin_execute(
        f"ALTER DATABASE {name} ALLOW_CONNECTIONS false",
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
    )


async def allow_connections(url: str) -> None:
    await _admin_execute(f"ALTER DATABASE {_database_name(url)} ALLOW_CONNECTIONS true")


@asynccontextmanager
async def refusing_connections(url: str) -> AsyncIterator[None]:
    await refuse_connections(url)
    try:
        yield
    finally:
        await allow_connections(url)


async def terminate_backend(pid: int) -> None:
    await _admin_execute(f"SELECT pg_terminate_backend({int(pid)})")


@asynccontextmanager
async def holding_row(database_url: str, table: str, row_id: str) -> AsyncIterator[None]:
    """Another transaction locks one row of `table` (PostgreSQL) or the whole database (SQLite) until released."""
    if database_url.startswith("sqlite"):
        path = make_url(database_url).database
        assert path is not None
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        return
    from server.db.engine import Database

    db = Database(database_url)
    try:
        async with db.engine.connect() as conn:
            transaction = await conn.begin()
            await conn.execute(text(f"SELECT id FROM {table} WHERE id = :id FOR UPDATE"), {"id": row_id})
            try:
                yield
            finally:
                await transaction.rollback()
    finally:
        await db.dispose()
