"""Every test starts on an empty database at the newest migration, whatever the worker's tests before it did
(on PostgreSQL a test's database is emptied and handed on: tests/conftest.py `_give_back`)."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from server.core.audit import AuditAction, audit_row
from server.core.models import Actor
from server.core.service import Core
from server.db import queries, tables
from server.db.migrate import current_revision, head_revision
from server.vocab import EntityKind

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
