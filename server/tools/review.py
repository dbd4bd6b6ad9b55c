"""Review tools: find completed work awaiting a decision, and decide."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from server.core import results
from server.core.models import Limits
from server.core.review import reviews
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import DECISIVE, READ
from server.tools.declare import tool
from server.tools.params import Cursor, Limit, text


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_list_pending_reviews(limit: Limit = 10, cursor: Cursor = None) -> results.PendingReviews:
        """Runs awaiting review, oldest first; then jct_get_evidence and jct_submit_review."""
        return await reviews.list_pending_reviews(core, limit=limit, cursor=cursor)

    @tool(mcp, DECISIVE)
    async def jct_submit_review(
        evidence_pack_id: str,
        decision: Literal["approved", "rejected", "needs_changes"],
        reason: Annotated[str, text("Why, specifically.", Limits.REASON)],
        ctx: Context,
        reviewer_name: Annotated[
            str,
            text("Display name.", Limits.NAME),
        ] = "claude-code",
        override_reason: Annotated[str | None, text("Admin: approve past a gate; audited.", Limits.REASON)] = None,
    ) -> results.ReviewSubmitted:
        """Decide a pending evidence pack, once: approved (done, for good), rejected (the task fails; an admin's
        jct_requeue_task undoes it) or needs_changes (requeued; your reason goes into its next briefing)."""
        return await reviews.submit_review(
            core, identity.actor(ctx), evidence_pack_id, decision, reason, reviewer_name, override_reason
        )
