"""The dashboard's event stream (/ui/events): one per open page, fed by the change feed, counted with the MCP
sessions and closed when the viewer's token is revoked or the server shuts down."""

from __future__ import annotations

import contextlib
import json

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from server.ui.dashboard import dashboard

HEARTBEAT_SECONDS = 15.0


class EventStream:
    """A plain ASGI app, so that a route serves it as is (Starlette wraps bare functions as request handlers)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        ui = dashboard(request)
        refused = await ui.guard.validate_request(request)
        viewer = await ui.access.viewer(request) if refused is None else None
        if refused is not None or viewer is None:
            await (refused or Response("log in first", status_code=401))(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-store"),
                    (b"x-accel-buffering", b"no"),
                ],
            }
        )
        try:
            async with (
                ui.sessions.stream("ui", viewer.name, viewer.credential),
                ui.hub.watch() as changes,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(_until_disconnected, receive, tg.cancel_scope)
                # `hello` tells a page that (re)connected to catch up with what it missed.
                await _event(send, b"retry: 2000\nevent: hello\ndata: {}\n\n")
                while True:
                    with anyio.move_on_after(HEARTBEAT_SECONDS):
                        batch = await changes.receive()
                        await _event(send, b"event: change\ndata: " + json.dumps(sorted(batch)).encode() + b"\n\n")
                        continue
                    await _event(send, b": keep-alive\n\n")
        finally:
            # Closed by revocation, shutdown or the page going away: end the response if anyone still listens.
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _event(send: Send, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


async def _until_disconnected(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
