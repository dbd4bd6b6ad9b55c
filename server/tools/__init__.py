"""MCP tool adapters: one module per toolset, each tool one call into server/core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mcp.server import MCPServer

from server import sdk
from server.core.service import Core
from server.identity import Identity
from server.tools import admin, git, missions, observe, operators, review, worker, workflows

Register = Callable[[MCPServer[Any], Core, Identity], None]
# Each toolset's tools, by module: one module per toolset, plus a feature's tools in the toolsets they belong to.
TOOLSETS: dict[str, tuple[Register, ...]] = {
    "worker": (worker.register,),
    "plan": (missions.register_plan, workflows.register_plan),
    "observe": (
        observe.register,
        missions.register_observe,
        workflows.register_observe,
        git.register,
        operators.register_observe,
    ),
    "review": (review.register,),
    "admin": (admin.register, missions.register_admin, operators.register_admin),
}


def register_tools(server: MCPServer[Any], core: Core, identity: Identity, toolsets: Sequence[str]) -> dict[str, str]:
    """Register the selected toolsets; returns each registered tool's toolset (what roles are checked against).
    Each tool's schemas are trimmed as it is declared (declare.py, schemas.py)."""
    toolset_of: dict[str, str] = {}
    for name in toolsets:
        before = {tool.name for tool in sdk.registered_tools(server)}
        for register in TOOLSETS[name]:
            register(server, core, identity)
        for tool in sdk.registered_tools(server):
            if tool.name not in before:
                toolset_of[tool.name] = name
    return toolset_of
