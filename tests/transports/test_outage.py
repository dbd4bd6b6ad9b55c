"""A PostgreSQL outage under a running `jct serve`: calls answer UNAVAILABLE, the log stays a few lines long,
and service resumes by itself once the database is back.

The outage is real: the server's own test database is made to refuse connections (`ALLOW_CONNECTIONS
false`) and its sessions are terminated (tests/world.py); nothing else on the cluster is touched. Before,
every call during it was INTERNAL_ERROR "Nothing you sent caused this" with a traceback per call in the
log, and the change feed and the lease sweeper logged a traceback on every pass; the front door's 503 was
plain OAuth JSON that MCP clients could not show.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from server.config import Settings
from server.core import tokens
from server.core.service import Core
from server.errors import RpcCode
from tests.security.conftest import bearer, connect, sdk_refusal
from tests.transports.conftest import call, call_error, http_server, server_env
from tests.world import refusing_connections

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TASK = {"objective": "Write docs", "operation": "docs", "target_repo": "myorg/docs", "acceptance_criteria": ["Exists"]}
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("jct_queue_stats", {}),
    ("jct_list_tasks", {}),
    ("jct_enqueue_task", TASK),
    ("jct_claim_next", {}),
    ("jct_get_task", {"task_id": str(uuid.uuid4())}),
]
OUTAGE_SECONDS = 3.0
MIN_CALLS = 50
# Per part of the server (tool calls, change feed, lease sweeper): a first line and a closing one.
MAX_OUTAGE_LINES = 8


def server_log(tmp_path: Path, base_url: str) -> str:
    return (tmp_path / f"jct-serve-{base_url.rsplit(':', 1)[1]}.log").read_text(errors="replace")


async def test_an_outage_is_unavailable_logged_in_a_few_lines_and_over_without_a_restart(
    database_url: str, dialect: str, tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    if dialect != "postgresql":
        pytest.skip("an outage of a PostgreSQL server (SQLite's full disk: tests/tools/test_errors.py)")
    # The feed and the sweeper poll fast, so the outage spans many of their passes too.
    fast = {"notify_interval_seconds": 0.05, "sweep_interval_seconds": 0.1}
    core = Core.build(make_settings())
    try:
        secret, _ = await tokens.create_token(core, "alice", ["worker", "admin"])
    finally:
        await core.db.dispose()
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    accept = {"accept": "application/json, text/event-stream"}
    with anyio.fail_after(180):
        async with (
            http_server(server_env(database_url, tmp_path, **fast), tmp_path) as open_url,
            http_server(server_env(database_url, tmp_path, auth="token", **fast), tmp_path) as token_url,
            Client(f"{open_url}/mcp", mode="legacy") as client,
        ):
            await call(client, "jct_enqueue_task", **TASK)
            async with refusing_connections(database_url):
                # Calls for a few seconds: hundreds of them, and dozens of feed and sweeper passes.
                refused: list[dict[str, Any]] = []
                ends = anyio.current_time() + OUTAGE_SECONDS
                while anyio.current_time() < ends or len(refused) < MIN_CALLS:
                    tool, arguments = CALLS[len(refused) % len(CALLS)]
                    refused.append(await call_error(client, tool, **arguments))
                with pytest.raises(MCPError) as resource:
                    await client.read_resource("jct://queue")
                with pytest.raises(MCPError) as prompt:
                    await client.get_prompt("work_next")
                async with httpx2.AsyncClient(base_url=token_url) as http:
                    door = await http.post("/mcp", json=ping, headers=accept | bearer(secret))
                door_sdk = await sdk_refusal(token_url, secret, "legacy")
            # Connections allowed again: the very next calls work, on the same server processes.
            stats = await call(client, "jct_queue_stats")
            assert (await call(client, "jct_list_tasks"))["count"] == 1
            async with connect("http-legacy", token_url, secret) as alice:
                tools_after = await alice.list_tools()
    for body in refused:
        error = body["error"]
        assert error["code"] == "UNAVAILABLE", error
        assert error["retry_after_seconds"] == 5
        assert error["suggestion"] == "Retry in 5 seconds; nothing was recorded."
    assert stats["counts"]["queued"] == 1, "nothing the outage refused was recorded"
    for failed in (resource.value.error, prompt.value.error):
        assert failed.code == RpcCode.UNAVAILABLE
        assert failed.message.startswith("JCT cannot reach its database right now")
        assert failed.data == {"code": "UNAVAILABLE", "retry_after_seconds": 5}

    assert door.status_code == 503
    assert door.headers["retry-after"] == "5"
    assert door.json()["id"] == 3
    assert door.json()["error"]["code"] == RpcCode.UNAVAILABLE
    assert door.json()["error"]["data"]["error"] == "temporarily_unavailable"
    assert door_sdk.code == RpcCode.UNAVAILABLE
    assert door_sdk.message.startswith("JCT could not verify the token. JCT cannot reach its database right now")
    assert tools_after.tools, "the token server verifies tokens again"

    for base_url in (open_url, token_url):
        log = server_log(tmp_path, base_url)
        assert "Traceback" not in log, log
        outage_lines = [line for line in log.splitlines() if "database unreachable" in line]
        assert 1 <= len(outage_lines) <= MAX_OUTAGE_LINES, log
    open_log = server_log(tmp_path, open_url)
    assert "tool calls, resources and prompts answer UNAVAILABLE; logged once per 10s" in open_log
    assert "subscribers are not notified meanwhile" in open_log
    assert "leases are not expired meanwhile" in open_log
    assert "database unreachable: over after" in open_log
    assert f"{len(refused) + 2} failure(s) in all" in open_log  # every call, the resource and the prompt
    assert len(open_log.splitlines()) <= MAX_OUTAGE_LINES + 4, open_log
