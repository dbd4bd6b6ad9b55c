"""The schema the migrations build is the schema the code declares, on every dialect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import func, insert, select
from sqlalchemy.engine import Connection

from server.config import Settings, async_database_url
from server.db import tables
from server.db.engine import Database
from server.db.migrate import current_revision, head_revision, is_migrated, upgrade

pytestmark = pytest.mark.anyio


def _diff(sync_conn: Connection) -> list[Any]:
    context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
    return list(compare_metadata(context, tables.metadata))


async def schema_diff(db: Database) -> list[Any]:
    async with db.read() as conn:
        return await conn.run_sync(_diff)


async def test_the_migrated_schema_matches_the_table_definitions(database_url: str) -> None:
    db = Database(database_url)
    try:
        assert await schema_diff(db) == []
        assert await current_revision(db) == head_revision()
        assert await is_migrated(db)
    finally:
        await db.dispose()


async def test_upgrading_an_up_to_date_database_changes_nothing(database_url: str) -> None:
    db = Database(database_url)
    try:
        async with db.write() as conn:
            await conn.execute(
                insert(tables.doctrine_refs).values(id="d", namespace="myorg", name="style", body="Be brief.")
            )

        await upgrade(db)
        await upgrade(db)

        assert await current_revision(db) == head_revision()
        assert await schema_diff(db) == []
        async with db.read() as conn:
            assert (await conn.execute(select(func.count()).select_from(tables.doctrine_refs))).scalar_one() == 1
    finally:
        await db.dispose()


async def test_a_fresh_database_migrates_from_nothing(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'nested' / 'fresh.db'}")
    try:
        assert await current_revision(db) is None
        assert not await is_migrated(db)
        await upgrade(db)
        assert await is_migrated(db)
        assert await schema_diff(db) == []
    finally:
        await db.dispose()


async def test_sqlite_connections_use_wal_foreign_keys_and_a_busy_timeout(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'pragmas.db'}")
    try:
        for transaction in (db.read, db.write):
            async with transaction() as conn:
                journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
                foreign_keys = (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar()
                busy_timeout = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
            assert str(journal).lower() == "wal"
            assert foreign_keys == 1
            assert isinstance(busy_timeout, int)
            assert busy_timeout >= 1000
    finally:
        await db.dispose()


async def test_sqlite_enforces_foreign_keys(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'fk.db'}")
    await upgrade(db)
    try:
        with pytest.raises(Exception, match="FOREIGN KEY"):
            async with db.write() as conn:
                await conn.execute(insert(tables.issue_doctrine).values(issue_id="nope", doctrine_id="nope"))
    finally:
        await db.dispose()


# --- database URLs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite:////abs/x.db", "sqlite+aiosqlite:////abs/x.db"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite+pysqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgresql://u:p@db:5432/jct", "postgresql+asyncpg://u:p@db:5432/jct"),
        ("postgres://u@db/jct", "postgresql+asyncpg://u@db/jct"),
        ("postgresql+psycopg2://u@db/jct", "postgresql+asyncpg://u@db/jct"),
        ("postgresql+asyncpg://u@db/jct", "postgresql+asyncpg://u@db/jct"),
        ("POSTGRESQL://u@db/jct", "postgresql+asyncpg://u@db/jct"),
    ],
)
def test_database_urls_map_onto_the_async_drivers(given: str, expected: str) -> None:
    assert async_database_url(given) == expected
    assert Settings(_env_file=None, database_url=given).database_url == expected


@pytest.mark.parametrize("url", ["mysql://u@db/jct", "oracle://db", "x.db", "", "://nothing"])
def test_unknown_database_schemes_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match=r"scheme|unsupported"):
        async_database_url(url)


def test_settings_refuse_an_unknown_database() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        Settings(_env_file=None, database_url="mysql://u@db/jct")


def test_settings_default_to_sqlite_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JCT_DATABASE_URL", "DATABASE_URL", "JCT_TRACE_ROOT"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(_env_file=None, home=tmp_path / "h")
    assert settings.database_url == f"sqlite+aiosqlite:///{tmp_path / 'h' / 'jct.db'}"
    assert settings.is_sqlite
    assert settings.traces == tmp_path / "h" / "traces"
