"""Every workflow JCT ships, end to end through the real MCP client, on both databases: started, each step
claimed in dependency order with what its dependencies delivered in its briefing, its outputs reported, the
prover satisfied, the gate's reviewer approving, and the mission completed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from server.config import Settings
from server.core.service import Core
from tests.tools.conftest import ok
from tests.workflows.people import PATCH, TEST_LOG, agent, person

pytestmark = pytest.mark.anyio

FINDINGS = '{"approve": true, "issues": []}'
# What an agent delivers for each step of each shipped workflow: (title, artifact type, content).
DELIVERIES: dict[str, dict[str, list[tuple[str, str, str]]]] = {
    "bugfix": {
        "reproduce": [("failing-test", "code_patch", PATCH), ("repro", "report", "pytest -k plus fails")],
        "fix": [("fix", "code_patch", PATCH), ("test-log", "log", TEST_LOG)],
    },
    "feature": {
        "spec": [("spec", "doc", "Export as CSV: one row per task.")],
        "implement": [("patch", "code_patch", PATCH), ("test-log", "log", TEST_LOG)],
        "review": [("review", "report", "Matches the spec."), ("findings", "report", FINDINGS)],
        "docs": [("docs", "doc", "## Export\nRun jct export.")],
    },
    "docs": {
        "outline": [("outline", "report", "1. Leases 2. Fencing")],
        "write": [("pages", "doc", "# Leases\nA claim holds a lease.")],
    },
}
INPUTS = {
    "bugfix": {"bug": "A + in the e-mail breaks login"},
    "feature": {"feature": "Export tasks as CSV"},
    "docs": {"topic": "leases"},
}


@pytest.mark.parametrize("name", sorted(DELIVERIES))
async def test_a_shipped_workflow_runs_end_to_end(name: str, make_settings: Callable[..., Settings]) -> None:
    core = Core.build(make_settings())
    async with agent(core, "worker") as worker, agent(core, "peer") as peer, person(core, "carol") as carol:
        listed = {w["name"]: w for w in (await ok(worker, "jct_list_workflows"))["workflows"]}
        started = await ok(worker, "jct_start_workflow", name=name, inputs=INPUTS[name], target_repo="myorg/api")
        assert started["version"] == listed[name]["version"]
        key_of = {item["task_id"]: item["key"] for item in started["tasks"]}
        reviewers = {"agent": peer, "human": carol}
        delivered: dict[str, set[str]] = {}
        order = []

        while True:
            claim = await ok(worker, "jct_claim_next")
            if not claim["claimed"]:
                break
            key = key_of[claim["task_id"]]
            order.append(key)
            step = claim["context_packet"]["data"]["step"]
            assert step["step"] == key
            assert set(step["depends_on"]) <= set(order[:-1])  # what it waits for came first
            context = await ok(worker, "jct_get_context", task_id=claim["task_id"])
            upstream = {item["artifact_id"] for item in context.get("dependency_artifacts", [])}
            assert upstream == set().union(*(delivered[dep] for dep in step["depends_on"]))

            run = {"task_id": claim["task_id"], "run_id": claim["run_id"]}
            ids = []
            for title, kind, content in DELIVERIES[name][key]:
                reported = await ok(
                    worker, "jct_report_artifact", **run, title=title, artifact_type=kind, content=content
                )
                ids.append(reported["artifact_id"])
            delivered[key] = set(ids)
            criteria = claim["context_packet"]["acceptance_criteria"]
            results = [{"criterion": n, "status": "satisfied", "evidence": ids} for n in range(len(criteria))]
            done = await ok(worker, "jct_complete_task", **run, success=True, summary="Done.", criteria_results=results)
            assert done["evidence_pack"]["verdict"] == "pass", done["evidence_pack"]["verdict_reason"]
            checks = await ok(worker, "jct_get_evidence", run_id=claim["run_id"])
            assert {"name": "outputs", "passed": True}.items() <= _check(checks, "outputs").items()
            if step["review"] == "auto":
                assert done["review"]["status"] == "auto_approved"
            else:
                assert done["review"]["status"] == "awaiting_manual_review"
                decision = await ok(
                    reviewers[step["review"]],
                    "jct_submit_review",
                    evidence_pack_id=done["evidence_pack"]["id"],
                    decision="approved",
                    reason="Meets the step's outputs.",
                )
                assert decision["task_status"] == "completed"

        assert sorted(order) == sorted(listed[name]["steps"])  # every step, once
        mission = await ok(worker, "jct_get_mission", mission_id=started["mission_id"])
        assert mission["mission"]["status"] == "completed"
        assert mission["mission"]["workflow"]["version"] == started["version"]
        assert mission["progress"]["percent_done"] == 100
    await core.db.dispose()


def _check(evidence: dict[str, Any], name: str) -> dict[str, Any]:
    return next(check for check in evidence["evidence_pack"]["checks"] if check["name"] == name)
