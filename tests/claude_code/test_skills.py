"""The plugins' skills say what the tools accept: every criterion status the jct-work skill names is one
jct_complete_task takes (its schema's and the server's), and it names all of them."""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp import Client

from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.claude_code.harness import ROOT
from tests.core.helpers import enqueue

pytestmark = pytest.mark.anyio

SKILLS = [
    ROOT / "deploy" / "claude-code" / plugin / "skills" / "jct-work" / "SKILL.md"
    for plugin in ("plugin", "plugin-local")
]
# "`status`: `satisfied` or `unsatisfied`": the values the skill gives for a criterion's status.
STATUSES = re.compile(r"`status`:?\s+((?:`\w+`(?:,?\s+or\s+|,\s+|\s*/\s*)?)+)")


def named_statuses(text: str) -> set[str]:
    found = STATUSES.findall(text)
    assert len(found) == 1, f"the skill should name the criterion statuses once, as `status`: `a` or `b`: {found}"
    return set(re.findall(r"`(\w+)`", found[0]))


def test_the_work_skill_names_no_status_of_another_vocabulary() -> None:
    for skill in SKILLS:
        text = skill.read_text()
        assert named_statuses(text)
        assert not re.search(r"\bnot_\w+", text), skill


async def test_every_status_the_work_skill_names_is_accepted_by_jct_complete_task(core: Core) -> None:
    named = {skill: named_statuses(skill.read_text()) for skill in SKILLS}
    async with Client(build_mcp(core, FixedIdentity("worker")), mode="legacy") as client:
        [complete] = [tool for tool in (await client.list_tools()).tools if tool.name == "jct_complete_task"]
        schema: dict[str, Any] = complete.input_schema
        offered = set(schema["properties"]["criteria_results"]["items"]["properties"]["status"]["enum"])
        for skill, statuses in named.items():
            assert statuses == offered, skill
        for status in sorted(offered):
            task_id = await enqueue(core, objective=f"Check the status {status}")
            claim = (await client.call_tool("jct_claim_task", {"task_id": task_id})).structured_content
            assert claim is not None
            artifact = await client.call_tool(
                "jct_report_artifact",
                {"task_id": task_id, "title": "Patch", "artifact_type": "code_patch", "content": "diff"},
            )
            assert artifact.structured_content is not None
            results = [{"criterion": 0, "status": status, "evidence": [artifact.structured_content["artifact_id"]]}]
            done = await client.call_tool(
                "jct_complete_task",
                {"task_id": task_id, "success": True, "summary": "done", "criteria_results": results},
            )
            assert not done.is_error, (status, done.content)
            assert done.structured_content is not None
            assert done.structured_content["success"] is True
