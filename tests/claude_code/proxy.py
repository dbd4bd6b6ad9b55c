"""A logging reverse proxy between an MCP client and JCT, and a catcher for traffic meant to leave the machine.

`McpProxy` forwards every request to `upstream` (a JCT base URL, which a test may change, to move the
client onto a restarted server) and records each one: HTTP method, path, the JSON-RPC methods in the
body, the `mcp-session-id` it carried, the status and the session id of the answer. `drop(session_id)`
makes the proxy answer that session's requests as the MCP SDK answers an unknown session (404,
`Session not found`), without passing them on: the server-side loss of a session, seen from the client.

`Egress` is what HTTP_PROXY / HTTPS_PROXY point at: it refuses every request with 403 and records what
was asked, so a test can see whether the client tried to reach anything beyond 127.0.0.1.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
from anyio.abc import SocketAttribute, SocketStream
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from tests.claude_code.model import serve_app

SESSION_HEADER = "mcp-session-id"
SESSION_NOT_FOUND = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
# Hop-by-hop headers a proxy must not forward, plus the ones httpx sets itself.
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host", "content-length"}


@dataclass
class Exchange:
    """One request the proxy saw, and how it was answered."""

    http_method: str
    path: str
    rpc: list[str]  # JSON-RPC methods in the body; "response" for a client's answer to a server request
    messages: list[Any]  # the JSON-RPC messages themselves, parsed
    session: str | None  # the mcp-session-id the request carried
    status: int | None = None
    new_session: str | None = None  # the mcp-session-id the answer carried
    dropped: bool = False  # answered 404 by the proxy itself
    headers: dict[str, str] = field(default_factory=dict)  # the request's headers
    ended: bool = False  # the answer's body is over (or the client went away): an open stream is not

    def describe(self) -> str:
        rpc = ",".join(self.rpc) or "-"
        session = (self.session or "none")[:8]
        text = f"{self.http_method} {self.path} [{rpc}] session={session} -> {self.status}"
        if self.new_session and self.new_session != self.session:
            text += f" new-session={self.new_session[:8]}"
        if self.dropped:
            text += " (dropped by proxy)"
        return text


def rpc_messages(body: bytes) -> tuple[list[str], list[Any]]:
    """The JSON-RPC methods of a request body, and its messages."""
    if not body:
        return [], []
    try:
        parsed = json.loads(body)
    except ValueError:
        return ["(not json)"], []
    messages = parsed if isinstance(parsed, list) else [parsed]
    methods = [str(m.get("method", "response")) if isinstance(m, dict) else "?" for m in messages]
    return methods, messages


async def relay(upstream: httpx2.Response, exchange: Exchange) -> AsyncIterator[bytes]:
    """The upstream body as it arrives; an upstream that goes away (a restart) just ends it. The exchange is
    marked ended when the body is over or the client went away."""
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    except httpx2.TransportError:
        return
    finally:
        exchange.ended = True


class McpProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.exchanges: list[Exchange] = []
        self.dropped: set[str] = set()
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(60.0, read=None))

    def drop(self, session_id: str) -> None:
        self.dropped.add(session_id)

    def sessions(self) -> list[str]:
        """Session ids the upstream handed out, in order."""
        seen: list[str] = []
        for exchange in self.exchanges:
            if exchange.new_session and exchange.new_session not in seen and not exchange.dropped:
                seen.append(exchange.new_session)
        return seen

    def open_streams(self) -> list[Exchange]:
        """The exchanges whose answer is still being relayed: event streams the client holds open."""
        return [e for e in self.exchanges if e.status is not None and not e.ended and not e.dropped]

    def log(self) -> str:
        """Every exchange so far, one line each."""
        return "\n".join(exchange.describe() for exchange in self.exchanges)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = await request.body()
        methods, messages = rpc_messages(body)
        session = request.headers.get(SESSION_HEADER)
        exchange = Exchange(request.method, request.url.path, methods, messages, session, headers=dict(request.headers))
        self.exchanges.append(exchange)
        response = await self._answer(request, body, exchange)
        await response(scope, receive, send)

    async def _answer(self, request: Request, body: bytes, exchange: Exchange) -> Response:
        if exchange.session is not None and exchange.session in self.dropped:
            exchange.status, exchange.dropped, exchange.ended = 404, True, True
            return Response(json.dumps(SESSION_NOT_FOUND), status_code=404, media_type="application/json")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        url = self.upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        try:
            upstream = await self._http.send(
                self._http.build_request(request.method, url, headers=headers, content=body), stream=True
            )
        except httpx2.TransportError as error:
            exchange.status, exchange.ended = 502, True
            return Response(f"upstream unreachable: {error}", status_code=502)
        exchange.status = upstream.status_code
        exchange.new_session = upstream.headers.get(SESSION_HEADER)
        answer_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
        return StreamingResponse(
            relay(upstream, exchange),
            status_code=upstream.status_code,
            headers=answer_headers,
            background=BackgroundTask(upstream.aclose),
        )

    async def aclose(self) -> None:
        await self._http.aclose()


@asynccontextmanager
async def mcp_proxy(upstream: str) -> AsyncIterator[tuple[McpProxy, str]]:
    """A running proxy to `upstream`; yields it and its base URL."""
    proxy = McpProxy(upstream)
    try:
        async with serve_app(proxy) as url:
            yield proxy, url
    finally:
        await proxy.aclose()


class Egress:
    """Refuses every proxied request (HTTP or CONNECT) with 403 and records its request line."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            data = b""
            with anyio.move_on_after(5):
                while b"\r\n\r\n" not in data and len(data) < 65536:
                    chunk = await stream.receive(4096)
                    if not chunk:
                        break
                    data += chunk
            line = data.split(b"\r\n", 1)[0].decode(errors="replace")
            if line:
                self.attempts.append(line)
            with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await stream.send(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@asynccontextmanager
async def egress() -> AsyncIterator[tuple[Egress, str]]:
    """A running egress catcher; yields it and its URL (for HTTP_PROXY and HTTPS_PROXY)."""
    catcher = Egress()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as tcp:
        port = tcp.extra(SocketAttribute.local_port)
        async with anyio.create_task_group() as tg:
            tg.start_soon(tcp.serve, catcher.handle)
            try:
                yield catcher, f"http://127.0.0.1:{port}"
            finally:
                tg.cancel_scope.cancel()
