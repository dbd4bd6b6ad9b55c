"""Every tool, called with generated arguments of every shape through the real MCP client.

No answer is INTERNAL_ERROR or carries a traceback, the server keeps answering, and a refused call leaves
every table as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from server.config import Settings
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import build_mcp
from tests.core.helpers import PATCH, snapshot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

EXAMPLES = 150
HUGE = [
    "",
    " ",
    "x" * 4_001,
    "é" * 20_001,
    "a" * 70_000,
    "🙂" * 3_000,
    "b" * 2_000_000,
    "\x00",
    "ok\x1b[31mred",
    "line\nbreak",
    "tab\there",
    "../../etc/passwd",
    "/etc/passwd",
    "file:///etc/passwd",
    "https://example.com/build/42",
    "urn:x",
    "{}",
    '{"pr": 12}',
    "[1, 2]",
    "null",
    "not json {",
    "P0",
    "queued",
    "code_change",
    "code_patch",
    "approved",
    "needs_changes",
    "Task",
    "Run",
    "text/plain",
    "main",
    "myorg/api",
    "0",
    "-1",
    "eyJ4IjoxfQ",
    "WyJQMiIsIjIwMjQtMDEtMDFUMDA6MDA6MDAiLCJ4Il0",
    "00000000-0000-0000-0000-000000000000",
    "00000000000000000000000000000000",
    "{12345678-1234-5678-1234-567812345678}",
]


@dataclass
class Target:
    portal: BlockingPortal
    core: Core
    client: Client
    schemas: dict[str, dict[str, Any]]
    ids: list[str]


@pytest.fixture
def target(anyio_backend: str, make_settings: Callable[..., Settings]) -> Iterator[Target]:
    """A server on a database holding a queued task, a claimed one with an artifact, and one awaiting review.

    Hypothesis drives a plain function; the client and the server live on an event loop of their own.
    """
    settings = make_settings(review_auto_approve=False)
    with start_blocking_portal(anyio_backend) as portal:
        core = Core.build(settings)
        try:
            with portal.wrap_async_context_manager(
                Client(build_mcp(core, FixedIdentity("fuzzer")), mode="legacy")
            ) as client:
                ids = portal.call(_seed, client)
                schemas = portal.call(_schemas, client)
                yield Target(portal, core, client, schemas, ids)
        finally:
            portal.call(core.db.dispose)


async def _schemas(client: Client) -> dict[str, dict[str, Any]]:
    return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


async def _ok(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def _seed(client: Client) -> list[str]:
    ids: list[str] = []
    for objective in ("Queued task", "Claimed task", "Reviewed task"):
        task = await _ok(
            client,
            "jct_enqueue_task",
            objective=objective,
            operation="code_change",
            target_repo="myorg/api",
            acceptance_criteria=["It works"],
        )
        ids += [task["task_id"], task["cwom_issue_id"]]
    for task_id in ids[2::2]:
        claim = await _ok(client, "jct_claim_task", task_id=task_id)
        artifact = await _ok(
            client, "jct_report_artifact", task_id=task_id, title="Patch", artifact_type="code_patch", content=PATCH
        )
        ids += [claim["run_id"], artifact["artifact_id"]]
    done = await _ok(client, "jct_complete_task", task_id=ids[4], success=True, summary="Done.")
    ids.append(done["evidence_pack"]["id"])
    return ids


def _strategies(ids: list[str]) -> tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]:
    identifiers = st.sampled_from(ids) | st.uuids().map(str)
    texts = st.text(max_size=40) | st.sampled_from(HUGE) | identifiers
    numbers = st.integers(min_value=-5, max_value=150) | st.sampled_from([-(2**63), 2**63, 10**30, 86_401, 29])
    scalars = st.none() | st.booleans() | numbers | st.floats(allow_nan=True, allow_infinity=True) | texts
    anything = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    )
    return texts, anything


def _for_schema(schema: dict[str, Any], texts: st.SearchStrategy[Any], anything: st.SearchStrategy[Any]) -> Any:
    """Values that fit the property's schema often, and values of any other shape otherwise."""
    if "enum" in schema:
        plausible: st.SearchStrategy[Any] = st.sampled_from(schema["enum"])
    elif "anyOf" in schema:
        plausible = st.one_of([_for_schema(option, texts, anything) for option in schema["anyOf"]])
    else:
        kind = schema.get("type")
        if kind == "string":
            plausible = texts
        elif kind == "integer":
            plausible = st.integers(min_value=-10, max_value=200) | st.sampled_from([-(2**63), 2**63 - 1, 10**30])
        elif kind == "boolean":
            plausible = st.booleans()
        elif kind == "array":
            plausible = st.lists(_for_schema(schema.get("items", {}), texts, anything), max_size=5) | st.just(
                ["x"] * 60
            )
        elif kind == "object":
            plausible = st.dictionaries(st.sampled_from(["criterion", "status", "evidence", "note", "x"]), anything)
        else:
            plausible = anything
    return plausible | anything


def arguments(schema: dict[str, Any], ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    texts, anything = _strategies(ids)
    defs = schema.get("$defs", {})
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        resolved = _resolve(prop, defs)
        properties[name] = _for_schema(resolved, texts, anything)
    extra = st.dictionaries(st.sampled_from(["bogus", "__proto__", "actor_id"]), anything, max_size=1)
    return st.builds(lambda given, more: {**given, **more}, st.fixed_dictionaries({}, optional=properties), extra)


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _resolve(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "items" in schema:
        return {**schema, "items": _resolve(schema["items"], defs)}
    if "anyOf" in schema:
        return {**schema, "anyOf": [_resolve(option, defs) for option in schema["anyOf"]]}
    return schema


def _json_safe(value: Any) -> bool:
    """Arguments travel as JSON: NaN and infinities cannot, so the client never sends them."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(_json_safe(v) for v in value.values())
    return True


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_tool_survives_arbitrary_arguments(target: Target, data: st.DataObject) -> None:
    tool = data.draw(st.sampled_from(sorted(target.schemas)), label="tool")
    args = data.draw(arguments(target.schemas[tool], target.ids), label="arguments")
    if not _json_safe(args):
        args = json.loads(json.dumps(args, allow_nan=True).replace("NaN", "null").replace("Infinity", "1e308"))
    target.portal.call(_check_one_call, target, tool, args)


async def _check_one_call(target: Target, tool: str, args: dict[str, Any]) -> None:
    before = await snapshot(target.core)
    try:
        result = await target.client.call_tool(tool, args)
    except MCPError as exc:  # a protocol-level refusal of the arguments is acceptable; a crash is not
        refusal: MCPError | None = exc
    else:
        refusal = None
    if refusal is not None:
        assert refusal.error.code == INVALID_PARAMS, refusal
        assert "Traceback" not in str(refusal)
        assert await snapshot(target.core) == before
        return
    texts = [block.text for block in result.content if block.type == "text"]
    assert all("Traceback" not in text for text in texts)
    if result.is_error:
        body = json.loads(texts[0])
        assert body["success"] is False
        assert body["error"]["code"] != "INTERNAL_ERROR", body
        assert body["error"]["message"], body
        assert body["error"]["suggestion"], body
        assert len(texts[0]) < 10_000, "an error must not echo a huge argument back"
        assert await snapshot(target.core) == before, f"{tool} refused {body['error']['code']} but changed rows"
    else:
        assert result.structured_content is not None
        assert result.structured_content["success"] is True
    stats = await target.client.call_tool("jct_queue_stats", {})
    assert not stats.is_error
