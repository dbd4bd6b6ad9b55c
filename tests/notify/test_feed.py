"""The change feed: audit rows become resources/updated and list_changed for subscribers of both eras."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import pytest
from mcp import Client

from server.config import Settings
from server.core.claims import queue, work
from server.core.review import completion
from server.core.service import Core
from server.identity import FixedIdentity
from server.mcp import JctServer, build_mcp
from server.notify.feed import ChangeFeed
from tests.core.helpers import ALICE, bare, enqueue
from tests.support.inbox import Inbox, list_changed, updated

pytestmark = pytest.mark.anyio


@dataclass
class Watched:
    """The watcher's MCP server and the change feed that notifies its subscribers, polled by the test."""

    server: JctServer
    feed: ChangeFeed


@pytest.fixture
async def watched(core: Core) -> Watched:
    server = build_mcp(core, FixedIdentity("watcher"))
    feed = ChangeFeed(core, server.hub.deliver, interval=0.05)
    await feed.start_position()
    return Watched(server, feed)


async def claimed(core: Core) -> tuple[str, str]:
    """A task enqueued and claimed by Alice; (task_id, the URI of its run)."""
    task_id = await enqueue(core)
    claim = await queue.claim_task(core, ALICE, task_id)
    return task_id, f"jct://runs/{bare(claim.run_id)}"


async def test_legacy_subscriber_hears_about_a_completion_by_another_agent(core: Core, watched: Watched) -> None:
    task_id, uri = await claimed(core)
    inbox = Inbox()
    async with Client(watched.server, mode="legacy", message_handler=inbox) as client:
        assert client.server_capabilities.resources is not None
        assert client.server_capabilities.resources.subscribe is True
        assert client.server_capabilities.resources.list_changed is True
        await client.subscribe_resource(uri)
        await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
        await inbox.wait_for(updated(uri), poll=watched.feed.poll)


async def test_unsubscribed_uris_stay_quiet(core: Core, watched: Watched) -> None:
    task_id, uri = await claimed(core)
    inbox = Inbox()
    async with Client(watched.server, mode="legacy", message_handler=inbox) as client:
        await client.subscribe_resource(uri)
        await client.unsubscribe_resource(uri)
        await work.report_progress(core, ALICE, task_id, message="halfway")
        await watched.feed.poll()
        # A later change to a still-subscribed URI arrives, and the unsubscribed one never did.
        await client.subscribe_resource(f"jct://tasks/{task_id}")
        await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
        await inbox.wait_for(updated(f"jct://tasks/{task_id}"), poll=watched.feed.poll)
        assert not any(updated(uri)(m) for m in inbox.messages)


async def test_list_changed_reaches_a_legacy_session_when_a_task_is_enqueued(core: Core, watched: Watched) -> None:
    inbox = Inbox()
    async with Client(watched.server, mode="legacy", message_handler=inbox) as client:
        await client.subscribe_resource("jct://queue")
        await enqueue(core)
        await inbox.wait_for(list_changed, poll=watched.feed.poll)
        await inbox.wait_for(updated("jct://queue"), poll=watched.feed.poll)


async def test_modern_listener_hears_about_a_completion(core: Core, watched: Watched) -> None:
    task_id, uri = await claimed(core)
    async with Client(watched.server) as client, client.listen(resource_subscriptions=[uri]) as events:
        await completion.complete_task(core, ALICE, task_id, success=True, summary="done")
        await watched.feed.poll()
        with anyio.fail_after(10):
            event = await events.__anext__()
        assert getattr(event, "uri", None) == uri


async def test_a_disconnected_subscriber_is_forgotten(core: Core, make_settings: Callable[..., Settings]) -> None:
    server = build_mcp(core, FixedIdentity("watcher"))
    async with Client(server, mode="legacy") as client:
        await client.subscribe_resource("jct://queue")
        assert server.hub.subscriber_count == 1
    gc.collect()
    assert server.hub.subscriber_count == 0
