"""Workflows by hand, through the real `jct` process: list, check a file (lines and reasons), print the schema,
start one as a mission, and the one line each command prints when it cannot."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.command import jct, jct_process, local_env, one_error_line
from tests.support.flows import flows_with, workflow_yaml

pytestmark = pytest.mark.anyio

GOOD = workflow_yaml(
    "notes",
    "Write release notes",
    "version",
    """\
  - id: write
    operation: docs
    objective: "Notes for {version}"
""",
)


def env(tmp_path: Path) -> dict[str, str]:
    return local_env(tmp_path) | {"COLUMNS": "200", "JCT_WORKFLOWS_DIR": str(tmp_path / "flows")}


async def test_list_check_schema_and_start(tmp_path: Path) -> None:
    flows = flows_with(tmp_path, notes=GOOD, bad=GOOD.replace("name: notes", "name: bad").replace("{version}", "{tag}"))

    code, out, err = await jct(tmp_path, "workflows", env=env(tmp_path))
    assert code == 0, err
    for name in ("bugfix", "feature", "docs", "notes"):
        assert re.search(rf"^\s*{name}\s+[0-9a-f]{{12}}\s", out, re.M), out
    assert f"refused: {flows / 'bad.yaml'}:8: {{tag}} in step 'write' names no input" in out

    code, out, err = await jct(tmp_path, "workflow", "check", str(flows / "notes.yaml"), env=env(tmp_path))
    assert code == 0, err
    assert "workflow 'notes' version" in out
    code, out, err = await jct(tmp_path, "workflow", "check", str(flows / "bad.yaml"), env=env(tmp_path))
    assert code == 1
    assert f"{flows / 'bad.yaml'}:8: {{tag}} in step 'write' names no input (inputs: version)" in out
    assert "1 problem(s)" in one_error_line(err)

    code, out, err = await jct(tmp_path, "workflow", "schema", env=env(tmp_path))
    assert code == 0, err
    assert json.loads(out)["$id"] == "urn:jct:workflow:1"

    args = ["workflow", "start", "notes", "--input", "version=1.2", "--repo", "myorg/api", "--key", "n-1"]
    code, out, err = await jct(tmp_path, *args, env=env(tmp_path))
    assert code == 0, err
    mission_id = re.search(r"workflow notes version [0-9a-f]{12}: mission (\S+) with 1 task", out).group(1)  # type: ignore[union-attr]
    assert re.search(r"write\s+\S+\s+phase 0\s+queued", out)
    code, out, err = await jct(tmp_path, "mission", mission_id, env=env(tmp_path))
    assert code == 0, err
    assert "Notes for 1.2" in out


async def test_failures_are_one_line(tmp_path: Path) -> None:
    code, _out, err = await jct_process(tmp_path, "workflow", "start", "nope", "--repo", "myorg/api", env=env(tmp_path))
    assert code == 1
    assert "WORKFLOW_NOT_FOUND" in one_error_line(err)
    code, _out, err = await jct_process(
        tmp_path, "workflow", "start", "bugfix", "--input", "bug", "--repo", "myorg/api", env=env(tmp_path)
    )
    assert code == 2
    assert "is not NAME=VALUE" in one_error_line(err)
    code, _out, err = await jct_process(
        tmp_path, "workflow", "start", "bugfix", "--repo", "myorg/api", env=env(tmp_path)
    )
    assert code == 1
    assert "INVALID_ARGUMENT: Workflow 'bugfix' needs the input(s) bug" in one_error_line(err)
