"""Fan-out to subscribers of both protocol eras.

Legacy sessions subscribe with `resources/subscribe`; we keep their connections weakly, so a
client that goes away is forgotten with its connection. 2026-07-28 clients listen with
`subscriptions/listen`, served by the SDK from the subscription bus we publish to. Every send
runs with a deadline in its own task of the hub's sender group: a slow subscriber never holds
up the others or the feed, and tool calls never wait for notifications at all.
"""

from __future__ import annotations

import contextlib
import logging
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from server import sdk
from server import uris as pages
from server.metrics import Metrics
from server.notify.changes import Changes
from server.taskgroup import HeldTaskGroup

log = logging.getLogger(__name__)
SEND_DEADLINE = 5.0
# Batches a dashboard page may have waiting; past that it already knows it must refresh, so more are dropped.
WATCH_BUFFER = 4


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The per-request ServerSession wraps the connection that outlives the request.
    connection = sdk.connection_of(ctx)
    assert connection is not None
    return connection


class NotificationHub:
    def __init__(self, metrics: Metrics | None = None, max_per_session: int = 100) -> None:
        self.bus = InMemorySubscriptionBus()
        self.max_per_session = max_per_session
        self.metrics = metrics if metrics is not None else Metrics()
        # connection -> URIs it subscribed to; connections that used resources/* hear list_changed.
        self._subscriptions: weakref.WeakKeyDictionary[Connection, set[str]] = weakref.WeakKeyDictionary()
        self._seen: weakref.WeakSet[Connection] = weakref.WeakSet()
        self._senders = HeldTaskGroup()
        # Open dashboard streams (server/ui/): each hears every batch of changed URIs.
        self._watchers: set[MemoryObjectSendStream[frozenset[str]]] = set()

    # --- handlers registered on the MCP server -------------------------------------------

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        uri = str(params.uri)
        if not pages.is_jct_uri(uri):
            raise MCPError(
                INVALID_PARAMS,
                f"Cannot subscribe to {uri[: pages.MAX_LENGTH]!r}: not a JCT resource. Subscribe to jct://queue, "
                "jct://reviews/pending, or a jct://tasks|issues|runs|evidence|artifacts/<id> URI from resources/list.",
            )
        held = self._subscriptions.setdefault(_connection(ctx), set())
        if uri not in held and len(held) >= self.max_per_session:
            raise MCPError(
                INVALID_PARAMS,
                f"This session already holds {len(held)} subscriptions, the limit "
                "(JCT_MAX_SUBSCRIPTIONS_PER_SESSION). Unsubscribe from URIs you no longer watch first.",
            )
        held.add(uri)
        return EmptyResult()

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams) -> EmptyResult:
        uris = self._subscriptions.get(_connection(ctx))
        if uris is not None:
            uris.discard(str(params.uri))
        return EmptyResult()

    async def observe(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: remember connections that use resources (Claude Code lists them to build its
        @-mention menu), so list_changed reaches them. Others get no unsolicited traffic."""
        if ctx.method.startswith("resources/"):
            self._seen.add(_connection(ctx))
        return await call_next(ctx)

    # --- delivery ------------------------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own the task group legacy sends run in, until cancelled: the feed hands sends over and
        moves on, so a subscriber that stops reading delays nobody but itself."""
        await self._senders.run(task_status=task_status)

    @asynccontextmanager
    async def watch(self) -> AsyncIterator[MemoryObjectReceiveStream[frozenset[str]]]:
        """Hear every batch of changed URIs while inside (a dashboard page's event stream)."""
        send, receive = anyio.create_memory_object_stream[frozenset[str]](WATCH_BUFFER)
        self._watchers.add(send)
        try:
            yield receive
        finally:
            self._watchers.discard(send)
            send.close()
            receive.close()

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)

    async def deliver(self, changes: Changes) -> None:
        started = time.perf_counter()
        batch = frozenset(changes.uris)
        for watcher in list(self._watchers):
            # A full buffer already means "refresh"; a closed one is on its way out.
            with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
                watcher.send_nowait(batch)
        for uri in sorted(changes.uris):
            await self.bus.publish(ResourceUpdated(uri=uri))
        if changes.list_changed:
            await self.bus.publish(ResourcesListChanged())
        sends: list[tuple[Connection, str, dict[str, str] | None]] = []
        for connection, uris in list(self._subscriptions.items()):
            sends += [
                (connection, "notifications/resources/updated", {"uri": uri}) for uri in sorted(uris & changes.uris)
            ]
        if changes.list_changed:
            sends += [(connection, "notifications/resources/list_changed", None) for connection in list(self._seen)]
        if self._senders.group is not None:
            for send in sends:
                self._senders.group.start_soon(self._send, *send, started)
            return
        # No sender group (an in-process server without the background tasks): send here.
        async with anyio.create_task_group() as tg:
            for send in sends:
                tg.start_soon(self._send, *send, started)

    async def _send(self, connection: Connection, method: str, params: dict[str, str] | None, started: float) -> None:
        with anyio.move_on_after(SEND_DEADLINE) as scope:
            await connection.notify(method, params)
        if not scope.cancelled_caught:
            self.metrics.notifications.labels(method, "sent").inc()
            self.metrics.fanout_seconds.observe(time.perf_counter() - started)
            return
        self.metrics.notifications.labels(method, "dropped").inc()
        if connection in self._subscriptions or connection in self._seen:
            log.warning("dropping a subscriber that did not take %s within %.0fs", method, SEND_DEADLINE)
            self._subscriptions.pop(connection, None)
            self._seen.discard(connection)
