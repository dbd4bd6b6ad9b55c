"""Bad input never reaches storage (DESIGN section 10), on both databases, sent as raw JSON to a real server.

Measured before: NaN, Infinity or NUL in `telemetry` or `outputs` answered INTERNAL_ERROR on PostgreSQL and
were stored on SQLite (after which `jct db copy` to PostgreSQL failed); tampered cursors answered
INTERNAL_ERROR. Each value here is written into the JSON-RPC body by hand, as a client could send it (an SDK
client would turn NaN into null before it left)."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from server.config import Settings
from server.core.briefings import intake
from server.core.service import Core
from server.db.copy import copy_database
from tests.conftest import POSTGRES_URL, drop_postgres_database, postgres_database
from tests.core.helpers import ADMIN, bare, snapshot
from tests.support.raw import RawSession
from tests.support.serving import serving

pytestmark = pytest.mark.anyio

LIMIT = 120.0
UUID = "6f8dc5fc-b239-45c9-a79e-d7f107855007"


@dataclass
class Served:
    core: Core
    session: RawSession
    task_id: str
    run_id: str


@pytest.fixture
async def served(make_settings: Callable[..., Settings]) -> AsyncIterator[Served]:
    # The run completes partial afterwards: it stays completed rather than going back (JCT_AUTO_REWORK).
    settings = make_settings(max_artifact_bytes=4096, max_run_artifact_bytes=8192, auto_rework=False)
    core = Core.build(make_settings())
    try:
        async with serving(settings) as (base_url, _mcp), AsyncExitStack() as stack:
            session = RawSession(base_url)
            stack.push_async_callback(session.aclose)
            await session.initialize()
            task = await intake.enqueue_task(core, ADMIN, objective="o", operation="code_change", target_repo="a/b")
            claim = await tool(session, "jct_claim_task", {"task_id": task.task_id})
            yield Served(core, session, task.task_id, claim["run_id"])
    finally:
        await core.db.dispose()


async def tool(session: RawSession, name: str, arguments: dict[str, Any], *, raw: str | None = None) -> Any:
    """Call a tool with `arguments`, or with `raw`: the arguments object as JSON text, written by hand."""
    text = raw if raw is not None else json.dumps(arguments)
    body = f'{{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {{"name": "{name}", "arguments": {text}}}}}'
    response = await session.http.post(
        session.url, content=body.encode("utf-8", "surrogatepass"), headers=session._headers()
    )
    if response.status_code == 400:  # the SDK refused the body itself (a parse error): nothing reached JCT
        return {"jsonrpc_error": response.json()["error"]}
    assert response.status_code == 200, response.text
    lines = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
    message = json.loads(lines[-1]) if lines else response.json()
    if "error" in message:
        return {"jsonrpc_error": message["error"]}
    result = message["result"]
    if result.get("isError"):
        return json.loads(result["content"][0]["text"])["error"]
    return result["structuredContent"]


def _args(served: Served, **extra: str) -> str:
    """The fixed part of a call on the claimed task, as JSON text to splice more (raw) members into."""
    members = [f'"task_id": "{served.task_id}"', f'"run_id": "{served.run_id}"', *extra.values()]
    return "{" + ", ".join(members) + "}"


UNSTORABLE = {
    "NaN in telemetry": ("jct_complete_task", '"success": true, "summary": "s", "telemetry": {"cost_usd": NaN}'),
    "Infinity in telemetry": (
        "jct_complete_task",
        '"success": true, "summary": "s", "telemetry": {"tokens_input": Infinity}',
    ),
    "-Infinity deep in telemetry": (
        "jct_complete_task",
        '"success": true, "summary": "s", "telemetry": {"extra": {"list": [1, -Infinity]}}',
    ),
    "NUL in a telemetry key": ("jct_complete_task", '"success": true, "summary": "s", "telemetry": {"a\\u0000b": 1}'),
    "lone surrogate in telemetry": (
        "jct_complete_task",
        '"success": true, "summary": "s", "telemetry": {"note": "\\ud800"}',
    ),
    "NaN in progress telemetry": ("jct_report_progress", '"message": "m", "telemetry": {"cost_usd": NaN}'),
    "Infinity in progress telemetry": (
        "jct_report_progress",
        '"message": "m", "telemetry": {"duration_seconds": Infinity}',
    ),
    "NaN in outputs (object)": ("jct_complete_task", '"success": true, "summary": "s", "outputs": {"score": NaN}'),
    "NaN in outputs (JSON text)": ("jct_complete_task", '"success": true, "summary": "s", "outputs": "{\\"x\\": NaN}"'),
    "NUL in outputs": ("jct_complete_task", '"success": true, "summary": "s", "outputs": {"pr": "12\\u0000"}'),
    "NUL in the summary": ("jct_complete_task", '"success": true, "summary": "done\\u0000"'),
    "lone surrogate in the summary": ("jct_complete_task", '"success": true, "summary": "done \\udfff"'),
    "8-bit escape in the summary": ("jct_complete_task", '"success": true, "summary": "done \\u009b31m"'),
    "lone surrogate in a progress note": ("jct_report_progress", '"message": "half \\ud83d way"'),
    "NUL in an artifact title": (
        "jct_report_artifact",
        '"title": "Log\\u0000", "artifact_type": "log", "content": "ok"',
    ),
    "lone surrogate in a criterion note": (
        "jct_complete_task",
        '"success": true, "summary": "s", "criteria_results": [{"criterion": 0, "status": "unsatisfied", '
        '"note": "\\udc00"}]',
    ),
}


@pytest.mark.parametrize("case", list(UNSTORABLE), ids=list(UNSTORABLE))
async def test_values_no_database_can_carry_are_invalid_arguments_that_change_nothing(
    served: Served, case: str
) -> None:
    name, members = UNSTORABLE[case]
    with anyio.fail_after(LIMIT):
        before = await snapshot(served.core)
        error = await tool(served.session, name, {}, raw=_args(served, extra=members))
        assert error.get("code") == "INVALID_ARGUMENT" or "jsonrpc_error" in error, error
        assert await snapshot(served.core) == before
        # The claim is intact: the same run completes normally afterwards.
        done = await tool(
            served.session,
            "jct_complete_task",
            {"task_id": served.task_id, "run_id": served.run_id, "success": True, "summary": "ok"},
        )
        assert done["task_status"] == "completed", done


def _cursor(*parts: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(parts)).encode()).decode().rstrip("=")


TAMPERED = {
    "naive time": (
        "jct_list_tasks",
        {"cursor": _cursor("P2", "2026-01-01T00:00:00", "6f8dc5fc-b239-45c9-a79e-d7f107855007")},
    ),
    "NUL in the priority": ("jct_list_tasks", {"cursor": _cursor("P2\u0000", "2026-01-01T00:00:00+00:00", "x")}),
    "unknown priority": ("jct_list_tasks", {"cursor": _cursor("P9", "2026-01-01T00:00:00+00:00", "x")}),
    "not an id": ("jct_list_tasks", {"cursor": _cursor("P2", "2026-01-01T00:00:00+00:00", "'; DROP TABLE tasks")}),
    "wrong arity": ("jct_list_tasks", {"cursor": _cursor("P2")}),
    "not base64": ("jct_list_tasks", {"cursor": "!!!"}),
    "a serial past 64 bits": (
        "jct_get_audit_trail",
        {"entity_kind": "Task", "entity_id": "6f8dc5fc-b239-45c9-a79e-d7f107855007", "cursor": _cursor(2**70)},
    ),
    "a negative serial": (
        "jct_get_audit_trail",
        {"entity_kind": "Task", "entity_id": "6f8dc5fc-b239-45c9-a79e-d7f107855007", "cursor": _cursor(-1)},
    ),
    "a boolean serial": (
        "jct_get_audit_trail",
        {"entity_kind": "Task", "entity_id": "6f8dc5fc-b239-45c9-a79e-d7f107855007", "cursor": _cursor(True)},
    ),
    "naive time in reviews": ("jct_list_pending_reviews", {"cursor": _cursor("2026-01-01T00:00:00", "x")}),
}


@pytest.mark.parametrize("case", list(TAMPERED), ids=list(TAMPERED))
async def test_tampered_cursors_are_invalid_arguments(served: Served, case: str) -> None:
    name, arguments = TAMPERED[case]
    with anyio.fail_after(LIMIT):
        error = await tool(served.session, name, arguments)
        assert error["code"] == "INVALID_ARGUMENT", error
        assert "cursor" in error["message"]


async def test_a_tampered_resources_list_cursor_is_invalid_params(served: Served) -> None:
    with anyio.fail_after(LIMIT):
        past_9999 = _cursor("running", "P2", "9999-12-31T23:00:00-05:00", "6f8dc5fc-b239-45c9-a79e-d7f107855007")
        before_1 = _cursor("recent", "", "0001-01-01T00:00:00+05:00", "6f8dc5fc-b239-45c9-a79e-d7f107855007")
        tampered = (_cursor("running", "P2\u0000", "2026-01-01T00:00:00", "x"), _cursor("elsewhere", "", "", ""))
        for cursor in (*tampered, past_9999, before_1):
            body = {"jsonrpc": "2.0", "id": 3, "method": "resources/list", "params": {"cursor": cursor}}
            response = await served.session.http.post(served.session.url, json=body, headers=served.session._headers())
            text = response.text
            assert '"code":-32602' in text.replace(" ", ""), text
            assert "cursor is not one JCT returned" in text


async def test_a_run_that_stores_more_than_its_cap_gets_payload_too_large(served: Served) -> None:
    """JCT_MAX_RUN_ARTIFACT_BYTES (8 KiB here, 4 KiB per artifact): the third 3 KiB artifact does not fit."""
    with anyio.fail_after(LIMIT):
        run = {"task_id": served.task_id, "run_id": served.run_id}
        for n in range(2):
            ok = await tool(
                served.session,
                "jct_report_artifact",
                {**run, "title": f"Part {n}", "artifact_type": "log", "content": "x" * 3000},
            )
            assert ok["size_bytes"] == 3000
        before = await snapshot(served.core)
        refused = await tool(
            served.session,
            "jct_report_artifact",
            {**run, "title": "Part 2", "artifact_type": "log", "content": "y" * 3000},
        )
        assert refused["code"] == "PAYLOAD_TOO_LARGE"
        assert "JCT_MAX_RUN_ARTIFACT_BYTES" in refused["message"]
        assert await snapshot(served.core) == before
        run_dir = served.core.store.run_dir(bare(served.run_id))
        assert len([p for p in run_dir.rglob("*") if p.is_file()]) == 2
        # A remote URI stores nothing here and still fits.
        linked = await tool(
            served.session,
            "jct_report_artifact",
            {
                **run,
                "title": "Full log",
                "artifact_type": "log",
                "uri": "https://ci.example.com/logs/1",
                "content": None,
            },
        )
        assert linked.get("uri") == "https://ci.example.com/logs/1", linked


async def test_a_client_naming_itself_with_nul_is_refused_and_stores_nothing(served: Served) -> None:
    with anyio.fail_after(LIMIT):
        bad = RawSession(served.session.url.removesuffix("/mcp"))
        try:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "evil\u0000", "version": "1"},
                },
            }
            response = await bad.http.post(bad.url, json=body, headers=bad._headers())
            if response.status_code == 200 and "result" in response.text:
                bad.session_id = response.headers["mcp-session-id"]
                before = await snapshot(served.core)
                error = await tool(bad, "jct_claim_next", {})
                assert error["code"] == "INVALID_ARGUMENT", error
                assert "clientInfo.name" in error["message"]
                assert await snapshot(served.core) == before
            else:
                assert '"error"' in response.text, response.text
        finally:
            await bad.aclose()


@pytest.mark.skipif(not POSTGRES_URL, reason="the copy's target is PostgreSQL: set JCT_TEST_POSTGRES_URL")
@pytest.mark.parametrize("dialect", ["sqlite"], indirect=True)
async def test_after_every_refusal_the_embedded_database_still_copies_to_postgresql(
    served: Served, worker_id_str: str
) -> None:
    with anyio.fail_after(LIMIT):
        for name, members in UNSTORABLE.values():
            await tool(served.session, name, {}, raw=_args(served, extra=members))
        target = await postgres_database(worker_id_str)
        try:
            report = await copy_database(served.core.settings.database_url, target)
            assert report.rows["tasks"] == 1
        finally:
            await drop_postgres_database(target)
