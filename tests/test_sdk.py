"""server/sdk.py against the real SDK: every private part it reaches is still there, and every hook still works.

An SDK upgrade that removes or renames one fails here first, naming it, rather than somewhere in the server.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.server import MCPServer
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.context import HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resources import ResourceTemplate
from mcp.server.session import ServerSession
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmptyResult,
    PromptReference,
    ResourceTemplateReference,
    SubscribeRequestParams,
)
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import BaseModel
from sse_starlette.sse import AppStatus

from server import sdk

pytestmark = pytest.mark.anyio

MCP = f"mcp {importlib.metadata.version('mcp')}"


class Answer(BaseModel):
    value: int


def a_server() -> MCPServer[Any]:
    """An MCPServer with one tool and one prompt."""
    server: MCPServer[Any] = MCPServer("sdk-test")

    @server.tool(name="double")
    async def double(value: int) -> Answer:
        return Answer(value=2 * value)

    @server.prompt(name="hello")
    async def hello() -> str:
        return "hello"

    return server


def _manager() -> Any:
    server = a_server()
    server.streamable_http_app(streamable_http_path="/mcp")
    return server.session_manager


# What server/sdk.py reaches, on what: (where, a factory of the real object, the dotted attribute path).
REACHED: list[tuple[str, Callable[[], Any], str]] = [
    ("MCPServer", a_server, "_tool_manager.list_tools"),
    ("MCPServer", a_server, "_tool_manager.get_tool"),
    ("MCPServer", a_server, "_tool_manager._tools"),
    ("MCPServer", a_server, "_prompt_manager.get_prompt"),
    ("MCPServer", a_server, "_resource_manager._templates"),
    ("MCPServer", a_server, "_resource_security"),
    ("MCPServer", a_server, "_lowlevel_server.get_request_handler"),
    ("MCPServer", a_server, "_lowlevel_server.add_request_handler"),
    ("MCPServer", a_server, "_lowlevel_server.create_initialization_options"),
    ("MCPServer", a_server, "middleware"),
    ("Tool", lambda: sdk.registered_tools(a_server())[0], "fn_metadata.output_schema"),
    ("StreamableHTTPSessionManager", _manager, "_server_instances"),
    ("StreamableHTTPSessionManager", _manager, "_session_owners"),
    ("StreamableHTTPSessionManager", _manager, "_admit_session"),
    ("StreamableHTTPSessionManager", _manager, "_discard_session"),
    ("sse_starlette AppStatus", lambda: AppStatus, "should_exit"),
    ("sse_starlette AppStatus", lambda: AppStatus, "enable_automatic_graceful_drain"),
    ("sse_starlette AppStatus", lambda: AppStatus, "disable_automatic_graceful_drain"),
    ("sse_starlette AppStatus", lambda: AppStatus, "enable_automatic_graceful_drain_mode"),
]


@pytest.mark.parametrize(("where", "make", "path"), REACHED, ids=[f"{w}.{p}" for w, _, p in REACHED])
def test_every_private_part_sdk_py_reaches_is_still_there(where: str, make: Callable[[], Any], path: str) -> None:
    found = make()
    for name in path.split("."):
        assert hasattr(found, name), f"{MCP}: {where}.{path} is gone ({name!r} is missing); update server/sdk.py"
        found = getattr(found, name)


def test_a_server_session_still_wraps_its_connection_as_connection() -> None:
    source = ServerSession.__init__.__code__.co_names
    assert "_connection" in source, f"{MCP}: ServerSession no longer sets _connection; update sdk.connection_of"


async def test_registered_tools_and_prompts_are_found_and_an_output_schema_can_be_replaced() -> None:
    server = a_server()
    (tool,) = sdk.registered_tools(server)
    assert tool.name == "double"
    assert sdk.has_tool(server, "double")
    assert not sdk.has_tool(server, "triple")
    assert sdk.has_prompt(server, "hello")
    assert not sdk.has_prompt(server, "goodbye")
    assert sdk.output_schema(tool) == tool.output_schema  # reading the SDK's own caches it
    schema = {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}
    sdk.set_output_schema(tool, schema)
    assert sdk.output_schema(tool) == schema
    async with Client(server, mode="legacy") as client:
        (listed,) = (await client.list_tools()).tools
        assert listed.output_schema == schema, f"{MCP}: fn_metadata.output_schema no longer reaches tools/list"
        result = await client.call_tool("double", {"value": 2})
        assert result.structured_content == {"value": 4}


async def test_a_resource_template_built_here_is_listed_and_read() -> None:
    server = a_server()

    async def read(name: str) -> str:
        return f"hello {name}"

    template = ResourceTemplate.from_function(
        read, uri_template="test://greet/{name}", name="greet", security=sdk.resource_security(server)
    )
    sdk.add_resource_template(server, template)
    async with Client(server, mode="legacy") as client:
        listed = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in listed] == ["test://greet/{name}"]
        page = await client.read_resource("test://greet/world")
        assert page.contents[0].text == "hello world"  # type: ignore[union-attr]


async def test_request_handlers_are_added_and_chained() -> None:
    server = a_server()
    subscribed: list[str] = []

    async def subscribe(ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams) -> EmptyResult:
        subscribed.append(str(params.uri))
        return EmptyResult()

    async def complete_prompts(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> HandlerResult:
        return CompleteResult(completion=Completion(values=["from the first handler"]))

    sdk.add_request_handler(server, "resources/subscribe", SubscribeRequestParams, subscribe)
    sdk.add_request_handler(server, "completion/complete", CompleteRequestParams, complete_prompts)
    previous = sdk.request_handler(server, "completion/complete")
    assert previous is complete_prompts

    async def complete(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> HandlerResult:
        if isinstance(params.ref, ResourceTemplateReference):
            return CompleteResult(completion=Completion(values=["from the second handler"]))
        assert previous is not None
        return await previous(ctx, params)

    sdk.add_request_handler(server, "completion/complete", CompleteRequestParams, complete)
    sdk.advertise_list_changed(server)
    async with Client(server, mode="legacy") as client:
        await client.subscribe_resource("test://anything")
        assert subscribed == ["test://anything"]
        templated = await client.complete(ResourceTemplateReference(uri="test://{x}"), {"name": "x", "value": ""})
        assert templated.completion.values == ["from the second handler"]
        prompted = await client.complete(PromptReference(name="hello"), {"name": "x", "value": ""})
        assert prompted.completion.values == ["from the first handler"]
        capabilities = client.server_capabilities.resources
        assert capabilities is not None
        assert capabilities.list_changed is True, f"{MCP}: listChanged is no longer advertised"


async def test_a_tool_call_finds_its_connection_which_lasts_across_calls() -> None:
    server = a_server()
    seen: list[object | None] = []

    @server.tool(name="whoami")
    async def whoami(ctx: Context) -> str:
        connection = sdk.connection_of(ctx.request_context)
        assert connection is not None, f"{MCP}: the request's ServerSession._connection is gone"
        seen.append(sdk.lasting_channel(connection))
        return "ok"

    async with Client(server, mode="legacy") as client:
        await client.call_tool("whoami", {})
        await client.call_tool("whoami", {})
    assert seen[0] is not None
    assert seen[0] is seen[1]


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LATEST_HANDSHAKE_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "sdk-test", "version": "0"},
        },
    }


async def test_legacy_sessions_are_followed_renamed_and_listed() -> None:
    server = a_server()
    unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(streamable_http_path="/mcp", transport_security=unchecked)
    manager = server.session_manager
    admitted: list[str] = []
    discarded: list[str] = []
    sdk.hook_sessions(
        manager,
        rename=lambda session_id: f"r1.{session_id}",
        admitted=lambda session_id, _requestor, _close: admitted.append(session_id),
        discarded=discarded.append,
    )
    accept = {"accept": "application/json, text/event-stream"}
    with anyio.fail_after(30):
        async with (
            manager.run(),
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1") as http,
        ):
            response = await http.post("/mcp", json=_initialize(), headers=accept)
            assert response.status_code == 200, response.text
            session_id = response.headers["mcp-session-id"]
            assert session_id.startswith("r1.")
            assert admitted == [session_id]
            assert list(sdk.streamable_sessions(manager)) == [session_id]
            closed = await http.delete("/mcp", headers={"mcp-session-id": session_id, **accept})
            assert closed.status_code == 200, closed.text
            with anyio.fail_after(5):
                while not discarded:
                    await anyio.sleep(0.01)
            assert discarded[0] == session_id
            assert sdk.streamable_sessions(manager) == {}


async def test_a_renamed_session_keeps_its_owner_and_closes() -> None:
    manager = _manager()
    closers: list[Callable[[], Any]] = []
    sdk.hook_sessions(
        manager,
        rename=lambda session_id: f"r1.{session_id}",
        admitted=lambda _session_id, _requestor, close: closers.append(close),
        discarded=lambda _session_id: None,
    )
    owner = AuthorizationContext(client_id="alice", issuer=None, subject="token-1")
    transport = manager._admit_session(owner)
    session_id = transport.mcp_session_id
    assert session_id.startswith("r1.")
    assert manager._session_owners == {session_id: owner}
    await closers[0]()
    assert manager._session_owners == {}
    assert sdk.streamable_sessions(manager) == {}


def test_event_streams_are_held_ended_and_reset() -> None:
    try:
        sdk.hold_event_streams()
        # uvicorn's signal handler, as sse-starlette patches it, now leaves the streams open.
        assert AppStatus.enable_automatic_graceful_drain is False
        sdk.end_event_streams()
        assert AppStatus.should_exit is True
    finally:
        sdk.reset_event_streams()
    assert (AppStatus.should_exit, AppStatus.enable_automatic_graceful_drain) == (False, True)
