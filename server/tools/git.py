"""Git tools (observe): read-only views of the repositories JCT reads itself (JCT_REPOS, or a local tree)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from pydantic import Field

from server.core import results
from server.core.git import history
from server.core.models import Limits
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import READ
from server.tools.declare import tool
from server.tools.params import Cursor, bounded, text

Repo = Annotated[str, bounded(Limits.REPO)]
Ref = Annotated[str, bounded(Limits.REF)]
OptionalRef = Annotated[str | None, bounded(Limits.REF)]
Path = Annotated[str | None, bounded(Limits.PATH)]
MaxChars = Annotated[int, Field(ge=1, le=history.MAX_CHARS)]


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_git_log(
        repo: Repo,
        ref: Ref = "main",
        path: Path = None,
        limit: Annotated[int, Field(ge=1, le=history.MAX_LOG)] = 20,
        since_ref: Annotated[str | None, text("Only commits after it.", Limits.REF)] = None,
        cursor: Cursor = None,
        tags: Annotated[bool, Field(description="List tags instead.")] = False,
    ) -> results.GitLog:
        """Commits of a repo JCT reads, newest first."""
        return await history.git_log(core, repo, ref, path, limit, since_ref=since_ref, cursor=cursor, tags=tags)

    @tool(mcp, READ)
    async def jct_git_diff(
        run_id: str | None = None,
        repo: Annotated[str | None, bounded(Limits.REPO)] = None,
        base: OptionalRef = None,
        head: OptionalRef = None,
        path: Path = None,
        max_chars: MaxChars = 20_000,
    ) -> results.GitText:
        """A run's change (run_id) or repo base..head, read by JCT."""
        return await history.git_diff(
            core, run_id=run_id, repo=repo, base=base, head=head, path=path, max_chars=max_chars
        )

    @tool(mcp, READ)
    async def jct_git_show(
        repo: Repo,
        ref: Ref,
        path: Annotated[str, bounded(Limits.PATH)],
        max_chars: MaxChars = 20_000,
    ) -> results.GitText:
        """A file or directory listing at a ref, read by JCT."""
        return await history.git_show(core, repo, ref, path, max_chars)
