"""PostgreSQL's writes of a change to a claimed task are one statement kept per shape (server/db/changes/
`_WriteShape`) and reused with each call's parameters. Lists of writes that differ must never share one, and a
value that cannot be a parameter of a kept statement is built for its own call."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import bindparam, select
from sqlalchemy.exc import StatementError

from server.core.service import Core
from server.db import changes
from server.db import tables as t
from server.db.changes import postgres
from tests.core.helpers import enqueue

pytestmark = [pytest.mark.anyio, pytest.mark.dialects("postgresql")]


async def write(core: Core, writes: Sequence[changes.Insert | changes.Update | changes.Spend]) -> None:
    async with core.db.write() as conn:
        await postgres.write_postgres(conn, writes)


def audit(action: str) -> dict[str, Any]:
    return {
        "actor_kind": "agent",
        "actor_id": "a",
        "action": action,
        "entity_kind": "Task",
        "entity_id": str(uuid.uuid4()),
    }


async def actions(core: Core) -> list[str]:
    async with core.db.read() as conn:
        return list((await conn.execute(select(t.audit_log.c.action).order_by(t.audit_log.c.id))).scalars())


async def task_row(core: Core, task_id: str) -> tuple[int, str]:
    async with core.db.read() as conn:
        row = (await conn.execute(select(t.tasks).where(t.tasks.c.id == task_id))).mappings().one()
    return row["review_rounds"], row["target_path"]


async def test_two_rows_of_one_insert_and_two_inserts_of_a_row_are_two_shapes(core: Core) -> None:
    before = await actions(core)
    await write(core, [changes.insert_audit([audit("one.first"), audit("one.second")])])
    await write(core, [changes.insert_audit([audit("two.first")]), changes.insert_audit([audit("two.second")])])
    await write(core, [changes.insert_audit([]), changes.insert_audit([audit("after.empty")])])
    written = sorted((await actions(core))[len(before) :])  # CTEs of one statement insert in no promised order
    assert written == sorted(["one.first", "one.second", "two.first", "two.second", "after.empty"])


async def test_sql_with_a_parameter_of_its_own_is_built_for_each_call_with_every_value(core: Core) -> None:
    task_id = await enqueue(core)
    rounds = t.tasks.c.review_rounds
    await write(core, [changes.Update(t.tasks, task_id, {"review_rounds": rounds + 2, "target_path": "a/b"})])
    assert await task_row(core, task_id) == (2, "a/b")
    await write(core, [changes.Update(t.tasks, task_id, {"review_rounds": rounds + 3, "target_path": "c/d"})])
    assert await task_row(core, task_id) == (5, "c/d")


async def test_a_parameter_left_without_a_value_is_an_error_not_a_null(core: Core) -> None:
    task_id = await enqueue(core)
    before = await task_row(core, task_id)
    with pytest.raises(StatementError, match="value is required"):
        await write(core, [changes.Update(t.tasks, task_id, {"target_path": bindparam("nothing")})])
    assert await task_row(core, task_id) == before
