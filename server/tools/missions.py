"""Mission tools (DESIGN section 11): plan a goal as phases of dependent tasks, follow it, cancel it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from server.core import cancel, mission_status, missions, results
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import DESTRUCTIVE, READ, WRITE
from server.tools.params import Cursor, IdempotencyKey, Limit, MissionId, Operation, Priority, Reason


class PlannedTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="Unique in the mission.")
    objective: str = Field(description="As for jct_enqueue_task.")
    operation: Operation = Field(description="As for jct_enqueue_task.")
    target_repo: str = Field(description="e.g. myorg/api")
    target_ref: str = Field("main", description="Branch.")
    target_path: str = Field("", description="Scope in the repo.")
    priority: Priority = "P2"
    time_budget_seconds: int = Field(3600, description="Seconds.")
    acceptance_criteria: list[str] = Field([], description="Checkable statements.")
    context_summary: str = Field("", description="Its briefing.")
    depends_on: list[str] = Field([], description="Keys it waits for (this or an earlier phase).")


class PlannedPhase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="e.g. Specify")
    tasks: list[PlannedTask] = Field(description="At least one.")


def register_plan(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_create_mission",
        annotations=WRITE,
        description=(
            "Plan a goal as phases of tasks, stored in one step. A task is claimable once the tasks it depends_on "
            "and every task of earlier phases are approved; until then it is blocked. Returns mission_id and "
            "each key's task_id. Refused (nothing stored): cycles, unknown keys, empty phases, >500 tasks."
        ),
    )
    async def jct_create_mission(
        title: Annotated[str, Field(description="A short name.")],
        goal: Annotated[str, Field(description="What done means.")],
        phases: Annotated[list[PlannedPhase], Field(description="In order: each waits for the one before.")],
        ctx: Context,
        idempotency_key: IdempotencyKey = None,
    ) -> results.MissionCreated:
        return await missions.create_mission(
            core,
            identity.actor(ctx),
            title=title,
            goal=goal,
            phases=[phase.model_dump() for phase in phases],
            idempotency_key=idempotency_key,
        )


def register_observe(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_get_mission",
        annotations=READ,
        description=(
            "A mission: progress, phases, blockers (each with the action that lifts it), claimable tasks and "
            "decisions so far. include=['tasks'] lists its tasks (of one phase with phase)."
        ),
    )
    async def jct_get_mission(
        mission_id: MissionId,
        include: Annotated[list[Literal["tasks"]] | None, Field(description="Also list its tasks.")] = None,
        phase: Annotated[int | None, Field(description="Only this phase's tasks.")] = None,
        since: Annotated[str | None, Field(description="ISO time: only decisions after it.")] = None,
    ) -> results.MissionView:
        return await mission_status.get_mission(core, mission_id, include=include, phase=phase, since=since)

    @mcp.tool(name="jct_list_missions", annotations=READ, description="Missions, newest first, with progress.")
    async def jct_list_missions(
        status: Annotated[
            Literal["active", "completed", "cancelled", "all"], Field(description="Which missions.")
        ] = "active",
        limit: Limit = 10,
        cursor: Cursor = None,
    ) -> results.MissionList:
        return await mission_status.list_missions(core, status=status, limit=limit, cursor=cursor)


def register_admin(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_cancel_mission",
        annotations=DESTRUCTIVE,
        description="Cancel a mission and every task of it not yet ended. Cannot be undone.",
    )
    async def jct_cancel_mission(mission_id: MissionId, reason: Reason, ctx: Context) -> results.MissionCancelled:
        return await cancel.cancel_mission(core, identity.actor(ctx), mission_id, reason)
