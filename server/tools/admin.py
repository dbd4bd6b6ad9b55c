"""Admin tools: put work into the queue, and cancel it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from server.core import results
from server.core.briefings import doctrine, intake
from server.core.claims import cancel
from server.core.models import Limits
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import DESTRUCTIVE, WRITE
from server.tools.declare import tool
from server.tools.params import (
    Budget,
    Criterion,
    DoctrineRefs,
    IdempotencyKey,
    Operation,
    PriorArt,
    Priority,
    Reason,
    TargetRepo,
    TaskId,
    Touches,
    Uuid,
    bounded,
    items,
    text,
)


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, DESTRUCTIVE)
    async def jct_manage_doctrine(
        action: Literal["add", "list", "show", "remove"],
        ctx: Context,
        name: Annotated[str | None, text("ns/name", Limits.DOCTRINE_REF)] = None,
        body: Annotated[str | None, text("For add.", Limits.DOCTRINE_BODY)] = None,
        repo_prefix: Annotated[str | None, text("Also all repos under it", Limits.REPO)] = None,
    ) -> doctrine.DoctrineList:
        """Briefing guidance: add (replaces), list, show, remove. Undo: add again the body show gave."""
        return await doctrine.manage(core, identity.actor(ctx), action, name, body, repo_prefix)

    @tool(mcp, WRITE)
    async def jct_enqueue_task(
        objective: Annotated[str, bounded(Limits.OBJECTIVE)],
        operation: Operation,
        target_repo: TargetRepo,
        ctx: Context,
        target_ref: Annotated[str, text("Branch or commit.", Limits.REF)] = "main",
        target_path: Annotated[str, text("Scope in the repo.", Limits.PATH)] = "",
        time_budget_seconds: Annotated[int, Budget] = 3600,
        priority: Priority = "P2",
        acceptance_criteria: Annotated[list[Criterion] | None, items("Checkable statements.", Limits.CRITERIA)] = None,
        context_summary: Annotated[str | None, text("The briefing.", Limits.SUMMARY)] = None,
        idempotency_key: IdempotencyKey = None,
        create_cwom: Annotated[bool, Field(description="Issue and briefing too.")] = True,
        mission_id: str | None = None,
        phase: Annotated[int | None, Field(ge=0, description="Default: the mission's last.")] = None,
        depends_on: Annotated[list[Uuid] | None, items("Task ids in the mission.", Limits.DEPENDENCIES)] = None,
        doctrine: DoctrineRefs = None,
        prior_art: Annotated[list[PriorArt] | None, items("Earlier work to know of.", Limits.PRIOR_ART)] = None,
        data: Annotated[dict[str, Any] | None, Field(description="Facts (JSON).")] = None,
        touches: Touches = None,
    ) -> results.Enqueued:
        """Add a task. Write objective and acceptance_criteria so another agent can do and check the work unaided.
        mission_id joins a mission (blocked until depends_on are approved). Undo: jct_cancel_task."""
        return await intake.enqueue_task(
            core,
            identity.actor(ctx),
            objective=objective,
            operation=operation,
            target_repo=target_repo,
            target_ref=target_ref,
            target_path=target_path,
            time_budget_seconds=time_budget_seconds,
            priority=priority,
            acceptance_criteria=acceptance_criteria,
            context_summary=context_summary,
            idempotency_key=idempotency_key,
            create_cwom=create_cwom,
            mission_id=mission_id,
            phase=phase,
            depends_on=depends_on,
            doctrine_refs=doctrine,
            prior_art=prior_art,
            data=data,
            touches=touches,
        )

    @tool(mcp, DESTRUCTIVE)
    async def jct_cancel_task(task_id: TaskId, reason: Reason, ctx: Context) -> results.Cancelled:
        """Cancel a queued, blocked or running task; its agent's next call fails. Undo: jct_requeue_task."""
        return await cancel.cancel_task(core, identity.actor(ctx), task_id, reason)
