"""Admin tools: put work into the queue, and cancel it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import Field

from server.core import cancel, intake, results
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import DESTRUCTIVE, WRITE
from server.tools.params import Operation, TaskId


def register(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_enqueue_task",
        annotations=WRITE,
        description=(
            "Add a task to the queue. Write the objective and acceptance_criteria so another agent can do and "
            "verify the work without asking; context_summary is its briefing. With an idempotency_key a resend "
            "returns the same task (duplicate: true). With mission_id it joins that mission (blocked until its "
            "depends_on are approved). Errors: REPO_NOT_ALLOWED, BUDGET_OUT_OF_RANGE (30..86400 s), "
            "IDEMPOTENCY_CONFLICT, MISSION_NOT_FOUND."
        ),
    )
    async def jct_enqueue_task(
        objective: Annotated[str, Field(description="What the agent should achieve.")],
        operation: Annotated[Operation, Field(description="The kind of work.")],
        target_repo: Annotated[str, Field(description="e.g. myorg/api-service")],
        ctx: Context,
        target_ref: Annotated[str, Field(description="Branch or commit.")] = "main",
        target_path: Annotated[str, Field(description="Scope inside the repo; empty = whole repo.")] = "",
        time_budget_seconds: Annotated[int, Field(description="30..86400.")] = 3600,
        priority: Annotated[Literal["P0", "P1", "P2", "P3", "P4"], Field(description="P0 goes first.")] = "P2",
        acceptance_criteria: Annotated[list[str] | None, Field(description="Checkable statements of done.")] = None,
        context_summary: Annotated[str | None, Field(description="The agent's briefing.")] = None,
        idempotency_key: Annotated[str | None, Field(description="A resend with it returns the same task.")] = None,
        create_cwom: Annotated[bool, Field(description="Also create the issue and briefing.")] = True,
        mission_id: Annotated[str | None, Field(description="Join this mission.")] = None,
        phase: Annotated[int | None, Field(description="Default: the mission's last; one past it starts one.")] = None,
        depends_on: Annotated[list[str] | None, Field(description="Task ids of the same mission.")] = None,
    ) -> results.Enqueued:
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
        )

    @mcp.tool(
        name="jct_cancel_task",
        annotations=DESTRUCTIVE,
        description="Cancel a queued or running task for good; a running agent's next call fails. Cannot be undone.",
    )
    async def jct_cancel_task(
        task_id: TaskId, reason: Annotated[str, Field(description="Why; kept in the audit log.")], ctx: Context
    ) -> results.Cancelled:
        return await cancel.cancel_task(core, identity.actor(ctx), task_id, reason)
