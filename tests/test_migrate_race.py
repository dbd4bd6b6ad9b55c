"""Two `jct serve` processes started together on one fresh PostgreSQL database: both come up, one migrates."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from alembic.script import ScriptDirectory
from anyio.abc import Process
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine

from server.config import async_database_url
from server.db.migrate import alembic_config, head_revision
from tests.conftest import POSTGRES_URL, drop_postgres_database
from tests.transports.conftest import free_port, open_serve, server_env, stop_process, wait_ready

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(not POSTGRES_URL, reason="the race is on PostgreSQL: set JCT_TEST_POSTGRES_URL"),
]

LIMIT = 120.0  # the whole test, both servers included
RUNNING_UPGRADE = re.compile(r"Running upgrade (\w*) *-> (\w+)")


@asynccontextmanager
async def fresh_database() -> AsyncIterator[str]:
    """A new, empty PostgreSQL database (not the migrated test template): nothing has migrated it yet."""
    name = f"jct_race_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(async_database_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f"CREATE DATABASE {name}"))
    finally:
        await admin.dispose()
    url = str(make_url(async_database_url(POSTGRES_URL)).set(database=name))
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@asynccontextmanager
async def schema_creation_held(url: str) -> AsyncIterator[None]:
    """Create the table alembic makes first (alembic_version) in a transaction left open until the block ends.

    A migrator that reaches its own CREATE TABLE alembic_version waits for this transaction; when it rolls
    back, the migrators still waiting go on at once. That lines both processes up at the same point,
    however differently their interpreters took to start, so the race is run every time, not by luck.
    """
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            transaction = await conn.begin()
            await conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            try:
                yield
            finally:
                await transaction.rollback()
    finally:
        await engine.dispose()


async def blocked_backends(conn: AsyncConnection, database: str) -> int:
    """Sessions on `database` waiting for a lock: on the advisory lock, or on the held CREATE TABLE."""
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = :database AND wait_event_type = 'Lock' "
        "AND pid <> pg_backend_pid()"
    )
    return int((await conn.execute(query, {"database": database})).scalar_one())


async def serve(url: str, tmp_path: Path, label: str) -> tuple[Process, str, Path]:
    port = free_port()
    log_path = tmp_path / f"serve-{label}.log"
    env = server_env(url, tmp_path / label, log_level="INFO")
    with log_path.open("wb") as log:
        process = await open_serve(port, env, tmp_path, log)
    return process, f"http://127.0.0.1:{port}", log_path


def logs(paths: list[Path]) -> str:
    return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')}" for path in paths)


async def test_two_servers_started_together_both_come_up_and_the_schema_is_migrated_once(tmp_path: Path) -> None:
    # Why this test can fail: server/db/migrate.py takes pg_advisory_xact_lock before alembic runs. Without
    # it, both processes get past alembic's "is there an alembic_version table?" check (there is none) and
    # both wait on schema_creation_held's CREATE TABLE; once it rolls back, one creates the table and the
    # other fails on PostgreSQL's unique catalog index (pg_type) when the first commits. That process exits
    # non-zero, so it never answers /readyz, and the log would not show each migration exactly once.
    # With the lock, the second process waits on the lock instead, then finds the schema at head.
    with anyio.fail_after(LIMIT):
        async with fresh_database() as url:
            database = make_url(url).database
            assert database is not None
            processes: list[tuple[Process, str, Path]] = []
            try:
                monitor = create_async_engine(async_database_url(POSTGRES_URL), isolation_level="AUTOCOMMIT")
                try:
                    async with schema_creation_held(url), monitor.connect() as conn:
                        processes = [await serve(url, tmp_path, label) for label in ("a", "b")]
                        # Both must be stopped at the starting line before the race is let go.
                        while await blocked_backends(conn, database) < 2:
                            exited = [p for p, _, _ in processes if p.returncode is not None]
                            assert not exited, f"a server exited early:\n{logs([path for *_, path in processes])}"
                            await anyio.sleep(0.05)
                finally:
                    await monitor.dispose()

                ready = [await wait_ready(process, base_url) for process, base_url, _ in processes]
                output = logs([path for *_, path in processes])
                assert ready == [True, True], f"both servers must come up:\n{output}"
            finally:
                for process, _, _ in processes:
                    await stop_process(process)

            output = logs([path for *_, path in processes])
            ran = [match.groups() for match in RUNNING_UPGRADE.finditer(output)]
            script = ScriptDirectory.from_config(alembic_config())
            every = sorted((rev.down_revision or "", rev.revision) for rev in script.walk_revisions())
            assert sorted(ran) == every, f"each migration must run exactly once:\n{output}"
            engine = create_async_engine(url)
            try:
                async with engine.connect() as conn:
                    versions = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
            finally:
                await engine.dispose()
            assert versions == [head_revision()]
