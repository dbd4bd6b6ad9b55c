"""Every error code a tool can return, by shape, and bad arguments as tool errors, never protocol crashes."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text, update

from server.config import Settings
from server.db import tables
from tests.core.helpers import bare
from tests.tools.conftest import ClientFactory, error, ok
from tests.world import fill, small_disk

pytestmark = pytest.mark.anyio

MISSING = str(uuid.uuid4())
TASK = {"objective": "Write docs", "operation": "docs", "target_repo": "myorg/docs", "acceptance_criteria": ["Exists"]}


async def test_not_found_codes(connect: ClientFactory) -> None:
    async with connect() as client:
        assert (await error(client, "jct_get_task", task_id=MISSING))["code"] == "TASK_NOT_FOUND"
        assert (await error(client, "jct_claim_task", task_id=MISSING))["code"] == "TASK_NOT_FOUND"
        assert (await error(client, "jct_get_run", run_id=MISSING))["code"] == "RUN_NOT_FOUND"
        assert (await error(client, "jct_get_evidence", run_id=MISSING))["code"] == "RUN_NOT_FOUND"
        assert (await error(client, "jct_get_artifact", artifact_id=MISSING))["code"] == "ARTIFACT_NOT_FOUND"
        review = await error(client, "jct_submit_review", evidence_pack_id=MISSING, decision="approved", reason="ok")
        assert review["code"] == "EVIDENCE_PACK_NOT_FOUND"


async def test_claim_and_fence_codes(connect: ClientFactory, make_settings) -> None:  # type: ignore[no-untyped-def]
    from server.core.service import Core

    core = Core.build(make_settings())
    try:
        async with connect("alice", core=core) as alice, connect("bob", core=core) as bob:
            task_id = (await ok(alice, "jct_enqueue_task", **TASK))["task_id"]
            other = (await ok(alice, "jct_enqueue_task", **{**TASK, "objective": "Other"}))["task_id"]
            not_claimed = await error(alice, "jct_report_progress", task_id=task_id, message="hi")
            assert not_claimed["code"] == "TASK_NOT_CLAIMED"
            run_id = (await ok(alice, "jct_claim_task", task_id=task_id))["run_id"]
            assert (await error(bob, "jct_claim_task", task_id=task_id))["code"] == "TASK_ALREADY_CLAIMED"
            stolen = await error(bob, "jct_complete_task", task_id=task_id, success=True, summary="x")
            assert stolen["code"] == "NOT_CLAIMANT"
            assert (await error(alice, "jct_get_evidence", run_id=run_id))["code"] == "EVIDENCE_PACK_NOT_FOUND"
            big = "x" * (core.settings.max_artifact_bytes + 1)
            too_big = await error(
                alice, "jct_report_artifact", task_id=task_id, title="Log", artifact_type="log", content=big
            )
            assert too_big["code"] == "PAYLOAD_TOO_LARGE"
            async with core.db.write() as conn:
                past = datetime(2000, 1, 1, tzinfo=UTC)
                await conn.execute(
                    update(tables.runs).where(tables.runs.c.id == bare(run_id)).values(lease_expires_at=past)
                )
            late = await error(alice, "jct_complete_task", task_id=task_id, success=True, summary="x")
            assert late["code"] == "LEASE_EXPIRED"
            assert (await ok(alice, "jct_claim_task", task_id=other))["task_id"] == other
    finally:
        await core.db.dispose()


async def test_policy_codes(connect: ClientFactory) -> None:
    async with connect(allowed_repo_prefixes=["myorg/"]) as client:
        denied = await error(client, "jct_enqueue_task", **{**TASK, "target_repo": "evil/repo"})
        assert denied["code"] == "REPO_NOT_ALLOWED"
        budget = await error(client, "jct_enqueue_task", **{**TASK, "time_budget_seconds": 10})
        assert budget["code"] == "BUDGET_OUT_OF_RANGE"
        await ok(client, "jct_enqueue_task", **TASK, idempotency_key="k1")
        again = await ok(client, "jct_enqueue_task", **TASK, idempotency_key="k1")
        assert again["duplicate"] is True
        conflict = await error(client, "jct_enqueue_task", **{**TASK, "objective": "Changed"}, idempotency_key="k1")
        assert conflict["code"] == "IDEMPOTENCY_CONFLICT"


async def test_review_codes(connect: ClientFactory) -> None:
    async with connect("alice", review_auto_approve=False, auto_rework=False, auth="token") as client:
        task_id = (await ok(client, "jct_enqueue_task", **TASK))["task_id"]
        await ok(client, "jct_claim_task", task_id=task_id)
        done = await ok(client, "jct_complete_task", task_id=task_id, success=True, summary="done")
        pack = done["evidence_pack"]["id"]
        own = await error(client, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="mine")
        assert own["code"] == "REVIEW_NOT_ALLOWED"
    async with connect("carol", review_auto_approve=False, auto_rework=False) as reviewer:
        task_id = (await ok(reviewer, "jct_enqueue_task", **TASK))["task_id"]
        await ok(reviewer, "jct_claim_task", task_id=task_id)
        done = await ok(reviewer, "jct_complete_task", task_id=task_id, success=True, summary="done")
        pack = done["evidence_pack"]["id"]
        await ok(reviewer, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="good")
        twice = await error(reviewer, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="again")
        assert twice["code"] == "ALREADY_REVIEWED"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("jct_claim_task", {"task_id": "not-a-uuid"}),
        ("jct_claim_task", {"task_id": 12}),
        ("jct_claim_task", {}),
        ("jct_list_tasks", {"status": "sleeping"}),
        ("jct_list_tasks", {"limit": -1}),
        ("jct_list_tasks", {"cursor": "garbage"}),
        ("jct_enqueue_task", {"objective": "x", "operation": "dance", "target_repo": "a/b"}),
        ("jct_enqueue_task", {"objective": "x", "operation": "docs", "target_repo": "a/b", "priority": "P9"}),
        ("jct_enqueue_task", {"objective": "x" * 100_000, "operation": "docs", "target_repo": "a/b"}),
        ("jct_enqueue_task", {"objective": "bell\x07", "operation": "docs", "target_repo": "a/b"}),
        ("jct_get_audit_trail", {"entity_kind": "Planet", "entity_id": MISSING}),
        ("jct_report_progress", {"task_id": MISSING, "message": "m", "progress": 101}),
        ("jct_complete_task", {"task_id": MISSING, "success": "maybe", "summary": "s"}),
        ("jct_submit_review", {"evidence_pack_id": MISSING, "decision": "meh", "reason": "r"}),
        ("jct_get_artifact", {"artifact_id": MISSING, "max_chars": 0}),
        ("jct_no_such_tool", {}),
    ],
)
async def test_bad_arguments_are_invalid_argument_tool_errors(
    connect: ClientFactory, tool: str, arguments: dict[str, object]
) -> None:
    async with connect() as client:
        assert (await error(client, tool, **arguments))["code"] == "INVALID_ARGUMENT"
        # The server keeps serving.
        assert (await ok(client, "jct_queue_stats"))["counts"]["queued"] == 0


async def test_a_crash_is_internal_error_with_a_logged_correlation_id(
    connect: ClientFactory, make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    from server.core.service import Core

    core = Core.build(make_settings())
    try:
        # Something no caller could cause or avoid: a table vanishes under the running server.
        async with core.db.write() as conn:
            await conn.execute(text("ALTER TABLE count_deltas RENAME TO count_deltas_gone"))
        async with connect(core=core) as client:
            body = await error(client, "jct_queue_stats")
    finally:
        await core.db.dispose()
    assert body["code"] == "INTERNAL_ERROR"
    assert "count_deltas" not in body["message"]
    correlation = body["message"].split("correlation id ")[1].split(")")[0]
    assert any(correlation in record.getMessage() for record in caplog.records)


async def test_an_unknown_prompt_is_invalid_params(connect: ClientFactory) -> None:
    from mcp.shared.exceptions import MCPError
    from mcp_types import INVALID_PARAMS

    async with connect() as client:
        with pytest.raises(MCPError) as err:
            await client.get_prompt("no_such_prompt")
        assert err.value.error.code == INVALID_PARAMS
        assert (await ok(client, "jct_queue_stats"))["counts"]["queued"] == 0


# --- failures of the world: UNAVAILABLE, not INTERNAL_ERROR -------------------------------------------------

UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"


async def test_an_unreachable_database_is_unavailable_everywhere_and_logs_one_line(
    connect: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: INTERNAL_ERROR "Nothing you sent caused this" and a traceback per call (and per resource read)."""
    from mcp.shared.exceptions import MCPError

    from server.errors import RpcCode

    with anyio.fail_after(60), caplog.at_level(logging.INFO):
        async with connect(database_url=UNREACHABLE) as client:
            for tool, arguments in (
                ("jct_queue_stats", {}),
                ("jct_list_tasks", {}),
                ("jct_get_task", {"task_id": MISSING}),
                ("jct_enqueue_task", TASK),
                ("jct_claim_next", {}),
            ):
                body = await error(client, tool, **arguments)
                assert body["code"] == "UNAVAILABLE", body
                assert body["retry_after_seconds"] == 5
                assert body["message"] == "JCT cannot reach its database right now; this call was not carried out."
                assert body["suggestion"] == "Retry in 5 seconds; nothing was recorded."
            refusals = []
            for read in (
                client.read_resource("jct://queue"),
                client.read_resource(f"jct://tasks/{MISSING}"),
                client.get_prompt("work_next"),
            ):
                with pytest.raises(MCPError) as refused:
                    await read
                refusals.append(refused.value.error)
    for refusal in refusals:
        assert refusal.code == RpcCode.UNAVAILABLE
        assert refusal.message.startswith("JCT cannot reach its database right now")
        assert refusal.data == {"code": "UNAVAILABLE", "retry_after_seconds": 5}
    assert not [record for record in caplog.records if record.exc_info], "no traceback for a failure of the world"
    lines = [record.getMessage() for record in caplog.records if "database unreachable" in record.getMessage()]
    assert len(lines) == 1, lines
    assert "ConnectionRefusedError" in lines[0]


async def test_a_full_disk_is_unavailable_records_nothing_and_passes_when_there_is_room(
    connect: ClientFactory, make_settings: Callable[..., Settings], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The trace store on a real 64 KiB tmpfs: an artifact that does not fit is ENOSPC (before: INTERNAL_ERROR)."""
    from server.core.service import Core

    with small_disk(tmp_path / "disk") as disk, anyio.fail_after(60):
        core = Core.build(make_settings(trace_root=disk / "traces"))
        try:
            async with connect(core=core) as client:
                task_id = (await ok(client, "jct_enqueue_task", **TASK))["task_id"]
                run_id = (await ok(client, "jct_claim_task", task_id=task_id))["run_id"]
                report = {"task_id": task_id, "title": "Log", "artifact_type": "log"}
                full = await error(client, "jct_report_artifact", **report, content="x" * 200_000)
                assert full["code"] == "UNAVAILABLE"
                assert full["message"] == "JCT's disk is full; this call was not carried out."
                assert full["suggestion"] == "Retry in 60 seconds; nothing was recorded."
                assert full["retry_after_seconds"] == 60
                run = await ok(client, "jct_get_run", run_id=run_id)
                assert run["artifacts"] == []
                assert not [p for p in (disk / "traces").rglob("*") if p.is_file()], "no file left behind"
                fits = await ok(client, "jct_report_artifact", **report, content="ok")
                assert (await ok(client, "jct_get_run", run_id=run_id))["artifacts"][0]["artifact_id"] == (
                    fits["artifact_id"]
                )
        finally:
            await core.db.dispose()
    assert not [record for record in caplog.records if record.exc_info]


async def test_a_full_sqlite_database_is_unavailable_until_there_is_room(
    connect: ClientFactory, make_settings: Callable[..., Settings], tmp_path: Path, dialect: str
) -> None:
    """The SQLite file itself on a real 1 MiB tmpfs, filled up: "database or disk is full" (before: INTERNAL_ERROR)."""
    from server.core.service import Core
    from server.db.engine import Database
    from server.db.migrate import upgrade

    if dialect != "sqlite":
        pytest.skip("the embedded database's own disk")
    with small_disk(tmp_path / "disk", "1m") as disk, anyio.fail_after(120):
        url = f"sqlite+aiosqlite:///{disk / 'jct.db'}"
        db = Database(url)
        await upgrade(db)
        await db.dispose()
        core = Core.build(make_settings(database_url=url))
        try:
            async with connect(core=core) as client:
                filler = fill(disk, leave=48 * 1024)
                enqueued = 0
                for attempt in range(100):
                    result = await client.call_tool(
                        "jct_enqueue_task", {**TASK, "objective": f"Task {attempt}", "context_summary": "y" * 19_000}
                    )
                    if result.is_error:
                        break
                    enqueued += 1
                else:
                    raise AssertionError("the disk never filled up")
                full = json.loads(result.content[0].text)["error"]  # type: ignore[union-attr]
                assert full["code"] == "UNAVAILABLE", full
                assert full["message"] == "JCT's disk is full; this call was not carried out."
                stats = await ok(client, "jct_queue_stats")
                assert stats["counts"]["queued"] == enqueued, "the refused task was not recorded"
                filler.unlink()
                await ok(client, "jct_enqueue_task", **{**TASK, "objective": "After the disk has room"})
                assert (await ok(client, "jct_queue_stats"))["counts"]["queued"] == enqueued + 1
        finally:
            await core.db.dispose()
