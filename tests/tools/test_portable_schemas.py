"""Output schemas every client can map: the MCP Inspector's `--strict` schema portability check (2.12.0) finds
nothing in JCT's tools/list. These are its rules, checked on every tool's input and output schema: no `type`
array (["string", "null"]), no null branch, no `$ref` or `$defs`, no bare boolean schema, and no schema that
constrains nothing. A nullable result field is an optional one instead: JCT leaves a null out of the JSON."""

from __future__ import annotations

from typing import Any

import pytest

from tests.tools.conftest import ClientFactory

pytestmark = pytest.mark.anyio

# The Inspector's CONSTRAINING_KEYWORDS: a schema with none of these accepts any value.
CONSTRAINING = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "maxItems", "minItems", "uniqueItems", "maxContains",
    "minContains", "maxProperties", "minProperties", "required", "dependentRequired", "allOf", "anyOf", "oneOf",
    "not", "items", "prefixItems", "contains", "additionalItems", "unevaluatedItems", "properties",
    "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames", "dependentSchemas",
    "dependencies", "$ref", "$dynamicRef", "$recursiveRef",
}  # fmt: skip
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SUBSCHEMAS = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")


def findings(node: Any, path: str = "") -> list[str]:
    if isinstance(node, bool):
        return [f"{path}: a bare {node} schema"]
    if not isinstance(node, dict):
        return []
    found = []
    if isinstance(node.get("type"), list):
        found.append(f"{path}: type is an array {node['type']}")
    if node.get("type") == "null" or None in node.get("enum", []):
        found.append(f"{path}: a null branch")
    if "$ref" in node or "$defs" in node:
        found.append(f"{path}: $ref or $defs")
    if not CONSTRAINING & set(node) and not path.endswith(".not"):
        found.append(f"{path}: constrains nothing")
    for key in SUBSCHEMA_MAPS:
        for name, child in (node.get(key) or {}).items():
            found += findings(child, f"{path}.{key}.{name}")
    for key in SUBSCHEMA_LISTS:
        for n, child in enumerate(node.get(key) or []):
            found += findings(child, f"{path}.{key}[{n}]")
    for key in SUBSCHEMAS:
        if (key in node and key != "additionalProperties") or isinstance(node.get(key), dict):
            found += findings(node[key], f"{path}.{key}")
    return found


async def test_every_schema_passes_the_portability_rules(connect: ClientFactory) -> None:
    async with connect() as client:
        tools = (await client.list_tools()).tools
    assert len(tools) > 20
    problems = []
    for tool in tools:
        assert tool.output_schema is not None, tool.name
        problems += [f"{tool.name} outputSchema{p}" for p in findings(tool.output_schema)]
        problems += [f"{tool.name} inputSchema{p}" for p in findings(tool.input_schema)]
    assert problems == []


async def test_a_null_field_is_left_out_and_the_result_still_validates(connect: ClientFactory) -> None:
    async with connect() as client:
        enqueued = await client.call_tool(
            "jct_enqueue_task", {"objective": "Add a changelog", "operation": "docs", "target_repo": "myorg/api"}
        )
        assert not enqueued.is_error, enqueued.content
        assert enqueued.structured_content is not None
        task = await client.call_tool("jct_get_task", {"task_id": enqueued.structured_content["task_id"]})
    assert not task.is_error, task.content
    assert task.structured_content is not None
    detail = task.structured_content["task"]
    # Queued, never claimed: these are null, so absent (the SDK client checked the result against the schema).
    for absent in ("claimed_at", "completed_at", "active_run_id", "result", "error"):
        assert absent not in detail
    assert detail["status"] == "queued"
