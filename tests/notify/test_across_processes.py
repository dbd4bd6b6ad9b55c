"""Change notifications through real servers, real transports and `mcp.Client`.

A watcher subscribes on one `jct serve` process; an agent changes the queue through another process
on the same PostgreSQL database (or through another session of the same process, on SQLite); the
watcher hears about it from its process's change feed, which follows the shared audit log.

The last two tests run the server in this process (uvicorn on a socket made here) so they can look at
the notification hub itself: whom it still holds after a client leaves, and what a subscriber that
stops reading its stream does to everyone else.
"""

from __future__ import annotations

import gc
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated
from mcp_types import ResourceUpdatedNotification
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from sqlalchemy import insert

from server.config import Settings
from server.core.service import Core
from server.db import tables
from server.mcp import JctServer
from server.notify.feed import BATCH
from tests.conftest import POSTGRES_URL
from tests.core.helpers import bare
from tests.support.inbox import Inbox, list_changed, updated
from tests.support.raw import RawSession
from tests.support.serving import serving
from tests.transports.conftest import call, clients_of_two_servers, http_server, server_env

pytestmark = pytest.mark.anyio

LIMIT = 120.0  # a whole test, servers included
NOTIFIED = 20.0  # a change on one process until the watcher on another hears of it
QUEUE = "jct://queue"
OBJECTIVE = "Add input validation to user registration"
CRITERIA = ["Email validated against RFC 5322", "Registration rejects an empty password"]
SUMMARY = "Files of interest: src/routes/users.py, src/models/user.py. The endpoint accepts anything."

ON_POSTGRESQL = pytest.mark.parametrize(
    "dialect",
    [
        pytest.param(
            "postgresql",
            marks=pytest.mark.skipif(
                not POSTGRES_URL, reason="two server processes share one PostgreSQL database: set JCT_TEST_POSTGRES_URL"
            ),
        )
    ],
)
ON_SQLITE = pytest.mark.parametrize("dialect", ["sqlite"])


# --- helpers --------------------------------------------------------------------------------


async def enqueue(client: Client, objective: str = OBJECTIVE) -> dict[str, Any]:
    return await call(
        client,
        "jct_enqueue_task",
        objective=objective,
        operation="code_change",
        target_repo="myorg/api",
        acceptance_criteria=CRITERIA,
        context_summary=SUMMARY,
    )


async def claimed_task(agent: Client) -> tuple[str, str]:
    """Enqueue a task and claim it; (task_id, run_id)."""
    task_id = str((await enqueue(agent))["task_id"])
    claim = await call(agent, "jct_claim_task", task_id=task_id)
    return task_id, str(claim["run_id"])


async def complete(agent: Client, task_id: str, run_id: str) -> None:
    result = await call(agent, "jct_complete_task", task_id=task_id, run_id=run_id, success=True, summary="done")
    assert result["success"] is True


async def legacy_watcher_hears_a_completion(watcher_base: str, agent_base: str) -> tuple[Inbox, str]:
    """A legacy watcher on one server subscribes to a run that an agent on the other completes, and hears of
    it; (what the watcher heard, the run's URI)."""
    inbox = Inbox()
    async with (
        Client(f"{watcher_base}/mcp", mode="legacy", message_handler=inbox) as watcher,
        Client(f"{agent_base}/mcp", mode="legacy") as agent,
    ):
        task_id, run_id = await claimed_task(agent)
        uri = f"jct://runs/{bare(run_id)}"
        await watcher.subscribe_resource(uri)
        await complete(agent, task_id, run_id)
        await inbox.wait_for(updated(uri))
    return inbox, uri


# --- across processes and sessions ------------------------------------------------------------


@ON_POSTGRESQL
async def test_a_completion_on_another_process_reaches_a_legacy_subscriber(database_url: str, tmp_path: Path) -> None:
    env = server_env(database_url, tmp_path)
    with anyio.fail_after(LIMIT):
        async with http_server(env, tmp_path) as one, http_server(env, tmp_path) as two:
            await legacy_watcher_hears_a_completion(one, two)


@ON_SQLITE
async def test_a_completion_by_another_session_reaches_a_legacy_subscriber(database_url: str, tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT):
        async with http_server(server_env(database_url, tmp_path), tmp_path) as base:
            inbox, uri = await legacy_watcher_hears_a_completion(base, base)
    # The watcher heard only of what it subscribed to (list_changed aside: it used resources/*).
    heard = {m.params.uri for m in inbox.messages if isinstance(m, ResourceUpdatedNotification)}
    assert heard == {uri}


@ON_POSTGRESQL
async def test_a_completion_on_another_process_reaches_a_2026_listener(database_url: str, tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT):
        async with clients_of_two_servers(database_url, tmp_path, second_mode="legacy") as (watcher, agent):
            assert watcher.protocol_version in MODERN_PROTOCOL_VERSIONS
            task_id, run_id = await claimed_task(agent)
            uri = f"jct://runs/{bare(run_id)}"
            async with watcher.listen(resource_subscriptions=[uri]) as events:
                await complete(agent, task_id, run_id)
                with anyio.fail_after(NOTIFIED):
                    event = await events.__anext__()
            assert isinstance(event, ResourceUpdated)
            assert event.uri == uri


async def test_an_enqueued_task_becomes_mentionable_in_another_session(database_url: str, tmp_path: Path) -> None:
    """Claude Code's @-mention menu: it lists resources, hears list_changed when another session
    enqueues, lists again, and reads the new issue's briefing."""
    with anyio.fail_after(LIMIT):
        async with http_server(server_env(database_url, tmp_path), tmp_path) as base:
            inbox = Inbox()
            async with (
                Client(f"{base}/mcp", mode="legacy", message_handler=inbox) as watcher,
                Client(f"{base}/mcp", mode="legacy") as agent,
            ):
                before = await watcher.list_resources()
                assert not any(r.uri.startswith("jct://issues/") for r in before.resources)

                enqueued = await enqueue(agent)
                await inbox.wait_for(list_changed)

                issue_uri = f"jct://issues/{enqueued['cwom_issue_id']}"
                listed = await watcher.list_resources(cache_mode="bypass")
                issue = next(r for r in listed.resources if r.uri == issue_uri)
                assert issue.name == f"Issue: {OBJECTIVE}"
                assert issue.title == f"Issue: {OBJECTIVE}"
                assert issue.mime_type == "text/markdown"

                page = await watcher.read_resource(issue_uri)
                text = page.contents[0].text  # type: ignore[union-attr]
                assert OBJECTIVE in text
                for criterion in CRITERIA:
                    assert criterion in text
                assert SUMMARY in text


# --- the hub, in this process -------------------------------------------------------------------


def subscribed_sessions(server: JctServer) -> set[str | None]:
    """The session ids of the connections the hub holds subscriptions for."""
    return {connection.session_id for connection in list(server.hub._subscriptions)}


async def eventually(condition: Callable[[], bool], timeout: float, *, collect: bool = False) -> float:
    """Poll an in-process condition until it holds (bounded); when it first held, by time.monotonic().

    `collect` runs the garbage collector before each look, for conditions on weak references. It
    stops the event loop the in-process server shares for a full collection each time, so conditions
    that need none leave it off: with thousands of live objects that alone made tool calls slow."""
    with anyio.fail_after(timeout):
        while not condition():
            if collect:
                gc.collect()
            await anyio.sleep(0.02)
    return time.monotonic()


@ON_SQLITE
async def test_a_subscriber_that_disconnects_is_dropped(make_settings: Callable[..., Settings]) -> None:
    with anyio.fail_after(LIMIT):
        async with serving(make_settings(notify_interval_seconds=0.05)) as (base, server):
            hub = server.hub
            inbox = Inbox()
            async with Client(f"{base}/mcp", mode="legacy", message_handler=inbox) as stays:
                await stays.subscribe_resource(QUEUE)
                async with Client(f"{base}/mcp", mode="legacy") as leaves:
                    await leaves.list_resources()
                    await leaves.subscribe_resource(QUEUE)
                    assert hub.subscriber_count == 2
                    assert len(hub._seen) == 2
                # Leaving sends DELETE: the session ends, and the hub's weak references let it go.
                await eventually(lambda: hub.subscriber_count == 1 and len(hub._seen) == 1, 10, collect=True)
                # The one that stayed is still served and notified.
                await enqueue(stays)
                await inbox.wait_for(updated(QUEUE))


@ON_SQLITE
async def test_a_stuck_subscriber_never_blocks_tool_calls(
    make_settings: Callable[..., Settings], core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscriber whose socket is full stalls only its own notifications, never a tool call.

    The stuck session opens its GET stream and never reads it. Small socket buffers on both ends
    (SO_SNDBUF on the server's listening socket, SO_RCVBUF on the client's) make that fill after a few
    hundred notifications instead of megabytes; a burst of audit rows (as a busy queue would write,
    100 task URIs the session subscribed to, over many polls) provides them. Once the buffers are full
    the hub's send to that session blocks until SEND_DEADLINE, then drops the session. Meanwhile
    another session's tool calls - changes the stuck session is subscribed to - keep completing
    quickly, and afterwards the healthy subscriber still hears about new changes. A session that
    subscribed and never opened its GET stream at all is harmless throughout: the transport drops
    its notifications.
    """
    # Long enough that a tool call on a loaded machine (seconds, under CI) fits many times into it; a call
    # the stuck session blocked would take the whole deadline.
    deadline = 20.0
    monkeypatch.setattr("server.notify.hub.SEND_DEADLINE", deadline)
    task_ids = [str(uuid.uuid4()) for _ in range(100)]
    with anyio.fail_after(LIMIT):
        settings = make_settings(notify_interval_seconds=0.05, max_subscriptions_per_session=200)
        async with serving(settings, send_buffer=4096) as (base, server):
            hub = server.hub
            inbox = Inbox()
            stuck, streamless = RawSession(base, receive_buffer=4096), RawSession(base)
            try:
                async with (
                    Client(f"{base}/mcp", mode="legacy", message_handler=inbox) as healthy,
                    Client(f"{base}/mcp", mode="legacy") as agent,
                ):
                    await healthy.subscribe_resource(QUEUE)
                    await streamless.initialize()
                    await streamless.subscribe(QUEUE)
                    await stuck.initialize()
                    for uri in [QUEUE, *(f"jct://tasks/{task_id}" for task_id in task_ids)]:
                        await stuck.subscribe(uri)
                    await stuck.open_stream_and_never_read()
                    assert stuck.session_id in subscribed_sessions(server)

                    calls: list[tuple[float, float]] = []
                    stop = anyio.Event()

                    async def keep_calling() -> None:
                        # Each enqueue changes jct://queue, which the stuck session subscribed to.
                        while not stop.is_set():
                            started = time.monotonic()
                            await enqueue(agent, "Another task")
                            calls.append((started, time.monotonic()))

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(keep_calling)
                        await flood(core, task_ids, polls=25)
                        dropped = await eventually(lambda: stuck.session_id not in subscribed_sessions(server), 60)
                        stop.set()

                    # The send that timed out began `deadline` before the drop: the session was stuck all
                    # that time, and the tool calls went on.
                    stuck_since = dropped - deadline
                    during = [(a, b) for a, b in calls if a >= stuck_since and b <= dropped]
                    assert len(during) >= 3, (len(calls), during)
                    slowest = max(b - a for a, b in calls)
                    assert slowest < deadline / 2, slowest
                    # Only the stuck session was dropped: the healthy one and the streamless one remain.
                    assert hub.subscriber_count == 2
                    assert streamless.session_id in subscribed_sessions(server)

                    # The feed moved on: the healthy subscriber hears of the next change.
                    inbox.messages.clear()
                    await enqueue(agent, "After the drop")
                    await inbox.wait_for(updated(QUEUE))
            finally:
                with anyio.CancelScope(shield=True):
                    await stuck.aclose()
                    await streamless.aclose()


async def flood(core: Core, task_ids: list[str], polls: int) -> None:
    """Audit rows touching every task in `task_ids`, enough for `polls` feed batches (the feed reads
    BATCH rows per poll), as a busy queue would write them."""
    now = datetime.now(UTC)
    rows = [
        {
            "ts": now,
            "actor_kind": "agent",
            "actor_id": "flood",
            "action": "task.progress",
            "entity_kind": "Task",
            "entity_id": task_ids[i % len(task_ids)],
            "before": None,
            "after": None,
            "trace_id": None,
        }
        for i in range(BATCH * polls)
    ]
    async with core.db.write() as conn:
        await conn.execute(insert(tables.audit_log), rows)
