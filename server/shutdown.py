"""Stopping, bounded and truthful (DESIGN section 10): what a SIGTERM does, in order.

1. The listener closes and /readyz turns 503, so balancers stop sending; no new connection is taken.
2. Requests already received finish and their responses are written (every POST but a 2026-07-28
   `subscriptions/listen`, and tool calls, which on the old SSE transport answer over the event stream),
   for at most JCT_SHUTDOWN_GRACE_SECONDS. A jct_claim_next waiting for work answers `claimed: false` at once.
3. Then the database stops (server/db/engine.py `Database.stop`): no transaction begins any more, and the
   statements still running are cancelled, so their transactions roll back and their callers are told
   UNAVAILABLE ("nothing was recorded"), which is the truth. Those answers get CANCELLED_SECONDS to leave.
4. The event streams that never end on their own (legacy GET streams, SSE connections, listens) are ended
   STREAMS_SECONDS later at most, and the process exits.

Claims are not released: their leases run out and the sweeper of a surviving replica requeues them. The
claims this process renewed for its connections (server/core/claims/holding.py) first get JCT_LEASE_SECONDS,
the lease nobody renews, before the database stops: their agents outlive the process and reconnect elsewhere.
Whatever the database is doing, the process exits within the grace plus a few seconds.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from server import sdk

log = logging.getLogger("jct.shutdown")

# After the grace: how long cancelled calls get to write their answers, and streams to end.
CANCELLED_SECONDS = 3.0
# How long handing back the claims this process renewed may take, after the grace (one statement).
HAND_BACK_SECONDS = 3.0
STREAMS_SECONDS = 2


class InFlight:
    """A count of work under way (tool calls, HTTP requests) that can be waited on until it is zero."""

    def __init__(self) -> None:
        self.count = 0
        self._idle: anyio.Event | None = None

    def enter(self) -> None:
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
        if not self.count and self._idle is not None:
            self._idle.set()

    async def idle(self) -> None:
        """Return once the count is zero."""
        while self.count:
            self._idle = anyio.Event()
            await self._idle.wait()


@dataclass
class Readiness:
    serving: bool = False
    draining: bool = False


class Drain:
    """The app's part of a shutdown: what is in flight, and how to stop the database (`Database.stop`: it
    cancels the statements still running and returns how many it interrupted)."""

    # After both counts reach zero, look again this much later: on the SSE transport a POST is answered
    # (202) before its tool call starts.
    SETTLE = 0.2

    def __init__(
        self,
        tool_calls: InFlight,
        state: Readiness,
        stop_database: Callable[[], Awaitable[int]],
        stop_waiting: Callable[[], None] = lambda: None,
        hand_back: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        self._tool_calls = tool_calls
        self._state = state
        self._stop_database = stop_database
        self._stop_waiting = stop_waiting
        self._hand_back = hand_back
        self.requests = InFlight()

    @property
    def draining(self) -> bool:
        return self._state.draining

    def begin(self) -> None:
        self._state.draining = True
        # Claims waiting for work answer `claimed: false` now rather than hold the drain up.
        self._stop_waiting()

    async def wait(self, grace: float) -> int:
        """Wait, at most `grace` seconds, until no request or tool call is running; returns how many still are."""
        with anyio.move_on_after(grace):
            while True:
                await self.requests.idle()
                await self._tool_calls.idle()
                await anyio.sleep(self.SETTLE)
                if not self.requests.count and not self._tool_calls.count:
                    break
        return self.requests.count + self._tool_calls.count

    async def run(self, grace: float) -> None:
        """Steps 2 and 3: wait for what is in flight, then stop the database and let the cancelled answer."""
        log.info("draining: waiting up to %.0fs for in-flight requests and tool calls", grace)
        left = await self.wait(grace)
        await self._hand_back_claims()
        interrupted = await self._stop_database()
        if left:
            log.warning(
                "draining: %d request(s) still running after %.0fs; cancelled %d database statement(s)",
                left,
                grace,
                interrupted,
            )
            left = await self.wait(CANCELLED_SECONDS)
            if left:
                log.warning("draining: %d request(s) did not answer; stopping anyway", left)

    async def _hand_back_claims(self) -> None:
        """The claims this process renewed for its connections get the lease nobody renews, before the database
        stops (server/core/claims/holding.py `hand_back`); at most HAND_BACK_SECONDS, a failure only logged."""
        if self._hand_back is None:
            return
        try:
            with anyio.fail_after(HAND_BACK_SECONDS):
                handed = await self._hand_back()
        except Exception as exc:  # the database away, or slow: their leases run out as they are
            log.warning("draining: could not hand back the claims this process renewed: %s", exc)
            return
        if handed:
            log.info("draining: %d claim(s) this process renewed now have JCT_LEASE_SECONDS", handed)


class CountRequests:
    """ASGI middleware: count the requests a drain waits for, the POSTs, except listens, which never end."""

    def __init__(self, app: ASGIApp, requests: InFlight) -> None:
        self._app = app
        self._requests = requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _is_listen(scope):
            await self._app(scope, receive, send)
            return
        self._requests.enter()
        try:
            await self._app(scope, receive, send)
        finally:
            self._requests.leave()


def _is_listen(scope: Scope) -> bool:
    # 2026-07-28 requests name their method in a header; a listen stream stays open until the client leaves.
    return (b"mcp-method", b"subscriptions/listen") in scope.get("headers", ())


def draining_server(config: Any, grace: float) -> Any:
    """uvicorn's Server, whose shutdown (SIGTERM, Ctrl-C) drains first (steps 1-3), then ends the streams."""
    import uvicorn

    config.timeout_graceful_shutdown = STREAMS_SECONDS

    class DrainingServer(uvicorn.Server):
        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            # sse-starlette ends every event stream the moment uvicorn sees a signal, tool call
            # responses included (they are streams too): JCT says when streams end instead.
            sdk.hold_event_streams()
            try:
                await super().serve(sockets)
            finally:
                sdk.reset_event_streams()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            drain: Drain = config.app.state.drain
            drain.begin()
            # Stop taking connections and requests, as uvicorn's own shutdown would, then wait for calls.
            for listener in self.servers:
                listener.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            await drain.run(grace)
            # Now end the event streams that never end on their own, so that none is left for uvicorn to cancel.
            sdk.end_event_streams()
            config.app.state.sessions.end_streams("the server is shutting down")
            await super().shutdown(sockets)

    return DrainingServer(config)
