"""Every error code a tool can return, by shape, and bad arguments as tool errors, never protocol crashes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import text, update

from server.db import tables
from tests.tools.conftest import ClientFactory, error, ok

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
                await conn.execute(update(tables.runs).where(tables.runs.c.id == run_id).values(lease_expires_at=past))
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
    async with connect("alice", review_auto_approve=False, auth="token") as client:
        task_id = (await ok(client, "jct_enqueue_task", **TASK))["task_id"]
        await ok(client, "jct_claim_task", task_id=task_id)
        done = await ok(client, "jct_complete_task", task_id=task_id, success=True, summary="done")
        pack = done["evidence_pack"]["id"]
        own = await error(client, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="mine")
        assert own["code"] == "REVIEW_NOT_ALLOWED"
    async with connect("carol", review_auto_approve=False) as reviewer:
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
    connect: ClientFactory,
    make_settings,
    caplog: pytest.LogCaptureFixture,  # type: ignore[no-untyped-def]
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
