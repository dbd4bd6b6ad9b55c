"""Mission tools (DESIGN section 11): plan a goal as phases of dependent tasks, follow it, cancel it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from pydantic import BaseModel, ConfigDict, Field

from server.core import results
from server.core.claims import cancel
from server.core.missions import plan as missions
from server.core.missions import status as mission_status
from server.core.models import Limits
from server.core.service import Core
from server.identity import Identity
from server.tools.annotations import DESTRUCTIVE, READ, WRITE
from server.tools.declare import tool
from server.tools.params import (
    Budget,
    Criterion,
    Cursor,
    DoctrineRefs,
    IdempotencyKey,
    Key,
    Limit,
    MissionId,
    Operation,
    Priority,
    Reason,
    TargetRepo,
    Touches,
    bounded,
    items,
    text,
)


class PlannedTask(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = text("Unique name.", Limits.TITLE)
    objective: str = bounded(Limits.OBJECTIVE)
    operation: Operation
    target_repo: TargetRepo
    target_ref: str = Field("main", description="Branch.", json_schema_extra={"maxLength": Limits.REF})
    target_path: str = Field("", description="Scope.", json_schema_extra={"maxLength": Limits.PATH})
    priority: Priority = "P2"
    time_budget_seconds: Annotated[int, Budget] = 3600
    acceptance_criteria: list[Criterion] = Field(
        [], description="Checkable statements.", json_schema_extra={"maxItems": Limits.CRITERIA}
    )
    context_summary: str = Field("", description="Briefing.", json_schema_extra={"maxLength": Limits.SUMMARY})
    depends_on: list[Key] = Field([], description="Keys awaited.", json_schema_extra={"maxItems": Limits.DEPENDENCIES})
    doctrine: DoctrineRefs = None
    touches: Touches = None


class PlannedPhase(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = text("e.g. Specify", Limits.TITLE)
    tasks: list[PlannedTask] = Field(description="At least one.", json_schema_extra={"maxItems": Limits.MISSION_TASKS})


# The limit in the schema; the service checks it (and refuses NaN and infinity) with a message saying what to send.
AT_LEAST_0: dict[str, Any] = {"json_schema_extra": {"minimum": 0}}


def register_plan(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, WRITE)
    async def jct_create_mission(
        title: Annotated[str, text("Short name.", Limits.TITLE)],
        goal: Annotated[str, text("What done means.", Limits.SUMMARY)],
        phases: Annotated[list[PlannedPhase], items("Ordered.", Limits.PHASES)],
        ctx: Context,
        idempotency_key: IdempotencyKey = None,
        max_cost_usd: Annotated[float | None, Field(description="Once spent, tasks wait.", **AT_LEAST_0)] = None,
        max_tokens: Annotated[int | None, Field(**AT_LEAST_0)] = None,
    ) -> results.MissionCreated:
        """Plan a goal as phases of tasks. A task waits until its depends_on and earlier phases are approved. Undo:
        jct_cancel_mission."""
        return await missions.create_mission(
            core,
            identity.actor(ctx),
            title=title,
            goal=goal,
            phases=[phase.model_dump() for phase in phases],
            idempotency_key=idempotency_key,
            max_cost_usd=max_cost_usd,
            max_tokens=max_tokens,
        )


def register_observe(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, READ)
    async def jct_get_mission(
        mission_id: MissionId,
        include: Annotated[list[Literal["tasks", "milestones"]] | None, items("Also list these.", 2)] = None,
        phase: Annotated[int | None, Field(ge=0, description="Only this phase's tasks.")] = None,
        since: Annotated[str | None, text("ISO time: only events after it.", 64)] = None,
        agent: Annotated[str | None, text("Only this agent's events.", 256)] = None,
    ) -> results.MissionView:
        """A mission: progress, phases, blockers (with what lifts each), claimable tasks, decisions, cost, outcome."""
        return await mission_status.get_mission(
            core, mission_id, include=include, phase=phase, since=since, agent=agent
        )

    @tool(mcp, READ)
    async def jct_list_missions(
        status: Literal["active", "completed", "cancelled", "all"] = "active",
        limit: Limit = 10,
        cursor: Cursor = None,
    ) -> results.MissionList:
        """Missions, newest first, with progress."""
        return await mission_status.list_missions(core, status=status, limit=limit, cursor=cursor)


def register_admin(mcp: MCPServer[Any], core: Core, identity: Identity) -> None:
    @tool(mcp, DESTRUCTIVE)
    async def jct_cancel_mission(mission_id: MissionId, reason: Reason, ctx: Context) -> results.MissionCancelled:
        """Cancel a mission and its open tasks. Cannot be undone."""
        return await cancel.cancel_mission(core, identity.actor(ctx), mission_id, reason)
