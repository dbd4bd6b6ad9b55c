"""MCP tool adapters: one module per toolset, each tool one call into server/core."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mcp.server import MCPServer

from server.core.service import Core
from server.identity import Identity
from server.tools import admin, observe, review, worker

Register = Callable[[MCPServer[Any], Core, Identity], None]
TOOLSETS: dict[str, Register] = {
    "worker": worker.register,
    "observe": observe.register,
    "review": review.register,
    "admin": admin.register,
}


def register_tools(server: MCPServer[Any], core: Core, identity: Identity, toolsets: Sequence[str]) -> dict[str, str]:
    """Register the selected toolsets; returns each registered tool's toolset (what roles are checked against)."""
    toolset_of: dict[str, str] = {}
    for name in toolsets:
        before = {tool.name for tool in server._tool_manager.list_tools()}
        TOOLSETS[name](server, core, identity)
        for tool in server._tool_manager.list_tools():
            if tool.name not in before:
                toolset_of[tool.name] = name
    # Every character of tools/list lands in each agent's context window: drop the
    # auto-generated "title" keys, which only repeat the property names.
    for tool in server._tool_manager.list_tools():
        _strip_titles(tool.parameters)
    return toolset_of


def _strip_titles(schema: Any) -> None:
    if isinstance(schema, dict):
        properties = schema.get("properties")
        schema.pop("title", None)
        if isinstance(properties, dict):
            for value in properties.values():
                _strip_titles(value)
        for key in ("items", "anyOf", "allOf", "oneOf", "$defs", "additionalProperties"):
            child = schema.get(key)
            if isinstance(child, list):
                for item in child:
                    _strip_titles(item)
            elif isinstance(child, dict):
                if key == "$defs":
                    for item in child.values():
                        _strip_titles(item)
                else:
                    _strip_titles(child)
