"""The tool surface is deliberate: a committed snapshot, annotations, toolsets, and its size in tokens."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.tools.conftest import ClientFactory

pytestmark = pytest.mark.anyio

SNAPSHOT = Path(__file__).with_name("tools_snapshot.json")
READS = {
    "jct_git_log",
    "jct_git_diff",
    "jct_git_show",
    "jct_get_mission",
    "jct_list_missions",
    "jct_list_workflows",
    "jct_list_tasks",
    "jct_get_context",
    "jct_get_task",
    "jct_get_run",
    "jct_get_evidence",
    "jct_get_audit_trail",
    "jct_list_agents",
    "jct_list_stuck",
    "jct_search_audit",
    "jct_get_artifact",
    "jct_queue_stats",
    "jct_list_pending_reviews",
}
# Mutations that end work: cancelling (a running agent loses its claim; only a task, not a mission, comes back
# with jct_requeue_task), a review decision (an approval is final), removing doctrine.
DESTRUCTIVE = {"jct_cancel_task", "jct_cancel_mission", "jct_submit_review", "jct_manage_doctrine"}
WORKER = {
    "jct_list_tasks",
    "jct_claim_task",
    "jct_claim_next",
    "jct_get_context",
    "jct_report_artifact",
    "jct_report_progress",
    "jct_complete_task",
    "jct_release_task",
}


async def _surface(client: Client) -> list[dict[str, Any]]:
    tools = (await client.list_tools()).tools
    return [
        {
            "name": tool.name,
            "annotations": tool.annotations.model_dump(exclude_none=True) if tool.annotations else None,
            "input_schema": tool.input_schema,
        }
        for tool in sorted(tools, key=lambda t: t.name)
    ]


def _context_tokens(tools: list[Any]) -> float:
    """What a client hands its model, measured as the comparison with peer servers measures it: the tools as one
    JSON list of name, description and input schema, keys and escaping included, at 4 characters a token."""
    listed = [{"name": t.name, "description": t.description, "input_schema": t.input_schema} for t in tools]
    return len(json.dumps(listed)) / 4


async def test_tools_list_matches_the_committed_snapshot(connect: ClientFactory) -> None:
    async with connect() as client:
        surface = await _surface(client)
    if os.environ.get("JCT_UPDATE_SNAPSHOT") == "1":
        SNAPSHOT.write_text(json.dumps(surface, indent=2, sort_keys=True) + "\n")
    expected = json.loads(SNAPSHOT.read_text())
    assert surface == expected, "tools/list changed: rerun with JCT_UPDATE_SNAPSHOT=1 if the change is deliberate"


async def test_reads_are_read_only_and_only_what_cannot_be_undone_is_destructive(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = (await client.list_tools()).tools
    assert len(tools) == 33
    for tool in tools:
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (tool.name in READS), tool.name
        if tool.name not in READS:
            assert tool.annotations.destructive_hint is (tool.name in DESTRUCTIVE), tool.name


async def test_every_mutation_says_how_to_undo_it_or_that_it_cannot_be(connect: ClientFactory) -> None:
    """A mutating tool's description names its undo (another tool, or the same one again), or says it is final."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
    said = ("Undo:", "undo", "for good", "Cannot be undone")
    vague = [t.name for t in tools if t.name not in READS and not any(words in (t.description or "") for words in said)]
    assert not vague, f"mutating tools that do not say how to undo them: {vague}"
    cancelled = next(t for t in tools if t.name == "jct_cancel_task").description or ""
    assert "Undo: jct_requeue_task" in cancelled  # a cancelled task comes back with jct_requeue_task


async def test_toolsets_select_the_exposed_groups(connect: ClientFactory) -> None:
    async with connect(toolsets=["worker"]) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert names == WORKER


def _properties(schema: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Every property at any depth (in nested objects, array items and $defs), with where it is."""
    if not isinstance(schema, dict):
        return []
    found = []
    for name, value in schema.get("properties", {}).items():
        found.append((f"{where}.{name}", value))
        found += _properties(value, f"{where}.{name}")
    for name, nested in schema.get("$defs", {}).items():
        found += _properties(nested, f"{where}.$defs.{name}")
    found += _properties(schema.get("items"), f"{where}[]")
    return found


# Parameters whose name, type and limits say all there is: a description would repeat the name ("The task's id.")
# in every agent's context window. Every other parameter says what to pass.
SELF_DESCRIBED = {
    "task_id",
    "action",
    "target_repo",
    "priority",
    "entity_kind",
    "media_type",
    "criteria_results",
    "evidence_pack_id",
    "cursor",
    "reason",
    "run_id",
    "mission_id",
    "artifact_id",
    "entity_id",
    "actor_id",
    "repo",
    "ref",
    "base",
    "head",
    "path",
    "limit",
    "max_chars",
    "time_budget_seconds",
    "active_within_seconds",
    "idempotency_key",
    "max_tokens",
    "objective",
    "operation",
    "decision",
    "status",
}


def _undescribed(schema: dict[str, Any], where: str) -> list[str]:
    return [
        path
        for path, value in _properties(schema, where)
        if "description" not in value and path.rsplit(".", 1)[-1] not in SELF_DESCRIBED
    ]


# The ids JCT hands out: core checks each is a UUID (models.parse_id), which bounds it; the schema says so in the
# parameter's name (or its list's) rather than in a `format` a client ignores.
IDS = (
    "_id",
    "jct_enqueue_task.depends_on[]",
    ".criteria_results[].evidence[]",
)


def _unbounded(path: str, value: dict[str, Any]) -> list[str]:
    """What a property leaves unsaid of the limits the server enforces (docs/tools.md, Input limits)."""
    types = value.get("type")
    options = [option.get("type") for option in value.get("anyOf", [])]
    if (
        "enum" in value
        or "const" in value
        or path.endswith((".content", ".outputs", ".telemetry", ".data", ".success", ".create_cwom"))
    ):
        return []  # a closed set, or bounded by a setting and checked by core (JCT_MAX_ARTIFACT_BYTES, JSON)
    missing = []
    if (types == "string" or "string" in options) and "maxLength" not in value and not path.endswith(IDS):
        missing.append(f"{path}: maxLength, or an id core checks")
    if types == "array" and "maxItems" not in value:
        missing.append(f"{path}: maxItems")
    if types == "array" and value.get("items", {}).get("type") == "string":
        missing += _unbounded(f"{path}[]", value["items"])
    if types == "integer" and "minimum" not in value:
        missing.append(f"{path}: minimum")
    return missing


async def test_every_input_property_has_a_description(connect: ClientFactory) -> None:
    """Every parameter says what to pass, unless its name, type and limits say it all (SELF_DESCRIBED)."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
    missing = [path for tool in tools for path in _undescribed(tool.input_schema, tool.name)]
    assert not missing, f"tool parameters without a description: {missing}"


async def test_every_limit_the_server_enforces_is_in_the_input_schema(connect: ClientFactory) -> None:
    """A client sees each documented limit before it calls: texts have maxLength (or are UUIDs), lists maxItems,
    numbers their bounds."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
    missing = [
        gap
        for tool in tools
        for path, value in _properties(tool.input_schema, tool.name)
        for gap in _unbounded(path, value)
    ]
    assert not missing, missing


async def test_output_schemas_are_flat_for_cheap_checking(connect: ClientFactory) -> None:
    """The SDK client checks every result against its tool's output schema: no $ref to resolve, no anyOf to try."""
    async with connect() as client:
        tools = (await client.list_tools()).tools
    for tool in tools:
        schema = json.dumps(tool.output_schema)
        assert tool.output_schema is not None, tool.name
        assert '"$ref"' not in schema, tool.name
        assert '"anyOf"' not in schema, tool.name


async def test_the_surface_fits_the_context_budget(connect: ClientFactory) -> None:
    """Every toolset (the default) under 5,000 tokens, a worker-only server under 2,500."""
    async with connect() as client:
        full = _context_tokens((await client.list_tools()).tools)
    async with connect(toolsets=["worker"]) as client:
        worker = _context_tokens((await client.list_tools()).tools)
    assert full < 5_000, f"tools/list is {full:.0f} tokens"
    assert worker < 2_500, f"the worker toolset is {worker:.0f} tokens"
