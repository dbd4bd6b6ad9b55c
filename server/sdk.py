"""Every place JCT reaches into the MCP SDK's private parts, in one module, each with why (mcp 2.3).

The SDK has no public way to do these things yet. tests/test_sdk.py fails loudly, naming the attribute,
when an SDK upgrade removes or renames one of them.
"""

from __future__ import annotations

from typing import Any

from mcp.server.connection import Connection, NotifyOnlyOutbound


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
