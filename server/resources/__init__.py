"""MCP resources: jct:// pages in Markdown written for a model's context window (DESIGN section 4)."""

from __future__ import annotations

from typing import Any

from mcp.server import MCPServer

from server.core.service import Core
from server.resources import listing, templates


def register_resources(server: MCPServer[Any], core: Core, *, page_tasks: int = listing.PAGE_TASKS) -> None:
    """The two fixed pages, a template per record kind (with id completions) and the paginated resources/list.

    `page_tasks` is how many tasks one resources/list page covers (each brings up to four URIs).
    """
    templates.register(server, core)
    listing.register(server, core, page_tasks=page_tasks)


__all__ = ["register_resources"]
