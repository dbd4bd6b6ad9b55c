"""The prover's `outputs` check through the real MCP client, on both databases: a workflow step's required
outputs must be reported (by title and type), a JSON output must parse and match its schema; otherwise the
verdict is `fail`, naming what is missing or wrong."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from server.core.review import prover
from tests.support.flows import flows_with, workflow_yaml
from tests.tools.conftest import ClientFactory, connect, ok

pytestmark = pytest.mark.anyio
__all__ = ["connect"]

FLOW = workflow_yaml(
    "survey",
    "Survey a module",
    "module",
    """\
  - id: survey
    operation: analysis
    objective: "Survey {module}"
    outputs:
      - {name: notes, type: report}
      - {name: raw-log, type: log, required: false}
      - name: findings
        type: json
        schema:
          type: object
          required: [risk]
          properties:
            risk: {enum: [low, high]}
""",
)


@pytest.fixture
async def agent(connect: ClientFactory, tmp_path: Path) -> AsyncIterator[Client]:
    async with connect("agent", workflows_dir=flows_with(tmp_path, survey=FLOW)) as client:
        yield client


async def attempt(client: Client, artifacts: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Start the workflow, claim its step, report `artifacts` (title, type, content), complete it."""
    await ok(client, "jct_start_workflow", name="survey", inputs={"module": "leases"}, target_repo="myorg/api")
    claim = await ok(client, "jct_claim_next")
    run = {"task_id": claim["task_id"], "run_id": claim["run_id"]}
    for title, kind, content in artifacts:
        await ok(client, "jct_report_artifact", **run, title=title, artifact_type=kind, content=content)
    done = await ok(client, "jct_complete_task", **run, success=True, summary="Surveyed")
    pack = await ok(client, "jct_get_evidence", run_id=claim["run_id"])
    return {"done": done, "pack": pack["evidence_pack"]}


def outputs_check(pack: dict[str, Any]) -> dict[str, Any]:
    return next(check for check in pack["checks"] if check["name"] == "outputs")


async def test_missing_outputs_fail_the_verdict_naming_them(agent: Client) -> None:
    result = await attempt(agent, [("summary", "report", "All fine.")])
    assert result["done"]["evidence_pack"]["verdict"] == "fail"
    reason = result["done"]["evidence_pack"]["verdict_reason"]
    assert "outputs (missing notes (report), findings (json))" in reason
    # Never auto-approved: missing outputs go back to the agent (JCT_AUTO_REWORK).
    assert result["done"]["review"]["status"] == "needs_changes"
    assert "(outputs)" in result["done"]["review"]["message"]
    assert "output notes (report)" in result["pack"]["evidence_missing"]
    assert "raw-log" not in reason  # optional


async def test_an_output_of_the_wrong_type_is_missing(agent: Client) -> None:
    result = await attempt(agent, [("notes", "doc", "x"), ("findings", "report", '{"risk": "low"}')])
    assert outputs_check(result["pack"]) == {"name": "outputs", "passed": False, "detail": "missing notes (report)"}


async def test_a_json_output_must_parse_and_match_its_schema(agent: Client) -> None:
    broken = await attempt(agent, [("notes", "report", "x"), ("findings", "report", "{risk: low")])
    assert "invalid findings: not JSON" in outputs_check(broken["pack"])["detail"]
    wrong = await attempt(agent, [("notes", "report", "x"), ("findings", "report", '{"risk": "medium"}')])
    detail = outputs_check(wrong["pack"])["detail"]
    assert detail.startswith("invalid findings: 'medium' is not one of ['low', 'high'] at /risk")
    assert wrong["done"]["evidence_pack"]["verdict"] == "fail"


async def test_every_output_delivered_passes_and_is_auto_approved(agent: Client) -> None:
    result = await attempt(agent, [("notes", "report", "Two risks."), ("findings", "log", '{"risk": "high"}')])
    check = outputs_check(result["pack"])
    assert check == {"name": "outputs", "passed": True, "detail": "3 declared output(s) delivered"}
    assert result["done"]["evidence_pack"]["verdict"] == "pass"
    assert result["done"]["review"]["status"] == "auto_approved"


async def test_a_task_outside_a_workflow_has_no_outputs_check(agent: Client) -> None:
    task = await ok(agent, "jct_enqueue_task", objective="Survey", operation="analysis", target_repo="myorg/api")
    claim = await ok(agent, "jct_claim_task", task_id=task["task_id"])
    run = {"task_id": task["task_id"], "run_id": claim["run_id"]}
    await ok(agent, "jct_report_artifact", **run, title="notes", artifact_type="report", content="x")
    await ok(agent, "jct_complete_task", **run, success=True, summary="done")
    pack = (await ok(agent, "jct_get_evidence", run_id=claim["run_id"]))["evidence_pack"]
    assert "outputs" not in {check["name"] for check in pack["checks"]}


def test_the_latest_artifact_of_a_name_is_the_one_checked() -> None:
    def artifact(n: int, content: str) -> prover.ProverArtifact:
        return prover.ProverArtifact(id=f"a{n}", type="report", title="findings", content=content)

    base = prover.ProverInput(
        operation="analysis",
        success=True,
        target_path="",
        time_budget_seconds=60,
        duration_seconds=1,
        acceptance_criteria=(),
        claims=(),
        artifacts=(artifact(1, "nope"), artifact(2, "{}")),
        outputs=(prover.DeclaredOutput("findings", "json", True, {"type": "object"}),),
    )
    assert prover.prove(base).verdict == "pass"
    swapped = prover.ProverInput(**{**base.__dict__, "artifacts": (artifact(2, "{}"), artifact(1, "nope"))})
    assert prover.prove(swapped).verdict == "fail"
