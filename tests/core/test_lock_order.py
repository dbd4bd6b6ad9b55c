"""Lock order on PostgreSQL: cancelling a mission takes its running runs before its row, as a completion, a
progress report or an approval does (the fence locks the run, then the mission is taken). Before, cancel took
the mission first: with a completion holding the run and asking for the mission, PostgreSQL found a deadlock and
aborted one of them. Played out deterministically with a second connection holding what the fence holds."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from server.config import Settings
from server.core.claims import cancel, queue
from server.core.missions import plan
from server.core.service import Core
from tests.core.helpers import ADMIN, ALICE

pytestmark = pytest.mark.anyio


async def test_cancelling_a_mission_waits_for_a_completion_holding_its_run_and_neither_fails(
    dialect: str, database_url: str, make_settings: Callable[..., Settings]
) -> None:
    if dialect != "postgresql":
        pytest.skip("SQLite has one writer at a time: no lock order to keep")
    core = Core.build(make_settings())
    other = create_async_engine(database_url)
    try:
        spec = {"key": "a", "objective": "Do a", "operation": "analysis", "target_repo": "myorg/api"}
        made = await plan.create_mission(
            core, ADMIN, title="Ship", goal="It", phases=[{"name": "One", "tasks": [spec]}]
        )
        claimed = await queue.claim_next(core, ALICE)
        assert claimed.claimed
        outcome: dict[str, object] = {}

        async def cancel_it() -> None:
            try:
                outcome["cancel"] = await cancel.cancel_mission(core, ADMIN, made.mission_id, "Stop it.")
            except Exception as exc:  # a deadlock victim
                outcome["cancel"] = exc

        with anyio.fail_after(30):
            async with other.connect() as conn:
                trans = await conn.begin()
                # What a completion's fence holds, then what its approval asks for.
                await conn.execute(
                    text("UPDATE runs SET lease_expires_at = lease_expires_at WHERE id = :run"),
                    {"run": str(claimed.run_id).split(".")[0]},
                )
                async with anyio.create_task_group() as tg:
                    tg.start_soon(cancel_it)
                    await anyio.sleep(0.5)  # cancel is waiting now
                    try:
                        await conn.execute(
                            text("SELECT id FROM missions WHERE id = :m FOR UPDATE"), {"m": made.mission_id}
                        )
                        await trans.commit()
                        outcome["completion"] = "committed"
                    except Exception as exc:  # a deadlock victim
                        outcome["completion"] = exc
                        await trans.rollback()
    finally:
        await other.dispose()
        await core.db.dispose()
    assert outcome["completion"] == "committed", outcome
    assert not isinstance(outcome["cancel"], Exception), outcome
    assert outcome["cancel"].tasks_cancelled == 1  # type: ignore[attr-defined]
