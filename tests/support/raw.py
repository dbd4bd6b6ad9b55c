"""A legacy streamable HTTP session driven by hand (no SDK client), so a test can make it misbehave."""

from __future__ import annotations

import itertools
import json
import socket
from contextlib import AsyncExitStack
from typing import Any

import httpx2
from mcp_types.version import LATEST_HANDSHAKE_VERSION


class RawSession:
    """A legacy streamable HTTP session driven by hand, so it can misbehave: subscribe and then never
    open its GET stream, or open it and never read it. `receive_buffer` shrinks SO_RCVBUF."""

    def __init__(self, base_url: str, receive_buffer: int | None = None, token: str | None = None) -> None:
        options = [(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)] if receive_buffer else None
        self.http = httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(socket_options=options), timeout=30.0)
        self.url = f"{base_url}/mcp"
        self.session_id: str | None = None
        self.token = token
        self._ids = itertools.count(1)
        self._stack = AsyncExitStack()

    def _headers(self, accept: str = "application/json, text/event-stream") -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": "application/json"}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        if self.session_id is not None:
            headers |= {"Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": LATEST_HANDSHAKE_VERSION}
        return headers

    async def status(self) -> int:
        """The HTTP status a ping in this session gets now: 200 while the session lives, 404 once it is gone."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": "ping", "params": {}}
        return (await self.http.post(self.url, json=body, headers=self._headers())).status_code

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params or {}}
        response = await self.http.post(self.url, json=body, headers=self._headers())
        assert response.status_code == 200, response.text
        if self.session_id is None:
            self.session_id = response.headers["mcp-session-id"]
        data = [line.removeprefix("data:").strip() for line in response.text.splitlines() if line.startswith("data:")]
        message: dict[str, Any] = json.loads(data[-1]) if data else response.json()
        assert "result" in message, message
        return message

    async def initialize(self) -> None:
        params = {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        }
        await self.request("initialize", params)
        body = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        response = await self.http.post(self.url, json=body, headers=self._headers())
        assert response.status_code == 202, response.text

    async def subscribe(self, uri: str) -> None:
        await self.request("resources/subscribe", {"uri": uri})

    async def open_stream_and_never_read(self) -> httpx2.Response:
        response = await self._stack.enter_async_context(
            self.http.stream("GET", self.url, headers=self._headers("text/event-stream"))
        )
        assert response.status_code == 200
        return response

    async def aclose(self) -> None:
        """Drop the connections without DELETE, as a crashed client would."""
        await self._stack.aclose()
        await self.http.aclose()
