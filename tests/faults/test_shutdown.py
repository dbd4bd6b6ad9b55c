"""Stopping is bounded and truthful (DESIGN section 10), with a statement really blocked on a lock.

Measured before: SIGTERM with a statement blocked on a lock exited after 40 s instead of the 10 s grace,
and the clients were told "failed" for writes that then committed. Now, at the end of the grace, the
statements still running are cancelled: their transactions roll back, their callers are told UNAVAILABLE
(nothing recorded), and the process exits a few seconds later. Whatever a client was told agrees with
the database afterwards."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import select

from server.config import Settings
from server.core.briefings import intake
from server.core.service import Core
from server.db import tables
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.core.helpers import ADMIN
from tests.support.servers import serve
from tests.transports.conftest import server_env
from tests.world import holding_row

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GRACE = 2.0
# The process must be gone this long after SIGTERM at most: the grace, the cancelled calls' answers, the
# streams' end, and process exit.
EXIT_BOUND = GRACE + 8.0
LIMIT = 120.0


async def test_sigterm_cancels_a_blocked_write_in_time_and_tells_the_truth(
    database_url: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    core = Core.build(make_settings())
    env = server_env(database_url, tmp_path, shutdown_grace_seconds=GRACE, log_level="INFO")
    outcome: dict[str, Any] = {}
    try:
        task = await intake.enqueue_task(core, ADMIN, objective="Blocked", operation="docs", target_repo="a/b")
        with anyio.fail_after(LIMIT):
            async with serve(env, tmp_path) as server, Client(server.mcp_url, mode="legacy") as agent:
                await agent.list_tools()
                async with holding_row(database_url, "tasks", task.task_id), anyio.create_task_group() as tg:

                    async def claim() -> None:
                        try:
                            result = await agent.call_tool("jct_claim_task", {"task_id": task.task_id})
                            outcome["result"] = result
                        except Exception as exc:  # the connection went away with the process
                            outcome["error"] = exc

                    tg.start_soon(claim)
                    await anyio.sleep(1.0)  # the claim reaches the lock and waits there
                    assert "result" not in outcome, outcome
                    stopped = time.monotonic()
                    server.process.send_signal(signal.SIGTERM)
                    await server.process.wait()
                    exited = time.monotonic() - stopped
                    tg.cancel_scope.cancel()

        assert exited < EXIT_BOUND, (exited, server.log())
        async with core.db.read() as conn:
            row = (await conn.execute(select(tables.tasks).where(tables.tasks.c.id == task.task_id))).mappings().one()
            runs = (await conn.execute(select(tables.runs).where(tables.runs.c.task_id == task.task_id))).all()
        result = outcome.get("result")
        if result is not None and not result.is_error:
            assert row["status"] == "running"  # told claimed: claimed
        else:
            # Told it failed (or never told): nothing was recorded, not even after the lock was released.
            assert row["status"] == "queued", row
            assert runs == []
            if result is not None:
                body = result.content[0].text
                assert '"UNAVAILABLE"' in body, body
                assert "Traceback" not in body
        # The blocked claim's statement at least; a background read (the sweeper, the change feed) may have
        # been in flight at the deadline too, and is cancelled with it.
        assert re.search(r"cancelled [1-9]\d* database statement", server.log()) or result is None
    finally:
        await core.db.dispose()


async def test_a_write_blocked_past_the_lock_timeout_answers_unavailable_and_changes_nothing(
    database_url: str, make_settings: Callable[..., Settings]
) -> None:
    """JCT_LOCK_TIMEOUT_SECONDS bounds every wait for a lock, with or without a shutdown."""
    core = Core.build(make_settings(lock_timeout_seconds=1))
    try:
        task = await intake.enqueue_task(core, ADMIN, objective="Blocked", operation="docs", target_repo="a/b")
        with anyio.fail_after(LIMIT):
            async with Client(build_mcp(core, FixedIdentity("agent")), mode="legacy") as agent:
                async with holding_row(database_url, "tasks", task.task_id):
                    started = time.monotonic()
                    result = await agent.call_tool("jct_claim_task", {"task_id": task.task_id})
                    waited = time.monotonic() - started
                body = json.loads(result.content[0].text)  # type: ignore[union-attr]
                assert result.is_error
                assert body["error"]["code"] == "UNAVAILABLE", body
                assert body["error"]["retry_after_seconds"] > 0
                assert waited < 10, waited  # the lock timeout, not the 30 s the old busy wait took
                claimed = await agent.call_tool("jct_claim_task", {"task_id": task.task_id})
                assert not claimed.is_error, claimed
    finally:
        await core.db.dispose()
