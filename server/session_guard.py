"""The ASGI middleware that keeps `Sessions` (server/sessions.py) current with every request to /mcp, /sse
and /messages/, and the context a stream's calls run in: the holder whose connection they came through, and
the event a client's hang-up sets."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.core.claims.holders import CURRENT, HUNG_UP, HangUp, Holder
from server.identity import AGENT_HEADER, agent_value
from server.sessions import Kind, Sessions, who


class SessionGuard:
    """ASGI middleware: keeps `Sessions` current with every request to /mcp, /sse and /messages/.

    Legacy streamable HTTP sessions are registered when the SDK admits them (server/sdk.py hooks); here
    their requests mark them used. SSE connections and listen streams are registered here, and run in a
    scope that closing them cancels."""

    def __init__(self, app: ASGIApp, sessions: Sessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        headers = dict(scope.get("headers", ()))
        if path == "/mcp" or path.startswith("/mcp/"):
            session = headers.get(b"mcp-session-id")
            if session is not None:
                key = session.decode("latin-1")
                if method == "POST":
                    hung_up = HangUp()
                    with self.sessions.busy(key), held_by(self.sessions.holder(key)), noting(hung_up):
                        await self.app(scope, _hanging_up(receive, hung_up), send)
                    return
                self.sessions.touch(key)
                if method == "GET":
                    with self.sessions.streaming(key):
                        await self.app(scope, receive, send)
                    return
            elif method == "POST" and headers.get(b"mcp-method") == b"subscriptions/listen":
                await self._stream("listen", scope, receive, send)
                return
            elif method == "POST" and (agent := declared(scope)) is not None:
                # A stateless request: held while its agent's listen stream is open in this process.
                principal, _ = who(scope)
                with held_by(self.sessions.agent_holder(principal, agent)):
                    await self.app(scope, receive, send)
                return
        elif path == "/sse" and method == "GET":
            await self._sse(scope, receive, send)
            return
        elif path.startswith("/messages"):
            ids = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("session_id")
            if ids:
                key = f"sse:{ids[0]}"
                with self.sessions.busy(key), held_by(self.sessions.holder(key)):
                    await self.app(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _stream(self, kind: Kind, scope: Scope, receive: Receive, send: Send) -> None:
        principal, credential = who(scope)
        response = Ending(send)
        try:
            async with self.sessions.stream(kind, principal, credential, declared(scope)):
                await self.app(scope, receive, response.send)
        finally:
            await response.end()

    async def _sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An SSE connection, known by the session id its first event announces (`/messages/?session_id=`),
        which its POSTs carry."""
        response = Ending(send)
        try:
            await self._sse_stream(scope, receive, response.send)
        finally:
            await response.end()

    async def _sse_stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        principal, credential = who(scope)
        async with self.sessions.stream("sse", principal, credential) as entry:
            announced = False

            async def watch(message: Message) -> None:
                nonlocal announced
                if not announced and message["type"] == "http.response.body":
                    body = bytes(message.get("body", b""))
                    marker = body.find(b"session_id=")
                    if marker >= 0:
                        announced = True
                        session_id = body[marker + len(b"session_id=") :].split(b"\r", 1)[0].split(b"\n", 1)[0]
                        self.sessions.remove(entry.key)
                        entry.key = f"sse:{session_id.decode('latin-1')}"
                        self.sessions.add(entry)
                await send(message)

            await self.app(scope, receive, watch)


def declared(scope: Scope) -> str | None:
    """The request's X-JCT-Agent header, when it sent one valid value (a malformed one is refused when a tool
    call reads it: server/identity.py)."""
    name = AGENT_HEADER.encode()
    values = [value.decode("latin-1") for key, value in scope.get("headers", ()) if key.lower() == name]
    return agent_value(values) if values else None


@contextmanager
def held_by(holder: Holder) -> Iterator[None]:
    """The calls of this request came through `holder`'s connection."""
    token = CURRENT.set(holder)
    try:
        yield
    finally:
        CURRENT.reset(token)


@contextmanager
def noting(hung_up: HangUp) -> Iterator[None]:
    """The calls of this request stop waiting when `hung_up` is set (server/core/claims/holders.py HUNG_UP)."""
    token = HUNG_UP.set(hung_up)
    try:
        yield
    finally:
        HUNG_UP.reset(token)


def _hanging_up(receive: Receive, hung_up: HangUp) -> Receive:
    """`receive`, setting `hung_up` when it says the client disconnected (the event stream of a POST listens)."""

    async def noted() -> Message:
        message = await receive()
        if message["type"] == "http.disconnect":
            hung_up.set()
        return message

    return noted


class Ending:
    """The `send` of a stream that closing may cancel mid-response: `end` finishes whatever response was begun
    (a stream's last, empty chunk; a 503 if nothing was sent yet), so the client sees the stream end and
    the server logs no "returned without completing response"."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._started = False
        self._done = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._started = True
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self._done = True
        await self._send(message)

    async def end(self) -> None:
        if self._done:
            return
        self._done = True
        # Shielded: this runs when a closing or a shutdown cancelled the stream; the client may be gone.
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            if not self._started:
                await self._send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
