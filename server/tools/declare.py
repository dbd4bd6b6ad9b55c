"""How a tool is declared: `@tool(mcp, READ)` on a function named for the tool, whose docstring describes it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mcp.server import MCPServer
from mcp_types import ToolAnnotations

Fn = TypeVar("Fn", bound=Callable[..., Any])


def tool(mcp: MCPServer[Any], annotations: ToolAnnotations) -> Callable[[Fn], Fn]:
    """Register the function as the tool of its name, its docstring joined into one line as the description (the
    SDK would keep the line breaks and indentation, which every agent's context window pays for)."""

    def register(fn: Fn) -> Fn:
        description = " ".join(line.strip() for line in (fn.__doc__ or "").splitlines())
        return mcp.tool(annotations=annotations, description=description)(fn)

    return register
