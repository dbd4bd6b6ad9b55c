"""The seed's agent workflows (section 5) through a real server, over every transport."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from tests.core.helpers import bare
from tests.transports.conftest import Transport, call, call_error, complete_failed, report

pytestmark = pytest.mark.anyio

LIMIT = 90.0
PATCH = """diff --git a/src/routes/users.py b/src/routes/users.py
--- a/src/routes/users.py
+++ b/src/routes/users.py
@@ -1 +1,2 @@
 def register(email):
+    validate_email(email)
"""
PASSING_TESTS = "tests/test_users.py ....\n============ 12 passed in 0.52s ============\n"
FAILING_TESTS = "tests/test_users.py ..F.\n====== 3 failed, 9 passed in 0.61s ======\n"
CRITERION = "Email validated against RFC 5322"


async def enqueue(client: Client, objective: str = "Add input validation to user registration", **extra: object) -> str:
    fields: dict[str, object] = {
        "objective": objective,
        "operation": "code_change",
        "target_repo": "myorg/api",
        "acceptance_criteria": [CRITERION],
        "context_summary": "Files of interest: src/routes/users.py, src/models/user.py",
    }
    fields.update(extra)
    result = await call(client, "jct_enqueue_task", **fields)
    assert result["success"] is True
    assert result["status"] == "queued"
    return str(result["task_id"])


async def complete_citing(
    client: Client, task_id: str, run_id: str, patch: dict[str, Any], summary: str
) -> dict[str, Any]:
    """A successful completion that cites `patch` for the task's one criterion."""
    cited = [{"criterion": 0, "status": "satisfied", "evidence": [patch["artifact_id"]]}]
    return await call(
        client,
        "jct_complete_task",
        task_id=task_id,
        run_id=run_id,
        success=True,
        summary=summary,
        criteria_results=cited,
    )


async def test_the_negotiated_protocol_matches_the_transport(transport: Transport) -> None:
    with anyio.fail_after(LIMIT):
        async with transport() as client:
            tools = await client.list_tools()
            names = {tool.name for tool in tools.tools}
            assert {"jct_claim_next", "jct_complete_task", "jct_submit_review", "jct_enqueue_task"} <= names
            if transport.kind in ("http-modern", "memory"):
                assert client.protocol_version in MODERN_PROTOCOL_VERSIONS
            else:
                assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS


async def test_happy_path_ends_auto_approved(transport: Transport) -> None:
    """5.1: list, claim, read the briefing, report a diff and test output, complete: auto-approved."""
    with anyio.fail_after(LIMIT):
        async with transport() as agent:
            task_id = await enqueue(agent)
            listed = await call(agent, "jct_list_tasks", status="queued")
            assert [t["task_id"] for t in listed["tasks"]] == [task_id]
            assert listed["count"] == 1

            claim = await call(agent, "jct_claim_task", task_id=task_id)
            assert claim["task_id"] == task_id
            assert claim["run_id"]
            assert claim["objective"] == "Add input validation to user registration"
            assert claim["target"] == {"repo": "myorg/api", "ref": "main", "path": ""}
            assert claim["context_packet"]["acceptance_criteria"] == [CRITERION]
            assert "src/routes/users.py" in claim["context_packet"]["summary"]
            assert claim["constraints"]["time_budget_seconds"] == 3600

            context = await call(agent, "jct_get_context", task_id=task_id)
            assert context["context_packet"]["id"] == claim["context_packet"]["id"]
            assert context["issue"]["acceptance_criteria"] == [CRITERION]

            patch = await report(agent, task_id, claim["run_id"], PATCH)
            log = await report(
                agent, task_id, claim["run_id"], PASSING_TESTS, title="Test results", artifact_type="log"
            )
            assert patch["run_id"] == log["run_id"] == bare(claim["run_id"])

            done = await complete_citing(
                agent,
                task_id,
                claim["run_id"],
                patch,
                "Added RFC 5322 email validation to registration endpoint. All tests pass.",
            )
            assert done["success"] is True
            assert (done["task_status"], done["run_status"]) == ("completed", "done")
            assert done["evidence_pack"]["verdict"] == "pass"
            assert done["review"]["status"] == "auto_approved"

            task = await call(agent, "jct_get_task", task_id=task_id)
            assert task["task"]["status"] == "completed"
            run = await call(agent, "jct_get_run", run_id=claim["run_id"])
            assert run["run"]["status"] == "done"
            assert sorted(a["artifact_id"] for a in run["artifacts"]) == sorted(
                [patch["artifact_id"], log["artifact_id"]]
            )
            content = await call(agent, "jct_get_artifact", artifact_id=patch["artifact_id"])
            assert content["content"] == PATCH


async def test_failure_path_ends_failed_with_a_failing_verdict(transport: Transport) -> None:
    """5.2: the agent reports failing tests and completes with success=false."""
    with anyio.fail_after(LIMIT):
        async with transport() as agent:
            task_id = await enqueue(agent)
            claim = await call(agent, "jct_claim_task", task_id=task_id)
            await report(
                agent, task_id, claim["run_id"], FAILING_TESTS, title="Failed test output", artifact_type="log"
            )
            done = await complete_failed(
                agent,
                task_id,
                claim["run_id"],
                "Unable to implement feature - dependency conflict in package.json",
                "npm install fails with peer dependency conflict between react@18 and react-dom@17",
            )
            assert (done["task_status"], done["run_status"]) == ("failed", "failed")
            assert done["evidence_pack"]["verdict"] == "fail"
            assert done["review"]["status"] == "not_required"

            evidence = await call(agent, "jct_get_evidence", run_id=claim["run_id"])
            # A check whose `passed` is null leaves it out.
            checks = {check["name"]: check.get("passed") for check in evidence["evidence_pack"]["checks"]}
            assert checks["run_succeeded"] is False
            task = await call(agent, "jct_get_task", task_id=task_id)
            assert task["task"]["status"] == "failed"

            # A retried completion returns the recorded outcome; a claim of the failed task is refused.
            again = await call(
                agent, "jct_complete_task", task_id=task_id, run_id=claim["run_id"], success=False, summary="again"
            )
            assert again["duplicate"] is True
            assert again["evidence_pack"]["id"] == done["evidence_pack"]["id"]
            refused = await call_error(agent, "jct_claim_task", task_id=task_id)
            assert refused["error"]["code"] == "TASK_ALREADY_CLAIMED"
            bad = await call_error(agent, "jct_get_task", task_id="not-a-uuid")
            assert bad["error"]["code"] == "INVALID_ARGUMENT"


async def test_multi_task_loop_drains_the_queue_in_priority_order(transport: Transport) -> None:
    """5.3: claim-next, report, complete, until claimed is false."""
    with anyio.fail_after(LIMIT):
        async with transport() as agent:
            low = await enqueue(agent, "Tidy the README", priority="P3")
            urgent = await enqueue(agent, "Fix the login outage", priority="P0")
            normal = await enqueue(agent, "Add a health check", priority="P2")
            done_order: list[str] = []
            for _ in range(10):
                claim = await call(agent, "jct_claim_next")
                if not claim["claimed"]:
                    assert set(claim) == {"success", "claimed"}
                    break
                task_id = claim["task_id"]
                patch = await report(agent, task_id, claim["run_id"], PATCH, title="Patch")
                done = await complete_citing(agent, task_id, claim["run_id"], patch, f"Done: {claim['objective']}")
                assert done["task_status"] == "completed"
                done_order.append(task_id)
            else:
                pytest.fail("jct_claim_next never reported an empty queue")
            assert done_order == [urgent, normal, low]
            stats = await call(agent, "jct_queue_stats")
            assert stats["counts"]["completed"] == 3
            assert stats["counts"]["queued"] == stats["counts"]["running"] == 0
            listed = await call(agent, "jct_list_tasks", status="queued")
            assert listed["count"] == 0


async def test_review_agent_approves_pending_work(transport: Transport) -> None:
    """5.4: with manual review, a second session finds the evidence pack, inspects it, and approves."""
    with anyio.fail_after(LIMIT):
        async with transport(review_auto_approve=False) as worker, transport(review_auto_approve=False) as reviewer:
            task_id = await enqueue(worker)
            claim = await call(worker, "jct_claim_next")
            assert claim["claimed"] is True
            assert claim["task_id"] == task_id
            patch = await report(worker, task_id, claim["run_id"], PATCH)
            done = await complete_citing(worker, task_id, claim["run_id"], patch, "Validated emails")
            assert done["review"]["status"] == "awaiting_manual_review"
            assert (done["task_status"], done["run_status"]) == ("completed", "under_review")

            pending = await call(reviewer, "jct_list_pending_reviews")
            assert [item["task_id"] for item in pending["reviews"]] == [task_id]
            item = pending["reviews"][0]
            assert item["evidence_pack_id"] == done["evidence_pack"]["id"]
            run_id = item["run_id"]
            assert run_id == bare(claim["run_id"])

            evidence = await call(reviewer, "jct_get_evidence", run_id=run_id)
            assert evidence["evidence_pack"]["verdict"] == done["evidence_pack"]["verdict"]
            assert evidence["evidence_pack"]["criteria_results"][0]["status"] == "satisfied"
            run = await call(reviewer, "jct_get_run", run_id=run_id)
            assert [a["artifact_id"] for a in run["artifacts"]] == [patch["artifact_id"]]
            assert run["run"]["status"] == "under_review"

            review = {
                "evidence_pack_id": item["evidence_pack_id"],
                "decision": "approved",
                "reason": "Code changes look correct. Email validation follows RFC 5322.",
            }
            decided = await call(reviewer, "jct_submit_review", **review)
            assert decided["decision"] == "approved"
            assert (decided["issue_status"], decided["run_status"], decided["task_status"]) == (
                "done",
                "done",
                "completed",
            )
            after = await call(worker, "jct_get_run", run_id=run_id)
            assert after["run"]["status"] == "done"
            assert (await call(reviewer, "jct_list_pending_reviews"))["count"] == 0
            twice = await call_error(
                reviewer, "jct_submit_review", **(review | {"decision": "rejected", "reason": "x"})
            )
            assert twice["error"]["code"] == "ALREADY_REVIEWED"
