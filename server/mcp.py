"""build_mcp(): the MCP server: the tools JCT_TOOLSETS selects, the jct:// resources, the prompts."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server import MCPServer
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    GetPromptResult,
    InputRequiredResult,
    ListPromptsResult,
    ListToolsResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from server import calls, sdk
from server.errors import ErrorCode, JctError
from server.failures import FailureLog
from server.identity import Identity
from server.metrics import Metrics
from server.notify.hub import NotificationHub
from server.shutdown import InFlight

if TYPE_CHECKING:
    from server.core.service import Core

log = logging.getLogger("jct.mcp")

INSTRUCTIONS = """\
JCT is a shared work queue for coding agents. To work: jct_claim_next (or jct_list_tasks + \
jct_claim_task) -> do the work with your own tools -> jct_report_artifact for each output (a diff \
as code_patch, test output as log) -> jct_complete_task with a summary and criteria_results citing \
artifact ids. Completion runs a prover and a review policy. Your claim is a lease: any call on the \
task renews it; call jct_report_progress during long work. If you cannot finish, jct_release_task. \
Errors are JSON with a code and a suggestion: follow the suggestion."""


# Each prompt drives one tool (server/prompts/): a caller whose roles do not allow the tool neither sees nor
# gets the prompt.
PROMPT_TOOLS = {
    "work_next": "jct_claim_next",
    "review": "jct_submit_review",
    "enqueue": "jct_enqueue_task",
    "plan": "jct_create_mission",
}

# What a server answers before it is ready (see `JctServer.ready`): the handshake, and nothing that reads JCT.
_BEFORE_READY = frozenset({"initialize", "ping", "server/discover"})


class JctServer(MCPServer[Any]):
    """MCPServer whose tool failures all leave through one translation (server/tools/errors.py), whose
    tools are checked against the caller's roles in one place (`call_tool`), and whose resource changes
    reach subscribers of both protocol eras through `hub`."""

    def __init__(self, hub: NotificationHub, identity: Identity, **kwargs: Any) -> None:
        super().__init__(subscriptions=hub.bus, **kwargs)
        self.hub = hub
        self.identity = identity
        # tool -> toolset, filled by build_mcp; a tool registered later (`extend`) counts as admin.
        self.toolset_of: dict[str, str] = {}
        # JCT_LOG_TOOL_CALLS: one line per tool call on `jct.calls` (server/calls.py).
        self.log_calls = False
        # Tool calls running now: a draining server waits for them (server/app.py).
        self.in_flight = InFlight()
        # Requests that fail because the database or the disk did: one log line per kind per interval.
        self.failures = FailureLog(log, "tool calls, resources and prompts answer UNAVAILABLE")
        sdk.add_request_handler(self, "resources/subscribe", SubscribeRequestParams, hub.subscribe)
        sdk.add_request_handler(self, "resources/unsubscribe", UnsubscribeRequestParams, hub.unsubscribe)
        # Completions for prompts and resource templates chain onto this one (registered later, in `populate`):
        # here so that `initialize`, which may be answered before they are, advertises completions.
        sdk.add_request_handler(self, "completion/complete", CompleteRequestParams, _no_completions)
        # Set while the tools, resources and prompts are still being registered (`jct serve --stdio` answers
        # `initialize` first): every other request waits for it.
        self.ready: anyio.Event | None = None
        # Set once the handshake has been answered (or another request arrives first): the cue to start that work.
        self.answered = anyio.Event()
        self.middleware.append(self._until_ready)
        self.middleware.append(hub.observe)
        self.middleware.append(self._only_usable_tools)
        self.middleware.append(self._world_failures)
        sdk.advertise_list_changed(self)

    def toolset(self, tool: str) -> str:
        return self.toolset_of.get(tool, "admin")

    def may_call(self, tool: str) -> bool:
        """Whether the caller of the current request may call `tool` (always, without tokens)."""
        return self.identity.may_use(tool, self.toolset(tool))

    def may_prompt(self, prompt: str) -> bool:
        """Whether the caller may use `prompt`: it may call the tool the prompt drives (PROMPT_TOOLS)."""
        tool = PROMPT_TOOLS.get(prompt)
        return tool is None or (sdk.has_tool(self, tool) and self.may_call(tool))

    @property
    def metrics(self) -> Metrics:
        return self.hub.metrics

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        known = sdk.has_tool(self, name)
        # Only registered names become label values: garbage names must not grow the metric.
        self.in_flight.enter()
        started = time.perf_counter()
        began = self.failures.now()
        code = "error"
        result: CallToolResult | InputRequiredResult | None = None
        try:
            with self.metrics.tool_call(name if known else "unknown") as outcome:
                result = await self._call_tool(name, arguments, context, known=known)
                code = _outcome(result)
                outcome(code)
                if code == "ok":
                    self.failures.recovered(name, began)
                return result
        finally:
            self.in_flight.leave()
            if self.log_calls:
                calls.logged(
                    name if known else "unknown",
                    calls.caller(self.identity, context),
                    arguments,
                    result,
                    code,
                    time.perf_counter() - started,
                )

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None, *, known: bool
    ) -> CallToolResult | InputRequiredResult:
        if known and not self.may_call(name):
            log.info("tool %s refused: PERMISSION_DENIED", name)
            from server.tools.errors import error_result

            return error_result(
                JctError(
                    ErrorCode.PERMISSION_DENIED,
                    f"Your token's roles do not allow {name} (one of the {self.toolset(name)} tools).",
                    "Use the tools tools/list shows you, or ask the JCT operator for a token with the role "
                    "you need (jct token create NAME --role worker|reviewer|admin).",
                )
            )
        try:
            return await super().call_tool(name, arguments, context)
        except MCPError:
            raise
        except ToolError as exc:
            from server.tools.errors import translate

            return translate(name, exc, self.failures)

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | InputRequiredResult:
        # Here, not in middleware: the SDK logs a traceback for a failed read before middleware sees it.
        try:
            return await super().read_resource(uri, context)
        except ResourceError as exc:
            from server.tools.errors import protocol_error

            error = protocol_error(exc, self.failures)
            if error is None:
                raise
            raise error from None

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        # An unknown prompt is the caller's mistake: INVALID_PARAMS, not a server error.
        if not sdk.has_prompt(self, name):
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}. Call prompts/list for the available prompts.")
        if not self.may_prompt(name):
            raise MCPError(
                INVALID_PARAMS,
                f"Your token's roles do not allow the {name} prompt (it drives {PROMPT_TOOLS[name]}). Use the "
                "prompts prompts/list shows you, or ask the JCT operator for a token with the role you need.",
            )
        return await super().get_prompt(name, arguments, context)

    async def _until_ready(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a request that needs JCT waits until the server is ready (only while it starts)."""
        if self.ready is None or self.ready.is_set():
            return await call_next(ctx)
        if ctx.method in _BEFORE_READY:
            result = await call_next(ctx)
            self.answered.set()
            return result
        self.answered.set()
        await self.ready.wait()
        return await call_next(ctx)

    async def _world_failures(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: a prompt, completion or listing that fails because the database or the disk did is a
        JSON-RPC error saying so (server/tools/errors.py), not an internal error with a traceback."""
        try:
            return await call_next(ctx)
        except MCPError:
            raise
        except Exception as exc:
            from server.tools.errors import protocol_error

            error = protocol_error(exc, self.failures)
            if error is None:
                raise
            raise error from None

    async def _only_usable_tools(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: tools/list and prompts/list show each caller only the tools and prompts its roles allow."""
        result = await call_next(ctx)
        if ctx.method == "tools/list":
            return _only_named(result, ListToolsResult, "tools", self.may_call)
        if ctx.method == "prompts/list":
            return _only_named(result, ListPromptsResult, "prompts", self.may_prompt)
        return result


def _only_named(
    result: HandlerResult, model: type[ListToolsResult | ListPromptsResult], field: str, usable: Callable[[str], bool]
) -> HandlerResult:
    """A tools/list or prompts/list result keeping only the entries whose name is `usable`."""
    if isinstance(result, model):
        return result.model_copy(update={field: [e for e in getattr(result, field) if usable(e.name)]})
    if isinstance(result, dict) and isinstance(result.get(field), list):  # the wire form
        return {**result, field: [e for e in result[field] if not isinstance(e, dict) or usable(str(e.get("name")))]}
    return result


async def _no_completions(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> CompleteResult:
    return CompleteResult(completion=Completion(values=[]))


def _outcome(result: CallToolResult | InputRequiredResult) -> str:
    """`ok`, or the JCT error code of a failed call (read back from the error JSON the model gets)."""
    if not isinstance(result, CallToolResult) or not result.is_error:
        return "ok"
    try:
        code = json.loads(result.content[0].text)["error"]["code"]  # type: ignore[union-attr]
    except (IndexError, AttributeError, KeyError, TypeError, ValueError):
        return "error"
    return code if code in ErrorCode.__members__ else "error"


def build_mcp(
    core: Core, identity: Identity, hub: NotificationHub | None = None, metrics: Metrics | None = None
) -> JctServer:
    server = new_server(
        identity, hub if hub is not None else NotificationHub(metrics, core.settings.max_subscriptions_per_session)
    )
    populate(server, core)
    return server


def new_server(identity: Identity, hub: NotificationHub) -> JctServer:
    """The server with nothing registered yet: enough to answer `initialize` (see `populate`)."""
    return JctServer(
        hub, identity, name="jct", title="JCT work queue", version=version("jct"), instructions=INSTRUCTIONS
    )


def populate(server: JctServer, core: Core) -> None:
    """Register the tools JCT_TOOLSETS selects, the jct:// resources and the prompts."""
    from server.prompts import register_prompts
    from server.resources import register_resources
    from server.tools import register_tools

    server.toolset_of = register_tools(server, core, server.identity, core.settings.toolsets)
    server.log_calls = core.settings.log_tool_calls
    register_resources(server, core)
    register_prompts(server, core)
