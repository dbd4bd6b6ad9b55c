"""Starting workflows through the real MCP client, on both databases: a mission of one task per step, phases by
dependency level, objectives from the inputs, the step kept on each task, what a step's dependencies delivered
in its briefing, and refusals that store nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from sqlalchemy import func, select

from server.core.service import Core
from server.db import tables
from tests.support.flows import flows_with, workflow_yaml
from tests.tools.conftest import ClientFactory, connect, error, ok

pytestmark = pytest.mark.anyio
__all__ = ["connect"]

PATCH = "diff --git a/t.py b/t.py\n--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-a\n+b\n"
TINY = workflow_yaml(
    "tiny",
    "Write one page",
    "topic",
    """\
  - id: write
    operation: docs
    objective: "Write about {topic}"
    outputs:
      - {name: page, type: doc}
""",
)


@pytest.fixture
async def agent(connect: ClientFactory, tmp_path: Path) -> AsyncIterator[Client]:
    async with connect("agent", workflows_dir=tmp_path / "flows") as client:
        yield client


async def start(client: Client, name: str = "bugfix", **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"inputs": {"bug": "Login fails with a + in the e-mail"}, "target_repo": "myorg/api"}
    arguments.update(extra)
    return await ok(client, "jct_start_workflow", name=name, **arguments)


async def missions_stored(core: Core) -> int:
    async with core.db.read() as conn:
        return int((await conn.execute(select(func.count()).select_from(tables.missions))).scalar_one())


async def test_the_shipped_workflows_are_listed_with_inputs_and_versions(agent: Client) -> None:
    listed = await ok(agent, "jct_list_workflows")
    by_name = {item["name"]: item for item in listed["workflows"]}
    assert {"bugfix", "feature", "docs"} <= set(by_name)
    assert by_name["bugfix"]["inputs"] == [{"name": "bug", "required": True, "description": "What is wrong"}]
    assert by_name["feature"]["steps"] == ["spec", "implement", "review", "docs"]
    assert len(by_name["docs"]["version"]) == 12
    assert listed["refused"] == []


async def test_a_workflow_becomes_a_mission_of_one_task_per_step(agent: Client) -> None:
    started = await start(agent)
    assert started["workflow"] == "bugfix"
    keys = {item["key"]: item for item in started["tasks"]}
    assert set(keys) == {"reproduce", "fix"}
    assert keys["reproduce"]["status"] == "queued"
    assert keys["fix"]["status"] == "blocked"
    assert (keys["reproduce"]["phase"], keys["fix"]["phase"]) == (0, 1)

    view = await ok(agent, "jct_get_mission", mission_id=started["mission_id"], include=["tasks"])
    assert view["mission"]["workflow"] == {
        "name": "bugfix",
        "version": started["version"],
        "inputs": {"bug": "Login fails with a + in the e-mail"},
    }
    assert view["mission"]["title"] == "bugfix: Login fails with a + in the e-mail"
    assert [phase["name"] for phase in view["phases"]] == ["reproduce", "fix"]
    objectives = {t["task_id"]: t["objective"] for t in view["tasks"]}
    assert objectives[keys["reproduce"]["task_id"]] == "Reproduce: Login fails with a + in the e-mail"
    assert objectives[keys["fix"]["task_id"]] == "Fix: Login fails with a + in the e-mail"

    context = await ok(agent, "jct_get_context", task_id=keys["fix"]["task_id"])
    step = context["step"]
    assert (step["workflow"], step["step"], step["version"]) == ("bugfix", "fix", started["version"])
    assert step["review"] == "human"
    assert step["max_rounds"] == 3
    assert [(o["name"], o["type"]) for o in step["outputs"]] == [("fix", "code_patch"), ("test-log", "log")]
    assert context["context_packet"]["data"] == {"step": step}
    assert "titled exactly: fix (code_patch), test-log (log)" in context["context_packet"]["summary"]
    assert context["issue"]["acceptance_criteria"] == ["the failing test passes", "no other test fails"]


async def test_a_steps_briefing_lists_what_its_dependencies_delivered(agent: Client) -> None:
    started = await start(agent)
    keys = {item["key"]: item["task_id"] for item in started["tasks"]}
    claim = await ok(agent, "jct_claim_next")
    assert claim["task_id"] == keys["reproduce"]
    run = {"task_id": keys["reproduce"], "run_id": claim["run_id"]}
    test = await ok(
        agent, "jct_report_artifact", **run, title="failing-test", artifact_type="code_patch", content=PATCH
    )
    repro = await ok(agent, "jct_report_artifact", **run, title="repro", artifact_type="report", content="pytest -k x")
    before = await ok(agent, "jct_get_context", task_id=keys["fix"])
    assert "dependency_artifacts" not in before  # nothing approved yet
    done = await ok(agent, "jct_complete_task", **run, success=True, summary="Reproduced")
    assert done["review"]["status"] == "auto_approved"

    context = await ok(agent, "jct_get_context", task_id=keys["fix"])
    assert context["dependency_artifacts"] == [
        {
            "artifact_id": test["artifact_id"],
            "title": "failing-test",
            "type": "code_patch",
            "task_id": keys["reproduce"],
            "step": "reproduce",
        },
        {
            "artifact_id": repro["artifact_id"],
            "title": "repro",
            "type": "report",
            "task_id": keys["reproduce"],
            "step": "reproduce",
        },
    ]


async def test_an_unknown_workflow_is_workflow_not_found(agent: Client, core: Core) -> None:
    refused = await error(agent, "jct_start_workflow", name="nope", inputs={}, target_repo="myorg/api")
    assert refused["code"] == "WORKFLOW_NOT_FOUND"
    assert "bugfix" in refused["suggestion"]


async def test_missing_and_unknown_inputs_are_refused_and_store_nothing(
    connect: ClientFactory, make_settings: Any, tmp_path: Path
) -> None:
    core = Core.build(make_settings())
    async with connect("agent", core=core) as agent:
        missing = await error(agent, "jct_start_workflow", name="bugfix", inputs={}, target_repo="myorg/api")
        assert missing["code"] == "INVALID_ARGUMENT"
        assert "needs the input(s) bug" in missing["message"]
        unknown = await error(
            agent, "jct_start_workflow", name="bugfix", inputs={"bug": "x", "colour": "red"}, target_repo="myorg/api"
        )
        assert unknown["code"] == "INVALID_ARGUMENT"
        assert "no input(s) colour" in unknown["message"]
        blank = await error(agent, "jct_start_workflow", name="bugfix", inputs={"bug": " "}, target_repo="myorg/api")
        assert blank["code"] == "INVALID_ARGUMENT"
        control = await error(
            agent, "jct_start_workflow", name="bugfix", inputs={"bug": "a\x1b[2Jb"}, target_repo="myorg/api"
        )
        assert control["code"] == "INVALID_ARGUMENT"
        assert await missions_stored(core) == 0
    await core.db.dispose()


async def test_optional_inputs_take_their_defaults(agent: Client) -> None:
    started = await ok(agent, "jct_start_workflow", name="docs", inputs={"topic": "the queue"}, target_repo="myorg/api")
    outline = next(item["task_id"] for item in started["tasks"] if item["key"] == "outline")
    context = await ok(agent, "jct_get_context", task_id=outline)
    assert "what developers need to know" in context["context_packet"]["summary"]


async def test_an_idempotency_key_returns_the_first_mission_or_refuses_another_payload(agent: Client) -> None:
    first = await start(agent, idempotency_key="bug-42")
    again = await start(agent, idempotency_key="bug-42")
    assert again["duplicate"] is True
    assert again["mission_id"] == first["mission_id"]
    conflict = await error(
        agent,
        "jct_start_workflow",
        name="bugfix",
        inputs={"bug": "other"},
        target_repo="myorg/api",
        idempotency_key="bug-42",
    )
    assert conflict["code"] == "IDEMPOTENCY_CONFLICT"


async def test_user_files_load_beside_the_shipped_a_broken_one_is_reported_and_running_work_keeps_its_version(
    agent: Client, tmp_path: Path
) -> None:
    broken = TINY.replace("name: tiny", "name: broken").replace("type: doc", "type: video")
    flows = flows_with(tmp_path, tiny=TINY, broken=broken)
    listed = await ok(agent, "jct_list_workflows")
    assert "tiny" in {item["name"] for item in listed["workflows"]}
    [refused] = listed["refused"]
    assert refused.startswith(f"{flows / 'broken.yaml'}:10: ")
    assert "'video' is not one of" in refused

    started = await ok(agent, "jct_start_workflow", name="tiny", inputs={"topic": "leases"}, target_repo="myorg/api")
    (flows / "tiny.yaml").write_text(TINY.replace("type: doc", "type: report").replace("one page", "two pages"))
    newer = {item["name"]: item for item in (await ok(agent, "jct_list_workflows"))["workflows"]}["tiny"]
    assert newer["version"] != started["version"]

    context = await ok(agent, "jct_get_context", task_id=started["tasks"][0]["task_id"])
    assert context["step"]["version"] == started["version"]
    assert context["step"]["outputs"] == [{"name": "page", "type": "doc", "required": True}]


async def test_a_step_names_doctrine_its_briefing_carries(agent: Client, tmp_path: Path) -> None:
    styled = TINY.replace("name: tiny", "name: styled").replace(
        "    outputs:", "    doctrine: [myorg/docs-style]\n    outputs:"
    )
    flows_with(tmp_path, styled=styled)
    refused = await error(agent, "jct_start_workflow", name="styled", inputs={"topic": "x"}, target_repo="myorg/d")
    assert refused["code"] == "DOCTRINE_NOT_FOUND"

    await ok(agent, "jct_manage_doctrine", action="add", name="myorg/docs-style", body="Write short sentences.")
    started = await start(agent, "styled", inputs={"topic": "queues"}, target_repo="myorg/d")
    context = await ok(agent, "jct_get_context", task_id=started["tasks"][0]["task_id"])
    assert [(d["namespace"], d["name"]) for d in context["doctrine_refs"]] == [("myorg", "docs-style")]
