"""Every place JCT reaches into the MCP SDK's private parts, in one module, each with why (mcp 2.3).

The SDK has no public way to do these things yet. Also here: sse-starlette's process-wide `AppStatus`, which
the SDK's SSE transport streams through. tests/test_sdk.py fails loudly, naming the attribute, when an SDK
upgrade removes or renames one of them. Call sites use these functions, never the private names.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from mcp.server import MCPServer
from mcp.server.connection import Connection, NotifyOnlyOutbound
from mcp.server.lowlevel.server import NotificationOptions, RequestHandler
from mcp.server.mcpserver.resources import ResourceTemplate
from mcp.server.mcpserver.resources.templates import ResourceSecurity
from mcp.server.mcpserver.tools import Tool
from mcp.server.models import InitializationOptions
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from sse_starlette.sse import AppStatus

# --- connections ------------------------------------------------------------------------------------


def connection_of(request_context: Any) -> Connection | None:
    """The connection a request came through. `ServerRequestContext.session` (a ServerSession) wraps it as
    `_connection` and exposes only some of its fields; JCT keys per-connection state on it (the agent a
    connection is, its resource subscriptions) (mcp 2.3)."""
    connection = getattr(getattr(request_context, "session", None), "_connection", None)
    return connection if isinstance(connection, Connection) else None


def lasting_channel(connection: Connection) -> object | None:
    """What stays the same across the requests of one client connection: the connection itself on the
    handshake era's transports; on a 2026-07-28 stream (stdio) the SDK builds a new Connection per request
    around one `NotifyOnlyOutbound` per stream, so that; None for a stateless HTTP request (no channel)."""
    if isinstance(connection.outbound, NotifyOnlyOutbound):
        return connection.outbound
    return connection if connection.has_standalone_channel else None


# --- what an MCPServer has registered -------------------------------------------------------------


def registered_tools(server: MCPServer[Any]) -> list[Tool]:
    """The tools as registered (`_tool_manager`), whose schemas JCT trims before anyone lists them: the public
    `list_tools()` returns copies for the wire (mcp 2.3)."""
    return server._tool_manager.list_tools()


def registered_tool(server: MCPServer[Any], name: str) -> Tool | None:
    """The tool registered as `name` (`_tool_manager`), as the SDK built it (mcp 2.3)."""
    return server._tool_manager.get_tool(name)


def add_built_tool(server: MCPServer[Any], tool: Tool) -> None:
    """Register a Tool built beforehand (`_tool_manager._tools`; the public way builds it from its function).
    A name already registered keeps its first tool, as `add_tool` does (mcp 2.3)."""
    server._tool_manager._tools.setdefault(tool.name, tool)


def has_tool(server: MCPServer[Any], name: str) -> bool:
    """Whether `name` is a registered tool, without building tools/list."""
    return registered_tool(server, name) is not None


def has_prompt(server: MCPServer[Any], name: str) -> bool:
    """Whether `name` is a registered prompt (`_prompt_manager`), without building prompts/list (mcp 2.3)."""
    return server._prompt_manager.get_prompt(name) is not None


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The outputSchema the SDK derived for a tool, from `fn_metadata` (mcp 2.3)."""
    return tool.fn_metadata.output_schema


def set_output_schema(tool: Tool, schema: dict[str, Any]) -> None:
    """Publish `schema` as the tool's outputSchema, which the SDK lists and validates results against. There is
    no setter: it lives in `fn_metadata.output_schema`, and `Tool.output_schema` is a cached_property over it,
    so a copy cached there is dropped too (mcp 2.3)."""
    tool.fn_metadata.output_schema = schema
    vars(tool).pop("output_schema", None)


def resource_security(server: MCPServer[Any]) -> ResourceSecurity:
    """The server's default resource security (`_resource_security`), which `@server.resource` templates
    get; a template JCT builds itself needs the same (mcp 2.3)."""
    return server._resource_security


def add_resource_template(server: MCPServer[Any], template: ResourceTemplate) -> None:
    """Register a template JCT built itself (a ResourceTemplate subclass): `_resource_manager.add_template`
    only builds the SDK's own class from a function, so this writes `_resource_manager._templates` (mcp 2.3)."""
    server._resource_manager._templates[template.uri_template] = template


# --- the low-level server ---------------------------------------------------------------------------


def request_handler(server: MCPServer[Any], method: str) -> RequestHandler[Any, Any] | None:
    """The handler registered for `method` on the low-level server (`_lowlevel_server`), so a new one can
    hand on what it does not serve (completions for prompts and for resource templates) (mcp 2.3)."""
    entry = server._lowlevel_server.get_request_handler(method)
    return None if entry is None else entry.handler


def add_request_handler(
    server: MCPServer[Any], method: str, params_type: type[Any], handler: RequestHandler[Any, Any]
) -> None:
    """Serve `method` with `handler` on the low-level server (`_lowlevel_server`): MCPServer has no public
    way for methods it does not serve itself (legacy resources/subscribe, resources/list with cursors) or
    serves in one fixed way (completion/complete, chained) (mcp 2.3)."""
    server._lowlevel_server.add_request_handler(method, params_type, handler)


def advertise_list_changed(server: MCPServer[Any]) -> None:
    """Advertise `resources.listChanged`. The SDK does only when told to, and the handshake era's transports
    ask the low-level server (`_lowlevel_server`) for its options with no arguments, so its
    `create_initialization_options` is wrapped to answer for them (mcp 2.3)."""
    low = server._lowlevel_server
    plain = low.create_initialization_options

    def with_list_changed(
        notification_options: NotificationOptions | None = None, *args: Any, **kw: Any
    ) -> InitializationOptions:
        return plain(notification_options or NotificationOptions(resources_changed=True), *args, **kw)

    low.create_initialization_options = with_list_changed  # type: ignore[method-assign]


# --- legacy streamable HTTP sessions ---------------------------------------------------------------


def streamable_sessions(manager: StreamableHTTPSessionManager) -> dict[str, StreamableHTTPServerTransport]:
    """The legacy streamable HTTP sessions a session manager holds (`_server_instances`): nothing public
    lists them (for /metrics and the drain) (mcp 2.3)."""
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
    `_admit_session` (under its creation lock, with the requestor's AuthorizationContext, in
    `_server_instances` and `_session_owners`) and forgets it in `_discard_session` (DELETE, idle timeout,
    a crash, or a closing we ask for). `rename` may change the id first (a replica's prefix); `admitted`
    gets the final id, the requestor and a closer (mcp 2.3)."""
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


# --- event streams (sse-starlette) ------------------------------------------------------------------


def hold_event_streams() -> None:
    """Keep event streams open through a signal. sse-starlette ends every stream in the process the moment
    uvicorn sees one (its class-wide `AppStatus`), tool call responses included (they are streams too);
    a draining JCT says when streams end instead (sse-starlette 3, under mcp 2.3)."""
    AppStatus.disable_automatic_graceful_drain()  # type: ignore[no-untyped-call]


def end_event_streams() -> None:
    """End every event stream in the process now (`AppStatus.should_exit`)."""
    AppStatus.should_exit = True


def reset_event_streams() -> None:
    """Back to sse-starlette's defaults, for a next server in the same process (tests)."""
    AppStatus.should_exit = False
    AppStatus.enable_automatic_graceful_drain_mode()  # type: ignore[no-untyped-call]
