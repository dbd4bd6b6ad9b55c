"""build_mcp(): the MCP server, with the tools of the toolsets JCT_TOOLSETS selects."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, InputRequiredResult

from server.core.service import Core
from server.identity import Identity
from server.tools import register_tools
from server.tools.errors import translate

INSTRUCTIONS = """\
JCT is a shared work queue for coding agents. To work: jct_claim_next (or jct_list_tasks + \
jct_claim_task) -> do the work with your own tools -> jct_report_artifact for each output (a diff \
as code_patch, test output as log) -> jct_complete_task with a summary and criteria_results citing \
artifact ids. Completion runs a prover and a review policy. Your claim is a lease: any call on the \
task renews it; call jct_report_progress during long work. If you cannot finish, jct_release_task. \
Errors are JSON with a code and a suggestion: follow the suggestion."""


class JctServer(MCPServer[Any]):
    """MCPServer whose tool failures all leave through one translation (server/tools/errors.py)."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except MCPError:
            raise
        except ToolError as exc:
            return translate(name, exc)


def build_mcp(core: Core, identity: Identity) -> MCPServer[Any]:
    server = JctServer(name="jct", title="JCT work queue", version=version("jct"), instructions=INSTRUCTIONS)
    register_tools(server, core, identity, core.settings.toolsets)
    return server
