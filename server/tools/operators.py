"""Operator tools (DESIGN section 14): requeue and reprioritise (admin); agents, stuck work, audit search
(observe). Each is one call into server/core/operators/actions.py, which the CLI and the dashboard call too."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from server.core import results
from server.core.models import Limits
from server.core.operators import actions
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import READ, WRITE
from server.tools.declare import tool
from server.tools.params import AuditLimit, Cursor, Priority, Reason, TaskId, bounded, text

# jct_list_stuck shows the 50 most urgent items (the dashboard and `jct stuck` may ask for more).
STUCK_SHOWN = 50


def register_admin(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, WRITE)
    async def jct_requeue_task(
        task_id: TaskId,
        reason: Reason,
        ctx: Context,
        feedback: Annotated[str | None, text("For the next agent.", Limits.REASON)] = None,
    ) -> results.Requeued:
        """Requeue failed, cancelled or rejected work, attempts and rounds reset; feedback joins its briefing. Undo:
        jct_cancel_task."""
        return await actions.requeue_task(core, identity.actor(ctx), task_id, reason, feedback)

    @tool(mcp, WRITE)
    async def jct_set_priority(task_id: TaskId, priority: Priority, ctx: Context) -> results.PrioritySet:
        """Change an open task's priority; undo: set the previous one it returns."""
        return await actions.set_priority(core, identity.actor(ctx), task_id, priority)


def register_observe(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_list_agents(
        active_within_seconds: Annotated[int, Field(ge=1, le=2_592_000)] = 3600,
        state: Annotated[
            results.AgentState | None, Field(description="working: holds a claim; waiting: in jct_claim_next.")
        ] = None,
    ) -> results.AgentList:
        """Agents, their state, claims, lease ends, cost."""
        return await actions.list_agents(core, active_within_seconds=active_within_seconds, state=state)

    @tool(mcp, READ)
    async def jct_list_stuck(
        stuck_after_seconds: Annotated[
            int | None, Field(ge=1, le=actions.STUCK_AFTER_MAX, description="Silence that counts; default setting.")
        ] = None,
    ) -> results.StuckList:
        """Work needing a person, with reason and action."""
        return await actions.list_stuck(core, limit=STUCK_SHOWN, stuck_after_seconds=stuck_after_seconds)

    @tool(mcp, READ)
    async def jct_search_audit(
        actor_id: Annotated[str | None, bounded(256)] = None,
        action: Annotated[str | None, text("e.g. task.failed", 64)] = None,
        entity_kind: Annotated[str | None, text("e.g. Task", 32)] = None,
        since: Annotated[str | None, text("ISO time.", 64)] = None,
        until: Annotated[str | None, text("ISO time.", 64)] = None,
        limit: AuditLimit = 50,
        cursor: Cursor = None,
    ) -> results.AuditTrail:
        """Audit log, newest first."""
        return await actions.search_audit(
            core,
            actor_id=actor_id,
            action=action,
            entity_kind=entity_kind,
            since=since,
            until=until,
            limit=limit,
            cursor=cursor,
        )
