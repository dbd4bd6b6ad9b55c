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
from server.tools.params import Cursor, Operation

MissionId = Annotated[str, Field(description="The mission's id (UUID).")]


class PlannedTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(description="Unique in the mission; depends_on names keys.")
    objective: str
    operation: Operation
    target_repo: str
    target_ref: str = "main"
    target_path: str = ""
    priority: Literal["P0", "P1", "P2", "P3", "P4"] = "P2"
    time_budget_seconds: int = 3600
    acceptance_criteria: list[str] = []
    context_summary: str = ""
    depends_on: list[str] = Field(default=[], description="Keys of tasks of this or an earlier phase.")


class PlannedPhase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    tasks: list[PlannedTask]


def register_worker(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
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
        title: str,
        goal: str,
        phases: list[PlannedPhase],
        ctx: Context,
        idempotency_key: str | None = None,
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
        include: list[Literal["tasks"]] | None = None,
        phase: int | None = None,
        since: Annotated[str | None, Field(description="ISO time: only decisions after it.")] = None,
    ) -> results.MissionView:
        return await mission_status.get_mission(core, mission_id, include=include, phase=phase, since=since)

    @mcp.tool(name="jct_list_missions", annotations=READ, description="Missions, newest first, with progress.")
    async def jct_list_missions(
        status: Literal["active", "completed", "cancelled", "all"] = "active",
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        cursor: Cursor = None,
    ) -> results.MissionList:
        return await mission_status.list_missions(core, status=status, limit=limit, cursor=cursor)


def register_admin(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @mcp.tool(
        name="jct_cancel_mission",
        annotations=DESTRUCTIVE,
        description="Cancel a mission and every task of it not yet ended. Cannot be undone.",
    )
    async def jct_cancel_mission(mission_id: MissionId, reason: str, ctx: Context) -> results.MissionCancelled:
        return await cancel.cancel_mission(core, identity.actor(ctx), mission_id, reason)
