"""Principals and roles through a real `jct serve` with JCT_AUTH=token, over streamable HTTP (both eras) and SSE."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from server.errors import RpcCode
from tests.core.helpers import PATCH, snapshot
from tests.security.conftest import TokenServer, bearer
from tests.tools.test_surface import WORKER
from tests.transports.conftest import call, call_error
from tests.transports.test_fence import lapse_and_sweep

pytestmark = pytest.mark.anyio

LIMIT = 90.0
# A worker's tools: its own toolset and planning.
WORKER_TOOLS = WORKER | {"jct_create_mission", "jct_start_workflow"}
OBSERVE_TOOLS = {
    "jct_get_mission",
    "jct_list_workflows",
    "jct_list_missions",
    "jct_get_task",
    "jct_get_run",
    "jct_get_evidence",
    "jct_get_artifact",
    "jct_get_audit_trail",
    "jct_queue_stats",
    "jct_git_log",
    "jct_git_diff",
    "jct_git_show",
    "jct_list_agents",
    "jct_list_stuck",
    "jct_search_audit",
}
REVIEW_TOOLS = {"jct_list_pending_reviews", "jct_submit_review"}
ADMIN_TOOLS = {
    "jct_enqueue_task",
    "jct_cancel_task",
    "jct_cancel_mission",
    "jct_requeue_task",
    "jct_set_priority",
    "jct_manage_doctrine",
}


async def enqueue(client: Client, objective: str = "Add input validation") -> str:
    result = await call(
        client,
        "jct_enqueue_task",
        objective=objective,
        operation="code_change",
        target_repo="myorg/api",
        acceptance_criteria=["Email is validated"],
    )
    return str(result["task_id"])


@asynccontextmanager
async def signed_in(token_server: TokenServer, *principals: tuple[str, ...]) -> AsyncIterator[list[Client]]:
    """A client for each principal, given as (name, *roles), each signed in with a token of its own."""
    secrets = [await token_server.token(*principal) for principal in principals]
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(token_server.client(secret)) for secret in secrets]


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


async def test_one_principal_cannot_touch_another_principals_claim(token_server: TokenServer) -> None:
    """B cannot report on, complete or release A's claim; a worker cannot cancel, an admin can; every audit
    row names the principal that made the change."""
    with anyio.fail_after(LIMIT):
        principals = [("alice", "worker"), ("bob", "worker"), ("root", "admin")]
        async with signed_in(token_server, *principals) as (a, b, admin):
            assert await tool_names(a) == WORKER_TOOLS | OBSERVE_TOOLS | {"jct_enqueue_task"}
            assert await tool_names(admin) == WORKER_TOOLS | OBSERVE_TOOLS | REVIEW_TOOLS | ADMIN_TOOLS

            task_id = await enqueue(a)
            issue_id = (await call(a, "jct_get_task", task_id=task_id))["task"]["cwom_issue_id"]
            claim = await call(a, "jct_claim_task", task_id=task_id)
            run = {"task_id": task_id, "run_id": claim["run_id"]}
            artifact = await call(
                a, "jct_report_artifact", **run, title="Patch", artifact_type="code_patch", content=PATCH
            )
            await call(a, "jct_report_progress", **run, message="half way", progress=50)

            # Knowing A's run id is not enough: the run belongs to A's principal.
            refused = [
                await call_error(b, "jct_report_artifact", **run, title="Mine", artifact_type="log", content="x"),
                await call_error(b, "jct_report_progress", **run, message="hijack"),
                await call_error(b, "jct_complete_task", **run, success=True, summary="stolen"),
                await call_error(b, "jct_release_task", **run, reason="mine now"),
            ]
            assert [r["error"]["code"] for r in refused] == ["NOT_CLAIMANT"] * 4
            still = await call(b, "jct_get_task", task_id=task_id)
            assert still["task"]["status"] == "running"
            assert still["task"]["active_run_id"] == claim["run_id"]

            denied = await call_error(b, "jct_cancel_task", task_id=task_id, reason="not mine to cancel")
            assert denied["error"]["code"] == "PERMISSION_DENIED"
            assert "jct_cancel_task" in denied["error"]["message"]
            cancelled = await call(admin, "jct_cancel_task", task_id=task_id, reason="superseded")
            assert cancelled["success"] is True
            assert (await call(a, "jct_get_task", task_id=task_id))["task"]["status"] == "cancelled"

            actors: dict[str, set[str]] = {}
            entities = (
                ("Task", task_id),
                ("Issue", issue_id),
                ("Run", claim["run_id"]),
                ("Artifact", artifact["artifact_id"]),
            )
            for kind, entity in entities:
                trail = await call(admin, "jct_get_audit_trail", entity_kind=kind, entity_id=entity)
                for entry in trail["entries"]:
                    actors.setdefault(entry["action"], set()).add(entry["actor_id"])
    assert actors["task.enqueued"] == {"alice"}
    assert actors["task.claimed"] == {"alice"}
    assert actors["artifact.reported"] == {"alice"}
    assert actors["run.progress"] == {"alice"}
    assert actors["task.cancelled"] == {"root"}
    assert set().union(*actors.values()) == {"alice", "root"}  # every row: no bob, no "local"


async def test_a_reviewer_may_not_review_its_own_run_but_an_admin_may(token_server: TokenServer) -> None:
    with anyio.fail_after(LIMIT):
        principals = [("carol", "worker", "reviewer"), ("dave", "reviewer"), ("root", "admin")]
        async with signed_in(token_server, *principals) as (c, d, admin):
            assert await tool_names(d) == OBSERVE_TOOLS | REVIEW_TOOLS
            denied = await call_error(d, "jct_claim_next")
            assert denied["error"]["code"] == "PERMISSION_DENIED"

            packs = []
            for objective in ("First change", "Second change"):
                task_id = await enqueue(c, objective)
                run = {"task_id": task_id, "run_id": (await call(c, "jct_claim_task", task_id=task_id))["run_id"]}
                await call(c, "jct_report_artifact", **run, title="Patch", artifact_type="code_patch", content=PATCH)
                done = await call(c, "jct_complete_task", **run, success=True, summary="Done.")
                assert done["review"]["status"] == "awaiting_manual_review"
                packs.append(done["evidence_pack"]["id"])

            own = await call_error(
                c, "jct_submit_review", evidence_pack_id=packs[0], decision="approved", reason="looks good to me"
            )
            assert own["error"]["code"] == "REVIEW_NOT_ALLOWED"
            by_other = await call(d, "jct_submit_review", evidence_pack_id=packs[0], decision="approved", reason="ok")
            assert by_other["decision"] == "approved"
            by_admin = await call(
                admin, "jct_submit_review", evidence_pack_id=packs[1], decision="rejected", reason="wrong approach"
            )
            assert by_admin["decision"] == "rejected"

            trail = await call(d, "jct_get_audit_trail", entity_kind="EvidencePack", entity_id=packs[0])
            reviews = [e for e in trail["entries"] if e["action"] == "review.submitted"]
            assert [e["actor_id"] for e in reviews] == ["dave"]


async def test_a_revoked_token_is_refused_with_401(token_server: TokenServer) -> None:
    with anyio.fail_after(LIMIT):
        erin = await token_server.token("erin", "worker")
        async with token_server.client(erin) as client:
            await call(client, "jct_queue_stats")
            await token_server.revoke("erin")
            if token_server.kind != "sse":  # the SDK's SSE client only logs a refused POST; checked below instead
                with pytest.raises(MCPError) as refused:  # the 401's JSON-RPC body, as the client shows it
                    await client.call_tool("jct_queue_stats", {})
                assert refused.value.error.code == RpcCode.AUTHENTICATION_REQUIRED
                assert refused.value.error.message == "The bearer token is not valid: unknown, mistyped or revoked."
        with pytest.raises(Exception):  # noqa: B017, PT011 - nor can it connect again
            async with token_server.client(erin) as again:
                await again.list_tools()
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with httpx2.AsyncClient(timeout=10, base_url=token_server.base_url, headers=bearer(erin)) as http:
            responses = [
                await http.get("/sse"),
                await http.post("/messages/?session_id=0123456789abcdef0123456789abcdef", json=ping),
                await http.post("/mcp", json=ping, headers={"accept": "application/json, text/event-stream"}),
            ]
        for response in responses:
            assert response.status_code == 401
            assert response.json()["error"]["data"]["error"] == "invalid_token"
            assert "resource_metadata=" in response.headers["www-authenticate"]


async def test_two_agents_sharing_one_token_are_fenced_apart(token_server: TokenServer) -> None:
    """One token, two agents (DESIGN section 10: the fence holds whoever shares an identity). The first
    agent's lease runs out and the second claims the task: the first's late calls answer LEASE_EXPIRED,
    naming its run or not (a stateless caller must name it), and change nothing."""
    with anyio.fail_after(LIMIT):
        shared = await token_server.token("ci-pool", "worker")
        core = token_server.core
        async with token_server.client(shared) as zombie, token_server.client(shared) as successor:
            task_id = await enqueue(zombie)
            stale = await call(zombie, "jct_claim_task", task_id=task_id)
            await lapse_and_sweep(core, stale["run_id"])  # this sweep's, or the server's own
            fresh = await call(successor, "jct_claim_next")
            assert fresh["task_id"] == task_id
            before = await snapshot(core)

            named = await call_error(
                zombie, "jct_complete_task", task_id=task_id, run_id=stale["run_id"], success=False, summary="late"
            )
            unnamed = await call_error(zombie, "jct_complete_task", task_id=task_id, success=False, summary="late")

            assert named["error"]["code"] == "LEASE_EXPIRED"
            stateless = token_server.kind == "http-modern"
            assert unnamed["error"]["code"] == ("INVALID_ARGUMENT" if stateless else "LEASE_EXPIRED")
            assert await snapshot(core) == before
            done = await call(
                successor, "jct_complete_task", task_id=task_id, run_id=fresh["run_id"], success=True, summary="ok"
            )
            assert done["task_status"] == "completed"


async def test_idempotency_keys_belong_to_the_principal_that_used_them(token_server: TokenServer) -> None:
    """The same key from two principals makes two tasks (a key says nothing of another's tasks, and cannot
    be used to probe them); each principal's resend is its own duplicate."""
    with anyio.fail_after(LIMIT):
        task = {"operation": "docs", "target_repo": "myorg/api", "idempotency_key": "nightly-docs"}
        async with signed_in(token_server, ("alice", "worker"), ("bob", "worker")) as (a, b):
            first = await call(a, "jct_enqueue_task", objective="Alice's docs", **task)
            other = await call(b, "jct_enqueue_task", objective="Bob's docs", **task)
            again = await call(a, "jct_enqueue_task", objective="Alice's docs", **task)
            conflict = await call_error(a, "jct_enqueue_task", objective="Something else", **task)
    assert other["task_id"] != first["task_id"]
    assert other.get("duplicate") is not True
    assert again["task_id"] == first["task_id"]
    assert again["duplicate"] is True
    assert conflict["error"]["code"] == "IDEMPOTENCY_CONFLICT"
    assert other["task_id"] not in conflict["error"]["message"]
