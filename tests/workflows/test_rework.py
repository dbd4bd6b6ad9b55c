"""Automatic rework of workflow steps through the real MCP client, on both databases: a step whose outputs are
missing goes back to the queue with the failed checks in its briefing, within its gate's rounds; a step whose
gate is for a person waits for one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from server.config import Settings
from server.core.service import Core
from tests.support.flows import flows_with
from tests.tools.conftest import ok
from tests.workflows.people import agent, deliver, draft_then_publish

pytestmark = pytest.mark.anyio

FLOW = draft_then_publish(
    "rework",
    "Draft and publish, and a sign-off for a person",
    draft_review="auto",
    more_steps="""\
  - id: sign-off
    operation: analysis
    objective: "Sign off {topic}"
    outputs:
      - {name: decision, type: report}
    gate: {review: human}
""",
)
NOTES = [("notes", "report", "Some notes, not the draft.")]


@pytest.fixture
async def core(make_settings: Callable[..., Settings], tmp_path: Path) -> Any:
    built = Core.build(make_settings(workflows_dir=flows_with(tmp_path, rework=FLOW)))
    yield built
    await built.db.dispose()


async def start(client: Client) -> dict[str, str]:
    started = await ok(client, "jct_start_workflow", name="rework", inputs={"topic": "leases"}, target_repo="myorg/api")
    return {item["key"]: item["task_id"] for item in started["tasks"]} | {"mission": started["mission_id"]}


async def task_of(client: Client, task_id: str) -> dict[str, Any]:
    return dict((await ok(client, "jct_get_task", task_id=task_id))["task"])


async def test_missing_outputs_send_the_step_back_and_its_next_claim_reads_why(core: Core) -> None:
    async with agent(core, "writer") as writer, agent(core, "other") as other:
        ids = await start(writer)

        sent = await deliver(writer, ids["draft"], NOTES)

        assert (sent["evidence_pack"]["verdict"], sent["task_status"]) == ("fail", "queued")
        assert sent["review"]["status"] == "needs_changes"
        assert "(required_evidence, outputs)" in sent["review"]["message"]
        assert (await task_of(writer, ids["publish"]))["status"] == "blocked"
        claim = await ok(other, "jct_claim_task", task_id=ids["draft"])
        feedback = claim["context_packet"]["review_feedback"]
        assert [(f["decision"], f["reviewer"], f["run_id"]) for f in feedback] == [
            ("needs_changes", "auto-rework", sent["run_id"])
        ]
        assert "- outputs: missing draft (doc)" in feedback[0]["reason"]
        await ok(other, "jct_release_task", task_id=ids["draft"], reason="leave it to the writer")

        done = await deliver(writer, ids["draft"], [("draft", "doc", "Leases are...")])

        assert (done["evidence_pack"]["verdict"], done["review"]["status"]) == ("pass", "auto_approved")
        assert (await task_of(writer, ids["draft"]))["status"] == "completed"


async def test_the_last_of_its_gate_rounds_fails_the_step_and_blocks_its_mission(core: Core) -> None:
    async with agent(core, "writer") as writer:
        ids = await start(writer)
        await deliver(writer, ids["draft"], NOTES)

        last = await deliver(writer, ids["draft"], NOTES)

        assert (last["task_status"], last["review"]["status"]) == ("failed", "needs_changes")
        task = await task_of(writer, ids["draft"])
        assert task["error"].startswith("quality_gate_exhausted: review asked for changes 2 times, round 2 of 2")
        assert (await task_of(writer, ids["publish"]))["status"] == "blocked"
        mission = await ok(writer, "jct_get_mission", mission_id=ids["mission"])
        assert ids["draft"] in {blocker["task_id"] for blocker in mission["blockers"]}


async def test_a_step_gated_for_a_person_waits_for_one(core: Core) -> None:
    async with agent(core, "writer") as writer:
        ids = await start(writer)

        done = await deliver(writer, ids["sign-off"], NOTES)

        assert (done["evidence_pack"]["verdict"], done["task_status"]) == ("fail", "completed")
        assert done["review"]["status"] == "awaiting_manual_review"
        pending = await ok(writer, "jct_list_pending_reviews")
        assert [review["task_id"] for review in pending["reviews"]] == [ids["sign-off"]]
