"""What an operator relies on: /metrics, JSON logs, replica-tagged sessions and a SIGTERM that drains."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from mcp import Client
from mcp.server import MCPServer
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from server.app import create_app
from server.cli.serve import bind_socket
from server.config import Settings
from server.db.engine import Database
from server.db.tables import runs, tasks
from server.shutdown import draining_server
from tests.core.helpers import bare
from tests.support.servers import serve
from tests.support.serving import serving
from tests.transports.conftest import (
    call,
    call_error,
    server_env,
)

pytestmark = pytest.mark.anyio

LIMIT = 60
TASK = {"objective": "Add input validation", "operation": "code_change", "target_repo": "myorg/api"}
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(http: httpx2.AsyncClient, base_url: str) -> Samples:
    response = await http.get(f"{base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


# --- /metrics ----------------------------------------------------------------------------------


async def test_metrics_expose_the_documented_series_and_move_with_calls(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(notify_interval_seconds=0.05)
    with anyio.fail_after(LIMIT):
        async with serving(settings) as (base, _mcp), httpx2.AsyncClient(timeout=10) as http:
            before = await scrape(http, base)
            for series in ("jct_tasks", "jct_leases_overdue", "jct_open_sessions", "jct_pending_reviews"):
                assert any(name == series for name, _ in before), f"{series} missing from /metrics"
            assert value(before, "jct_tasks", status="queued") == 0

            async with (
                Client(f"{base}/mcp", mode="legacy") as watcher,
                Client(f"{base}/mcp", mode="legacy") as agent,
            ):
                task_id = (await call(agent, "jct_enqueue_task", **TASK))["task_id"]
                await watcher.subscribe_resource(f"jct://tasks/{task_id}")
                await call(agent, "jct_claim_next")
                await call_error(agent, "jct_get_context", task_id="not-a-task")
                await agent.call_tool("no_such_tool", {})

                after = await scrape(http, base)
                assert value(after, "jct_tasks", status="queued") == 0
                assert value(after, "jct_tasks", status="running") == 1
                assert value(after, "jct_open_sessions", transport="streamable_http") == 2
                assert value(after, "jct_subscribed_sessions") == 1
                ok = value(after, "jct_tool_calls_total", tool="jct_claim_next", outcome="ok")
                assert ok == value(before, "jct_tool_calls_total", tool="jct_claim_next", outcome="ok") + 1
                assert value(after, "jct_tool_calls_total", tool="jct_enqueue_task", outcome="ok") == 1
                refused = {
                    labels
                    for name, labels in after
                    if name == "jct_tool_calls_total" and ("tool", "jct_get_context") in labels
                }
                assert refused == {frozenset({("tool", "jct_get_context"), ("outcome", "INVALID_ARGUMENT")})}
                # A name that is not a tool is counted, under one label value that garbage cannot grow.
                assert value(after, "jct_tool_calls_total", tool="unknown", outcome="INVALID_ARGUMENT") == 1
                assert value(after, "jct_tool_call_duration_seconds_count", tool="jct_claim_next") == 1

                # The claim changed the watched task: its notification is counted once it is sent.
                while (
                    value(after, "jct_notifications_total", method="notifications/resources/updated", outcome="sent")
                    < 1
                ):
                    await anyio.sleep(0.05)
                    after = await scrape(http, base)
                assert value(after, "jct_notification_fanout_seconds_count") >= 1


async def test_metrics_count_the_leases_the_sweeper_expires(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings(lease_seconds=5, live_lease_seconds=2, sweep_interval_seconds=0.1)
    with anyio.fail_after(LIMIT):
        async with serving(settings) as (base, _mcp), httpx2.AsyncClient(timeout=10) as http:
            samples = await scrape(http, base)
            assert value(samples, "jct_leases_expired_total") == 0
            async with Client(f"{base}/mcp", mode="legacy") as agent:
                await call(agent, "jct_enqueue_task", **TASK)
                await call(agent, "jct_claim_next")
            while value(samples, "jct_leases_expired_total") < 1:  # the agent went away: its lease runs out
                await anyio.sleep(0.1)
                samples = await scrape(http, base)
            # A scrape reads the queue before the counters: one begun after the count moved sees the requeue.
            samples = await scrape(http, base)
            assert value(samples, "jct_tasks", status="queued") == 1
            assert value(samples, "jct_tasks", status="running") == 0


# --- replicas ----------------------------------------------------------------------------------


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}
HEADERS = {"accept": "application/json, text/event-stream"}


async def test_a_replica_names_itself_in_its_session_ids(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(replica="jct1"))
    transport = httpx2.ASGITransport(app=app)
    with anyio.fail_after(LIMIT):
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http,
        ):
            response = await http.post("/mcp", json=INITIALIZE, headers=HEADERS)
            session = response.headers["mcp-session-id"]
            assert session.startswith("jct1.")
            assert len(session) > len("jct1.")
            # The renamed session is the one the server holds: a request with it is served.
            headers = HEADERS | {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post("/mcp", json=initialized, headers=headers)).status_code == 202
            listed = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)
            assert listed.status_code == 200
            assert "jct_claim_next" in listed.text
            # The untagged id is not a session.
            plain = headers | {"mcp-session-id": session.removeprefix("jct1.")}
            assert (
                await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=plain)
            ).status_code == 404


@pytest.mark.parametrize("name", ["JCT1", "a.b", "-x", "1x", "x" * 33])
def test_a_replica_name_must_be_usable_in_a_session_id_and_a_balancer_map(name: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="replica"):
        Settings(_env_file=None, home=tmp_path, replica=name)


# --- draining ----------------------------------------------------------------------------------


def with_slow_tool(entered: anyio.Event, release: anyio.Event) -> Callable[[MCPServer[Any]], None]:
    def extend(mcp: MCPServer[Any]) -> None:
        @mcp.tool()
        async def slow() -> str:
            """Wait until released (a long tool call in flight)."""
            entered.set()
            await release.wait()
            return "finished"

    return extend


async def test_shutdown_lets_a_running_call_finish_and_takes_no_one_new(
    make_settings: Callable[..., Settings],
) -> None:
    entered, release = anyio.Event(), anyio.Event()
    app = create_app(make_settings(), extend=with_slow_tool(entered, release))
    sock = bind_socket("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(app, log_config=None, lifespan="on", timeout_graceful_shutdown=2)
    server = draining_server(config, grace=30)
    outcome: dict[str, Any] = {}

    async def slow_call() -> None:
        try:
            async with Client(f"{base}/mcp", mode="legacy") as client:
                await client.list_tools()  # the client checks results against the tool's schema: fetch it now
                result = await client.call_tool("slow", {})
                outcome["slow"] = result.content[0].text  # type: ignore[union-attr]
        except* httpx2.TransportError as group:
            outcome["error"] = repr(
                group.exceptions
            )  # leaving: the session's DELETE finds the server gone, as it should

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            while not server.started:
                await anyio.sleep(0.01)
            tg.start_soon(slow_call)
            await entered.wait()
            server.should_exit = True  # what uvicorn's SIGTERM handler does (but for re-raising the signal)
            async with httpx2.AsyncClient(timeout=5) as http:
                while not app.state.drain.draining:
                    await anyio.sleep(0.01)
                # Draining: the listener is closed, so nobody new gets in while the call runs on.
                with pytest.raises(httpx2.TransportError):
                    await http.get(f"{base}/healthz")
            # Longer than any watcher polling for the signal takes to notice it: the call's response
            # stream must still be open when the call ends.
            await anyio.sleep(1.5)
            release.set()
    assert outcome.get("slow") == "finished", outcome


async def test_sigterm_exits_cleanly_and_leaves_claims_claimed(database_url: str, tmp_path: Path) -> None:
    """A replica stopped by SIGTERM neither releases nor corrupts its claims: they stay running, with
    their leases, until the leases run out and a sweeper requeues them. Logs are JSON lines throughout."""
    env = server_env(database_url, tmp_path, log_format="json", log_level="INFO")
    with anyio.fail_after(LIMIT):
        async with serve(env, tmp_path) as server, Client(server.mcp_url, mode="legacy") as agent:
            await call(agent, "jct_enqueue_task", **TASK)
            claimed = await call(agent, "jct_claim_next")
            server.process.send_signal(signal.SIGTERM)
            # uvicorn shuts down gracefully, then re-raises the signal: the exit status says SIGTERM.
            assert await server.process.wait() in (0, -signal.SIGTERM)

    db = Database(database_url)
    try:
        async with db.read() as conn:
            task = (await conn.execute(select(tasks).where(tasks.c.id == claimed["task_id"]))).mappings().one()
            run = (await conn.execute(select(runs).where(runs.c.id == bare(claimed["run_id"])))).mappings().one()
    finally:
        await db.dispose()
    assert task["status"] == "running"
    assert run["status"] == "running"
    assert run["lease_expires_at"] is not None

    lines = server.log().strip().splitlines()
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= set(record) for record in records)
    messages = [record["message"] for record in records]
    assert any(message.startswith("draining") for message in messages), messages
    assert "Application shutdown complete." in messages
