"""Every test starts on an empty database at the newest migration, whatever the worker's tests before it did
(on PostgreSQL a test's database is emptied and handed on: tests/conftest.py `_give_back`)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from server.config import async_database_url
from server.core.audit import AuditAction, audit_row
from server.core.models import Actor
from server.core.service import Core
from server.db import queries, tables
from server.db.migrate import current_revision, head_revision
from server.vocab import EntityKind
from tests.conftest import POSTGRES_URL, _give_back, _reusable, drop_postgres_database, postgres_database

pytestmark = pytest.mark.anyio


# Run more than once per worker, so that at least one case meets a database an earlier test used.
@pytest.mark.parametrize("round_", range(3))
async def test_a_test_starts_on_an_empty_database_at_head(core: Core, round_: int) -> None:
    assert await current_revision(core.db) == head_revision()
    async with core.db.read() as conn:
        counts = {
            name: (await conn.execute(select(func.count()).select_from(table))).scalar_one()
            for name, table in tables.metadata.tables.items()
        }
    assert {name: n for name, n in counts.items() if n} == {}
    # Numbering starts again too: the first audit row is 1.
    actor = Actor(actor_id="a", name="a", session="s")
    async with core.db.write() as conn:
        await queries.insert_audit(
            conn, [audit_row(actor, AuditAction.TASK_ENQUEUED, EntityKind.TASK, "t", None, {}, None)]
        )
        first = (await conn.execute(select(func.min(tables.audit_log.c.id)))).scalar_one()
    assert first == 1


@pytest.mark.skipif(not POSTGRES_URL, reason="PostgreSQL test databases: set JCT_TEST_POSTGRES_URL")
async def test_a_postgresql_test_database_is_handed_on_renamed_and_empty_unless_its_schema_changed(
    worker_id_str: str,
) -> None:
    url = await postgres_database(worker_id_str)
    kept: list[str] = []
    earlier = _reusable.pop(worker_id_str, None)  # the worker's last test's, handed on: back when this one ends
    try:
        engine = create_async_engine(url)
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO server_secrets (name, value) VALUES ('a', 'b')"))
        await engine.dispose()
        await _give_back(worker_id_str, url)
        handed = _reusable.pop(worker_id_str)
        kept.append(handed)
        assert make_url(handed).database != make_url(url).database  # what knew the old name cannot reach it
        names = await _names()
        assert make_url(handed).database in names
        assert make_url(url).database not in names
        engine = create_async_engine(handed)
        async with engine.begin() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM server_secrets"))).scalar_one() == 0
            await conn.execute(text("ALTER TABLE server_secrets RENAME TO secrets_gone"))
        await engine.dispose()
        kept.remove(handed)
        await _give_back(worker_id_str, handed)  # a changed schema: dropped, not handed on
        assert worker_id_str not in _reusable
        assert not {make_url(handed).database} & await _names()
    finally:
        for left in kept:
            await drop_postgres_database(left)
        if earlier is not None:
            _reusable[worker_id_str] = earlier


async def _names() -> set[str]:
    engine = create_async_engine(async_database_url(POSTGRES_URL))
    try:
        async with engine.connect() as conn:
            return set((await conn.execute(text("SELECT datname FROM pg_database"))).scalars())
    finally:
        await engine.dispose()
