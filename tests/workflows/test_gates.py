"""Quality gates through the real MCP client, on both databases: who may approve a step (auto, agent, human),
rounds of changes capped per step and by JCT_MAX_REVIEW_ROUNDS, quality_gate_exhausted, and an admin's
override kept in the audit log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from server.core.service import Core
from tests.support.flows import flows_with
from tests.tools.conftest import error, ok
from tests.workflows.people import PATCH, TEST_LOG, agent, deliver, draft_then_publish, person

pytestmark = pytest.mark.anyio

FLOW = draft_then_publish("twice", "Draft, then publish", draft_review="agent")


@pytest.fixture
def build(make_settings: Callable[..., Settings], tmp_path: Path) -> Callable[..., Core]:
    flows = flows_with(tmp_path, twice=FLOW)
    return lambda **overrides: Core.build(make_settings(workflows_dir=flows, **overrides))


async def start(client: Client, name: str, **inputs: str) -> dict[str, str]:
    started = await ok(client, "jct_start_workflow", name=name, inputs=inputs, target_repo="myorg/api")
    return {item["key"]: item["task_id"] for item in started["tasks"]} | {"mission": started["mission_id"]}


async def status(client: Client, task_id: str) -> dict[str, Any]:
    return dict((await ok(client, "jct_get_task", task_id=task_id))["task"])


async def approval_refused(done: dict[str, Any], reviewer: Client, reason: str) -> tuple[str, str]:
    """The completion passed and waits for a manual review, which `reviewer` may not give; (pack id, message)."""
    assert done["evidence_pack"]["verdict"] == "pass"
    assert done["review"]["status"] == "awaiting_manual_review"
    pack = done["evidence_pack"]["id"]
    refused = await error(reviewer, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason=reason)
    assert refused["code"] == "REVIEW_NOT_ALLOWED"
    return pack, refused["message"]


async def test_an_agent_gate_is_never_auto_approved_nor_approved_by_its_executor(build: Callable[..., Core]) -> None:
    core = build()
    async with agent(core, "writer") as writer, agent(core, "editor") as editor:
        ids = await start(writer, "twice", topic="leases")
        done = await deliver(writer, ids["draft"], [("draft", "doc", "Leases are...")])
        pack, refusal = await approval_refused(done, writer, "Mine")
        assert "review: agent" in refusal
        assert (await status(writer, ids["publish"]))["status"] == "blocked"
        await ok(editor, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="Clear")
        assert (await status(writer, ids["publish"]))["status"] == "queued"
        # The step after it has no gate: the review policy approves it.
        last = await deliver(writer, ids["publish"], [("page", "doc", "Published")])
        assert last["review"]["status"] == "auto_approved"
        mission = await ok(writer, "jct_get_mission", mission_id=ids["mission"])
        assert mission["mission"]["status"] == "completed"
    await core.db.dispose()


async def test_a_human_gate_is_decided_only_by_a_person(build: Callable[..., Core]) -> None:
    core = build()
    async with agent(core, "fixer") as fixer, agent(core, "bot") as bot, person(core, "carol") as carol:
        ids = await start(fixer, "bugfix", bug="Crash on empty input")
        await deliver(fixer, ids["reproduce"], [("failing-test", "code_patch", PATCH), ("repro", "report", "x")])
        done = await deliver(fixer, ids["fix"], [("fix", "code_patch", PATCH), ("test-log", "log", TEST_LOG)])
        pack, refusal = await approval_refused(done, bot, "LGTM")
        assert "only a person" in refusal
        await ok(carol, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="Verified")
        mission = await ok(fixer, "jct_get_mission", mission_id=ids["mission"])
        assert mission["mission"]["status"] == "completed"
    await core.db.dispose()


async def exhaust(writer: Client, editor: Client, ids: dict[str, str]) -> str:
    """Two reviews asking for changes on the draft step (max_rounds: 2): the second fails it; returns the last
    pack."""
    first = await deliver(writer, ids["draft"], [("draft", "doc", "v1")])
    requeued = await ok(
        editor,
        "jct_submit_review",
        evidence_pack_id=first["evidence_pack"]["id"],
        decision="needs_changes",
        reason="Too short",
    )
    assert requeued["task_status"] == "queued"
    told = "review round 1 of 2: the next review asking for changes fails the task"
    assert (await ok(writer, "jct_get_task", task_id=ids["draft"]))["review_round"] == told
    issue = (await ok(writer, "jct_get_task", task_id=ids["draft"]))["task"]["cwom_issue_id"]
    briefing = await writer.read_resource(f"jct://issues/{issue}")
    assert f"## Review feedback ({told}; oldest first" in briefing.contents[0].text  # type: ignore[union-attr]
    second = await deliver(writer, ids["draft"], [("draft", "doc", "v2")])
    pack = second["evidence_pack"]["id"]
    failed = await ok(
        editor, "jct_submit_review", evidence_pack_id=pack, decision="needs_changes", reason="Still short"
    )
    assert failed["task_status"] == "failed"
    return str(pack)


async def test_the_last_of_max_rounds_fails_the_task_with_quality_gate_exhausted_and_blocks_its_mission(
    build: Callable[..., Core],
) -> None:
    core = build()
    async with agent(core, "writer") as writer, agent(core, "editor") as editor:
        ids = await start(writer, "twice", topic="leases")
        await exhaust(writer, editor, ids)
        task = await status(writer, ids["draft"])
        assert task["status"] == "failed"
        assert task["error"].startswith("quality_gate_exhausted: review asked for changes 2 times, round 2 of 2")
        assert (await status(writer, ids["publish"]))["status"] == "blocked"
        mission = await ok(writer, "jct_get_mission", mission_id=ids["mission"])
        assert mission["mission"]["status"] == "active"
        assert ids["draft"] in {blocker["task_id"] for blocker in mission["blockers"]}
        trail = await ok(writer, "jct_get_audit_trail", entity_kind="Task", entity_id=ids["draft"])
        failed = [e for e in trail["entries"] if e["action"] == "task.failed"]
        assert failed[-1]["after"] == {"status": "failed", "reason": "quality_gate_exhausted", "rounds": 2}
    await core.db.dispose()


async def test_jct_max_review_rounds_caps_every_task(build: Callable[..., Core]) -> None:
    """JCT_MAX_REVIEW_ROUNDS=2: the first review asking for changes sends the work back, the second ends it."""
    core = build(max_review_rounds=2, review_auto_approve=False)
    async with agent(core, "worker") as worker, agent(core, "reviewer") as reviewer:
        task = await ok(
            worker, "jct_enqueue_task", objective="Fix it", operation="code_change", target_repo="myorg/api"
        )
        assert (await ok(worker, "jct_get_task", task_id=task["task_id"]))["review_round"] == "review round 0 of 2"
        statuses = []
        for _ in range(2):
            done = await deliver(worker, task["task_id"], [("Diff", "code_patch", PATCH)])
            pack = done["evidence_pack"]["id"]
            result = await ok(
                reviewer, "jct_submit_review", evidence_pack_id=pack, decision="needs_changes", reason="No"
            )
            statuses.append(result["task_status"])
        assert statuses == ["queued", "failed"]
        assert (await status(worker, task["task_id"]))["error"].startswith("quality_gate_exhausted")
    await core.db.dispose()


async def test_an_admin_may_approve_exhausted_work_with_an_override_reason_the_audit_log_keeps(
    build: Callable[..., Core],
) -> None:
    core = build()
    async with (
        agent(core, "writer") as writer,
        agent(core, "editor") as editor,
        person(core, "dana") as dana,
        person(core, "root", admin=True) as root,
    ):
        ids = await start(writer, "twice", topic="leases")
        pack = await exhaust(writer, editor, ids)
        decide = {"evidence_pack_id": pack, "decision": "approved", "reason": "Good enough"}
        assert (await error(dana, "jct_submit_review", **decide, override_reason="Ship"))[
            "code"
        ] == "REVIEW_NOT_ALLOWED"
        assert (await error(root, "jct_submit_review", **decide))["code"] == "ALREADY_REVIEWED"
        wrong = await error(root, "jct_submit_review", **{**decide, "decision": "rejected"}, override_reason="Ship")
        assert wrong["code"] == "INVALID_ARGUMENT"
        assert (await status(writer, ids["draft"]))["status"] == "failed"  # none of those changed anything

        approved = await ok(root, "jct_submit_review", **decide, override_reason="Deadline; the editor agreed")
        assert approved["task_status"] == "completed"
        assert approved["run_status"] == "done"
        task = await status(writer, ids["draft"])
        assert (task["status"], task.get("error")) == ("completed", None)
        assert (await status(writer, ids["publish"]))["status"] == "queued"
        evidence = await ok(writer, "jct_get_audit_trail", entity_kind="EvidencePack", entity_id=pack)
        overridden = [e for e in evidence["entries"] if e["action"] == "review.overridden"]
        assert overridden[0]["actor_id"] == "root"
        assert overridden[0]["after"]["override_reason"] == "Deadline; the editor agreed"
        assert [e["after"]["decision"] for e in evidence["entries"] if e["action"] == "review.submitted"] == [
            "needs_changes"
        ]
        again = await error(root, "jct_submit_review", **decide, override_reason="Twice")
        assert again["code"] == "ALREADY_REVIEWED"
    await core.db.dispose()


async def test_an_admin_may_approve_past_a_human_gate_with_an_override_reason(build: Callable[..., Core]) -> None:
    core = build()
    async with agent(core, "fixer") as fixer, agent(core, "boss") as boss:
        ids = await start(fixer, "bugfix", bug="Crash")
        await deliver(fixer, ids["reproduce"], [("failing-test", "code_patch", PATCH), ("repro", "report", "x")])
        done = await deliver(fixer, ids["fix"], [("fix", "code_patch", PATCH), ("test-log", "log", TEST_LOG)])
        pack = done["evidence_pack"]["id"]
        # An agent without the admin role cannot override.
        refused = await error(
            boss, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="ok", override_reason="now"
        )
        assert refused["code"] == "REVIEW_NOT_ALLOWED"
    async with person(core, "root", admin=True, kind="agent") as root:
        no_reason = await error(root, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="ok")
        assert no_reason["code"] == "REVIEW_NOT_ALLOWED"
        await ok(
            root, "jct_submit_review", evidence_pack_id=pack, decision="approved", reason="ok", override_reason="Hotfix"
        )
        trail = await ok(root, "jct_get_audit_trail", entity_kind="EvidencePack", entity_id=pack)
        submitted = [e for e in trail["entries"] if e["action"] == "review.submitted"]
        assert submitted[-1]["after"]["override_reason"] == "Hotfix"
    await core.db.dispose()
