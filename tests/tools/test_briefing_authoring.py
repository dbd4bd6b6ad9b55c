"""Briefings people author: prior_art and data given at enqueue (and on mission tasks) reach the briefing,
and a briefing is revised without a review round (a new context packet version, by an admin or the
enqueuer). Read back through the MCP client, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp_types import TextResourceContents

from server.core.briefings import intake, revise
from server.core.claims import queue, work
from server.core.missions import plan
from server.core.review import completion
from server.core.service import Core
from server.errors import ErrorCode, JctError
from tests.core.helpers import ADMIN, ALICE, BOB, PATCH
from tests.tools.conftest import ClientFactory, error, ok

pytestmark = pytest.mark.anyio

PRIOR = ["PR #12 tried a regex and was reverted", "RFC 5322 section 3.4.1"]
DATA = {"endpoint": "/signup", "expected_status": 400}
TASK: dict[str, Any] = {
    "objective": "Validate emails on signup",
    "operation": "code_change",
    "target_repo": "myorg/api",
    "acceptance_criteria": ["Email is validated"],
    "context_summary": "The endpoint accepts anything.",
}


async def page(client: Client, uri: str) -> str:
    content = (await client.read_resource(uri)).contents[0]
    assert isinstance(content, TextResourceContents)
    return content.text


async def test_prior_art_and_data_given_at_enqueue_are_in_the_briefing(connect: ClientFactory, core: Core) -> None:
    task = await intake.enqueue_task(core, ALICE, **TASK, prior_art=PRIOR, data=DATA)
    async with connect(core=core) as client:
        context = await ok(client, "jct_get_context", task_id=task.task_id)
        packet = context["context_packet"]
        assert packet["prior_art"] == PRIOR
        assert packet["data"] == DATA
        text = await page(client, f"jct://issues/{task.cwom_issue_id}")
    assert "Prior art:" in text
    assert "PR #12 tried a regex and was reverted" in text
    assert '"endpoint":"/signup"' in text.replace(" ", "")


async def test_jct_enqueue_task_takes_prior_art_and_data(connect: ClientFactory, core: Core) -> None:
    async with connect(core=core) as client:
        task = await ok(client, "jct_enqueue_task", **TASK, prior_art=PRIOR, data=DATA)
        context = await ok(client, "jct_get_context", task_id=task["task_id"])
        assert (context["context_packet"]["prior_art"], context["context_packet"]["data"]) == (PRIOR, DATA)
        before = (await queue.queue_stats(core)).counts
        refused = await error(client, "jct_enqueue_task", **TASK, prior_art=["x"] * 51)
        assert refused["code"] == "INVALID_ARGUMENT"
        assert (await queue.queue_stats(core)).counts == before


async def test_mission_tasks_carry_prior_art_and_data(connect: ClientFactory, core: Core) -> None:
    spec = {"key": "a", "objective": "Write the guide", "operation": "docs", "target_repo": "myorg/d"}
    created = await plan.create_mission(
        core,
        ADMIN,
        title="Docs",
        goal="Document it",
        phases=[{"name": "Write", "tasks": [spec | {"prior_art": PRIOR, "data": DATA}]}],
    )
    async with connect(core=core) as client:
        context = await ok(client, "jct_get_context", task_id=created.tasks[0].task_id)
    assert context["context_packet"]["prior_art"] == PRIOR
    assert context["context_packet"]["data"] == DATA


@pytest.mark.parametrize(
    "bad",
    [
        {"prior_art": "one string"},
        {"prior_art": ["x"] * 51},
        {"data": ["not", "an", "object"]},
        {"data": {"big": "x" * 17_000}},
        {"data": {"n": float("nan")}},
    ],
    ids=["prior_art not a list", "too much prior art", "data not an object", "data too large", "NaN in data"],
)
async def test_bad_prior_art_or_data_enqueues_nothing(core: Core, bad: dict[str, Any]) -> None:
    before = (await queue.queue_stats(core)).counts
    with pytest.raises(JctError) as refused:
        await intake.enqueue_task(core, ALICE, **TASK, **bad)
    assert refused.value.code == ErrorCode.INVALID_ARGUMENT
    assert (await queue.queue_stats(core)).counts == before


async def test_the_enqueuer_revises_a_briefing_without_a_review_round(connect: ClientFactory, core: Core) -> None:
    task = await intake.enqueue_task(core, ALICE, **TASK, prior_art=PRIOR)
    revised = await revise.revise_briefing(
        core,
        ALICE,
        task.task_id,
        summary="Reject addresses without a TLD too.",
        acceptance_criteria=["Email is validated", "Addresses without a TLD get 400"],
        data=DATA,
    )
    assert revised.version == 2
    async with connect(core=core) as client:
        context = await ok(client, "jct_get_context", task_id=task.task_id)
        packet = context["context_packet"]
        assert packet["version"] == 2
        assert packet["summary"] == "Reject addresses without a TLD too."
        assert packet["prior_art"] == PRIOR  # kept: not revised
        assert packet["data"] == DATA
        text = await page(client, f"jct://issues/{task.cwom_issue_id}")
        assert "(briefing v2)" in text
        assert "Addresses without a TLD get 400" in text
        trail = await ok(client, "jct_get_audit_trail", entity_kind="Issue", entity_id=task.cwom_issue_id)
        assert "issue.briefing_revised" in [e["action"] for e in trail["entries"]]

        # The prover checks the criteria in force: the second one exists now, and the agent can cite it.
        await queue.claim_task(core, BOB, task.task_id)
        patch = await work.report_artifact(
            core, BOB, task.task_id, title="p", artifact_type="code_patch", content=PATCH
        )
        claims = [{"criterion": i, "status": "satisfied", "evidence": [patch.artifact_id]} for i in (0, 1)]
        done = await ok(client, "jct_get_evidence", run_id=(await _complete(core, task.task_id, claims)).run_id)
    assert [c["criterion"] for c in done["evidence_pack"]["criteria_results"]] == TASK["acceptance_criteria"] + [
        "Addresses without a TLD get 400"
    ]


async def _complete(core: Core, task_id: str, claims: list[dict[str, Any]]) -> Any:
    return await completion.complete_task(core, BOB, task_id, success=True, summary="Done", criteria_results=claims)


async def test_only_an_admin_or_the_enqueuer_may_revise(core: Core) -> None:
    task = await intake.enqueue_task(core, ALICE, **TASK)
    with pytest.raises(JctError) as refused:
        await revise.revise_briefing(core, BOB, task.task_id, summary="Mine now")
    assert refused.value.code == ErrorCode.PERMISSION_DENIED
    assert (await revise.revise_briefing(core, ADMIN, task.task_id, prior_art=["x"])).version == 2
    with pytest.raises(JctError) as empty:
        await revise.revise_briefing(core, ALICE, task.task_id)
    assert empty.value.code == ErrorCode.INVALID_ARGUMENT
    with pytest.raises(JctError) as bad:
        await revise.revise_briefing(core, ALICE, task.task_id, files_of_interest=["../etc/passwd"])
    assert bad.value.code == ErrorCode.INVALID_ARGUMENT
    assert (await revise.revise_briefing(core, ALICE, task.task_id, files_of_interest=["src/app.py"])).version == 3
