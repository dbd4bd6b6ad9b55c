"""Without tokens a run_id read anywhere but in the claim's result does not act on the claim (DESIGN 3, 10).

Every tokenless caller is `local`, and a run's id is no secret: jct_get_task, the resources, the dashboard and
the audit log show it. Any agent used to read it there and fail, complete or release another agent's run
with it. Now the claim returns the run_id with a key appended; a call naming the bare id acts on the run only
from the connection that claimed it (NOT_CLAIMANT elsewhere), and the full run_id acts on it from anywhere:
a stateless caller, a client that reconnected, another server process on the same database. Over every
transport, through the SDK's client, on both databases.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy import select

from server.core.models import key_hash, parse_run_id
from server.core.service import Core
from server.db import tables
from tests.core.helpers import snapshot
from tests.transports.conftest import Transport, call, call_error, clients_of_two_servers, complete_failed
from tests.transports.test_workflows import PATCH, enqueue

pytestmark = pytest.mark.anyio

LIMIT = 120.0
# Transports whose requests carry no session (the 2026-07-28 protocol): nothing but the key tells a claimant.
STATELESS = ("http-modern", "memory")


async def _attempts(client: Client, task_id: str, run_id: str) -> list[str]:
    """Every run-scoped call, on `run_id`: the error code of each (each must fail)."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("jct_report_progress", {"message": "mine now", "progress": 10}),
        ("jct_report_artifact", {"title": "Patch", "artifact_type": "code_patch", "content": PATCH}),
        ("jct_complete_task", {"success": False, "summary": "gave up", "error_message": "not mine"}),
        ("jct_release_task", {"reason": "not mine"}),
    ]
    codes = []
    for tool, args in calls:
        refused = await call_error(client, tool, task_id=task_id, run_id=run_id, **args)
        codes.append(refused["error"]["code"])
    return codes


async def test_a_run_id_read_elsewhere_does_not_act_on_another_agents_claim(
    transport: Transport, make_settings: Callable[..., Any]
) -> None:
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            async with transport() as claimant, transport() as other:
                task_id = await enqueue(claimant)
                claim = await call(claimant, "jct_claim_task", task_id=task_id)
                run_id, key = parse_run_id(claim["run_id"])
                assert key is not None
                assert claim["run_id"] == f"{run_id}.{key}"

                # What everyone can read names the run, never its key.
                shown = await call(other, "jct_get_task", task_id=task_id)
                assert shown["task"]["active_run_id"] == run_id
                assert key not in str(shown)
                audit = await call(other, "jct_get_audit_trail", entity_kind="Run", entity_id=run_id)
                assert key not in str(audit)
                async with core.db.read() as conn:
                    stored = (await conn.execute(select(tables.runs.c.claim_key))).scalar_one()
                assert stored == key_hash(key) != key

                before = await snapshot(core)
                assert await _attempts(other, task_id, run_id) == ["NOT_CLAIMANT"] * 4
                forged = f"{run_id}.{'0' * 32}"
                assert await _attempts(other, task_id, forged) == ["NOT_CLAIMANT"] * 4
                assert await snapshot(core) == before

                # The claimant's work goes on, with the run_id its claim returned.
                progress = await call(
                    claimant, "jct_report_progress", task_id=task_id, run_id=claim["run_id"], message="on it"
                )
                assert progress["run_id"] == run_id
                if transport.kind not in STATELESS:
                    # The bare id still works from the connection that claimed.
                    await call(claimant, "jct_report_progress", task_id=task_id, run_id=run_id, message="still")
                else:
                    # Stateless, the claimant is as anonymous as everyone else: only the key tells it.
                    refused = await call_error(
                        claimant, "jct_report_progress", task_id=task_id, run_id=run_id, message="x"
                    )
                    assert refused["error"]["code"] == "NOT_CLAIMANT"
                done = await complete_failed(claimant, task_id, claim["run_id"], "could not", "blocked")
                assert done["run_id"] == run_id
    finally:
        await core.db.dispose()


async def test_a_client_that_reconnects_goes_on_with_its_claim(
    transport: Transport, make_settings: Callable[..., Any]
) -> None:
    """A network blip: the client's session (or, over stdio, its server process) is gone, and the new one is
    another agent. With the run_id its claim returned it finishes its work; with the bare id it may not."""
    core = Core.build(make_settings())
    try:
        with anyio.fail_after(LIMIT):
            async with transport() as first:
                task_id = await enqueue(first)
                claim = await call(first, "jct_claim_next")
            run_id, _key = parse_run_id(claim["run_id"])
            async with transport() as again:
                refused = await call_error(again, "jct_report_progress", task_id=task_id, run_id=run_id, message="x")
                assert refused["error"]["code"] == "NOT_CLAIMANT"
                await call(again, "jct_report_progress", task_id=task_id, run_id=claim["run_id"], message="back")
                released = await call(
                    again, "jct_release_task", task_id=task_id, run_id=claim["run_id"], reason="later"
                )
                assert released["task_status"] == "queued"
    finally:
        await core.db.dispose()


async def test_the_run_id_with_its_key_acts_on_the_claim_through_another_server_process(
    database_url: str, tmp_path: Path
) -> None:
    """Two `jct serve` processes on one database, clients speaking the stateless protocol (Claude Code's
    default over HTTP): the claim made through one is finished through the other with its run_id; the bare
    id, which the other process's listing shows, acts on nothing."""
    with anyio.fail_after(LIMIT):
        async with clients_of_two_servers(database_url, tmp_path) as (first, second):
            task_id = await enqueue(first)
            claim = await call(first, "jct_claim_task", task_id=task_id)
            shown = (await call(second, "jct_get_task", task_id=task_id))["task"]["active_run_id"]
            assert shown == parse_run_id(claim["run_id"])[0]
            assert await _attempts(second, task_id, shown) == ["NOT_CLAIMANT"] * 4
            await call(second, "jct_report_progress", task_id=task_id, run_id=claim["run_id"], message="moved")
            done = await call(
                second, "jct_complete_task", task_id=task_id, run_id=claim["run_id"], success=False, summary="no"
            )
            assert done["task_status"] in ("failed", "queued")
