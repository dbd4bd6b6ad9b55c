"""A three-phase mission by hand, through the real `jct` process: plan it from a file, list it, follow it as
agents work it, and the one line each command prints when it cannot."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from server.config import Settings
from server.core.claims import queue, work
from server.core.models import Actor
from server.core.review import completion
from server.core.service import Core
from tests.support.command import jct, jct_process, local_env, one_error_line

pytestmark = pytest.mark.anyio

AGENT = Actor(actor_id="agent-1", name="agent-1", session="agent-1")
DIFF = "--- a/src/api.py\n+++ b/src/api.py\n@@ -1 +1 @@\n-old\n+new\n"
MISSION = {
    "title": "Rate limiting for the API",
    "goal": "Clients over their quota get 429 with Retry-After, documented",
    "phases": [
        {"name": "Specify", "tasks": [{"key": "spec", "objective": "Write the spec", "operation": "docs"}]},
        {
            "name": "Build",
            "tasks": [
                {"key": "limiter", "objective": "Implement the bucket", "operation": "code_change"},
                {
                    "key": "headers",
                    "objective": "Send Retry-After",
                    "operation": "code_change",
                    "depends_on": ["limiter"],
                },
            ],
        },
        {"name": "Document", "tasks": [{"key": "docs", "objective": "Document the limits", "operation": "docs"}]},
    ],
}


def env(tmp_path: Path) -> dict[str, str]:
    return local_env(tmp_path) | {"COLUMNS": "200"}


def spec(tmp_path: Path, mission: dict[str, Any]) -> Path:
    for phase in mission["phases"]:
        for task in phase["tasks"]:
            task.setdefault("target_repo", "myorg/api")
    path = tmp_path / "mission.json"
    path.write_text(json.dumps(mission))
    return path


async def finish(core: Core, task_id: str) -> None:
    claim = await queue.claim_task(core, AGENT, task_id)
    await work.report_artifact(core, AGENT, task_id, title="Change", artifact_type="code_patch", content=DIFF)
    await completion.complete_task(core, AGENT, task_id, success=True, summary="Done", run_id=claim.run_id)


async def test_a_three_phase_mission_planned_listed_and_followed(tmp_path: Path) -> None:
    code, out, err = await jct(tmp_path, "plan", str(spec(tmp_path, MISSION)), "--key", "rl-1", env=env(tmp_path))
    assert code == 0, err
    mission_id = re.search(r"mission (\S+) created with 4 task\(s\)", out).group(1)  # type: ignore[union-attr]
    ids = dict(re.findall(r"^\s+(\w+)\s+([0-9a-f-]{36})\s+phase", out, re.M))
    assert set(ids) == {"spec", "limiter", "headers", "docs"}
    assert re.search(r"spec\s+\S+\s+phase 0\s+queued", out)
    assert re.search(r"headers\s+\S+\s+phase 1\s+blocked", out)

    code, again, err = await jct(tmp_path, "plan", str(tmp_path / "mission.json"), "--key", "rl-1", env=env(tmp_path))
    assert code == 0, err
    assert f"mission {mission_id}" in again
    assert "duplicate" in again

    code, out, err = await jct(tmp_path, "missions", env=env(tmp_path))
    assert code == 0, err
    assert mission_id in out
    assert "0/4" in out

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home", trace_root=tmp_path / "t"))
    try:
        await finish(core, ids["spec"])
        await finish(core, ids["limiter"])
    finally:
        await core.db.dispose()

    code, out, err = await jct(tmp_path, "mission", mission_id, env=env(tmp_path))
    assert code == 0, err
    assert "2/4 approved (50%)" in out
    assert re.search(rf"{ids['headers']}\s+1\s+queued", out), out
    assert re.search(rf"{ids['docs']}\s+2\s+blocked", out), out
    assert re.search(r"0\s+Specify\s+done\s+1/1", out), out


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
        ("[1, 2]", "must be one object with title, goal and phases"),
    ],
)
async def test_a_file_that_is_not_a_mission_is_one_line(tmp_path: Path, content: str, expected: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    code, _out, err = await jct(tmp_path, "plan", str(tmp_path / "bad.json"), env=env(tmp_path))
    assert code == 2
    assert expected in one_error_line(err)


async def test_a_cycle_is_refused_by_name_and_creates_nothing(tmp_path: Path) -> None:
    cyclic = {
        "title": "t",
        "goal": "g",
        "phases": [
            {
                "name": "p",
                "tasks": [
                    {"key": "a", "objective": "a", "operation": "docs", "depends_on": ["b"]},
                    {"key": "b", "objective": "b", "operation": "docs", "depends_on": ["a"]},
                ],
            }
        ],
    }
    code, out, err = await jct(tmp_path, "plan", str(spec(tmp_path, cyclic)), env=env(tmp_path))
    assert code == 1
    assert "INVALID_ARGUMENT: depends_on has a cycle: a -> b -> a." in one_error_line(err)
    code, out, err = await jct(tmp_path, "missions", "--status", "all", env=env(tmp_path))
    assert "0 mission(s)" in out


async def test_an_unknown_mission_is_one_line(tmp_path: Path) -> None:
    code, _out, err = await jct_process(tmp_path, "mission", "6f8dc5fc-b239-45c9-a79e-d7f107855007", env=env(tmp_path))
    assert code == 1
    assert "MISSION_NOT_FOUND" in one_error_line(err)
    code, _out, err = await jct_process(tmp_path, "mission", "nope", env=env(tmp_path))
    assert code == 1
    assert "not a UUID" in one_error_line(err)


async def test_a_budget_planned_from_a_file_is_raised_and_the_closing_summary_written_by_hand(tmp_path: Path) -> None:
    tasks = [{"key": key, "objective": key.upper(), "operation": "docs"} for key in ("a", "b")]
    budgeted = {"title": "Budgeted", "goal": "Two docs", "max_cost_usd": 1.0, "phases": [{"name": "W", "tasks": tasks}]}
    code, out, err = await jct(tmp_path, "plan", str(spec(tmp_path, budgeted)), env=env(tmp_path))
    assert code == 0, err
    mission_id = re.search(r"mission (\S+) created", out).group(1)  # type: ignore[union-attr]
    ids = dict(re.findall(r"^\s+(\w+)\s+([0-9a-f-]{36})\s+phase", out, re.M))

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    core = Core.build(Settings(_env_file=None, database_url=url, home=tmp_path / "home", trace_root=tmp_path / "t"))
    try:
        claim = await queue.claim_task(core, AGENT, ids["a"])
        await work.report_progress(core, AGENT, ids["a"], message="x", telemetry={"cost_usd": 1.5}, run_id=claim.run_id)
    finally:
        await core.db.dispose()

    code, out, err = await jct(tmp_path, "mission", mission_id, env=env(tmp_path))
    assert code == 0, err
    assert "$1.00 (spent: its tasks wait)" in out
    assert "budget_spent" in out
    code, _out, err = await jct(tmp_path, "mission-budget", mission_id, "--max-cost-usd", "-2", env=env(tmp_path))
    assert code == 1
    assert "INVALID_ARGUMENT: max_cost_usd must be a finite number, 0 or more" in one_error_line(err)
    code, out, err = await jct(tmp_path, "mission-budget", mission_id, "--max-cost-usd", "5", env=env(tmp_path))
    assert code == 0, err
    assert f"mission {mission_id}: budget max_cost_usd $5.00 (not spent: its tasks may be claimed)" in out

    code, out, err = await jct(tmp_path, "mission-summary", mission_id, "Stopped after a.", env=env(tmp_path))
    assert code == 0, err
    assert "closing summary recorded" in out
    code, out, err = await jct(tmp_path, "mission", mission_id, env=env(tmp_path))
    assert "budget_spent" not in out
    code, _out, err = await jct(tmp_path, "mission-summary", "nope", "x", env=env(tmp_path))
    assert code == 1
