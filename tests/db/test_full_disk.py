"""SQLite on a nearly full disk (issue 25): the WAL is bounded, and readiness says when writes fail.

A real full disk: a tmpfs of a few MB mounted by the test (it runs as root, as CI does), filled by a file.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import httpx2
import pytest
from sqlalchemy import text

from server.app import create_app
from server.config import Settings
from server.db.engine import Database
from server.db.migrate import upgrade
from server.failures import Kind, world_failure
from tests.world import fill, small_disk

pytestmark = pytest.mark.anyio

WAL_LIMIT_BYTES = 4 * 1024 * 1024  # server/db/engine.py WAL_LIMIT_BYTES


async def test_the_wal_is_cut_back_after_a_burst_that_a_reader_held_open(tmp_path: Path) -> None:
    """A reader holding a snapshot keeps the checkpoint from resetting the WAL, which grows past its limit;
    once the reader is gone, the next checkpoint cuts the file back (without a limit it kept its peak size)."""
    path = tmp_path / "jct.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    try:
        async with db.write() as conn:
            await conn.execute(text("CREATE TABLE filler (data BLOB)"))
        reader = sqlite3.connect(str(path), isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM filler").fetchall()
        for _ in range(48):
            async with db.write() as conn:
                await conn.execute(text("INSERT INTO filler VALUES (randomblob(256 * 1024))"))
        wal = Path(f"{path}-wal")
        assert wal.stat().st_size > 2 * WAL_LIMIT_BYTES
        reader.execute("COMMIT")
        reader.close()
        for _ in range(3):  # a checkpoint, then a write that restarts the WAL from its beginning
            async with db.write() as conn:
                await conn.execute(text("DELETE FROM filler WHERE rowid = (SELECT min(rowid) FROM filler)"))
            async with db.read() as conn:
                await conn.execute(text("PRAGMA wal_checkpoint(PASSIVE)"))
        assert wal.stat().st_size <= WAL_LIMIT_BYTES
    finally:
        await db.dispose()


async def test_readiness_reports_a_full_disk_while_writes_fail_and_recovers(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "4m", required=True) as disk:
        url = f"sqlite+aiosqlite:///{disk / 'jct.db'}"
        settings = Settings(_env_file=None, database_url=url, home=tmp_path / "home", trace_root=tmp_path / "t")
        app = create_app(settings)
        db = Database(url)
        try:
            await upgrade(db)
            async with db.write() as conn:
                await conn.execute(text("CREATE TABLE filler (data BLOB)"))
            transport = httpx2.ASGITransport(app=app)
            async with (
                app.router.lifespan_context(app),
                httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
            ):
                assert (await http.get("/readyz")).status_code == 200

                filler = fill(disk, leave=0)
                with pytest.raises(Exception, match="full") as caught:
                    async with db.write() as conn:
                        await conn.execute(text("INSERT INTO filler VALUES (randomblob(512 * 1024))"))
                failure = world_failure(caught.value)
                assert failure is not None
                assert failure.kind is Kind.DISK_FULL

                ready = await http.get("/readyz")
                assert ready.status_code == 503, ready.text
                assert ready.json()["reason"].startswith("disk full"), ready.text
                assert db.disk_full() is not None

                filler.unlink()
                await anyio.sleep(0)
                assert (await http.get("/readyz")).status_code == 200
                # The write that failed is still reported until one succeeds.
                assert db.disk_full() is not None
                async with db.write() as conn:
                    await conn.execute(text("INSERT INTO filler VALUES (randomblob(1024))"))
                assert db.disk_full() is None
        finally:
            await db.dispose()
