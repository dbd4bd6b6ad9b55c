"""The plugins' texts say what the tools accept: every criterion status the jct-work skill names is one
jct_complete_task takes (its schema's and the server's), and it names all of them; every tool, parameter, result
field, value and error code the skills, commands, agent and hook script name is one JCT has."""

from __future__ import annotations

import re
from typing import Any

import pytest
from mcp import Client

from server.core.service import Core
from server.errors import ErrorCode
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


# Every text of both plugins that tells a model (or, from the hook script, a session) what to call.
PLUGINS = [ROOT / "deploy" / "claude-code" / plugin for plugin in ("plugin", "plugin-local")]
TEXTS = [
    path for plugin in PLUGINS for path in sorted(plugin.rglob("*.md")) if path.name not in {"README.md", "PRIVACY.md"}
]
HOOK_SCRIPTS = [plugin / "hooks" / "jct-hook.js" for plugin in PLUGINS]
# Backticked words that name no tool, parameter, result field or value: placeholders and paths.
NOT_SCHEMA = {"$ARGUMENTS", "jct://issues/{id}", "jct://reviews/pending", "jct://evidence/{id}", "jct://artifacts/{id}"}
NOT_SCHEMA |= {"jct://queue", "system", "cd", "Stop"}
# A tool error's JSON: {"success": false, "error": {"code", "message", "suggestion"}} (server/errors.py).
ERROR_FIELDS = {"code", "message", "suggestion"}


def schema_words(schema: Any, found: set[str]) -> set[str]:
    """Every property name and enum value anywhere in a JSON schema."""
    if isinstance(schema, dict):
        if isinstance(schema.get("properties"), dict):
            found |= set(schema["properties"])
        for value in schema.get("enum") or []:
            found.add(str(value))
        for value in schema.values():
            schema_words(value, found)
    elif isinstance(schema, list):
        for value in schema:
            schema_words(value, found)
    return found


async def test_the_plugin_texts_name_only_tools_parameters_fields_and_codes_jct_has(core: Core) -> None:
    """What the skills, commands, agent and hook script name in backticks is a tool, one of its parameters or result
    fields (with a value it takes), or an error code; a claim's wait is within the server's cap."""
    async with Client(build_mcp(core, FixedIdentity("worker")), mode="legacy") as client:
        tools = (await client.list_tools()).tools
    names = {tool.name for tool in tools}
    words = set(ERROR_FIELDS)
    for tool in tools:
        schema_words(tool.input_schema, words)
        schema_words(tool.output_schema or {}, words)
    codes = {code.value for code in ErrorCode}
    for path in TEXTS:
        for quoted in re.findall(r"`([^`\n]+)`", path.read_text()):
            if quoted in NOT_SCHEMA:
                continue
            key, _, value = (part.strip() for part in quoted.partition(":"))
            if key.startswith("jct_"):
                assert key in names, f"{path}: `{quoted}` is no tool"
            elif key.isupper():
                assert key in codes, f"{path}: `{quoted}` is no error code"
            else:
                assert key in words, f"{path}: `{quoted}` names no parameter, result field or value of a tool"
            if key == "wait_seconds":
                assert 0 < float(value) <= core.settings.claim_wait_max_seconds, f"{path}: `{quoted}`"
            elif value and value not in {"true", "false"}:
                assert value in words, f"{path}: `{quoted}`: {value} is no value a tool takes or returns"
    for path in HOOK_SCRIPTS:
        script = path.read_text()
        for tool in set(re.findall(r"\bjct_\w+", script)):
            assert tool in names or f"jct_{tool.removeprefix('jct_')}" in names, f"{path}: {tool} is no tool"
        for tool in re.findall(r'tool === "(\w+)"', script):
            assert f"jct_{tool}" in names, f"{path}: jct_{tool} is no tool"
        gone = re.search(r"const GONE = new Set\(\[([^\]]*)\]\)", script)
        assert gone is not None
        assert set(re.findall(r'"(\w+)"', gone.group(1))) <= codes, path
        [wait] = re.findall(r"const WAIT_SECONDS = (\d+);", script)
        assert 0 < int(wait) <= core.settings.claim_wait_max_seconds, path
