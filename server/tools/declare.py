"""How a tool is declared: `@tool(mcp, READ)` on a function named for the tool, whose docstring describes it."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from mcp.server import MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations

from server import sdk
from server.tools import schemas

Fn = TypeVar("Fn", bound=Callable[..., Any])

# Each tool as the SDK built it and JCT trimmed it (schemas.py), by what it is built from. `jct serve` builds
# one server, but a process that builds several (the test suite builds one per test, in-process) registers the
# same functions anew for each, closed over its own Core; deriving the argument model and both JSON schemas from
# the signature, then trimming them, was most of building a server (about 90 ms of 105). The function's name,
# code, defaults and docstring are the key: the closure changes nothing derived from them, so a later server
# gets a copy of the first one's tool with its own function, sharing the schemas, which nothing changes once
# trimmed (tests/tools/test_declare.py).
_BUILT: dict[Hashable, Tool] = {}


def tool(mcp: MCPServer[Any], annotations: ToolAnnotations) -> Callable[[Fn], Fn]:
    """Register the function as the tool of its name, its docstring joined into one line as the description (the
    SDK would keep the line breaks and indentation, which every agent's context window pays for)."""

    def register(fn: Fn) -> Fn:
        description = " ".join(line.strip() for line in (fn.__doc__ or "").splitlines())
        kwdefaults = tuple(sorted((fn.__kwdefaults__ or {}).items()))
        key = (fn.__name__, fn.__code__, fn.__defaults__, kwdefaults, description, annotations.model_dump_json())
        built = _BUILT.get(key)
        if built is not None:
            sdk.add_built_tool(mcp, built.model_copy(update={"fn": fn}))
            return fn
        mcp.tool(annotations=annotations, description=description)(fn)
        tool = sdk.registered_tool(mcp, fn.__name__)
        if tool is not None and tool.fn is fn:
            schemas.trim(tool)
            # Kept holding no server's function (nor the Core it closes over).
            _BUILT[key] = tool.model_copy(update={"fn": _unbound})
        return fn

    return register


def _unbound(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a built tool is registered with its own function")
