"""Every place JCT reaches into the MCP SDK's private parts, in one module, each with why (mcp 2.3).

The SDK has no public way to do these things yet. tests/test_sdk.py fails loudly, naming the attribute,
when an SDK upgrade removes or renames one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from mcp.server.connection import Connection, NotifyOnlyOutbound
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager


def connection_of(request_context: Any) -> Connection | None:
    """The connection a request came through. `ServerRequestContext.session` (a ServerSession) wraps it as
    `_connection` and exposes only some of its fields; JCT keys per-connection state on it (the agent a
    connection is, its resource subscriptions)."""
    connection = getattr(getattr(request_context, "session", None), "_connection", None)
    return connection if isinstance(connection, Connection) else None


def lasting_channel(connection: Connection) -> object | None:
    """What stays the same across the requests of one client connection: the connection itself on the
    handshake era's transports; on a 2026-07-28 stream (stdio) the SDK builds a new Connection per request
    around one `NotifyOnlyOutbound` per stream, so that; None for a stateless HTTP request (no channel)."""
    if isinstance(connection.outbound, NotifyOnlyOutbound):
        return connection.outbound
    return connection if connection.has_standalone_channel else None


def streamable_sessions(manager: StreamableHTTPSessionManager) -> dict[str, StreamableHTTPServerTransport]:
    """The legacy streamable HTTP sessions a session manager holds (`_server_instances`): nothing public
    lists them (for /metrics and the drain)."""
    sessions: dict[str, StreamableHTTPServerTransport] = manager._server_instances
    return sessions


def hook_sessions(
    manager: StreamableHTTPSessionManager,
    *,
    rename: Callable[[str], str] | None,
    admitted: Callable[[str, Any, Callable[[], Coroutine[Any, Any, None]]], None],
    discarded: Callable[[str], None],
) -> None:
    """Follow the session manager's sessions. The SDK picks a session's id and registers it in
    `_admit_session` (under its creation lock, with the requestor's AuthorizationContext) and forgets it in
    `_discard_session` (DELETE, idle timeout, a crash, or a closing we ask for). `rename` may change the id
    first (a replica's prefix); `admitted` gets the final id, the requestor and a closer."""
    admit = manager._admit_session
    discard = manager._discard_session

    def admit_hooked(requestor: Any) -> Any:
        transport = admit(requestor)
        if transport is None:
            return None
        session_id = str(transport.mcp_session_id)
        if rename is not None:
            renamed = rename(session_id)
            transport.mcp_session_id = renamed
            manager._server_instances[renamed] = manager._server_instances.pop(session_id)
            if session_id in manager._session_owners:
                manager._session_owners[renamed] = manager._session_owners.pop(session_id)
            session_id = renamed

        async def close() -> None:
            await discard(session_id, transport)

        admitted(session_id, requestor, close)
        return transport

    async def discard_hooked(session_id: str, transport: StreamableHTTPServerTransport) -> None:
        discarded(session_id)
        await discard(session_id, transport)

    manager._admit_session = admit_hooked  # type: ignore[method-assign]
    manager._discard_session = discard_hooked  # type: ignore[method-assign]
