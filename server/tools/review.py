"""Review tools: find completed work awaiting a decision, and decide."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from server.core import results, review
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import READ, WRITE
from server.tools.params import Cursor, Limit


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_list_pending_reviews",
        annotations=READ,
        description=(
            "Completed runs awaiting a review decision, oldest first: evidence_pack_id, run_id, objective, "
            "verdict, summary. Inspect with jct_get_evidence / jct_get_run, then jct_submit_review."
        ),
    )
    async def jct_list_pending_reviews(limit: Limit = 10, cursor: Cursor = None) -> results.PendingReviews:
        return await review.list_pending_reviews(core, limit=limit, cursor=cursor)

    @mcp.tool(
        name="jct_submit_review",
        annotations=WRITE,
        description=(
            "Decide a pending evidence pack. approved: the work is done. rejected: the task fails. needs_changes: "
            "the task is requeued with your reason added to its briefing for the next attempt. Give a specific "
            "reason. Errors: ALREADY_REVIEWED, REVIEW_NOT_ALLOWED (you ran it yourself)."
        ),
    )
    async def jct_submit_review(
        evidence_pack_id: Annotated[str, Field(description="From jct_list_pending_reviews.")],
        decision: Annotated[
            Literal["approved", "rejected", "needs_changes"],
            Field(description="needs_changes requeues the task with your reason."),
        ],
        reason: Annotated[str, Field(description="Why; the next attempt's briefing quotes it.")],
        ctx: Context,
        reviewer_name: Annotated[
            str,
            Field(
                description="A display name you choose. Pages show it quoted and marked self-reported beside "
                "your principal, which is what identifies you."
            ),
        ] = "claude-code",
    ) -> results.ReviewSubmitted:
        return await review.submit_review(core, identity.actor(ctx), evidence_pack_id, decision, reason, reviewer_name)
